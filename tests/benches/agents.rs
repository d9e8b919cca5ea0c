//! Benchmark: many agents in one hive (issue 13, point 5).
//!
//! ```text
//! cargo bench -p hyperhive-tests --bench agents            # 100 agents
//! cargo bench -p hyperhive-tests --bench agents -- --quick # 16 agents (CI)
//! ```
//!
//! A real `hive` process over a real nats-server and the real dockerd, a
//! local busybox image. Each phase is measured against the same containers
//! made directly through bollard ([`hyperhive_tests::bare`]) with the
//! worker's parallelism (`WorkerConfig::default().max_parallel` at once),
//! in the same run, the hive first:
//!
//! 1. **first deploy**: one put declaring every agent → every container
//!    running with its spec. Bare: create + start each.
//! 2. **rebuild**: one put changing every agent's environment → every
//!    container running the new spec. Bare: stop, remove, create, start.
//! 3. **boot**: the hive is SIGKILLed, its containers are all removed, and
//!    it starts again on the same state dir → every container running.
//!    Bare: create + start each.
//!
//! The end of a hive phase is read from Docker's own event stream (a
//! `start` event carrying the agent's new spec label), replayed from the
//! moment before the put, so nothing polls dockerd while the hive works.
//! For each phase it prints the wall times and the ratio hive / bare, and
//! the hive's own counters from `/metrics` ([`hive::perf`]): store calls
//! and writes (one fsync each), Docker calls by kind, claims, converger
//! passes and its enqueue.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use futures_util::StreamExt;
use hive::agents::runtime::{AgentContainer, ContainerSpec};
use hive::agents::worker::WorkerConfig;
use hyperhive_tests::bare;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, NatsServer};
use serde_json::json;
use swarm_queue_client::{AgentName, AgentSpec, HiveName};

/// Longest any one phase may take before the bench gives up.
const PHASE_LIMIT: Duration = Duration::from_secs(900);

/// One declaration generation: what is put, and each agent's spec hash.
struct Generation {
    json: String,
    specs: BTreeMap<AgentName, AgentSpec>,
}

fn generation(image: &str, agents: usize, gen: usize) -> Generation {
    let specs: BTreeMap<AgentName, AgentSpec> = (0..agents)
        .map(|i| {
            let spec: AgentSpec = serde_json::from_value(json!({
                "image": image,
                "command": ["/bin/sleep", "3600"],
                "env": { "AGENT": i.to_string(), "GENERATION": gen.to_string() },
            }))
            .expect("valid spec");
            (
                AgentName::new(format!("a{i:03}")).expect("agent name"),
                spec,
            )
        })
        .collect();
    let json = json!({ "schema": 1, "agents": specs }).to_string();
    Generation { json, specs }
}

/// Wait until every agent of `hive` has had a container started with the
/// spec `want` gives it, reading Docker's events from `since` on.
async fn all_started(
    docker: &Docker,
    hive: &str,
    since: String,
    want: &BTreeMap<AgentName, AgentSpec>,
) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(a, s)| (a.to_string(), s.spec_hash()))
        .collect();
    hyperhive_tests::docker::started_with_specs(docker, hive, since, &want, PHASE_LIMIT).await;
}

/// The containers the hive would make for `specs`, under `hive`'s name.
fn bare_specs(
    hive: &HiveName,
    image: &str,
    specs: &BTreeMap<AgentName, AgentSpec>,
    state: &std::path::Path,
) -> Vec<ContainerSpec> {
    specs
        .iter()
        .map(|(a, s)| {
            let dir = state.join(a.as_str());
            std::fs::create_dir_all(&dir).expect("bare state dir");
            ContainerSpec::for_agent(AgentContainer {
                hive,
                agent: a,
                spec: s,
                image,
                state_dir: &dir,
                extra_binds: vec![],
                limits: hive::agents::runtime::HostLimits::default(),
                ports: vec![],
                volume_binds: vec![],
            })
        })
        .collect()
}

#[derive(Clone, Copy)]
enum BareOp {
    Deploy,
    Replace,
    Remove,
}

/// Run `op` on every container, `parallel` at a time; the wall time.
async fn bare_run(docker: &Docker, specs: &[ContainerSpec], op: BareOp, parallel: usize) -> f64 {
    let started = Instant::now();
    let stop = WorkerConfig::default().stop_timeout;
    futures_util::stream::iter(specs)
        .map(|c| async move {
            match op {
                BareOp::Deploy => bare::deploy(docker, c).await,
                BareOp::Replace => bare::replace(docker, c, stop).await,
                BareOp::Remove => bare::remove(docker, &c.name).await,
            }
        })
        .buffer_unordered(parallel)
        .collect::<Vec<()>>()
        .await;
    started.elapsed().as_secs_f64()
}

/// `hyperhive_perf_*` from the hive's `/metrics`: what → (calls, seconds).
type Perf = BTreeMap<String, (f64, f64)>;

async fn perf(h: &HiveProc) -> Perf {
    let text = reqwest::get(format!("{}/metrics", h.api().await))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    let mut out = Perf::new();
    for line in text.lines() {
        let (is_calls, rest) = if let Some(r) = line.strip_prefix("hyperhive_perf_calls_total") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("hyperhive_perf_seconds_total") {
            (false, r)
        } else {
            continue;
        };
        let Some((label, value)) = rest.split_once("} ") else {
            continue;
        };
        let what = label.trim_start_matches("{what=\"").trim_end_matches('"');
        let value: f64 = value.trim().parse().expect("a number");
        let slot = out.entry(what.to_string()).or_default();
        if is_calls {
            slot.0 = value;
        } else {
            slot.1 = value;
        }
    }
    out
}

