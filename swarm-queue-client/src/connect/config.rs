//! The `[nats]` table of both daemons' config files, and the checks that
//! can run before connecting, so `check-config` reports every problem at
//! once instead of the first connect failing on one.

use std::path::PathBuf;
use std::str::FromStr;

use async_nats::ServerAddr;
use serde::{Deserialize, Serialize};

use super::seed::read_nkey_seed;
use super::ConnectError;
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
    /// Only for `deliveries`: seconds a delivery id is remembered.
    pub max_age_secs: Option<u64>,
}

/// Per-bucket creation settings, as written in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketsConfig {
    pub status: BucketOverrides,
    pub wanted: BucketOverrides,
    pub credentials: BucketOverrides,
    pub rollouts: BucketOverrides,
    pub deliveries: BucketOverrides,
    pub maintenance: BucketOverrides,
}

impl BucketsConfig {
    /// The settings for `bucket`: the table's values over the bucket's defaults.
    pub fn get(&self, bucket: Bucket) -> BucketSettings {
        let o = match bucket {
            Bucket::Status => &self.status,
            Bucket::Wanted => &self.wanted,
            Bucket::Credentials => &self.credentials,
            Bucket::Rollouts => &self.rollouts,
            Bucket::Deliveries => &self.deliveries,
            Bucket::Maintenance => &self.maintenance,
        };
        let d = BucketSettings::default_for(bucket);
        BucketSettings {
            history: o.history.unwrap_or(d.history),
            storage: o.storage.unwrap_or(d.storage),
            replicas: o.replicas.unwrap_or(d.replicas),
            max_age_secs: o.max_age_secs.unwrap_or(d.max_age_secs),
        }
    }

    /// The config-file name of a bucket's table: `status`, `wanted`, `credentials`.
    pub fn table_name(bucket: Bucket) -> &'static str {
        match bucket {
            Bucket::Status => "status",
            Bucket::Wanted => "wanted",
            Bucket::Credentials => "credentials",
            Bucket::Rollouts => "rollouts",
            Bucket::Deliveries => "deliveries",
            Bucket::Maintenance => "maintenance",
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

    /// These settings with `url` (from a flag or the environment), when
    /// given, in place of every server they name.
    pub fn with_url(mut self, url: Option<&str>) -> Self {
        if let Some(url) = url {
            self.url = Some(url.to_string());
            self.servers.clear();
        }
        self
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
            problems.extend(check_max_age(bucket, s.max_age_secs));
        }
        problems
    }
}

/// `max_age_secs` is for the deliveries bucket alone, within its bounds:
/// an age on any other bucket would drop declarations or statuses.
fn check_max_age(bucket: Bucket, max_age_secs: u64) -> Option<String> {
    let table = BucketsConfig::table_name(bucket);
    let (low, high) = crate::buckets::DELIVERIES_MAX_AGE_BOUNDS;
    if bucket != Bucket::Deliveries {
        return (max_age_secs != 0).then(|| {
            format!(
                "nats.buckets.{table}.max_age_secs = {max_age_secs}: only the deliveries bucket \
                 expires its entries"
            )
        });
    }
    (!(low..=high).contains(&max_age_secs)).then(|| {
        format!(
            "nats.buckets.deliveries.max_age_secs must be {low} to {high} (a minute to 30 days), \
             not {max_age_secs}"
        )
    })
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
