//! Benchmark of the hive's job DAG and its Docker path. Prints a table.
//!
//! ```text
//! cargo bench -p hyperhive-tests --bench jobs            # full: 10,000 nodes, 10 deploys each way
//! cargo bench -p hyperhive-tests --bench jobs -- --quick # CI: 1,000 nodes, 3 deploys each way
//! ```
//!
//! 1. **DAG throughput**: rebuild-shaped jobs (5 nodes each, one agent
//!    each), queued, then every node claimed and finished through the
//!    store, one transaction per state change, with the durability the hive
//!    ships (`synchronous = FULL`). The same run repeats it with `NORMAL` as
//!    a reference. A node transition is one node changing state (pending →
//!    ready, ready → running, running → done).
//! 2. **first_deploy vs bollard**: one agent's `first_deploy` through the
//!    real worker and Docker runtime (queue to job done, polled every
//!    millisecond), against the same create + start done directly with
//!    bollard, interleaved in the same run; the ratio of the medians.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use hive::agents::jobs::{
    db_path, now_ms, DeployRequest, Durability, JobRequest, JobStore, Outcome, RetryPolicy, Store,
};
use hive::agents::runtime::{AgentContainer, ContainerSpec, DockerRuntime};
use hive::agents::worker::{self, WorkerConfig, WorkerDeps};
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use swarm_queue_client::{AgentName, AgentSpec, HiveName};
use tokio::sync::Notify;

struct Mode {
    name: &'static str,
    nodes: usize,
    deploys: usize,
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let mode = if quick {
        Mode {
            name: "quick",
            nodes: 1_000,
            deploys: 3,
        }
    } else {
        Mode {
            name: "full",
            nodes: 10_000,
            deploys: 10,
        }
    };
    println!("hyperhive job benchmark ({} mode)", mode.name);
    println!("machine: {}", hyperhive_tests::machine());
    println!();
    dag_throughput(&mode);
    println!();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(first_deploy_vs_bollard(&mode));
}

fn agent(i: usize) -> AgentName {
    AgentName::new(format!("bench-{i}")).expect("valid agent name")
}

struct DagRun {
    nodes: usize,
    jobs: usize,
    transitions: usize,
    enqueue: Duration,
    run: Duration,
}

fn run_dag(nodes: usize, durability: Durability) -> DagRun {
    const PER_JOB: usize = 5;
    let dir = tempfile::Builder::new()
        .prefix("hhtest-bench-")
        .tempdir()
        .expect("temp dir");
    let mut store = Store::open_with(&db_path(dir.path()), durability).expect("open store");
    let spec = AgentSpec {
        image: Some("local/bench:1".into()),
        ..Default::default()
    };
    let jobs = nodes / PER_JOB;
    let start = Instant::now();
    // One agent per job: a second pending rebuild of an agent would be
    // coalesced into the first instead of adding nodes.
    for j in 0..jobs {
        let request = JobRequest::Rebuild {
            spec: spec.clone(),
            relock: false,
            revision: None,
        };
        store
            .enqueue(&agent(j), request, now_ms())
            .expect("enqueue");
    }
    let enqueue = start.elapsed();
    let queued: usize = store
        .jobs(&hive::agents::jobs::JobFilter {
            all: true,
            agent: None,
        })
        .expect("list")
        .iter()
        .map(|j| j.nodes.len())
        .sum();
    let policy = RetryPolicy::default();
    let start = Instant::now();
    let mut finished = 0;
    while let Some(claim) = store.claim(now_ms(), None).expect("claim") {
        store
            .finish(
                claim.job,
                claim.seq,
                Outcome::Done { detail: None },
                &policy,
                now_ms(),
            )
            .expect("finish");
        finished += 1;
    }
    let run = start.elapsed();
    assert_eq!(finished, queued, "every queued node ran");
    let jobs_made = queued / PER_JOB;
    DagRun {
        nodes: finished,
        jobs: jobs_made,
        // ready -> running and running -> done for every node, plus
        // pending -> ready for every node after the first of its job.
        transitions: 2 * finished + (finished - jobs_made),
        enqueue,
        run,
    }
}