fn delta(after: &Perf, before: &Perf) -> Perf {
    after
        .iter()
        .map(|(k, (c, s))| {
            let (c0, s0) = before.get(k).copied().unwrap_or_default();
            (k.clone(), (c - c0, s - s0))
        })
        .collect()
}

/// One phase's figures.
struct Phase {
    name: &'static str,
    hive: f64,
    bare: f64,
    perf: Perf,
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick") || std::env::var("HH_BENCH_QUICK").is_ok();
    let agents = if quick { 16 } else { 100 };
    let parallel = WorkerConfig::default().max_parallel;
    hyperhive_tests::docker::require_docker();
    let nats = NatsServer::start();
    let url = nats.url();
    let swarm = Swarm::connect(&url).await;
    swarm.bucket("hyperhive-wanted").await;
    let img = TestImage::busybox("bench-agents");
    let real = unique_name("bench-agents");
    let bare_name = unique_name("bench-bare");
    let _hive_guard = ContainerGuard::new(&real);
    let _bare_guard = ContainerGuard::new(&bare_name);
    let bare_hive = HiveName::new(bare_name.as_str()).expect("hive name");
    let bare_dir = tempfile::Builder::new()
        .prefix("hhtest-bench-bare-")
        .tempdir()
        .expect("temp dir");
    let docker = bare::client();
    println!(
        "hyperhive agents benchmark: {agents} agents, {parallel} at a time ({} mode)",
        if quick { "quick" } else { "full" }
    );

    let mut h = HiveProc::start(HiveSpec {
        name: Some(&real),
        nats_url: Some(&url),
        ..Default::default()
    });
    h.api().await;
    let mut phases = Vec::new();

    // 1. First deploy.
    let first = generation(&img.reference, agents, 0);
    let before = perf(&h).await;
    let since = hyperhive_tests::docker::docker_now();
    let t0 = Instant::now();
    swarm.declare(&real, &first.json).await;
    all_started(&docker, &real, since, &first.specs).await;
    let hive_s = t0.elapsed().as_secs_f64();
    let perf_first = delta(&perf(&h).await, &before);
    let bare0 = bare_specs(&bare_hive, &img.reference, &first.specs, bare_dir.path());
    let bare_s = bare_run(&docker, &bare0, BareOp::Deploy, parallel).await;
    phases.push(Phase {
        name: "first deploy",
        hive: hive_s,
        bare: bare_s,
        perf: perf_first,
    });

    // 2. Rebuild of every agent.
    let second = generation(&img.reference, agents, 1);
    let before = perf(&h).await;
    let since = hyperhive_tests::docker::docker_now();
    let t0 = Instant::now();
    swarm.declare(&real, &second.json).await;
    all_started(&docker, &real, since, &second.specs).await;
    let hive_s = t0.elapsed().as_secs_f64();
    let perf_rebuild = delta(&perf(&h).await, &before);
    let bare1 = bare_specs(&bare_hive, &img.reference, &second.specs, bare_dir.path());
    let bare_s = bare_run(&docker, &bare1, BareOp::Replace, parallel).await;
    phases.push(Phase {
        name: "rebuild",
        hive: hive_s,
        bare: bare_s,
        perf: perf_rebuild,
    });

    // 3. Boot of a hive whose containers were all removed while it was down.
    h.daemon.kill();
    let real_hive = HiveName::new(real.as_str()).expect("hive name");
    let gone: Vec<ContainerSpec> =
        bare_specs(&real_hive, &img.reference, &second.specs, bare_dir.path());
    bare_run(&docker, &gone, BareOp::Remove, parallel).await;
    bare_run(&docker, &bare1, BareOp::Remove, parallel).await;
    let since = hyperhive_tests::docker::docker_now();
    let t0 = Instant::now();
    h.kill_and_restart(&[]);
    all_started(&docker, &real, since, &second.specs).await;
    let hive_s = t0.elapsed().as_secs_f64();
    let perf_boot = perf(&h).await;
    let bare_s = bare_run(&docker, &bare1, BareOp::Deploy, parallel).await;
    phases.push(Phase {
        name: "boot, every container gone",
        hive: hive_s,
        bare: bare_s,
        perf: perf_boot,
    });
    drop(h);

    report(agents, parallel, &phases);
}

fn report(agents: usize, parallel: usize, phases: &[Phase]) {
    println!("machine: {}", machine());
    println!();
    println!(
        "{:<28} {:>7} {:>9} {:>9} {:>10}",
        "phase", "agents", "hive s", "bare s", "hive/bare"
    );
    for p in phases {
        println!(
            "{:<28} {:>7} {:>9.2} {:>9.2} {:>9.2}x",
            p.name,
            agents,
            p.hive,
            p.bare,
            p.hive / p.bare
        );
    }
    println!();
    println!("where the hive's time went ({parallel} nodes at a time; overlapping calls add up):");
    for p in phases {
        println!("  {} ({:.2} s wall)", p.name, p.hive);
        println!(
            "    {:<22} {:>8} {:>10} {:>10} {:>12}",
            "what", "calls", "per agent", "seconds", "ms per call"
        );
        for (what, (calls, secs)) in &p.perf {
            if *calls == 0.0 {
                continue;
            }
            println!(
                "    {:<22} {:>8} {:>10.1} {:>10.3} {:>12.2}",
                what,
                calls,
                calls / agents as f64,
                secs,
                secs * 1000.0 / calls
            );
        }
    }
}

fn machine() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    format!("{}, load average {load}", hyperhive_tests::machine())
}
