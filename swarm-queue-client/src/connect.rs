//! How both daemons connect to NATS: one connection per process, reconnect
//! forever, retry the initial connect, and a counter that ticks on every
//! (re)connect so tasks that must re-read state after an outage (the hive's
//! `pull`) know when to.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, ServerAddr};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::buckets::{Bucket, BucketSettings};

/// TLS to the NATS server. Paths are read at connect time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Require TLS even when the server does not ask for it.
    pub required: bool,
    /// CA bundle to verify the server with.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, for mutual TLS (both or neither).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// One `[nats.buckets.<bucket>]` table: each field left out keeps that
/// bucket's own default (the wanted bucket keeps 10 values of history, the
/// others 1), so setting only `replicas` does not reset the history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketOverrides {
    pub history: Option<i64>,
    pub storage: Option<crate::buckets::Storage>,
    pub replicas: Option<usize>,
}

/// Per-bucket creation settings, as written in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketsConfig {
    pub status: BucketOverrides,
    pub wanted: BucketOverrides,
    pub credentials: BucketOverrides,
    pub rollouts: BucketOverrides,
}

impl BucketsConfig {
    /// The settings for `bucket`: the table's values over the bucket's defaults.
    pub fn get(&self, bucket: Bucket) -> BucketSettings {
        let o = match bucket {
            Bucket::Status => &self.status,
            Bucket::Wanted => &self.wanted,
            Bucket::Credentials => &self.credentials,
            Bucket::Rollouts => &self.rollouts,
        };
        let d = BucketSettings::default_for(bucket);
        BucketSettings {
            history: o.history.unwrap_or(d.history),
            storage: o.storage.unwrap_or(d.storage),
            replicas: o.replicas.unwrap_or(d.replicas),
        }
    }

    /// The config-file name of a bucket's table: `status`, `wanted`, `credentials`.
    pub fn table_name(bucket: Bucket) -> &'static str {
        match bucket {
            Bucket::Status => "status",
            Bucket::Wanted => "wanted",
            Bucket::Credentials => "credentials",
            Bucket::Rollouts => "rollouts",
        }
    }
}

/// The `[nats]` table of both daemons' config files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// One server URL, or several separated by commas.
    pub url: Option<String>,
    /// More servers (a cluster); joined with `url`.
    pub servers: Vec<String>,
    /// A `.creds` file (JWT + nkey seed) or an nkey seed file.
    pub credentials_file: Option<PathBuf>,
    /// A file holding this identity's nkey user seed (`SU…`), for servers
    /// configured with the per-identity authorization from
    /// [`crate::permissions`]. On NixOS it comes from `LoadCredential`.
    pub nkey_seed_file: Option<PathBuf>,
    pub tls: TlsConfig,
    /// Connection name shown by the server (`nats server report connections`).
    pub name: Option<String>,
    /// How buckets are created when missing (history, storage, replicas).
    pub buckets: BucketsConfig,
    /// The JetStream domain that holds the buckets, when it is not the one
    /// of the server connected to: a hive on a leaf-node site whose server
    /// runs its own JetStream reaches the hub's with `jetstream_domain =
    /// "hub"` (its API is then `$JS.hub.API.>`). Unset: the local
    /// `$JS.API.>`.
    pub jetstream_domain: Option<String>,
}

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

impl NatsConfig {
    /// Every configured server URL, validated.
    pub fn server_addrs(&self) -> Result<Vec<ServerAddr>, ConnectError> {
        let mut urls: Vec<String> = Vec::new();
        if let Some(url) = &self.url {
            urls.extend(url.split(',').map(|s| s.trim().to_string()));
        }
        urls.extend(self.servers.iter().map(|s| s.trim().to_string()));
        urls.retain(|u| !u.is_empty());
        if urls.is_empty() {
            return Err(ConnectError::NotConfigured);
        }
        urls.iter()
            .map(|u| {
                ServerAddr::from_str(u).map_err(|e| ConnectError::BadUrl {
                    url: u.clone(),
                    reason: e.to_string(),
                })
            })
            .collect()
    }

