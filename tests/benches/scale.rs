//! Scale simulation: N hives in one process against one nats-server.
//!
//! `cargo bench -p hyperhive-tests --bench scale` (N = 100, 1,000, 5,000),
//! or `-- --quick` (N = 50, 200). `-- --n 300` picks one N.
//!
//! Each simulated hive is the real status publisher (`hive::publisher::run`)
//! and the real wanted watch (`hive::wanted::run`) on its own connection
//! (`swarm_queue_client::connect`). Instead of a converger and Docker, a
//! recording step takes each declaration the watch delivers, records it (the
//! "runtime" that records instead of starting containers) and reports it
//! converged through the hive's `Health`, which makes the publisher put a new
//! status. So "declaration -> acknowledged converged" is: KV put of the
//! declaration -> the hive's watch -> recorded -> status put -> seen by the
//! bench's watch on `hyperhive-status` with `converged_revision` >= the put.
//!
//! Reported per N: nats-server RSS and this process's RSS (all N clients),
//! the time until the controller's `status --json` shows all N fresh, the
//! latency p50/p99 over up to 200 declarations, and the wall time of one
//! `status --json` call (the controller binary, a separate process).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hive::publisher::{self, PublisherDeps};
use hive::readiness::Health;
use hive::wanted::{self, WantedDeps};
use hyperhive_tests::{controller_bin, NatsServer};
use serde_json::{json, Value};
use swarm_queue_client::{Bucket, BucketSettings, HiveName, NatsConfig};

