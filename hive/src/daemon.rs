//! `hive run`: wires the tasks together and waits for shutdown.
//!
//! Order at start: state dir, xkey, readiness, then the loopback HTTP server
//! (so `/health/ready` answers even when nothing else works), then NATS and
//! the tasks that need it. Without a NATS URL or without a hive name the hive
//! still runs locally and says so in a readiness warning; "not configured"
//! and "configured but unreachable" are different warnings.

use std::sync::Arc;
use std::time::Duration;

use swarm_queue_client::{Bucket, Level};
use tokio::task::JoinSet;

use crate::config::HiveConfig;
use crate::readiness::{keys, Health};
use crate::shutdown::Shutdown;
use crate::{http, publisher, systemd, xkey};

/// File under the state dir holding the local API's bound address.
pub const API_ADDR_FILE: &str = "api.addr";

/// How long tasks get to finish after shutdown is requested.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot create state directory {path}")]
    StateDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    XKey(#[from] xkey::XKeyError),
    #[error("cannot listen on {addr} for the local API")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Run the hive until `shutdown` fires.
pub async fn run(config: HiveConfig, shutdown: Shutdown) -> Result<(), DaemonError> {
    std::fs::create_dir_all(&config.state_dir).map_err(|source| DaemonError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let xkey = xkey::load_or_create(&config.xkey_seed_file)?;
    let health = Arc::new(Health::new(config.name.clone(), Some(xkey.public_key())));

    let listener = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .map_err(|source| DaemonError::Listen {
            addr: config.http_listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(config.http_listen);
    tracing::info!(%addr, "local API listening (health: /health/ready, /health/live, /metrics)");
    // Written so that tools (and tests) using `http_listen = "127.0.0.1:0"`
    // can find the port the kernel chose.
    let addr_file = config.state_dir.join(API_ADDR_FILE);
    if let Err(e) = std::fs::write(&addr_file, format!("{addr}\n")) {
        tracing::warn!(path = %addr_file.display(), error = %e, "cannot record the local API address");
    }

    let mut tasks = JoinSet::new();
    tasks.spawn(http::serve(
        listener,
        http::health_router(health.clone()),
        shutdown.clone(),
    ));

    let nats = if !config.nats.is_configured() {
        health.raise(
            keys::NATS_NOT_CONFIGURED,
            Level::Warn,
            "no NATS server is configured: this hive runs alone and the swarm cannot see it \
             (set [nats] url, --nats-url or HYPERHIVE_NATS_URL)",
        );
        None
    } else if config.name.is_none() {
        None
    } else {
        match swarm_queue_client::connect(&config.nats, &connection_name(&config)).await {
            Ok(conn) => Some(conn),
            Err(e) => {
                let msg = publisher::chain(&e);
                tracing::error!(error = %msg, "cannot set up the NATS connection");
                health.raise(
                    keys::NATS_UNREACHABLE,
                    Level::Warn,
                    format!("NATS is configured but cannot be used: {msg}"),
                );
                None
            }
        }
    };
    if config.name.is_none() {
        health.raise(
            keys::HIVE_NAME_MISSING,
            Level::Warn,
            "no hive name is configured: this hive does not publish its status or listen for \
             the swarm (set name, --name or HYPERHIVE_HIVE_NAME)",
        );
    }

    if let (Some(conn), Some(name)) = (nats.clone(), config.name.clone()) {
        tasks.spawn(publisher::run(
            publisher::PublisherDeps {
                nats: conn,
                health: health.clone(),
                hive: name,
                interval: config.publish_interval,
                bucket: config.nats.buckets.get(Bucket::Status).clone(),
            },
            shutdown.clone(),
        ));
    }

    systemd::notify_ready();
    if let Some(interval) = systemd::watchdog_interval() {
        tasks.spawn(systemd::run_watchdog(interval, shutdown.clone()));
    }
    tracing::info!(
        hive = config.name.as_ref().map(|n| n.as_str()).unwrap_or("(unnamed)"),
        state_dir = %config.state_dir.display(),
        "hive running"
    );

    let mut waiting = shutdown.clone();
    waiting.wait().await;
    systemd::notify_stopping();
    tracing::info!("shutting down");
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while let Some(r) = tasks.join_next().await {
            if let Err(e) = r {
                tracing::error!(error = %e, "task ended abnormally");
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(grace = ?DRAIN_GRACE, "tasks did not finish in time; stopping anyway");
        tasks.abort_all();
    }
    if let Some(conn) = nats {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.client.flush()).await;
    }
    Ok(())
}

fn connection_name(config: &HiveConfig) -> String {
    match &config.name {
        Some(n) => format!("hive-{n}"),
        None => "hive".into(),
    }
}
