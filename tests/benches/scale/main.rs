//! Scale simulation: N hives in one process against one nats-server, or
//! against a three-server JetStream cluster with R3 buckets.
//!
//! `cargo bench -p hyperhive-tests --bench scale` runs N = 1,000, 5,000 and
//! 10,000 on one server; `-- --n 5000` (or `--n 1000,5000`) picks N;
//! `-- --cluster` runs N = 2,000 on three servers, the hives spread evenly
//! over them; `-- --quick` is the short CI form (N = 50, 200).
//! `-- --rollout` is a staged rollout over N = 10,000 (quick: 200) instead
//! ([`rollout`]). `-- --accounts` measures what an account per hive costs
//! nats-server against the same users in one account, at N = 10,000
//! (quick: 200) ([`accounts`]). `-- --storm` restarts the server under
//! N = 10,000 (quick: 200) simulated hives, with and without jitter
//! ([`storm`]). `-- --presence` measures the controller under the
//! server's connection events of N = 10,000 hives ([`presence`]).
//! `-- --events` measures `hyperhive-events` under N = 10,000 hives'
//! lifecycle events, against floors in the same run ([`events`]).
//!
//! The hives ([`fleet`]) hold no JetStream consumer: each watches its key
//! through a core-NATS doorbell and reads it with direct gets. So the server
//! needs no raised consumer limit, and its default `max_connections` (64K)
//! is far above 10,000; the one limit the bench raises is its own fd limit
//! (`RLIMIT_NOFILE`, soft to hard), which the servers it starts inherit.
//!
//! Reported per N: the servers' RSS (total, and per hive above the empty
//! server's), this process's RSS (all N clients), the JetStream consumers
//! the server holds, the time until `status --json` shows all N fresh,
//! declaration -> acknowledged converged p50/p99 over 200 declarations
//! spread over the fleet (KV put -> doorbell -> direct get -> recorded ->
//! status put -> seen on a watch of `hyperhive-status`), one `status --json`
//! call's wall time and peak RSS (median and maximum of 3), and the
//! dashboard ([`dashboard`]): serve start, snapshot size, KV update -> SSE
//! row.

mod accounts;
mod dashboard;
mod events;
mod fleet;
mod measure;
mod presence;
mod rollout;
mod storm;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hyperhive_tests::swarm::{start_cluster, write_controller_config};
use hyperhive_tests::{controller_bin, wait_until, NatsServer};
use measure::{pct, proc_kib, Consumers};
use serde_json::{json, Value};
use swarm_queue_client::{open_or_create, Bucket, BucketSettings};

/// Declarations timed per N (fewer when the fleet is smaller).
const DECLARATIONS: usize = 200;
/// KV update -> SSE row samples.
const DASHBOARD_UPDATES: usize = 20;
/// The controller's default `stale_after_secs` (twice the publish interval).
const STALE_AFTER_SECS: u64 = 120;
/// Longest wait for all hives fresh, and for the declarations.
const FRESH_LIMIT: Duration = Duration::from_secs(900);
const CONVERGE_LIMIT: Duration = Duration::from_secs(300);

struct Figures {
    n: usize,
    servers: usize,
    server_rss_kib: u64,
    empty_server_rss_kib: u64,
    /// Each server's RSS (KiB) and open fds, in server order.
    per_server: Vec<(u64, usize)>,
    /// Each server's share of one core over the steady window, if measured.
    steady_cpu: Vec<f64>,
    /// Declaration -> converged again after the steady window (ms).
    steady_latencies: Vec<f64>,
    client_rss_kib: u64,
    consumers: Consumers,
    setup_s: f64,
    all_fresh_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    samples: usize,
    status_ms: f64,
    status_peak_kib: u64,
    dash: dashboard::Figures,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(measure::WRAP) {
        // The wrapper builds no runtime: it should hold as little as it can.
        if let Err(e) = measure::wrapper(&args[2..]) {
            eprintln!("{}: {e}", measure::WRAP);
            std::process::exit(1);
        }
        return;
    }
    tokio::runtime::Runtime::new()
        .expect("a tokio runtime")
        .block_on(bench(&args));
}