/// nats-server 2.15 limits every stream to 1,000 consumers by default, and
/// every hive's wanted watch is one consumer on `KV_hyperhive-wanted`: past
/// ~1,000 hives the watches (and the controller's) are refused with
/// "maximum consumers limit reached" (10026). The bench raises the server's
/// default, as an operator of a larger swarm must (docs/benchmarks-scale.md).
const SERVER_CONFIG: &str =
    "max_connections: 100000\njetstream {\n  limits {\n    default_max_consumers: 100000\n  }\n}\n";

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn pct(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn status_json(config: &std::path::Path) -> Option<(Value, Duration)> {
    let t0 = Instant::now();
    let out = std::process::Command::new(controller_bin())
        .arg("--config")
        .arg(config)
        .args(["status", "--json"])
        .output()
        .ok()?;
    let took = t0.elapsed();
    if !out.status.success() {
        eprintln!("status failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some((serde_json::from_slice(&out.stdout).ok()?, took))
}

struct Figures {
    n: usize,
    server_rss_mib: f64,
    client_rss_mib: f64,
    all_fresh_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    samples: usize,
    status_call_ms: f64,
}

async fn run(n: usize) -> Figures {
    let nats = NatsServer::start_with(Some(SERVER_CONFIG), &[]);
    let url = nats.url();
    let dir = tempfile::Builder::new()
        .prefix("hhtest-scale-")
        .tempdir()
        .unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("sim{i:05}")).collect();
    let mut roster = String::new();
    for h in &names {
        roster.push_str(&format!("[hives.{h}]\n"));
    }
    let config = dir.path().join("controller.toml");
    std::fs::write(
        &config,
        format!("stale_after_secs = 60\n[nats]\nurl = {url:?}\n{roster}"),
    )
    .unwrap();
    let recorded: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let (trigger, shutdown) = hive::shutdown::channel();
    let cfg = NatsConfig {
        url: Some(url.clone()),
        ..Default::default()
    };
    let start = Instant::now();
    for name in &names {
        let hive = HiveName::new(name.as_str()).unwrap();
        let conn = swarm_queue_client::connect(&cfg, name).await.unwrap();
        let health = Arc::new(Health::new(Some(hive.clone()), None));
        let state_dir = dir.path().join(name);
        std::fs::create_dir_all(&state_dir).unwrap();
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        tokio::spawn(publisher::run(
            PublisherDeps {
                nats: conn.clone(),
                health: health.clone(),
                hive: hive.clone(),
                interval: Duration::from_secs(20),
                bucket: BucketSettings::default_for(Bucket::Status),
            },
            shutdown.clone(),
        ));
        tokio::spawn(wanted::run(
            WantedDeps {
                nats: conn,
                hive: hive.clone(),
                health: health.clone(),
                bucket: BucketSettings::default_for(Bucket::Wanted),
                state_dir,
                tx,
            },
            shutdown.clone(),
        ));
        // The recording runtime: record, then report converged.
        let recorded = recorded.clone();
        let name = name.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let rev = rx.borrow().as_ref().map(|w| w.revision);
                if let Some(rev) = rev {
                    recorded.lock().unwrap().push((name.clone(), rev));
                    health.set_revisions(Some(rev), Some(rev));
                }
            }
        });
    }
    // The controller sees all of them fresh.
    let all_fresh = loop {
        if let Some((r, _)) = status_json(&config) {
            let fresh = r["hives"]
                .as_array()
                .map(|h| h.iter().filter(|r| r["freshness"] == "fresh").count())
                .unwrap_or(0);
            if fresh == n {
                break start.elapsed();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "never all fresh"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // Declaration -> acknowledged converged, over up to 200 hives.
    let client = async_nats::connect(&url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let wanted_kv = js.get_key_value("hyperhive-wanted").await.unwrap();
    let status_kv = js.get_key_value("hyperhive-status").await.unwrap();
    let mut watch = status_kv.watch_all().await.unwrap();
    let k = n.min(200);
    let mut pending: HashMap<String, (u64, Instant)> = HashMap::new();
    let mut latencies = Vec::new();
    for name in names.iter().take(k) {
        let d = json!({ "schema": 1, "agents": { "a": { "image": "sim/img:1" } } }).to_string();
        let t0 = Instant::now();
        let rev = wanted_kv.put(name.as_str(), d.into()).await.unwrap();
        pending.insert(name.clone(), (rev, t0));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pending.is_empty() && Instant::now() < deadline {
        let Ok(Some(Ok(e))) = tokio::time::timeout(Duration::from_secs(5), watch.next()).await
        else {
            continue;
        };
        let Ok(doc) = serde_json::from_slice::<Value>(&e.value) else {
            continue;
        };
        if let Some((rev, t0)) = pending.get(&e.key).copied() {
            if doc["converged_revision"].as_u64() >= Some(rev) {
                latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
                pending.remove(&e.key);
            }
        }
    }
    let samples = latencies.len();
    let server_rss = rss_kib(nats.pid().unwrap());
    let client_rss = rss_kib(std::process::id());
    let mut calls = Vec::new();
    for _ in 0..3 {
        if let Some((_, took)) = status_json(&config) {
            calls.push(took.as_secs_f64() * 1000.0);
        }
    }
    trigger.trigger();
    Figures {
        n,
        server_rss_mib: server_rss as f64 / 1024.0,
        client_rss_mib: client_rss as f64 / 1024.0,
        all_fresh_s: all_fresh.as_secs_f64(),
        p50_ms: pct(&mut latencies.clone(), 0.5),
        p99_ms: pct(&mut latencies, 0.99),
        samples,
        status_call_ms: pct(&mut calls, 0.5),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let one = args
        .iter()
        .position(|a| a == "--n")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok());
    let ns: Vec<usize> = match one {
        Some(n) => vec![n],
        None if quick => vec![50, 200],
        None => vec![100, 1000, 5000],
    };
    println!(
        "{:>6} {:>14} {:>14} {:>12} {:>10} {:>10} {:>8} {:>14}",
        "N",
        "server RSS MiB",
        "client RSS MiB",
        "all fresh s",
        "p50 ms",
        "p99 ms",
        "samples",
        "status call ms"
    );
    for n in ns {
        let f = run(n).await;
        println!(
            "{:>6} {:>14.1} {:>14.1} {:>12.2} {:>10.2} {:>10.2} {:>8} {:>14.1}",
            f.n,
            f.server_rss_mib,
            f.client_rss_mib,
            f.all_fresh_s,
            f.p50_ms,
            f.p99_ms,
            f.samples,
            f.status_call_ms
        );
    }
}