    pub fn is_configured(&self) -> bool {
        self.url.as_deref().is_some_and(|u| !u.trim().is_empty())
            || self.servers.iter().any(|s| !s.trim().is_empty())
    }

    /// Check everything that can be checked without connecting.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.is_configured() {
            if let Err(e) = self.server_addrs() {
                problems.push(format!("nats: {e}"));
            }
        }
        if let Some(p) = &self.credentials_file {
            if !p.is_file() {
                problems.push(format!(
                    "nats.credentials_file {} does not exist or is not a file",
                    p.display()
                ));
            }
        }
        if let Some(p) = &self.nkey_seed_file {
            if let Err(e) = read_nkey_seed(p) {
                problems.push(format!("nats.nkey_seed_file: {e}"));
            }
            if self.credentials_file.is_some() {
                problems.push(
                    "nats: credentials_file and nkey_seed_file are two ways to authenticate; give one"
                        .into(),
                );
            }
        }
        let tls = &self.tls;
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            problems
                .push("nats.tls: cert_file and key_file go together; give both or neither".into());
        }
        for (field, path) in [
            ("ca_file", &tls.ca_file),
            ("cert_file", &tls.cert_file),
            ("key_file", &tls.key_file),
        ] {
            if let Some(p) = path {
                if !p.is_file() {
                    problems.push(format!("nats.tls.{field} {} does not exist", p.display()));
                }
            }
        }
        if let Some(domain) = &self.jetstream_domain {
            if let Err(e) = check_domain(domain) {
                problems.push(format!("nats.jetstream_domain: {e}"));
            }
        }
        for bucket in Bucket::ALL {
            let s = self.buckets.get(bucket);
            if !(1..=64).contains(&s.history) {
                problems.push(format!(
                    "nats.buckets.{}.history must be 1 to 64, not {}",
                    BucketsConfig::table_name(bucket),
                    s.history
                ));
            }
            if !(1..=5).contains(&s.replicas) {
                problems.push(format!(
                    "nats.buckets.{}.replicas must be 1 to 5, not {}",
                    BucketsConfig::table_name(bucket),
                    s.replicas
                ));
            }
        }
        problems
    }
}

/// A JetStream domain name that cannot be used as a subject token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "JetStream domain {domain:?} is not usable: {reason} (it becomes one subject token, \
     `$JS.<domain>.API`, and must match the server's `jetstream {{ domain }}`)"
)]
pub struct BadDomain {
    pub domain: String,
    pub reason: &'static str,
}

/// A domain is one subject token: not empty, no `.`, `*`, `>` or
/// whitespace (nats-server refuses the same in its `domain` setting).
pub fn check_domain(domain: &str) -> Result<(), BadDomain> {
    let fail = |reason| BadDomain {
        domain: domain.to_string(),
        reason,
    };
    if domain.is_empty() {
        return Err(fail("it is empty"));
    }
    if domain.len() > 64 {
        return Err(fail("it is longer than 64 characters"));
    }
    if domain.contains(['.', '*', '>']) {
        return Err(fail("it holds `.`, `*` or `>`"));
    }
    if domain.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(fail("it holds whitespace or a control character"));
    }
    Ok(())
}