fn dag_throughput(mode: &Mode) {
    println!(
        "DAG throughput: {} nodes in 5-node jobs (one agent each), one transaction per claim and per outcome",
        mode.nodes
    );
    println!(
        "  {:<28} {:>7} {:>6} {:>11} {:>9} {:>13} {:>9} {:>11}",
        "durability",
        "nodes",
        "jobs",
        "transitions",
        "run s",
        "transitions/s",
        "nodes/s",
        "jobs queued/s"
    );
    for (label, durability) in [
        ("synchronous=FULL (shipped)", Durability::Full),
        ("synchronous=NORMAL (ref.)", Durability::Normal),
    ] {
        let r = run_dag(mode.nodes, durability);
        let secs = r.run.as_secs_f64();
        println!(
            "  {:<28} {:>7} {:>6} {:>11} {:>9.2} {:>13.0} {:>9.0} {:>11.0}",
            label,
            r.nodes,
            r.jobs,
            r.transitions,
            secs,
            r.transitions as f64 / secs,
            r.nodes as f64 / secs,
            r.jobs as f64 / r.enqueue.as_secs_f64()
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

async fn first_deploy_vs_bollard(mode: &Mode) {
    let hive_name = hyperhive_tests::unique_name("bench");
    let image = TestImage::busybox("bench");
    let _containers = ContainerGuard::new(&hive_name);
    let hive = HiveName::new(hive_name.as_str()).expect("hive name");
    let dir = tempfile::Builder::new()
        .prefix("hhtest-bench-")
        .tempdir()
        .expect("temp dir");
    let store = JobStore::open(&db_path(dir.path())).expect("store");
    let runtime = Arc::new(DockerRuntime::new(hive.clone(), None));
    let wake = Arc::new(Notify::new());
    // A job's end is told as an event: the bench waits on it.
    let (events, ends) = hive::fleet_events::EventSink::new(hive.clone());
    let (stop, shutdown) = hive::shutdown::channel();
    let worker = tokio::spawn(worker::run(
        WorkerDeps {
            store: store.clone(),
            runtime,
            hive: hive.clone(),
            state_dir: dir.path().to_path_buf(),
            wake: Arc::clone(&wake),
            board: None,
            extra_binds: vec![],
            config: WorkerConfig::default(),
            events: Some(events),
        },
        shutdown,
    ));
    let docker = bollard::Docker::connect_with_socket_defaults().expect("docker");
    let spec = AgentSpec {
        image: Some(image.reference.clone()),
        ..Default::default()
    };

    let mut via_hive = Vec::new();
    let mut direct = Vec::new();
    for i in 0..mode.deploys {
        // Through the hive: queue, then wait for the job's end event.
        let a = AgentName::new(format!("via-hive-{i}")).expect("agent");
        let started = Instant::now();
        let deploy = DeployRequest {
            spec: spec.clone(),
            revision: None,
            relock: false,
        };
        let q = store
            .request_deploy(&a, deploy, now_ms())
            .await
            .expect("queue");
        wake.notify_one();
        let end = tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                let event = ends.next().await.expect("the worker's event sink");
                if event.agent.as_ref() == Some(&a)
                    && ["created", "job_failed"].contains(&event.kind.as_str())
                {
                    break;
                }
            }
        })
        .await;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        assert!(end.is_ok(), "first deploy of {a} did not end within 120 s");
        let job = store.job(q.job).await.expect("job");
        assert_eq!(job.state.as_str(), "done", "{job:#?}");
        via_hive.push(elapsed);

        // Directly: the same container, made and started with bollard.
        let b = AgentName::new(format!("direct-{i}")).expect("agent");
        let state = dir.path().join("direct").join(b.as_str());
        std::fs::create_dir_all(&state).expect("state dir");
        let c = ContainerSpec::for_agent(AgentContainer {
            hive: &hive,
            agent: &b,
            spec: &spec,
            image: &image.reference,
            state_dir: &state,
            extra_binds: vec![],
            limits: hive::agents::runtime::HostLimits::default(),
            ports: vec![],
            volume_binds: vec![],
        });
        let started = Instant::now();
        let body = hyperhive_tests::bare::create_body(&c);
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(c.name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .expect("create");
        docker
            .start_container(&created.id, None)
            .await
            .expect("start");
        direct.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    // Remove what both paths made.
    let names: Vec<String> = (0..mode.deploys)
        .flat_map(|i| [format!("via-hive-{i}"), format!("direct-{i}")])
        .map(|a| format!("hyperhive.{hive_name}.{a}"))
        .collect();
    for name in names {
        let _ = docker
            .remove_container(
                &name,
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
    }
    stop.trigger();
    let _ = worker.await;

    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (hive_mean, direct_mean) = (mean(&via_hive), mean(&direct));
    let hive_median = median(&mut via_hive);
    let direct_median = median(&mut direct);
    println!(
        "first_deploy of one agent, {} times each way, interleaved (busybox image present locally)",
        mode.deploys
    );
    println!("  {:<44} {:>10} {:>10}", "path", "median ms", "mean ms");
    println!(
        "  {:<44} {:>10.1} {:>10.1}",
        "hive: queue -> worker -> runtime -> job done", hive_median, hive_mean
    );
    println!(
        "  {:<44} {:>10.1} {:>10.1}",
        "bollard: create + start directly", direct_median, direct_mean
    );
    println!(
        "  ratio hive / direct (medians): {:.2}",
        hive_median / direct_median
    );
}
