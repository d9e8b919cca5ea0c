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
use crate::jobs::{now_ms, JobStore};
use crate::readiness::{keys, Health};
use crate::runtime::DockerRuntime;
use crate::shutdown::Shutdown;
use crate::wanted::WantedRx;
use crate::{
    api, converger, credentials, events, http, knowledge, publisher, systemd, wanted, worker, xkey,
};

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
    #[error(transparent)]
    Jobs(#[from] crate::jobs::StoreError),
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
    // The job database first: a damaged one stops the hive before anything
    // else runs, with the file named and its bytes left as they were.
    let store = crate::jobs::JobStore::open(&config.db_path())?;
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
    let mut router = http::health_router(health.clone());

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
                let msg = crate::error_chain(&e);
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

    // The last valid declaration, kept on disk, so the hive knows what is
    // wanted while NATS is away; the wanted task replaces it when the swarm's
    // is newer. The sender lives until shutdown, also without NATS.
    let saved = wanted::load_saved(&config.state_dir).map(Arc::new);
    let (wanted_tx, wanted_rx) = tokio::sync::watch::channel(saved);
    let knowledge_trigger = config
        .knowledge_repo
        .as_ref()
        .map(|_| Arc::new(tokio::sync::Notify::new()));

    // Containers carry the hive's name, so without one nothing is deployed.
    if let Some(name) = config.name.clone() {
        let runtime = Arc::new(DockerRuntime::new(
            name.clone(),
            config.docker_host.as_deref(),
        ));
        let wake = Arc::new(tokio::sync::Notify::new());
        let declared_rx = wanted_rx.clone();
        router = router.merge(api::router(api::ApiState {
            store: store.clone(),
            runtime: Arc::clone(&runtime),
            hive: name.clone(),
            wake: Arc::clone(&wake),
            declared: Arc::new(move |agent| {
                let wanted = declared_rx.borrow().clone()?;
                let spec = wanted.declaration.agents.get(agent)?.clone();
                Some((spec, Some(wanted.revision)))
            }),
        }));
        let extra_binds = match &config.knowledge_repo {
            Some(_) => vec![crate::runtime::Bind {
                host: config.knowledge_dir(),
                container: swarm_queue_client::containers::KNOWLEDGE_MOUNT.to_string(),
                read_only: true,
            }],
            None => vec![],
        };
        tasks.spawn(worker::run(
            worker::WorkerDeps {
                store: store.clone(),
                runtime: Arc::clone(&runtime),
                hive: name.clone(),
                state_dir: config.state_dir.clone(),
                wake: Arc::clone(&wake),
                health: Some(health.clone()),
                extra_binds,
                config: worker::WorkerConfig::default().with_env_overrides(),
            },
            shutdown.clone(),
        ));
        tasks.spawn(converger::run(
            converger::ConvergerDeps {
                store: store.clone(),
                runtime,
                hive: name.clone(),
                health: health.clone(),
                wake: Arc::clone(&wake),
                wanted: wanted_rx.clone(),
                reconcile_interval: config.reconcile_interval,
                orphan_grace: config.orphan_grace,
                retry_base: config.agent_retry_base,
            },
            shutdown.clone(),
        ));

        if let Some(conn) = nats.clone() {
            tasks.spawn(publisher::run(
                publisher::PublisherDeps {
                    nats: conn.clone(),
                    health: health.clone(),
                    hive: name.clone(),
                    interval: config.publish_interval,
                    bucket: config.nats.buckets.get(Bucket::Status),
                },
                shutdown.clone(),
            ));
            tasks.spawn(wanted::run(
                wanted::WantedDeps {
                    nats: conn.clone(),
                    hive: name.clone(),
                    health: health.clone(),
                    bucket: config.nats.buckets.get(Bucket::Wanted),
                    state_dir: config.state_dir.clone(),
                    tx: wanted_tx.clone(),
                },
                shutdown.clone(),
            ));
            let deliverer = Arc::new(std::sync::OnceLock::new());
            tasks.spawn(credentials::run_boot_delivery(
                credentials::BootDeps {
                    nats: conn.clone(),
                    hive: name.clone(),
                    health: health.clone(),
                    bucket: config.nats.buckets.get(Bucket::Credentials),
                    xkey: Arc::new(xkey),
                    trusted: Arc::new(config.trusted_controller_xkeys.clone()),
                    agents_dir: config.agents_dir(),
                    slot: Arc::clone(&deliverer),
                },
                shutdown.clone(),
            ));
            let deploy = deploy_fn(store.clone(), wake, wanted_rx.clone(), name.clone());
            let events_deps = events::EventDeps {
                client: conn.client.clone(),
                hive: name,
                health: health.clone(),
                knowledge: knowledge_trigger.clone(),
                credentials: deliverer,
                deploy,
            };
            let events_shutdown = shutdown.clone();
            tasks.spawn(async move {
                if let Err(e) = events::run(events_deps, events_shutdown).await {
                    tracing::error!(error = %crate::error_chain(&e), "event listener stopped");
                }
            });
        }
    }
    if let (Some(repo), Some(trigger)) = (config.knowledge_repo.clone(), knowledge_trigger) {
        tasks.spawn(knowledge::run(
            repo,
            config.knowledge_dir(),
            trigger,
            health.clone(),
            shutdown.clone(),
        ));
    }
    tasks.spawn(http::serve(listener, router, shutdown.clone()));

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
    drop(wanted_tx);
    Ok(())
}

/// The deploy subject's handler: deploy a declared agent (a first deploy,
/// or a rebuild that re-resolves its image). Fails closed: an agent that is
/// not declared, or a job store that cannot be read, gets an error reply.
fn deploy_fn(
    store: JobStore,
    wake: Arc<tokio::sync::Notify>,
    wanted: WantedRx,
    hive: swarm_queue_client::HiveName,
) -> events::DeployFn {
    Arc::new(move |agent| {
        let (store, wake, hive) = (store.clone(), wake.clone(), hive.clone());
        let current = wanted.borrow().clone();
        Box::pin(async move {
            let Some(w) = current else {
                return Err(format!(
                    "hive {hive} has no declaration yet, so agent {agent} is not declared; \
                     declare it first (swarm-controller declare)"
                ));
            };
            let Some(spec) = w.declaration.agents.get(&agent).cloned() else {
                return Err(format!(
                    "agent {agent} is not declared on hive {hive} (declaration revision {}); \
                     add it to the swarm file and run swarm-controller declare",
                    w.revision
                ));
            };
            let revision = w.revision;
            let a = agent.clone();
            match store
                .call(move |s| s.request_deploy(&a, spec, Some(revision), true, now_ms()))
                .await
            {
                Ok(q) => {
                    wake.notify_one();
                    Ok(q.job.0 as u64)
                }
                Err(e) => Err(format!(
                    "cannot queue the deploy of {agent} on hive {hive}: {}",
                    crate::error_chain(&e)
                )),
            }
        })
    })
}

fn connection_name(config: &HiveConfig) -> String {
    match &config.name {
        Some(n) => format!("hive-{n}"),
        None => "hive".into(),
    }
}
