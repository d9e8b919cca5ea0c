//! The dashboard over the simulated fleet: `swarm-controller serve` (the
//! binary, its own process) against the bench's server(s).
//!
//! Measured: the time from spawn to listening (it reads both buckets
//! first), the first SSE snapshot of the page the dashboard opens on
//! (worst first, 100 rows), the first page and the whole of `/api/status`,
//! and the time from one KV update (a status put of a hive the page shows)
//! to that hive's row on the open event stream. The serve process's peak
//! memory is read from its `/proc/<pid>/status` while it still runs.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyperhive_tests::process::serve_controller;
use hyperhive_tests::sse::EventStream;
use hyperhive_tests::Daemon;
use serde_json::Value;

use crate::measure::{pct, proc_kib};

/// The query the dashboard page opens its event stream with.
const PAGE_QUERY: &str = "sort=attention&offset=0&limit=100";
const T: Duration = Duration::from_secs(120);

pub struct Figures {
    pub start_ms: f64,
    pub snapshot_bytes: usize,
    pub first_page_bytes: usize,
    pub full_bytes: usize,
    pub update_p50_ms: f64,
    pub update_max_ms: f64,
    pub updates: usize,
    pub serve_hwm_kib: u64,
}

/// A running `serve`; dropping it kills the process.
pub struct Serve {
    _daemon: Daemon,
    pub pid: u32,
    pub base: String,
    pub start: Duration,
}

pub async fn start(config: &Path, log: &Path) -> Serve {
    let t0 = Instant::now();
    let (daemon, base) = serve_controller(config, log).await;
    Serve {
        pid: daemon.pid().expect("serve runs"),
        _daemon: daemon,
        base,
        start: t0.elapsed(),
    }
}

/// Measure the page and `updates` KV update -> SSE row latencies.
pub async fn measure(
    serve: &Serve,
    status: &async_nats::jetstream::kv::Store,
    updates: usize,
) -> Figures {
    let base = &serve.base;
    let get_len = |url: String| async move {
        reqwest::get(url)
            .await
            .expect("GET serve")
            .bytes()
            .await
            .expect("a body")
            .len()
    };
    let first_page_bytes = get_len(format!("{base}/api/status?{PAGE_QUERY}")).await;
    let full_bytes = get_len(format!("{base}/api/status")).await;
    let mut sse = EventStream::open(&format!("{base}/api/events?{PAGE_QUERY}"), T).await;
    let (event, snapshot) = sse.next().await;
    assert_eq!(event, "snapshot", "the first event");
    let snapshot_bytes = snapshot.len();
    let shown: Vec<String> = serde_json::from_str::<Value>(&snapshot).expect("JSON")["hives"]
        .as_array()
        .expect("a snapshot with hives")
        .iter()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    let mut latencies = Vec::new();
    for u in 0..updates.min(shown.len()) {
        let name = &shown[(u * 7) % shown.len()];
        let value = status
            .get(name.as_str())
            .await
            .expect("read a status")
            .unwrap_or_else(|| Bytes::from_static(b"{}"));
        let t0 = Instant::now();
        let rev = status
            .put(name.as_str(), value)
            .await
            .expect("put a status");
        loop {
            let (event, data) = sse.next().await;
            if event != "row" {
                continue;
            }
            let d: Value = serde_json::from_str(&data).expect("a row event is JSON");
            if d["row"]["name"] == name.as_str()
                && d["row"]["status_revision"].as_u64() >= Some(rev)
            {
                break;
            }
        }
        latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Figures {
        start_ms: serve.start.as_secs_f64() * 1000.0,
        snapshot_bytes,
        first_page_bytes,
        full_bytes,
        update_p50_ms: pct(&latencies, 0.5),
        update_max_ms: pct(&latencies, 1.0),
        updates: latencies.len(),
        serve_hwm_kib: proc_kib(serve.pid, "VmHWM:"),
    }
}
