//! How both daemons connect to NATS: one connection per process, reconnect
//! forever, retry the initial connect, and a counter that ticks on every
//! (re)connect so tasks that must re-read state after an outage (the hive's
//! `pull`) know when to.
//!
//! The parts, split by what each decides:
//! - `config`: the `[nats]` table both daemons' config files share, and
//!   every check that needs no connection (servers, files, domain, buckets).
//! - `seed`: reading an nkey user seed, and telling a plain seed file from
//!   a decorated `.creds` file, without ever echoing the seed.
//! - this file: the connection itself, its options and the connect counter.
//!
//! The reconnect delay grows with the attempts ([`reconnect_backoff`]) and
//! is drawn from `[0, backoff]` ([`reconnect_delay`]): a server restart
//! disconnects a whole fleet at once, and a fixed schedule would bring it
//! back at once ([`crate::jitter`]). The connection carries the process's
//! [`Jitter`], so every task that times a read or a put spreads it the same
//! way.

mod config;
mod seed;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use async_nats::{Client, ConnectOptions};
use tokio::sync::watch;

use crate::jitter::Jitter;

pub use config::{check_domain, BadDomain, BucketOverrides, BucketsConfig, NatsConfig, TlsConfig};
pub use seed::read_nkey_seed;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("no NATS server configured")]
    NotConfigured,
    #[error("invalid NATS server URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot read NATS credentials file {path}")]
    Credentials {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("nkey seed file {path}: {reason}")]
    NkeySeed { path: PathBuf, reason: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error(transparent)]
    Domain(#[from] BadDomain),
    #[error("cannot connect to NATS at {servers}")]
    Connect {
        servers: String,
        #[source]
        source: async_nats::ConnectError,
    },
}

/// The client is not connected right now; a JetStream request would hang
/// until its timeout instead of failing.
#[derive(Debug, Clone, thiserror::Error)]
#[error("not connected to NATS (connection state: {state})")]
pub struct NotConnected {
    pub state: String,
}

/// One process's NATS connection, shared by all its tasks.
#[derive(Clone, Debug)]
pub struct Connection {
    pub client: Client,
    /// Counts successful (re)connects. Tasks that must re-read state after an
    /// outage watch it and act on every change.
    pub connects: watch::Receiver<u64>,
    /// Where it connects to, for messages.
    pub servers: String,
    /// The JetStream domain of the buckets ([`NatsConfig::jetstream_domain`]).
    pub jetstream_domain: Option<String>,
    /// How this process spreads its reconnects and its periodic reads and
    /// puts; the hive's `jitter_percent`.
    pub jitter: Jitter,
}

impl Connection {
    /// A JetStream context on the buckets' domain: the local API, or
    /// `$JS.<domain>.API` when a domain is configured. Every JetStream use
    /// of the daemons goes through it.
    pub fn jetstream(&self) -> async_nats::jetstream::Context {
        match &self.jetstream_domain {
            Some(domain) => async_nats::jetstream::with_domain(self.client.clone(), domain),
            None => async_nats::jetstream::new(self.client.clone()),
        }
    }
}

/// Connect with the hyperhive defaults: reconnect forever, retry the initial
/// connect in the background (so a daemon starts while NATS is down), and
/// count connects. `name` is the connection name shown by the server
/// (`hive-<hive>` or `swarm-controller`, see [`crate::subjects`]); replies
/// come to the inbox prefix derived from it
/// ([`crate::subjects::inbox_prefix`]), the only inbox its identity may
/// read. `config.name` changes what the server shows, never the inbox.
/// Reconnects are spread with the default [`Jitter`].
pub async fn connect(config: &NatsConfig, name: &str) -> Result<Connection, ConnectError> {
    connect_with(config, name, Jitter::default()).await
}