async fn bench(args: &[String]) {
    // The hives' own warnings (a failed read, a reconnect) when asked for.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let quick = args.iter().any(|a| a == "--quick");
    let cluster = args.iter().any(|a| a == "--cluster");
    let steady = args
        .iter()
        .position(|a| a == "--steady")
        .and_then(|i| args.get(i + 1))
        .map(|v| Duration::from_secs(v.parse().expect("--steady takes seconds")))
        .unwrap_or(Duration::ZERO);
    let chosen: Option<Vec<usize>> = args
        .iter()
        .position(|a| a == "--n")
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.split(',')
                .map(|n| n.trim().parse().expect("--n takes numbers, like 1000,5000"))
                .collect()
        });
    let fds = measure::raise_fd_limit().expect("raise RLIMIT_NOFILE");
    if args.iter().any(|a| a == "--storm") {
        let ns = chosen.unwrap_or_else(|| vec![if quick { 200 } else { 10_000 }]);
        println!("scale: fd limit {fds}, N = {ns:?}");
        storm::bench(&ns, quick).await;
        return;
    }
    let rollout = args.iter().any(|a| a == "--rollout");
    if rollout || args.iter().any(|a| a == "--accounts") {
        // One N for these modes: 10,000, or 200 in the short form.
        let ns = chosen
            .clone()
            .unwrap_or_else(|| vec![if quick { 200 } else { 10_000 }]);
        println!("scale: fd limit {fds}, N = {ns:?}");
        if rollout {
            rollout::bench(&ns).await;
        } else {
            let clients = if quick {
                accounts::QUICK_CLIENTS
            } else {
                accounts::CLIENTS
            };
            accounts::bench(&ns, clients).await;
        }
        return;
    }
    if args.iter().any(|a| a == "--events") {
        let ns = chosen.unwrap_or_else(|| vec![if quick { 200 } else { 10_000 }]);
        println!("scale: the event stream, N = {ns:?}");
        events::bench(&ns).await;
        return;
    }
    if args.iter().any(|a| a == "--presence") {
        let ns = match chosen {
            Some(ns) => ns,
            None if quick => vec![200],
            None => vec![10_000],
        };
        println!("scale: connection events, N = {ns:?}");
        presence::bench(&ns).await;
        return;
    }
    let ns = match chosen {
        Some(ns) => ns,
        None if quick => vec![50, 200],
        None if cluster => vec![2000],
        None => vec![1000, 5000, 10_000],
    };
    let servers = if cluster { 3 } else { 1 };
    println!(
        "scale: {servers} nats-server(s), fd limit {fds}, N = {ns:?}, {} build",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!("{}", header());
    let mut notes = Vec::new();
    for n in ns {
        let f = run(n, servers, steady).await;
        println!("{}", row(&f));
        notes.extend(server_notes(&f, steady));
    }
    println!();
    for line in notes {
        println!("{line}");
    }
}

async fn run(n: usize, servers: usize, steady: Duration) -> Figures {
    let nats = if servers > 1 {
        start_cluster("hhscale")
    } else {
        vec![NatsServer::start()]
    };
    let urls: Vec<String> = nats.iter().map(NatsServer::url).collect();
    let all_urls = urls.join(",");
    let addrs: Vec<async_nats::ServerAddr> = urls.iter().map(|u| u.parse().unwrap()).collect();
    let client = async_nats::connect(addrs).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let bucket = |b| {
        let js = js.clone();
        async move {
            let settings = BucketSettings {
                replicas: servers,
                ..BucketSettings::default_for(b)
            };
            // A cluster just started may have no meta leader yet ("no
            // suitable peers for placement"): try until it has.
            wait_until(Duration::from_secs(60), "the bucket made", || async {
                open_or_create(&js, b, &settings).await.ok()
            })
            .await
        }
    };
    let status_kv = bucket(Bucket::Status).await;
    let wanted_kv = bucket(Bucket::Wanted).await;
    let server_rss = || -> u64 {
        nats.iter()
            .filter_map(|s| s.pid())
            .map(|p| proc_kib(p, "VmRSS:"))
            .sum()
    };
    let empty_server_rss_kib = server_rss();

    let dir = tempfile::Builder::new()
        .prefix("hhtest-scale-")
        .tempdir()
        .unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("sim{i:05}")).collect();
    let config = write_controller_config(dir.path(), &names, STALE_AFTER_SECS, &all_urls);
    let start = Instant::now();
    let fleet = fleet::start(&names, &urls, dir.path()).await;
    let setup_s = start.elapsed().as_secs_f64();
    let all_fresh_s = all_fresh(&config, &status_kv, n, start).await.as_secs_f64();

    let k = n.min(DECLARATIONS);
    let chosen: Vec<&String> = (0..k).map(|i| &names[i * n / k]).collect();
    let latencies = declare(&wanted_kv, &status_kv, &chosen).await;
    let server_rss_kib = server_rss();
    let per_server = nats
        .iter()
        .filter_map(|s| s.pid())
        .map(|p| (proc_kib(p, "VmRSS:"), measure::fd_count(p)))
        .collect();
    let client_rss_kib = proc_kib(std::process::id(), "VmRSS:");

    let serve = dashboard::start(&config, &dir.path().join("serve.log")).await;
    let dash = dashboard::measure(&serve, &status_kv, DASHBOARD_UPDATES).await;
    let consumers = measure::consumers(&js).await;
    let mut calls = Vec::new();
    let mut status_peak_kib = 0;
    for _ in 0..3 {
        if let Some((_, m)) = status_json(&config).await {
            calls.push(m.wall.as_secs_f64() * 1000.0);
            status_peak_kib = status_peak_kib.max(m.peak_rss_kib);
        }
    }
    let steady_cpu = steady_cpu(&nats, steady).await;
    let steady_latencies = if steady.is_zero() {
        Vec::new()
    } else {
        declare(&wanted_kv, &status_kv, &chosen).await
    };
    drop(serve);
    drop(fleet);
    for (i, server) in nats.iter().enumerate() {
        report_server_log(i, &server.log());
    }
    Figures {
        n,
        servers,
        server_rss_kib,
        empty_server_rss_kib,
        per_server,
        steady_cpu,
        steady_latencies,
        client_rss_kib,
        consumers,
        setup_s,
        all_fresh_s,
        p50_ms: pct(&latencies, 0.5),
        p99_ms: pct(&latencies, 0.99),
        samples: latencies.len(),
        status_ms: pct(&calls, 0.5),
        status_peak_kib,
        dash,
    }
}

