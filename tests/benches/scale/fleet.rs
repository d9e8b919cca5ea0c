//! N simulated hives in this process.
//!
//! Each is the real status publisher (`hive::bus::publisher::run`) and the real
//! wanted task (`hive::bus::wanted::run`: a core-NATS doorbell on its own key
//! and direct gets, no JetStream consumer) on its own connection
//! (`swarm_queue_client::connect`), with the hive's default 60 s publish
//! interval. Instead of a converger and Docker, a recording step takes each
//! declaration the wanted task hands over and reports it converged through
//! the hive's `StatusBoard` (each declared agent running on its declared spec, as
//! a real hive reports it), which makes the publisher put a new status.
//!
//! Each connection carries the hive's jitter (`swarm_queue_client::Jitter`,
//! seeded with the hive's index so a run can be repeated), which the real
//! reconnect, publisher and wanted code draw from: the hive's default
//! `jitter_percent`, or the one [`start_with_jitter`] is given (0: none).
//!
//! Hive `i` connects to server `i % servers` of the list, so a cluster's
//! hives are spread evenly. At most [`CONNECT_PARALLEL`] hives are being set
//! up at once, as a fleet that boots together would.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hive::bus::publisher::{self, PublisherDeps};
use hive::bus::wanted::{self, WantedDeps};
use hive::shutdown::{Shutdown, ShutdownTrigger};
use hive::status::StatusBoard;
use swarm_queue_client::{
    AgentName, AgentStatus, Bucket, BucketSettings, Declaration, HiveName, Jitter, NatsConfig,
    Observed, Power,
};

/// Hives set up at the same time.
const CONNECT_PARALLEL: usize = 64;
/// The hive's default `publish_interval_secs`.
const PUBLISH_INTERVAL: Duration = Duration::from_secs(60);

/// The running fleet; dropping it stops every hive.
pub struct Fleet {
    trigger: ShutdownTrigger,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.trigger.trigger();
    }
}

/// Start one simulated hive per name; hive `i` on `urls[i % urls.len()]`,
/// its state under `dir`, with the hive's default jitter.
pub async fn start(names: &[String], urls: &[String], dir: &Path) -> Fleet {
    start_with_jitter(
        names,
        urls,
        dir,
        swarm_queue_client::jitter::DEFAULT_PERCENT,
    )
    .await
}

/// [`start`], each hive's jitter `jitter_percent` (0: none).
pub async fn start_with_jitter(
    names: &[String],
    urls: &[String],
    dir: &Path,
    jitter_percent: u8,
) -> Fleet {
    let (trigger, shutdown) = hive::shutdown::channel();
    futures_util::stream::iter(names.iter().enumerate())
        .map(|(i, name)| {
            let url = urls[i % urls.len()].clone();
            let jitter = Jitter::seeded(jitter_percent, i as u64);
            start_one(name, url, dir, jitter, shutdown.clone())
        })
        .buffer_unordered(CONNECT_PARALLEL)
        .collect::<Vec<()>>()
        .await;
    Fleet { trigger }
}

async fn start_one(name: &str, url: String, dir: &Path, jitter: Jitter, shutdown: Shutdown) {
    let hive = HiveName::new(name).expect("a valid hive name");
    let cfg = NatsConfig {
        url: Some(url),
        ..Default::default()
    };
    let conn = swarm_queue_client::connect_with(&cfg, name, jitter)
        .await
        .expect("connect a simulated hive");
    let board = Arc::new(StatusBoard::new(Some(hive.clone()), None));
    let state_dir = dir.join(name);
    std::fs::create_dir_all(&state_dir).expect("a hive's state dir");
    let (tx, mut rx) = tokio::sync::watch::channel(None);
    // `wanted.json` saved as a hive saves it; with no converger to wait for
    // (the planned sender is dropped), at once.
    tokio::spawn(wanted::save_each(
        state_dir,
        rx.clone(),
        tokio::sync::watch::channel(None).1,
    ));
    tokio::spawn(publisher::run(
        PublisherDeps {
            nats: conn.clone(),
            board: board.clone(),
            hive: hive.clone(),
            interval: PUBLISH_INTERVAL,
            bucket: BucketSettings::default_for(Bucket::Status),
        },
        shutdown.clone(),
    ));
    tokio::spawn(wanted::run(
        WantedDeps {
            nats: conn,
            hive,
            board: board.clone(),
            bucket: BucketSettings::default_for(Bucket::Wanted),
            tx,
        },
        shutdown,
    ));
    // The recording runtime: take the declaration, report it converged.
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let wanted = rx.borrow().clone();
            if let Some(w) = wanted {
                board.set_agents(as_declared(&w.declaration), Default::default());
                board.set_revisions(Some(w.revision), Some(w.revision));
            }
        }
    });
}

/// Every agent of `d` running (or stopped) exactly as declared.
fn as_declared(d: &Declaration) -> BTreeMap<AgentName, AgentStatus> {
    d.agents
        .iter()
        .map(|(name, spec)| {
            let wanted = spec.power.unwrap_or_default();
            let observed = match wanted {
                Power::Up => Observed::Running,
                Power::Down => Observed::Stopped,
            };
            let status = AgentStatus {
                spec: Some(spec.spec_hash()),
                declared_spec: Some(spec.spec_hash()),
                ..AgentStatus::new(wanted, observed)
            };
            (name.clone(), status)
        })
        .collect()
}
