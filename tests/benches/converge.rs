//! Benchmark: how fast a hive acts on a declaration.
//!
//! `cargo bench -p hyperhive-tests --bench converge` (300 puts, 30 container
//! rebuilds), or `-- --quick` for CI (60 puts, 5 rebuilds).
//!
//! 1. **put -> first job queued**, in-process over a real nats-server: the
//!    hive's real wanted task (pull + watch) and real converger (plan +
//!    SQLite enqueue, `synchronous = FULL`), over the in-memory runtime so
//!    Docker is out of the picture. The converger wakes the job worker
//!    through a `Notify`; the bench waits on that same `Notify`, so the end
//!    of each sample is the moment the job is durably queued. Each put
//!    changes the agent's spec, so every one is a new revision to act on.
//! 2. **baseline**, interleaved with (1) in the same run: a bare KV put to
//!    another key and its delivery to a plain `watch` on the same server.
//! 3. **put -> container running**: a real `hive` process and the real
//!    dockerd; each put changes the spec, and the sample ends when Docker
//!    shows the container with the new spec label running (polled through
//!    bollard every 5 ms, so a sample is at most 5 ms late).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hive::converger::{self, ConvergerDeps};
use hive::jobs::JobStore;
use hive::readiness::Health;
use hive::runtime::objects::{ObjectInfo, ObjectKind, ObjectRuntime};
use hive::runtime::{
    BuildRequest, ContainerInfo, ContainerRuntime, ContainerSpec, ProgressFn, RuntimeError,
};
use hive::wanted::{self, WantedDeps};
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, NatsServer};
use serde_json::json;
use swarm_queue_client::{Bucket, BucketSettings, HiveName, NatsConfig, ObjectName};

/// A runtime with no containers that accepts every call: phase 1 measures
/// the hive's own path from a put to a queued job, not Docker.
struct NullRuntime(HiveName);

