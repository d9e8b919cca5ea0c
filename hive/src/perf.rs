//! # Where a hive's own time goes
//!
//! Process-wide counters of the work a deploy costs besides Docker's own
//! create, start, stop and remove: calls into the job store and, among
//! them, the calls that wrote (each is one commit, one fsync of the WAL
//! under `synchronous = FULL`), Docker API calls by kind, node claims, and
//! the converger's passes and enqueues. Each counter holds how many times
//! and the total time. `/metrics` shows them as
//! `hyperhive_perf_calls_total{what="…"}` and
//! `hyperhive_perf_seconds_total{what="…"}`, and the agents benchmark
//! (`tests/benches/agents.rs`) reads them before and after each phase to
//! say where the time of 100 agents went.
//!
//! Statics rather than a handle threaded through every task: they are only
//! ever added to, cost two relaxed atomic adds per call, and one call path
//! left without the handle would make the figures lie. Times of calls that
//! overlap add up, so a total can exceed the wall time of a phase.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often one kind of work ran and how long it took in all.
pub struct Counter {
    /// The `what` label in `/metrics`.
    what: &'static str,
    calls: AtomicU64,
    nanos: AtomicU64,
}

impl Counter {
    const fn new(what: &'static str) -> Counter {
        Counter {
            what,
            calls: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
        }
    }

    /// Count one call that took `took`.
    pub fn add(&self, took: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Run `work`, counting it and its time.
    pub async fn time<T>(&self, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = work.await;
        self.add(started.elapsed());
        out
    }

    /// (calls, seconds) so far.
    pub fn read(&self) -> (u64, f64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed) as f64 / 1e9,
        )
    }
}

/// Every call into the job store: time holding its connection.
pub static STORE_CALLS: Counter = Counter::new("store_call");
/// The store calls that changed rows: one commit, one WAL fsync each.
pub static STORE_WRITES: Counter = Counter::new("store_write");
/// Time from asking for the store to holding its connection (the blocking
/// pool and the lock).
pub static STORE_WAIT: Counter = Counter::new("store_wait");
/// The worker's claims of a ready node (including those that found none).
pub static CLAIMS: Counter = Counter::new("claim");
/// Node operations run by the worker, from claim to outcome recorded.
pub static NODES: Counter = Counter::new("node");
/// Converger passes (observe, apply, reconcile, report).
pub static CONVERGER_PASSES: Counter = Counter::new("converger_pass");
/// The converger queueing the jobs of one new revision.
pub static ENQUEUE_REVISION: Counter = Counter::new("converger_enqueue");
/// Docker: inspect one container.
pub static DOCKER_INSPECT: Counter = Counter::new("docker_inspect");
/// Docker: list this hive's containers.
pub static DOCKER_LIST: Counter = Counter::new("docker_list");
/// Docker: inspect one image.
pub static DOCKER_IMAGE_INSPECT: Counter = Counter::new("docker_image_inspect");
/// Docker: create, start, stop, remove one container.
pub static DOCKER_CREATE: Counter = Counter::new("docker_create");
pub static DOCKER_START: Counter = Counter::new("docker_start");
pub static DOCKER_STOP: Counter = Counter::new("docker_stop");
pub static DOCKER_REMOVE: Counter = Counter::new("docker_remove");

/// Every counter, in the order `/metrics` shows them.
pub static ALL: [&Counter; 14] = [
    &STORE_CALLS,
    &STORE_WRITES,
    &STORE_WAIT,
    &CLAIMS,
    &NODES,
    &CONVERGER_PASSES,
    &ENQUEUE_REVISION,
    &DOCKER_INSPECT,
    &DOCKER_LIST,
    &DOCKER_IMAGE_INSPECT,
    &DOCKER_CREATE,
    &DOCKER_START,
    &DOCKER_STOP,
    &DOCKER_REMOVE,
];

/// The counters in Prometheus text.
pub fn render() -> String {
    let mut out = String::new();
    family(
        &mut out,
        "hyperhive_perf_calls_total",
        "Calls of one kind of work since start (see hive::perf).",
        |c| c.read().0.to_string(),
    );
    family(
        &mut out,
        "hyperhive_perf_seconds_total",
        "Seconds spent in one kind of work since start; overlapping calls add up.",
        |c| format!("{:.6}", c.read().1),
    );
    out
}

fn family(out: &mut String, name: &str, help: &str, value: impl Fn(&Counter) -> String) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    for c in ALL {
        let _ = writeln!(out, "{name}{{what=\"{}\"}} {}", c.what, value(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders() {
        let c = Counter::new("t");
        c.add(Duration::from_millis(1500));
        c.add(Duration::from_millis(500));
        assert_eq!(c.read(), (2, 2.0));
        let text = render();
        assert!(text.contains("hyperhive_perf_calls_total{what=\"store_write\"}"));
        assert!(text.contains("hyperhive_perf_seconds_total{what=\"docker_list\"}"));
    }
}