/// Each server's share of one core while the fleet only publishes on its
/// timer (and `serve` follows), over `window`; empty when `window` is 0.
async fn steady_cpu(nats: &[NatsServer], window: Duration) -> Vec<f64> {
    if window.is_zero() {
        return Vec::new();
    }
    let pids: Vec<u32> = nats.iter().filter_map(NatsServer::pid).collect();
    let before: Vec<Duration> = pids.iter().map(|p| measure::cpu_time(*p)).collect();
    tokio::time::sleep(window).await;
    pids.iter()
        .zip(before)
        .map(|(p, b)| measure::cpu_time(*p).saturating_sub(b).as_secs_f64() / window.as_secs_f64())
        .collect()
}

/// The warnings and errors in a server's log (slow consumers, stalls,
/// refused connections, ...): how many of each kind, and between when.
fn report_server_log(index: usize, log: &str) {
    let mut kinds: std::collections::BTreeMap<String, (usize, String, String)> = Default::default();
    for line in log
        .lines()
        .filter(|l| l.contains("[WRN]") || l.contains("[ERR]"))
    {
        // `[pid] date time [WRN] what`, where a client's `what` is
        // `addr - cid - "name" - what: value`.
        let time = line.split_whitespace().nth(2).unwrap_or("").to_string();
        let text = line.split_once("] ").map_or(line, |(_, t)| t);
        let text = text.split_once("] ").map_or(text, |(_, t)| t);
        let what = text.rsplit(" - ").next().unwrap_or(text);
        let kind = what.split(':').next().unwrap_or(what).to_string();
        let entry = kinds.entry(kind).or_insert((0, time.clone(), time.clone()));
        entry.0 += 1;
        entry.2 = time;
    }
    for (kind, (count, first, last)) in kinds {
        eprintln!("server {index} log: {count} x {kind:?}, {first} to {last}");
    }
}

/// One `swarm-controller status --json` process: the parsed report and
/// how it ran; `None` (and its stderr printed) when it failed.
async fn status_json(config: &Path) -> Option<(Value, measure::Measured)> {
    let config = config.to_path_buf();
    let m = tokio::task::spawn_blocking(move || {
        let cfg = config.display().to_string();
        let dir = config.parent().unwrap_or(Path::new("/tmp")).to_path_buf();
        measure::run_measured(
            &controller_bin(),
            &["--config", &cfg, "status", "--json"],
            &dir,
        )
    })
    .await
    .expect("the status runner")
    .expect("run status --json");
    if !m.success {
        eprintln!("status --json failed: {}", m.stderr);
        return None;
    }
    Some((serde_json::from_slice(&m.stdout).ok()?, m))
}

