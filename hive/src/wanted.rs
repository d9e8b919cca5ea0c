//! The wanted-state task: this hive's key in `hyperhive-wanted`.
//!
//! At start and after every reconnect it reads the key (`pull`, the repair
//! path), then watches it from the next revision (the fast path), so a value
//! written between the read and the watch is never missed. It also re-reads
//! the key every [`REPULL_EVERY`] in case a watch silently stalls.
//!
//! Only a valid declaration moves anything: it is saved to
//! `<state>/wanted.json` (so the hive knows what is wanted while NATS is
//! away) and handed to the converger through a latest-value channel. A
//! delete, a purge or an undecodable value is **not** a deletion order: it
//! changes nothing and raises a readiness warning naming the revision and
//! the reason.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use swarm_queue_client::buckets::{watch_key, WatchFrom};
use swarm_queue_client::{
    decode, ensure_connected, open_or_create, Bucket, BucketSettings, Connection, Declaration,
    HiveName, Level,
};
use tokio::sync::watch;

use crate::readiness::{keys, Health};
use crate::shutdown::Shutdown;

/// Re-read the key this often even when the watch is quiet.
pub const REPULL_EVERY: Duration = Duration::from_secs(60);

/// A valid declaration and its KV revision (its identity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wanted {
    pub revision: u64,
    pub declaration: Declaration,
}

pub type WantedTx = watch::Sender<Option<Arc<Wanted>>>;
pub type WantedRx = watch::Receiver<Option<Arc<Wanted>>>;

/// File that keeps the last valid declaration across restarts.
pub fn saved_path(state_dir: &Path) -> PathBuf {
    state_dir.join("wanted.json")
}

/// The last valid declaration saved on disk, if any. A file that cannot be
/// read or parsed is reported and treated as "not known", never as empty.
pub fn load_saved(state_dir: &Path) -> Option<Wanted> {
    let path = saved_path(state_dir);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the saved declaration");
            return None;
        }
    };
    match serde_json::from_slice::<Wanted>(&text) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the saved declaration is unreadable; waiting for the swarm's");
            None
        }
    }
}

fn save(state_dir: &Path, wanted: &Wanted) {
    let path = saved_path(state_dir);
    let result = serde_json::to_vec_pretty(wanted)
        .map_err(std::io::Error::other)
        .and_then(|bytes| crate::xkey::write_private(&path, &bytes));
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot save the declaration locally");
    }
}

pub struct WantedDeps {
    pub nats: Connection,
    pub hive: HiveName,
    pub health: Arc<Health>,
    pub bucket: BucketSettings,
    pub state_dir: PathBuf,
    pub tx: WantedTx,
}

enum SessionEnd {
    Shutdown,
    Reconnected,
    Failed(String),
}

struct Session<'a> {
    deps: &'a WantedDeps,
    /// Highest revision handled, valid or not; older ones are ignored.
    last_handled: u64,
}

