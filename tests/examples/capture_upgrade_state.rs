//! A tool, not a test: makes `tests/data/upgrade-prev/`, the state that
//! `tests/tests/e2e/upgrade_state.rs` upgrades over, with a previous release's
//! `hive` binary. Build that release's hive (for example in a git worktree
//! of its commit, `cargo build -p hive --bin hive`), then, with nats-server
//! and dockerd at hand:
//!
//! ```text
//! cargo run -p hyperhive-tests --example capture_upgrade_state -- /path/to/old/hive
//! ```
//!
//! It declares [`declaration`] to a fresh hive of that release, waits for it
//! to converge, stops it, and writes the declaration, its job store and its
//! containers' `docker inspect` (the state dir written as [`STATE`]).

use std::path::Path;
use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::process::Daemon;
use hyperhive_tests::upgrade_data::{copy_job_store, data, declaration, import_image, HIVE, STATE};
use hyperhive_tests::NatsServer;
use serde_json::Value;

const T: Duration = Duration::from_secs(90);

#[tokio::main]
async fn main() {
    let old = std::env::args()
        .nth(1)
        .expect("usage: capture_upgrade_state PATH-TO-THE-PREVIOUS-RELEASE'S-hive");
    let nats = NatsServer::start();
    let url = nats.url();
    let _image = import_image();
    let _guard = ContainerGuard::new(HIVE);
    let swarm = Swarm::connect(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("hive.toml");
    std::fs::write(
        &config,
        format!(
            "name = {HIVE:?}\nstate_dir = {:?}\nhttp_listen = \"127.0.0.1:0\"\n\
             publish_interval_secs = 1\nmin_running_secs = 1\n[nats]\nurl = {url:?}\n",
            state.display().to_string()
        ),
    )
    .unwrap();
    let r1 = swarm.declare(HIVE, &declaration()).await;
    assert_eq!(r1, 1);
    let cfg = config.display().to_string();
    let mut hive = Daemon::spawn_in(
        None,
        Path::new(&old),
        &["run", "--config", &cfg],
        &[],
        &dir.path().join("hive.log"),
    );
    swarm.converged(HIVE, r1, T).await;
    assert_eq!(
        hive.terminate(),
        Some(0),
        "the old hive did not stop cleanly"
    );
    let out = data();
    std::fs::create_dir_all(out.join("state")).unwrap();
    std::fs::write(out.join("declaration.json"), declaration()).unwrap();
    copy_job_store(&state, &out.join("state"));
    let mut inspected = Vec::new();
    for agent in ["full", "plain", "parked"] {
        let text = docker(&["inspect", &format!("hyperhive.{HIVE}.{agent}")]);
        let mut v: Vec<Value> = serde_json::from_str(&text).unwrap();
        inspected.push(v.remove(0));
    }
    let text = serde_json::to_string_pretty(&inspected)
        .unwrap()
        .replace(&state.display().to_string(), STATE);
    std::fs::write(out.join("containers.json"), text + "\n").unwrap();
}
