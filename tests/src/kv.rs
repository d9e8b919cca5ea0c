//! Talking to the swarm's buckets directly, as the controller (or an
//! operator with the `nats` CLI) would: put declarations, read statuses.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use serde_json::Value;
use swarm_queue_client::{open_or_create, Bucket, BucketSettings};

/// A plain client on the swarm's buckets.
#[derive(Clone)]
pub struct Swarm {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

impl Swarm {
    pub async fn connect(url: &str) -> Swarm {
        let client = async_nats::connect(url).await.expect("connect to nats");
        let js = jetstream::new(client.clone());
        Swarm { client, js }
    }

    /// The bucket `name`, opened, or made with the settings the daemons
    /// make it with (`swarm_queue_client::open_or_create`), so a hive that
    /// makes it at the same moment makes the same one; any other name is
    /// opened or made with history 10.
    pub async fn bucket(&self, name: &str) -> kv::Store {
        if let Some(b) = Bucket::ALL.into_iter().find(|b| b.name() == name) {
            let settings = BucketSettings::default_for(b);
            return open_or_create(&self.js, b, &settings)
                .await
                .unwrap_or_else(|e| panic!("open or create {name}: {e}"));
        }
        match self.js.get_key_value(name).await {
            Ok(s) => s,
            Err(_) => self
                .js
                .create_key_value(kv::Config {
                    bucket: name.into(),
                    history: 10,
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|e| panic!("create {name}: {e}")),
        }
    }

    /// Put a declaration (any JSON text, valid or not); its revision.
    pub async fn declare(&self, hive: &str, json: &str) -> u64 {
        self.bucket("hyperhive-wanted")
            .await
            .put(hive, json.to_string().into())
            .await
            .expect("put declaration")
    }

    pub async fn delete_declaration(&self, hive: &str) {
        self.bucket("hyperhive-wanted")
            .await
            .delete(hive)
            .await
            .expect("delete declaration");
    }

    /// Leave on the declaration the mark a purge (`nats kv purge`) leaves:
    /// a message with `KV-Operation: PURGE`. The buckets refuse the purge
    /// itself (`deny_purge` takes no `Nats-Rollup`), but a bucket made
    /// before them may hold such a mark, and the hive must take it as no
    /// deletion order.
    pub async fn mark_declaration_purged(&self, hive: &str) {
        self.bucket("hyperhive-wanted").await;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("KV-Operation", "PURGE");
        self.js
            .publish_with_headers(Bucket::Wanted.key_subject(hive), headers, "".into())
            .await
            .expect("publish the purge mark")
            .await
            .expect("the purge mark stored");
    }

    /// The hive's current status document and its KV revision.
    pub async fn status(&self, hive: &str) -> Option<(u64, Value)> {
        let store = self.js.get_key_value("hyperhive-status").await.ok()?;
        let e = store.entry(hive).await.ok()??;
        if e.operation != kv::Operation::Put {
            return None;
        }
        Some((e.revision, serde_json::from_slice(&e.value).ok()?))
    }

    /// Wait until the hive reports `converged_revision >= revision`; the
    /// status document that showed it. On a timeout the panic says what
    /// the hive's last status read showed (whether it had read the
    /// declaration at all: `seen_revision`), so a failure names its cause.
    pub async fn converged(&self, hive: &str, revision: u64, timeout: Duration) -> Value {
        let last = std::sync::Mutex::new(None::<(u64, Value)>);
        let found = crate::poll_until(timeout, || async {
            let (at, s) = self.status(hive).await?;
            let done = s["converged_revision"]
                .as_u64()
                .is_some_and(|c| c >= revision);
            if done {
                return Some(s);
            }
            *last.lock().expect("not poisoned") = Some((at, s));
            None
        })
        .await;
        found.unwrap_or_else(|| {
            let seen = match last.into_inner().expect("not poisoned") {
                None => "no status of it was read".to_string(),
                Some((at, s)) => {
                    let warnings: String = s["warnings"].to_string().chars().take(600).collect();
                    format!(
                        "its last status (revision {at} of its key): seen_revision {}, \
                         converged_revision {}, state {}, warnings {warnings}",
                        s["seen_revision"], s["converged_revision"], s["state"]
                    )
                }
            };
            panic!("timed out after {timeout:?} waiting for {hive} converged on revision {revision}; {seen}")
        })
    }

    /// Wait until the hive's status satisfies `check`.
    pub async fn status_until(
        &self,
        hive: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        crate::wait_until(timeout, what, || async {
            let (_, s) = self.status(hive).await?;
            check(&s).then_some(s)
        })
        .await
    }
}

/// `(id, running, spec label)` of `hyperhive.<hive>.<agent>`, if it exists.
pub fn container(hive: &str, agent: &str) -> Option<(String, bool, String)> {
    let out = crate::docker_cli::run(&[
        "inspect",
        "--format",
        "{{.Id}} {{.State.Running}} {{index .Config.Labels \"org.hyperhive.spec\"}}",
        &format!("hyperhive.{hive}.{agent}"),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    Some((
        parts.next()?.to_string(),
        parts.next()? == "true",
        parts.next().unwrap_or_default().to_string(),
    ))
}

/// Containers labelled for `hive`.
pub fn containers_of(hive: &str) -> Vec<String> {
    crate::docker::docker(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}",
        "--filter",
        &format!("label=org.hyperhive.hive={hive}"),
    ])
    .lines()
    .map(str::to_string)
    .collect()
}
