//! # The real-component test harness
//!
//! Every end-to-end test starts what it needs through this crate and gets it
//! cleaned up on `Drop`, even when the test fails:
//!
//! - [`NatsServer`]: a real `nats-server -js` per test on a port the server
//!   picks itself (`-p -1`, read back from its log), with its own store dir.
//!   It can be stopped and restarted on the same port and store to simulate
//!   an outage. A missing `nats-server` fails the test with an install hint.
//! - [`registry`]: a real `docker-registry` (distribution 2.8) per test on a
//!   free loopback port with htpasswd logins, images pushed to it through a
//!   throwaway `DOCKER_CONFIG`, and a slow TCP proxy so a pull's progress
//!   can be watched; killed by its pid on drop.
//! - [`docker`]: images built locally, containers
//!   and images removed by label when the guard drops, and a socket proxy
//!   to dockerd that lets a test make Docker "come back"; [`docker_cli`]:
//!   every `docker` CLI call of the harness, each within a limit, and none
//!   more to a daemon once one has hung.
//! - [`bare`]: the containers a hive makes, made directly through bollard:
//!   the benchmarks' baseline.
//! - [`jobs`]: a client of a hive's operator API, on its Unix socket.
//! - [`link`]: a TCP forwarder a test can cut and restore (a leaf link).
//! - [`log_time`]: when, after an event, a daemon's log shows a line.
//! - [`browser`]: a headless Chromium driven over the DevTools protocol.
//! - [`sse`]: a reader of the controller's server-sent events.
//! - [`Daemon`]: a `hive` or `swarm-controller` process with its log
//!   captured, killed by its own pid on drop.
//! - [`reply_probes`]: a hive's answers aimed at what it must not reach.
//! - [`foreign`]: KV reads through nats-py, a client this project did not
//!   write.
//! - [`wait_until`]: poll a condition with a deadline; tests never sleep.
//! - [`swarm`]: a whole swarm on one machine (one or three servers, real
//!   hives, the controller); [`secured`]: a hive under the accounts
//!   `nats-config` renders; [`identity`]: nkey users and their server.
//! - [`kv`]: the buckets read and written directly; [`trace_log`]: the
//!   logs of code run in-process, captured to a file.
//! - [`oracle`]: the seeded fault schedule checked against `status --json`;
//!   [`upgrade_data`]: the previous release's state the upgrade test uses.
//!
//! [`NatsServer`] is in [`nats`] and [`Daemon`] in [`process`].

pub mod bare;
pub mod browser;
pub mod docker;
pub mod docker_cli;
pub mod foreign;
pub mod hive;
pub mod identity;
pub mod jobs;
pub mod kv;
pub mod link;
pub mod log_time;
pub mod nats;
pub mod oracle;
pub mod process;
pub mod registry;
pub mod reply_probes;
pub mod secured;
pub mod sse;
pub mod swarm;
pub mod trace_log;
pub mod upgrade_data;

pub use nats::{check_config, NatsServer};
pub use process::{controller_bin, hive_bin, Daemon};

use std::future::Future;
use std::time::{Duration, Instant};

/// Poll `check` every 25 ms until it returns `Some`, or fail after `timeout`
/// with `what` in the message.
pub async fn wait_until<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_until(timeout, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Poll `check` every 25 ms until it returns `Some`; `None` after `timeout`
/// (for a caller that says more than [`wait_until`] when it times out).
pub async fn poll_until<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Like [`wait_until`] for blocking checks, outside an async runtime.
pub fn wait_until_blocking<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A unique, obvious prefix for everything a test creates in Docker.
pub fn unique_name(test: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "hhtest-{}-{}-{}",
        test,
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The machine a benchmark ran on, for its table: CPUs and model.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpus} CPUs (nproc), {model}")
}