/// Wait until `status --json` shows all `n` hives fresh; the time since
/// `start`. No hive is fresh before its first status put, so the status
/// bucket is watched until every hive has put one, and only then is
/// `status --json` asked; when it does not show them all fresh yet, it is
/// asked again after the next put, never on a timer.
async fn all_fresh(
    config: &Path,
    status: &async_nats::jetstream::kv::Store,
    n: usize,
    start: Instant,
) -> Duration {
    let mut watch = status
        .watch_with_history(">")
        .await
        .expect("watch the status bucket");
    let mut reported = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + (FRESH_LIMIT.saturating_sub(start.elapsed()));
    loop {
        let entry = tokio::time::timeout_at(deadline, watch.next())
            .await
            .unwrap_or_else(|_| panic!("never all fresh: {} of {n} reported", reported.len()))
            .expect("the status watch ended")
            .expect("a status entry");
        reported.insert(entry.key);
        if reported.len() < n {
            continue;
        }
        if let Some((r, _)) = status_json(config).await {
            let fresh = r["hives"]
                .as_array()
                .map(|h| h.iter().filter(|r| r["freshness"] == "fresh").count())
                .unwrap_or(0);
            if fresh == n {
                return start.elapsed();
            }
        }
    }
}

/// Put one declaration for each of `hives`, back to back; each one's time
/// from its put until the hive's status shows it converged, in ms.
async fn declare(
    wanted: &async_nats::jetstream::kv::Store,
    status: &async_nats::jetstream::kv::Store,
    hives: &[&String],
) -> Vec<f64> {
    let mut watch = status.watch_all().await.unwrap();
    let mut pending: HashMap<String, (u64, Instant)> = HashMap::new();
    let d = json!({ "schema": 1, "agents": { "a": { "image": "sim/img:1" } } }).to_string();
    for name in hives {
        let t0 = Instant::now();
        let rev = wanted.put(name.as_str(), d.clone().into()).await.unwrap();
        pending.insert(name.to_string(), (rev, t0));
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + CONVERGE_LIMIT;
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
    latencies
}

/// One line per server: its RSS, open fds and steady-state CPU; and the
/// declarations timed again after the steady window.
fn server_notes(f: &Figures, steady: Duration) -> Vec<String> {
    let again = (!f.steady_latencies.is_empty()).then(|| {
        format!(
            "N={} declaration -> converged after {} s of steady state: p50 {:.1} ms, p99 {:.1} ms ({} samples)",
            f.n,
            steady.as_secs(),
            pct(&f.steady_latencies, 0.5),
            pct(&f.steady_latencies, 0.99),
            f.steady_latencies.len()
        )
    });
    f.per_server
        .iter()
        .enumerate()
        .map(|(i, (rss, fds))| {
            let cpu = f
                .steady_cpu
                .get(i)
                .map(|c| {
                    format!(
                        ", {:.1}% of a core over {} s of steady state",
                        c * 100.0,
                        steady.as_secs()
                    )
                })
                .unwrap_or_default();
            format!(
                "N={} server {i}: RSS {:.1} MiB, {fds} open fds{cpu}",
                f.n,
                *rss as f64 / 1024.0
            )
        })
        .chain(again)
        .collect()
}

fn header() -> String {
    [
        "| N | servers | server RSS MiB | KiB/hive | client RSS MiB | consumers held (bound) | setup s | all fresh s | decl→conv p50 ms | p99 ms | samples | status --json ms | status peak MiB | serve start ms | SSE snapshot KiB | /api/status page KiB | full /api/status KiB | KV→SSE row p50 ms | max ms (samples) | serve peak MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    .join("\n")
}

fn row(f: &Figures) -> String {
    let mib = |k: u64| k as f64 / 1024.0;
    let per_hive = f.server_rss_kib.saturating_sub(f.empty_server_rss_kib) as f64 / f.n as f64;
    let kib = |b: usize| b as f64 / 1024.0;
    format!(
        "| {} | {} | {:.1} | {per_hive:.1} | {:.1} | {} ({}) | {:.2} | {:.2} | {:.1} | {:.1} | {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} | {:.2} | {:.2} ({}) | {:.1} |",
        f.n,
        f.servers,
        mib(f.server_rss_kib),
        mib(f.client_rss_kib),
        f.consumers.total,
        f.consumers.bound,
        f.setup_s,
        f.all_fresh_s,
        f.p50_ms,
        f.p99_ms,
        f.samples,
        f.status_ms,
        mib(f.status_peak_kib),
        f.dash.start_ms,
        kib(f.dash.snapshot_bytes),
        kib(f.dash.first_page_bytes),
        kib(f.dash.full_bytes),
        f.dash.update_p50_ms,
        f.dash.update_max_ms,
        f.dash.updates,
        mib(f.dash.serve_hwm_kib),
    )
}
