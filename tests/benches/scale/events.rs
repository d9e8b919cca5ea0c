//! The event stream under N = 10,000 hives (`-- --events`; quick: 200):
//! what `hyperhive-events` costs the server, and what reading one hive's
//! events costs once the whole fleet has written its own.
//!
//! The stream is made with the controller's own code and default limits
//! (`swarm_controller::audit::open`). Each simulated hive publishes
//! [`PER_HIVE`] lifecycle events on its own subject, the way
//! `fleet_events` does (core-NATS publishes, no ack), from
//! [`CONNECTIONS`] connections.
//!
//! Floors measured in the same run:
//!
//! - **publish**: the same N × [`PER_HIVE`] messages on subjects no
//!   stream holds (the server routes and drops them), against the same
//!   into the stream, until the stream has stored them all;
//! - **read**: `swarm-controller events --hive H --json` (the CLI's
//!   process, wall time, median of 3) while the stream holds only H's own
//!   events, against the same read once all N hives have written theirs.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use hyperhive_tests::swarm::write_controller_config;
use hyperhive_tests::{controller_bin, wait_until, NatsServer};
use swarm_queue_client::event_stream::{hive_event_subject, Event, EventsSettings, EVENTS_STREAM};
use swarm_queue_client::{AgentName, HiveName};

use crate::measure::{cpu_time, proc_kib};

/// Events each hive writes (a deploy's created, started; an exit, a
/// restart, a rebuild).
const PER_HIVE: usize = 5;
/// Connections the events come from.
const CONNECTIONS: usize = 20;
const T: Duration = Duration::from_secs(600);

fn name(i: usize) -> String {
    format!("hive-{i:05}")
}

/// Every hive's events: (subject, payload).
fn events(n: usize) -> Vec<(String, Vec<u8>)> {
    let agent = AgentName::new("mail-bot").expect("a name");
    let kinds = ["created", "started", "exited", "started", "rebuilt"];
    let mut out = Vec::with_capacity(n * PER_HIVE);
    for i in 0..n {
        let hive = HiveName::new(name(i)).expect("a name");
        for kind in kinds.iter().take(PER_HIVE) {
            let mut e = Event::new(kind);
            e.hive = Some(hive.clone());
            e.agent = Some(agent.clone());
            e.exit_code = (*kind == "exited").then_some(3);
            out.push((hive_event_subject(&hive, Some(&agent), kind), e.encode()));
        }
    }
    out
}

/// Publish `all` over `clients`, round robin, and flush each.
async fn publish(clients: &[async_nats::Client], all: &[(String, Vec<u8>)], prefix: &str) {
    let mut sends = Vec::new();
    for (k, c) in clients.iter().enumerate() {
        let mine: Vec<(String, Vec<u8>)> = all
            .iter()
            .skip(k)
            .step_by(clients.len())
            .map(|(s, p)| (format!("{prefix}{s}"), p.clone()))
            .collect();
        let c = c.clone();
        sends.push(tokio::spawn(async move {
            for (s, p) in mine {
                c.publish(s, p.into()).await.expect("publish");
            }
            c.flush().await.expect("flush");
        }));
    }
    for s in sends {
        s.await.expect("a publisher");
    }
}

/// `events --hive <hive> --json`: wall seconds (median of 3) and lines.
fn read_one(config: &std::path::Path, hive: &str) -> (f64, usize) {
    let mut runs = Vec::new();
    let mut lines = 0;
    for _ in 0..3 {
        let at = Instant::now();
        let out = std::process::Command::new(controller_bin())
            .arg("--config")
            .arg(config)
            .args(["events", "--hive", hive, "--json"])
            .output()
            .expect("swarm-controller events");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        runs.push(at.elapsed().as_secs_f64());
        lines = out
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
    }
    runs.sort_by(f64::total_cmp);
    (runs[1], lines)
}

pub async fn bench(ns: &[usize]) {
    for &n in ns {
        one(n).await;
    }
}