impl Session<'_> {
    fn current_revision(&self) -> Option<u64> {
        self.deps.tx.borrow().as_ref().map(|w| w.revision)
    }

    fn handle(&mut self, entry: kv::Entry) {
        if entry.revision <= self.last_handled {
            return;
        }
        self.last_handled = entry.revision;
        let hive = &self.deps.hive;
        let keeping = match self.current_revision() {
            Some(r) => format!("keeping the declaration of revision {r}"),
            None => "nothing changes".to_string(),
        };
        match entry.operation {
            kv::Operation::Delete | kv::Operation::Purge => {
                let op = if entry.operation == kv::Operation::Delete {
                    "deleted"
                } else {
                    "purged"
                };
                tracing::warn!(%hive, revision = entry.revision, op, "wanted key removed; not a deletion order");
                self.deps.health.raise(
                    keys::WANTED,
                    Level::Warn,
                    format!(
                        "this hive's declaration was {op} at revision {}; that is not a deletion order: {keeping} \
                         (to retire everything, declare an explicit empty agent list)",
                        entry.revision
                    ),
                );
            }
            kv::Operation::Put => match decode::<Declaration>(&entry.value) {
                Err(e) => {
                    tracing::warn!(%hive, revision = entry.revision, error = %e, "undecodable declaration ignored");
                    self.deps.health.raise(
                        keys::WANTED,
                        Level::Warn,
                        format!(
                            "declaration revision {} is not valid ({e}); {keeping}",
                            entry.revision
                        ),
                    );
                }
                Ok(decoded) => {
                    for w in &decoded.warnings {
                        tracing::warn!(%hive, revision = entry.revision, warning = %w, "declaration");
                    }
                    self.deps.health.clear(keys::WANTED);
                    if self.current_revision() == Some(entry.revision) {
                        return;
                    }
                    let wanted = Wanted {
                        revision: entry.revision,
                        declaration: decoded.value,
                    };
                    tracing::info!(%hive, revision = wanted.revision, agents = wanted.declaration.agents.len(), "new declaration");
                    save(&self.deps.state_dir, &wanted);
                    self.deps.tx.send_replace(Some(Arc::new(wanted)));
                }
            },
        }
    }

    async fn run(
        &mut self,
        connects: &mut watch::Receiver<u64>,
        shutdown: &mut Shutdown,
    ) -> SessionEnd {
        let deps = self.deps;
        let client = &deps.nats.client;
        if let Err(e) = ensure_connected(client) {
            return SessionEnd::Failed(e.to_string());
        }
        let js = jetstream::new(client.clone());
        let store = match open_or_create(&js, Bucket::Wanted, &deps.bucket).await {
            Ok(s) => s,
            Err(e) => return SessionEnd::Failed(crate::error_chain(&e)),
        };
        let key = deps.hive.as_str();
        // Pull: the repair path.
        let pulled = match store.entry(key).await {
            Ok(e) => e,
            Err(e) => return SessionEnd::Failed(format!("pull of {key} failed: {e}")),
        };
        let from = pulled.as_ref().map(|e| e.revision);
        match pulled {
            Some(e) => self.handle(e),
            None => tracing::info!(hive = %deps.hive, "no declaration for this hive yet"),
        }
        // Watch: the fast path, from just after what the pull saw. A named
        // consumer (watch_key), because a hive's NATS identity may create
        // only consumers whose subject names its own key.
        let start = match from {
            Some(rev) => WatchFrom::Revision(rev + 1),
            None => WatchFrom::Current,
        };
        let watch = watch_key(client, &store, key, start).await;
        let mut watch = match watch {
            Ok(w) => w,
            Err(e) => return SessionEnd::Failed(format!("watch of {key} failed: {e}")),
        };
        let mut repull = tokio::time::interval(REPULL_EVERY);
        repull.tick().await;
        loop {
            tokio::select! {
                // Cancel-safe: watch::changed, Interval::tick and
                // Stream::next can be dropped between polls without loss
                // (a dropped next() leaves the item in the stream).
                _ = shutdown.wait() => return SessionEnd::Shutdown,
                _ = connects.changed() => return SessionEnd::Reconnected,
                _ = repull.tick() => {
                    if ensure_connected(client).is_ok() {
                        match store.entry(key).await {
                            Ok(Some(e)) => self.handle(e),
                            Ok(None) => {}
                            Err(e) => tracing::warn!(hive = %deps.hive, error = %e, "periodic pull failed"),
                        }
                    }
                }
                item = watch.next() => match item {
                    None => return SessionEnd::Failed("the watch ended".into()),
                    // A watch can yield an error (a missed heartbeat) and
                    // keep going: log it and carry on.
                    Some(Err(e)) => tracing::warn!(hive = %deps.hive, error = %e, "wanted watch error"),
                    Some(Ok(entry)) => self.handle(entry),
                }
            }
        }
    }
}

/// Run until shutdown.
pub async fn run(deps: WantedDeps, mut shutdown: Shutdown) {
    let mut connects = deps.nats.connects.clone();
    let mut session = Session {
        deps: &deps,
        last_handled: deps.tx.borrow().as_ref().map(|w| w.revision).unwrap_or(0),
    };
    let mut backoff = Duration::from_millis(500);
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = connects.wait_for(|n| *n > 0) => {}
        }
        connects.mark_unchanged();
        match session.run(&mut connects, &mut shutdown).await {
            SessionEnd::Shutdown => return,
            SessionEnd::Reconnected => {
                tracing::info!(hive = %deps.hive, "reconnected to NATS: pulling the declaration again");
                backoff = Duration::from_millis(500);
            }
            SessionEnd::Failed(why) => {
                tracing::warn!(hive = %deps.hive, error = %why, retry_in = ?backoff, "wanted-state session failed");
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(backoff) => {}
                    _ = connects.changed() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}