/// [`connect`], with reconnect delays drawn from `jitter`, which the
/// connection then carries for its tasks ([`Connection::jitter`]).
pub async fn connect_with(
    config: &NatsConfig,
    name: &str,
    jitter: Jitter,
) -> Result<Connection, ConnectError> {
    let addrs = config.server_addrs()?;
    if let Some(domain) = &config.jetstream_domain {
        check_domain(domain)?;
    }
    let servers = addrs
        .iter()
        .map(|a| a.clone().into_inner().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut opts = identity_and_tls(config, ConnectOptions::new()).await?;
    let (tx, rx) = watch::channel(0u64);
    let conn_name = config.name.clone().unwrap_or_else(|| name.to_string());
    let log_servers = servers.clone();
    let reconnect_jitter = jitter.clone();
    opts = opts
        .name(conn_name)
        .custom_inbox_prefix(crate::subjects::inbox_prefix(name))
        .max_reconnects(None)
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(5))
        .reconnect_delay_callback(move |attempts| reconnect_delay(attempts, &reconnect_jitter))
        .event_callback(move |event| {
            let tx = tx.clone();
            let servers = log_servers.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!(%servers, "connected to NATS");
                        tx.send_modify(|n| *n += 1);
                    }
                    async_nats::Event::Disconnected => {
                        tracing::warn!(%servers, "disconnected from NATS; reconnecting")
                    }
                    // A refused publish or subscription: under per-identity
                    // permissions this is the only sign the server gives.
                    async_nats::Event::ServerError(error) => {
                        tracing::warn!(%servers, %error, "the NATS server reported an error (a permissions violation names the subject)")
                    }
                    other => tracing::info!(%servers, event = %other, "NATS connection event"),
                }
            }
        });
    let client = opts
        .connect(addrs)
        .await
        .map_err(|source| ConnectError::Connect {
            servers: servers.clone(),
            source,
        })?;
    Ok(Connection {
        client,
        connects: rx,
        servers,
        jetstream_domain: config.jetstream_domain.clone(),
        jitter,
    })
}

/// The longest wait before reconnect attempt `attempts` (1-based): 0, then
/// 100 ms more per attempt, capped at 5 s: quick to come back after a server
/// restart, gentle on a server that stays down.
pub fn reconnect_backoff(attempts: usize) -> Duration {
    let steps = u64::try_from(attempts.saturating_sub(1)).unwrap_or(u64::MAX);
    Duration::from_millis(steps.saturating_mul(100).min(5_000))
}

/// The wait before reconnect attempt `attempts`: drawn from `[0,`
/// [`reconnect_backoff`]`]`, or the backoff itself with the jitter off.
pub fn reconnect_delay(attempts: usize, jitter: &Jitter) -> Duration {
    jitter.up_to(reconnect_backoff(attempts))
}

/// Fail fast when the client is not connected, instead of letting a
/// JetStream request wait for its timeout.
pub fn ensure_connected(client: &Client) -> Result<(), NotConnected> {
    match client.connection_state() {
        async_nats::connection::State::Connected => Ok(()),
        other => Err(NotConnected {
            state: other.to_string(),
        }),
    }
}

/// The options that say who this process is and how it talks TLS: the
/// credentials file or nkey seed, and `[nats.tls]`.
async fn identity_and_tls(
    config: &NatsConfig,
    mut opts: ConnectOptions,
) -> Result<ConnectOptions, ConnectError> {
    if let Some(path) = &config.credentials_file {
        let credentials_error = |source| ConnectError::Credentials {
            path: path.clone(),
            source,
        };
        let contents = tokio::fs::read_to_string(path)
            .await
            .map_err(credentials_error)?;
        opts = match seed::nkey_seed(&contents) {
            Some(seed) => opts.nkey(seed),
            None => opts.credentials(&contents).map_err(credentials_error)?,
        };
    }
    if let Some(path) = &config.nkey_seed_file {
        opts = opts.nkey(read_nkey_seed(path)?);
    }
    let tls = &config.tls;
    if tls.required {
        opts = opts.require_tls(true);
    }
    if let Some(ca) = &tls.ca_file {
        opts = opts.add_root_certificates(ca.clone());
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            opts = opts.add_client_certificate(cert.clone(), key.clone());
        }
        (None, None) => {}
        _ => {
            return Err(ConnectError::Tls(
                "cert_file and key_file go together; give both or neither".into(),
            ))
        }
    }
    Ok(opts)
}