/// Read and check an nkey user seed file. The seed itself never appears in
/// an error: only the path and what is wrong with it.
pub fn read_nkey_seed(path: &std::path::Path) -> Result<String, ConnectError> {
    let fail = |reason: String| ConnectError::NkeySeed {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(fail("it is not a file".into()));
    }
    // A seed is 58 characters; anything much longer is not a seed file.
    if meta.len() > 4096 {
        return Err(fail(format!("it is {} bytes, not a seed", meta.len())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let seed = nkey_seed(&text).ok_or_else(|| {
        fail(
            "it does not hold an nkey user seed (a line starting with SU, as written by `nk -gen user`)"
                .into(),
        )
    })?;
    nkeys::KeyPair::from_seed(&seed).map_err(|_| {
        fail("its SU… line is not a valid nkey seed (bad checksum or length)".into())
    })?;
    Ok(seed)
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
pub async fn connect(config: &NatsConfig, name: &str) -> Result<Connection, ConnectError> {
    let addrs = config.server_addrs()?;
    if let Some(domain) = &config.jetstream_domain {
        check_domain(domain)?;
    }
    let servers = addrs
        .iter()
        .map(|a| a.clone().into_inner().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut opts = ConnectOptions::new();
    if let Some(path) = &config.credentials_file {
        let credentials_error = |source| ConnectError::Credentials {
            path: path.clone(),
            source,
        };
        let contents = tokio::fs::read_to_string(path)
            .await
            .map_err(credentials_error)?;
        opts = match nkey_seed(&contents) {
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
    let (tx, rx) = watch::channel(0u64);
    let conn_name = config.name.clone().unwrap_or_else(|| name.to_string());
    let log_servers = servers.clone();
    opts = opts
        .name(conn_name)
        .custom_inbox_prefix(crate::subjects::inbox_prefix(name))
        .max_reconnects(None)
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(5))
        .reconnect_delay_callback(|attempts| {
            // 0, 100 ms, 200 ms … capped at 5 s: quick to come back after a
            // server restart, gentle on a server that stays down.
            Duration::from_millis((attempts.saturating_sub(1) as u64 * 100).min(5_000))
        })
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
    })
}

/// The user nkey seed of a plain seed file (what `nk -gen user` writes: the
/// seed, maybe followed by the public key), or `None` for anything else,
/// which is then read as a decorated `.creds` file. A nats-server whose
/// users are nkeys (the authorization `swarm-controller nats-config` writes)
/// needs the first; an operator/JWT setup the second.
fn nkey_seed(contents: &str) -> Option<String> {
    if contents.contains("-----BEGIN") {
        return None;
    }
    contents
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("SU"))
        .map(str::to_string)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_list_is_validated() {
        let c = NatsConfig {
            url: Some("nats://127.0.0.1:4222, nats://127.0.0.1:4223".into()),
            servers: vec!["127.0.0.1:4224".into()],
            ..Default::default()
        };
        assert_eq!(c.server_addrs().unwrap().len(), 3);
        let bad = NatsConfig {
            url: Some("http://[::1".into()),
            ..Default::default()
        };
        let err = bad.server_addrs().unwrap_err().to_string();
        assert!(err.contains("http://[::1"), "{err}");
        assert!(matches!(
            NatsConfig::default().server_addrs(),
            Err(ConnectError::NotConfigured)
        ));
    }

    #[test]
    fn a_plain_seed_file_is_an_nkey_and_a_creds_file_is_not() {
        let seed = "SUAN2V5XOP5JNJO27FILRZ45RVRBB32YC7XPLF7KUGCAA2MVBZOYUTMV24";
        assert_eq!(nkey_seed(seed).as_deref(), Some(seed));
        // `nk -gen user -pubout`: seed, then public key.
        let with_public =
            format!("{seed}\nUDXIL452LOQQGCB5SWW7VY2X7TWFDBMB6XKYXQ7BJGXOMOWDWGUVME7Y\n");
        assert_eq!(nkey_seed(&with_public).as_deref(), Some(seed));
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAi\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        assert_eq!(nkey_seed(&creds), None);
        assert_eq!(nkey_seed("not a key\n"), None);
    }

    #[test]
    fn check_reports_every_problem() {
        let c = NatsConfig {
            url: Some("nats://127.0.0.1:4222".into()),
            credentials_file: Some("/nonexistent/x.creds".into()),
            tls: TlsConfig {
                cert_file: Some("/nonexistent/cert.pem".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let problems = c.check();
        assert!(
            problems.iter().any(|p| p.contains("x.creds")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("go together")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("cert.pem")),
            "{problems:?}"
        );
    }

    #[test]
    fn nkey_seed_file_is_checked_and_never_echoed() {
        let dir = tempfile_dir();
        let good = dir.join("good.seed");
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let public = nkeys::KeyPair::from_seed(&seed).unwrap().public_key();
        // As `nk -gen user -pubout` writes it: the seed, then the public key.
        std::fs::write(&good, format!("{seed}\n{public}\n")).unwrap();
        assert_eq!(read_nkey_seed(&good).unwrap(), seed);
        let cfg = |p: &std::path::Path| NatsConfig {
            nkey_seed_file: Some(p.to_path_buf()),
            ..Default::default()
        };
        assert!(cfg(&good).check().is_empty(), "{:?}", cfg(&good).check());

        let account = dir.join("account.seed");
        let account_seed = nkeys::KeyPair::new_account().seed().unwrap();
        std::fs::write(&account, &account_seed).unwrap();
        let corrupt = dir.join("corrupt.seed");
        let mut broken = seed.clone();
        broken.replace_range(10..12, "AA");
        std::fs::write(&corrupt, &broken).unwrap();
        let cases = [
            (dir.join("missing.seed"), "cannot read"),
            (account.clone(), "user seed"),
            (corrupt.clone(), "not a valid nkey seed"),
            (dir.clone(), "not a file"),
        ];
        for (path, why) in cases {
            let problems = cfg(&path).check();
            assert_eq!(problems.len(), 1, "{problems:?}");
            let p = &problems[0];
            assert!(
                p.contains(why) && p.contains(&path.display().to_string()),
                "{p}"
            );
            assert!(!p.contains(&account_seed) && !p.contains(&broken), "{p}");
        }
        let both = NatsConfig {
            credentials_file: Some(good.clone()),
            ..cfg(&good)
        };
        assert!(both.check().iter().any(|p| p.contains("give one")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sqc-connect-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn jetstream_domains_are_one_subject_token() {
        assert_eq!(check_domain("hub"), Ok(()));
        assert_eq!(check_domain("site-7_eu"), Ok(()));
        for (bad, why) in [
            ("", "empty"),
            ("a.b", "`.`"),
            ("hub*", "`*`"),
            ("h>", "`>`"),
            ("my hub", "whitespace"),
            (&"x".repeat(65), "longer than 64"),
        ] {
            let e = check_domain(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(&format!("{bad:?}")), "{e}");
        }
        let c = toml_like(r#"{"url":"nats://a:4222","jetstream_domain":"a.b"}"#);
        assert!(
            c.check()
                .iter()
                .any(|p| p.starts_with("nats.jetstream_domain:") && p.contains("\"a.b\"")),
            "{:?}",
            c.check()
        );
    }

    #[test]
    fn toml_shape() {
        let c: NatsConfig = toml_like(
            r#"{"url":"nats://a:4222","buckets":{"wanted":{"history":5,"storage":"memory","replicas":3}}}"#,
        );
        assert_eq!(c.buckets.get(Bucket::Wanted).replicas, 3);
        assert_eq!(c.buckets.get(Bucket::Status).history, 1);
        // A table that sets only replicas keeps the bucket's own history.
        let c = toml_like(r#"{"buckets":{"wanted":{"replicas":3}}}"#);
        assert_eq!(c.buckets.get(Bucket::Wanted).history, 10);
        let c = toml_like(r#"{"buckets":{"wanted":{"history":0}}}"#);
        assert!(
            c.check()
                .iter()
                .any(|p| p.contains("nats.buckets.wanted.history")),
            "{:?}",
            c.check()
        );
        let err = serde_json::from_str::<NatsConfig>(r#"{"urll":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("urll"), "{err}");
    }

    fn toml_like(json: &str) -> NatsConfig {
        serde_json::from_str(json).unwrap()
    }
}