impl ContainerRuntime for NullRuntime {
    fn hive(&self) -> &HiveName {
        &self.0
    }
    async fn ping(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn image_exists(&self, _: &str) -> Result<bool, RuntimeError> {
        Ok(true)
    }
    async fn pull(&self, _: &str, _: ProgressFn<'_>) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn image_digest(&self, _: &str) -> Result<Option<String>, RuntimeError> {
        Ok(None)
    }
    async fn image_id(&self, _: &str) -> Result<Option<String>, RuntimeError> {
        Ok(None)
    }
    async fn remove_image(&self, _: &str) -> Result<bool, RuntimeError> {
        Ok(true)
    }
    async fn build(&self, _: &BuildRequest<'_>, _: ProgressFn<'_>) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        Ok(spec.name.clone())
    }
    async fn start(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn stop(&self, _: &str, _: Duration) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn remove(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn logs(
        &self,
        _: &str,
        _: &hive::runtime::logs::LogRequest,
    ) -> Result<Option<hive::runtime::logs::LogStream>, RuntimeError> {
        Ok(None)
    }
    async fn inspect(&self, _: &str) -> Result<Option<ContainerInfo>, RuntimeError> {
        Ok(None)
    }
    async fn list(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        Ok(vec![])
    }
}

impl ObjectRuntime for NullRuntime {
    async fn ensure_object(&self, _: ObjectKind, _: &ObjectName) -> Result<String, RuntimeError> {
        Ok(String::new())
    }
    async fn list_objects(&self, _: ObjectKind) -> Result<Vec<ObjectInfo>, RuntimeError> {
        Ok(vec![])
    }
    async fn remove_object(&self, _: ObjectKind, _: &str) -> Result<bool, RuntimeError> {
        Ok(true)
    }
}

fn pct(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn decl(image: &str, i: usize) -> String {
    json!({ "schema": 1, "agents": { "bench": {
        "image": image, "command": ["/bin/sleep", "3600"], "env": { "N": i.to_string() }
    }}})
    .to_string()
}

fn row(what: &str, samples: &mut [f64]) -> (f64, f64) {
    let n = samples.len();
    let p50 = pct(samples, 0.50);
    let p99 = pct(samples, 0.99);
    println!("{what:<44} {n:>6} {p50:>10.3} {p99:>10.3}");
    (p50, p99)
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick") || std::env::var("HH_BENCH_QUICK").is_ok();
    let (puts, rebuilds) = if quick { (60, 5) } else { (300, 30) };
    let nats = NatsServer::start();
    let url = nats.url();
    let swarm = Swarm::connect(&url).await;
    swarm.bucket("hyperhive-wanted").await;

    // In-process hive: real wanted task and converger, in-memory runtime.
    let hive = HiveName::new("bench").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open(&dir.path().join("hive.db")).unwrap();
    let health = Arc::new(Health::new(Some(hive.clone()), None));
    let conn = swarm_queue_client::connect(
        &NatsConfig {
            url: Some(url.clone()),
            ..Default::default()
        },
        "bench-hive",
    )
    .await
    .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(None);
    let wake = Arc::new(tokio::sync::Notify::new());
    let (trigger, shutdown) = hive::shutdown::channel();
    tokio::spawn(wanted::run(
        WantedDeps {
            nats: conn,
            hive: hive.clone(),
            health: health.clone(),
            bucket: BucketSettings::default_for(Bucket::Wanted),
            state_dir: dir.path().to_path_buf(),
            tx,
        },
        shutdown.clone(),
    ));
    tokio::spawn(converger::run(
        ConvergerDeps {
            store,
            runtime: Arc::new(NullRuntime(hive.clone())),
            hive: hive.clone(),
            health,
            wake: wake.clone(),
            wanted: rx,
            reconcile_interval: Duration::from_secs(3600),
            orphan_grace: Duration::from_secs(3600),
            retry_base: hive::retry::DEFAULT_BASE,
            docker_changed: Arc::default(),
            crash: hive::crashloop::CrashPolicy::default(),
        },
        shutdown.clone(),
    ));

    let wanted_store = swarm.bucket("hyperhive-wanted").await;
    let mut baseline_watch = wanted_store.watch("baseline").await.unwrap();
    let mut queued = Vec::new();
    let mut baseline = Vec::new();
    for i in 0..puts {
        // Baseline: a bare put and its watch delivery.
        let t0 = Instant::now();
        wanted_store
            .put("baseline", format!("{i}").into())
            .await
            .unwrap();
        baseline_watch.next().await.unwrap().unwrap();
        baseline.push(t0.elapsed().as_secs_f64() * 1000.0);

        // The hive: put -> job durably queued.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let t0 = Instant::now();
        wanted_store
            .put(hive.as_str(), decl("bench/img:1", i).into())
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), notified)
            .await
            .expect("the converger queued a job");
        queued.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    trigger.trigger();

    // A real hive process and dockerd: put -> container running.
    let img = TestImage::busybox("bench-conv");
    let real = unique_name("bench-conv");
    let _guard = ContainerGuard::new(&real);
    let h = HiveProc::start(HiveSpec {
        name: Some(&real),
        nats_url: Some(&url),
        ..Default::default()
    });
    h.api().await;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let name = format!("hyperhive.{real}.bench");
    let mut running = Vec::new();
    for i in 0..=rebuilds {
        let spec: swarm_queue_client::AgentSpec = serde_json::from_value(json!({
            "image": img.reference, "command": ["/bin/sleep", "3600"], "env": { "N": i.to_string() }
        }))
        .unwrap();
        let want = spec.spec_hash();
        let t0 = Instant::now();
        swarm.declare(&real, &decl(&img.reference, i)).await;
        loop {
            if let Ok(c) = docker.inspect_container(&name, None).await {
                let label = c
                    .config
                    .as_ref()
                    .and_then(|c| c.labels.as_ref())
                    .and_then(|l| l.get("org.hyperhive.spec").cloned());
                let up = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
                if up && label.as_deref() == Some(want.as_str()) {
                    break;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "container never ran spec {i}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The first is a first deploy; the rest are rebuilds.
        if i > 0 {
            running.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
    }
    drop(h);

    println!();
    println!(
        "machine: {} cores, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        cpu_model()
    );
    println!(
        "{:<44} {:>6} {:>10} {:>10}",
        "latency (ms)", "n", "p50", "p99"
    );
    let (b50, b99) = row("baseline: KV put -> watch delivery", &mut baseline);
    let (q50, q99) = row("hive: declaration put -> first job queued", &mut queued);
    let (r50, r99) = row("hive: declaration put -> container running", &mut running);
    println!();
    println!(
        "ratios vs baseline: queued {:.1}x (p50) {:.1}x (p99); running {:.0}x (p50) {:.0}x (p99)",
        q50 / b50,
        q99 / b99,
        r50 / b50,
        r99 / b99
    );
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