async fn one(n: usize) {
    let server = NatsServer::start();
    let url = server.url();
    let pid = server.pid().expect("the server runs");
    let dir = tempfile::Builder::new()
        .prefix("hhtest-bench-events-")
        .tempdir()
        .expect("a temp dir");
    let watched = name(n / 2);
    let config = write_controller_config(dir.path(), std::slice::from_ref(&watched), 120, &url);
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(async_nats::connect(&url).await.expect("connect"));
    }
    let js = jetstream::new(clients[0].clone());
    let mut stream = swarm_controller::audit::open(&js, &EventsSettings::default())
        .await
        .expect("the events stream");
    let all = events(n);
    // Floor of the read: the stream holds the watched hive's events only.
    let own: Vec<(String, Vec<u8>)> = all
        .iter()
        .filter(|(s, _)| s.contains(&format!(".{watched}.")))
        .cloned()
        .collect();
    publish(&clients[..1], &own, "").await;
    wait_until(T, "the watched hive's events stored", || async {
        let mut s = js.get_stream(EVENTS_STREAM).await.ok()?;
        (s.info().await.ok()?.state.messages >= PER_HIVE as u64).then_some(())
    })
    .await;
    let (read_floor_s, floor_lines) = read_one(&config, &watched);
    // Floor of the publish: the same messages where no stream holds them.
    let cpu0 = cpu_time(pid);
    let at = Instant::now();
    publish(&clients, &all, "bench.nowhere.").await;
    let floor_s = at.elapsed().as_secs_f64();
    let floor_cpu = (cpu_time(pid) - cpu0).as_secs_f64();
    let rss_before = proc_kib(pid, "VmRSS");
    let want = (own.len() + all.len()) as u64;
    let cpu1 = cpu_time(pid);
    let at = Instant::now();
    publish(&clients, &all, "").await;
    wait_until(T, "every event stored", || async {
        let mut s = js.get_stream(EVENTS_STREAM).await.ok()?;
        (s.info().await.ok()?.state.messages >= want).then_some(())
    })
    .await;
    let stored_s = at.elapsed().as_secs_f64();
    let stream_cpu = (cpu_time(pid) - cpu1).as_secs_f64();
    let rss_after = proc_kib(pid, "VmHWM");
    let state = stream.info().await.expect("stream info").state.clone();
    let (read_s, lines) = read_one(&config, &watched);
    println!(
        "events: N = {n} hives × {PER_HIVE} events from {CONNECTIONS} connections, one nats-server"
    );
    println!("| what | floor | into hyperhive-events | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| publish {} events, s | {floor_s:.2} | {stored_s:.2} (until stored) | {:.2} |",
        all.len(),
        stored_s / floor_s
    );
    println!(
        "| server CPU, s | {floor_cpu:.2} | {stream_cpu:.2} | {:.2} |",
        stream_cpu / floor_cpu.max(0.001)
    );
    println!(
        "| `events --hive {watched}`, s ({floor_lines} / {lines} lines) | {read_floor_s:.3} | {read_s:.3} | {:.2} |",
        read_s / read_floor_s
    );
    println!(
        "FIGURES: events n={n} per_hive={PER_HIVE} events={} publish_floor_s={floor_s:.2} \
         stored_s={stored_s:.2} publish_ratio={:.2} floor_cpu_s={floor_cpu:.2} stream_cpu_s={stream_cpu:.2} \
         stream_bytes={} stream_messages={} server_rss_before_mib={:.1} server_peak_mib={:.1} \
         read_floor_s={read_floor_s:.3} read_s={read_s:.3} read_ratio={:.2} read_lines={lines}",
        all.len(),
        stored_s / floor_s,
        state.bytes,
        state.messages,
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        read_s / read_floor_s
    );
    assert_eq!(
        lines,
        floor_lines + PER_HIVE,
        "the watched hive's events, twice"
    );
}
