//! Benchmark: how fast a hive acts on a declaration.
//!
//! `cargo bench -p hyperhive-tests --bench converge` (1,000 puts, 30 container
//! rebuilds), or `-- --quick` for CI (60 puts, 5 rebuilds); `--queued-only`
//! skips phase 3 (no Docker); `--puts N` takes N samples in phase 1.
//!
//! 1. **put -> first job queued**, in-process over a real nats-server: the
//!    hive's real wanted task (doorbell + direct get) and real converger
//!    (plan + SQLite enqueue, `synchronous = FULL`), over the in-memory
//!    runtime so Docker is out of the picture. Each put changes the
//!    agent's spec, so every one is a new revision to act on. A tracing
//!    layer timestamps the hive's stage events
//!    (`hive::agents::converger::stages`), which split each sample into
//!    doorbell delivery, direct get, decode, hand-off, look, plan and
//!    commit; a sample ends at the `committed` event, as the commit
//!    returns: the moment the job is durably queued. The converger then
//!    wakes the job worker through a `Notify`, and the bench waits on that
//!    same `Notify` before the next put; that wake-up is its own row, and
//!    the put -> wake figure is printed too (`wanted.json` is saved once
//!    the converger has committed, off that path).
//! 2. **the floor**, interleaved with (1) in the same run, each sample the
//!    sum of three bare operations on the same server and disk: (a) a KV
//!    put to another key and its delivery to a plain `watch`; (b) one
//!    direct get (`kv::Store::entry`, the bucket has `allow_direct`) of a
//!    key holding a value the size of the declaration; (c) one SQLite
//!    commit of a row that size on a store opened as the hive opens its job
//!    store (WAL, `synchronous = FULL`), in the same directory.
//!    For the slowest 1% of the hive's samples and of the floor's, the
//!    median of each part is printed: where a p99 came from (a commit
//!    waiting on the disk, or the doorbell).
//! 3. **put -> container running**: a real `hive` process and the real
//!    dockerd; each put changes the spec, and the sample ends at Docker's
//!    start event of the container with the new spec label.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hive::agents::converger::stages::TARGET_PREFIX;
use hive::agents::converger::{self, ConvergerDeps};
use hive::agents::jobs::{Durability, JobStore, Store};
use hive::agents::runtime::objects::{ObjectInfo, ObjectKind, ObjectRuntime};
use hive::agents::runtime::{
    BuildRequest, ContainerInfo, ContainerRuntime, ContainerSpec, ProgressFn, RuntimeError,
};
use hive::bus::wanted::{self, WantedDeps};
use hive::status::StatusBoard;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, NatsServer};
use serde_json::json;
use swarm_queue_client::{Bucket, BucketSettings, HiveName, NatsConfig, ObjectName};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// The hive's stage events in the order one declaration passes them
/// (`hive::agents::converger::stages`).
/// (`saved` is not one: `wanted.json` is written after the commit.)
const STAGES: [&str; 7] = [
    "doorbell",
    "read",
    "decoded",
    "pass",
    "looked",
    "planned",
    "committed",
];

/// Each stage of a sample, named by the span it measures: from the put
/// (or the previous event) to this event; the last from `committed` to
/// the bench's wake.
const STAGE_ROWS: [&str; 8] = [
    "put -> doorbell delivered",
    "direct get",
    "decode + validate",
    "hand-off to the converger",
    "jobs in flight + look at Docker",
    "plan (installed, exits, requests)",
    "commit (enqueue_all)",
    "commit -> bench woken",
];

/// Timestamps every stage event as it is emitted.
#[derive(Clone, Default)]
struct StageClock(Arc<Mutex<Vec<(&'static str, Instant)>>>);

impl<S: tracing::Subscriber> Layer<S> for StageClock {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let at = Instant::now();
        let target = event.metadata().target();
        if let Some(name) = target.strip_prefix(TARGET_PREFIX) {
            if let Some(stage) = STAGES.iter().find(|s| **s == name) {
                self.0.lock().unwrap().push((stage, at));
            }
        }
    }
}

impl StageClock {
    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    fn names(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().iter().map(|(s, _)| *s).collect()
    }

    /// The sample's stage spans in ms, from `t0` (the put) to `end` (the
    /// wake), and how the hive came to read its value. The read is the
    /// last before the first `decoded`; each later stage is the first of
    /// its name after the one before. A value a timed read took before
    /// its doorbell rang (a re-read left from an earlier doorbell, or the
    /// periodic pull) counts its put -> read as delivery and no direct get.
    fn sample(&self, t0: Instant, end: Instant) -> Option<(Vec<f64>, Taken)> {
        let events = self.0.lock().unwrap();
        let is = |name: &'static str| move |e: &(&'static str, Instant)| e.0 == name;
        let decoded = events.iter().position(is("decoded"))?;
        let read = events[..decoded].iter().rposition(is("read"))?;
        let (bell, taken) = match events[..read].iter().position(is("doorbell")) {
            None => (events[read].1, Taken::Timed),
            Some(b) => match events[b..decoded].iter().filter(|e| is("read")(e)).count() {
                1 => (events[b].1, Taken::Doorbell),
                reads => (events[b].1, Taken::ReRead { reads }),
            },
        };
        let mut at = vec![bell, events[read].1, events[decoded].1];
        let mut from = decoded + 1;
        for &stage in &STAGES[3..] {
            let i = from + events[from..].iter().position(is(stage))?;
            at.push(events[i].1);
            from = i + 1;
        }
        let mut prev = t0;
        let mut spans = Vec::with_capacity(STAGE_ROWS.len());
        for t in at.into_iter().chain([end]) {
            spans.push(t.saturating_duration_since(prev).as_secs_f64() * 1000.0);
            prev = t;
        }
        Some((spans, taken))
    }
}

/// How the hive came to read a sample's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// Its doorbell's read found it.
    Doorbell,
    /// Its doorbell's read did not (the stream had not stored it yet): a
    /// re-read did, the last of `reads` since the doorbell.
    ReRead { reads: usize },
    /// A timed read found it before its doorbell rang.
    Timed,
}

/// The wake after this sample's commit, and the sample's stage spans. A
/// wake-up that comes before the hive committed (a permit `notify_one`
/// left when nobody waited: the reconciler also wakes the worker) is
/// waited past, not taken for the sample's end.
async fn woken_after_commit(
    wake: &tokio::sync::Notify,
    first: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    clock: &StageClock,
    t0: Instant,
) -> (Instant, Vec<f64>, Taken, usize) {
    first.await;
    let mut early = 0;
    loop {
        let end = Instant::now();
        if let Some((spans, taken)) = clock.sample(t0, end) {
            return (end, spans, taken, early);
        }
        early += 1;
        wake.notified().await;
    }
}

/// Put `body` as the hive's declaration and wait for the wake after its
/// job is queued: the put -> wake time in ms, the stage spans, how the
/// hive read it and the wake-ups waited past.
async fn declare(
    store: &async_nats::jetstream::kv::Store,
    hive: &HiveName,
    body: String,
    wake: &tokio::sync::Notify,
    clock: &StageClock,
    what: &str,
) -> (f64, Vec<f64>, Taken, usize) {
    let notified = wake.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    clock.clear();
    let t0 = Instant::now();
    store.put(hive.as_str(), body.into()).await.unwrap();
    let waited = woken_after_commit(wake, notified, clock, t0);
    let (end, spans, taken, early) = tokio::time::timeout(Duration::from_secs(30), waited)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: no job queued in 30 s; the hive's stage events: {:?}",
                clock.names()
            )
        });
    ((end - t0).as_secs_f64() * 1000.0, spans, taken, early)
}

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
        _: &hive::agents::runtime::logs::LogRequest,
    ) -> Result<Option<hive::agents::runtime::logs::LogStream>, RuntimeError> {
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

/// The median of each part over the slowest 1% of `totals` (at least
/// one sample): what the samples past the p99 spent their time on.
fn slowest_percent(totals: &[f64], parts: &[&[f64]]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..totals.len()).collect();
    order.sort_by(|&a, &b| totals[b].partial_cmp(&totals[a]).unwrap());
    let n = (totals.len() / 100).max(1);
    parts
        .iter()
        .map(|p| {
            pct(
                &mut order[..n].iter().map(|&i| p[i]).collect::<Vec<_>>(),
                0.5,
            )
        })
        .collect()
}

fn tail_rows(hive: &[f64], floor: &[f64]) {
    println!();
    println!("the slowest 1% of samples, median ms by part:");
    for (name, v) in STAGE_ROWS.iter().zip(hive) {
        println!("  hive: {name:<38} {v:>10.3}");
    }
    for (name, v) in ["put -> watch", "direct get", "commit"].iter().zip(floor) {
        println!("  floor: {name:<37} {v:>10.3}");
    }
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

/// The bench, in a runtime that is shut down before the hive's directory
/// is removed, also when the bench fails: the hive's tasks (the saver of
/// `wanted.json` among them) would otherwise write into the directory
/// after it was removed, and leave it behind.
fn main() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(bench(dir.path()))
    }));
    drop(runtime);
    drop(dir);
    if let Err(panic) = ran {
        std::panic::resume_unwind(panic);
    }
}

async fn bench(dir: &std::path::Path) {
    let quick = std::env::args().any(|a| a == "--quick") || std::env::var("HH_BENCH_QUICK").is_ok();
    let queued_only = std::env::args().any(|a| a == "--queued-only");
    let clock = StageClock::default();
    let stage_filter =
        tracing_subscriber::filter::filter_fn(|m| m.target().starts_with(TARGET_PREFIX));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(clock.clone().with_filter(stage_filter)),
    )
    .unwrap();
    // A p99 of 300 samples is their third slowest: the full run takes
    // 1,000 (the tenth slowest), and its p99 still moves with the disk.
    let (mut puts, rebuilds) = if quick { (60, 5) } else { (1000, 30) };
    // `--puts N`: more samples, for a steadier p99.
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--puts") {
        puts = match args.get(i + 1).map(|v| v.parse::<usize>()) {
            Some(Ok(n)) if n > 0 => n,
            _ => panic!("--puts takes a count above 0, got {:?}", args.get(i + 1)),
        };
    }
    let nats = NatsServer::start();
    let url = nats.url();
    let swarm = Swarm::connect(&url).await;
    swarm.bucket("hyperhive-wanted").await;

    // In-process hive: real wanted task and converger, in-memory runtime.
    let hive = HiveName::new("bench").unwrap();
    let store = JobStore::open(&dir.join("hive.db")).unwrap();
    let board = Arc::new(StatusBoard::new(Some(hive.clone()), None));
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
    // As the daemon does: `wanted.json` saved once each is planned.
    let planned = Arc::new(tokio::sync::watch::channel(None).0);
    tokio::spawn(wanted::save_each(
        dir.to_path_buf(),
        rx.clone(),
        planned.subscribe(),
    ));
    tokio::spawn(wanted::run(
        WantedDeps {
            nats: conn,
            hive: hive.clone(),
            board: board.clone(),
            bucket: BucketSettings::default_for(Bucket::Wanted),
            tx,
        },
        shutdown.clone(),
    ));
    tokio::spawn(converger::run(
        ConvergerDeps {
            store,
            runtime: Arc::new(NullRuntime(hive.clone())),
            hive: hive.clone(),
            board,
            wake: wake.clone(),
            wanted: rx,
            reconcile_interval: Duration::from_secs(3600),
            orphan_grace: Duration::from_secs(3600),
            retry_base: hive::agents::retry::DEFAULT_BASE,
            docker_changed: Arc::default(),
            crash: hive::agents::crashloop::CrashPolicy::default(),
            planned,
        },
        shutdown.clone(),
    ));

    let wanted_store = swarm.bucket("hyperhive-wanted").await;
    assert!(
        wanted_store.stream.cached_info().config.allow_direct,
        "the wanted bucket is read by direct get"
    );
    let mut baseline_watch = wanted_store.watch("baseline").await.unwrap();
    // (b): a key holding a value the size of the declarations put below.
    let sized = decl("bench/img:1", puts);
    wanted_store
        .put("floor-get", sized.clone().into())
        .await
        .unwrap();
    // (c): a store opened as the job store is, beside it.
    let mut floor_db = Store::open_floor(&dir.join("floor.db"), Durability::Full).unwrap();
    // Put -> committed (the job durably queued), and put -> the bench's
    // wake through the worker's `Notify`.
    let (mut queued, mut woken) = (Vec::new(), Vec::new());
    let (mut baseline, mut gets, mut commits, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut stages: Vec<Vec<f64>> = vec![Vec::new(); STAGE_ROWS.len()];
    // One declaration acted on before the samples: the hive's tasks have
    // started (its first read of the key done) and the first of
    // everything is paid. Without it the first sample's decode took 102
    // ms, the task's start.
    let warm_up = decl("bench/img:1", puts + 1);
    declare(&wanted_store, &hive, warm_up, &wake, &clock, "the warm-up").await;
    let (mut early_wakes, mut reread, mut timed) = (0, Vec::new(), 0);
    for i in 0..puts {
        // (a): a bare put and its watch delivery.
        let t0 = Instant::now();
        wanted_store
            .put("baseline", format!("{i}").into())
            .await
            .unwrap();
        baseline_watch.next().await.unwrap().unwrap();
        let a = t0.elapsed().as_secs_f64() * 1000.0;

        // (b): one direct get of a declaration-sized value.
        let t0 = Instant::now();
        let got = wanted_store.entry("floor-get").await.unwrap().unwrap();
        let b = t0.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(got.value.len(), sized.len());

        // (c): one commit of a row that size.
        let t0 = Instant::now();
        floor_db.bare_commit(sized.as_bytes()).unwrap();
        let c = t0.elapsed().as_secs_f64() * 1000.0;
        baseline.push(a);
        gets.push(b);
        commits.push(c);
        floor.push(a + b + c);

        // The hive: put -> job durably queued.
        let body = decl("bench/img:1", i);
        let (woke, spans, taken, early) = declare(
            &wanted_store,
            &hive,
            body,
            &wake,
            &clock,
            &format!("put {i}"),
        )
        .await;
        // Every span but the last (commit -> wake).
        let put_to_queued: f64 = spans[..STAGES.len()].iter().sum();
        early_wakes += early;
        match taken {
            Taken::ReRead { reads } => reread.push((put_to_queued, reads)),
            Taken::Timed => timed += 1,
            Taken::Doorbell => {}
        }
        woken.push(woke);
        queued.push(put_to_queued);
        for (row, v) in stages.iter_mut().zip(spans) {
            row.push(v);
        }
    }
    trigger.trigger();

    let mut running = if queued_only {
        Vec::new()
    } else {
        container_running(&swarm, &url, rebuilds).await
    };

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
    // Before the rows sort them: which samples make each p99.
    let stage_parts: Vec<&[f64]> = stages.iter().map(Vec::as_slice).collect();
    let tail = slowest_percent(&queued, &stage_parts);
    let floor_tail = slowest_percent(&floor, &[&baseline, &gets, &commits]);
    let (b50, b99) = row("floor (a): KV put -> watch delivery", &mut baseline);
    row("floor (b): KV direct get, declaration-sized", &mut gets);
    row("floor (c): SQLite commit, synchronous=FULL", &mut commits);
    let (f50, f99) = row("floor: a + b + c, per sample", &mut floor);
    let (q50, q99) = row("hive: declaration put -> first job queued", &mut queued);
    row("  the same, to the bench's wake after it", &mut woken);
    let running = (!running.is_empty())
        .then(|| row("hive: declaration put -> container running", &mut running));
    println!();
    println!("put -> queued by stage (ms), {} samples:", stages[0].len());
    for (name, samples) in STAGE_ROWS.iter().zip(&mut stages) {
        if !samples.is_empty() {
            row(&format!("  {name}"), samples);
        }
    }
    tail_rows(&tail, &floor_tail);
    println!("wake-ups before the sample's commit, waited past: {early_wakes}");
    reread.sort_by(|a, b| a.0.total_cmp(&b.0));
    let reads = reread.iter().map(|r| r.1);
    println!(
        "samples whose value was found by a re-read (the doorbell before the stored value): {}{}",
        reread.len(),
        match (
            reread.first(),
            reread.last(),
            reads.clone().min(),
            reads.max()
        ) {
            (Some(lo), Some(hi), Some(fewest), Some(most)) => format!(
                ", put -> queued {:.3} to {:.3} ms, {fewest} to {most} reads each",
                lo.0, hi.0
            ),
            _ => String::new(),
        }
    );
    println!("samples whose value a timed read took before its doorbell: {timed}");
    println!();
    println!(
        "put -> queued vs the floor: {:.2}x (p50) {:.2}x (p99); vs put -> watch alone: {:.1}x (p50) {:.1}x (p99)",
        q50 / f50,
        q99 / f99,
        q50 / b50,
        q99 / b99
    );
    if let Some((r50, r99)) = running {
        println!(
            "put -> container running vs put -> watch: {:.0}x (p50) {:.0}x (p99)",
            r50 / b50,
            r99 / b99
        );
    }
}

/// Phase 3: a real hive process and dockerd, put -> container running.
async fn container_running(swarm: &Swarm, url: &str, rebuilds: usize) -> Vec<f64> {
    // A real hive process and dockerd: put -> container running.
    let img = TestImage::busybox("bench-conv");
    let real = unique_name("bench-conv");
    let _guard = ContainerGuard::new(&real);
    let h = HiveProc::start(HiveSpec {
        name: Some(&real),
        nats_url: Some(url),
        ..Default::default()
    });
    h.api().await;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let mut running = Vec::new();
    for i in 0..=rebuilds {
        let spec: swarm_queue_client::AgentSpec = serde_json::from_value(json!({
            "image": img.reference, "command": ["/bin/sleep", "3600"], "env": { "N": i.to_string() }
        }))
        .unwrap();
        let want = std::collections::BTreeMap::from([("bench".to_string(), spec.spec_hash())]);
        let since = hyperhive_tests::docker::docker_now();
        let t0 = Instant::now();
        swarm.declare(&real, &decl(&img.reference, i)).await;
        // Docker's own start event of the container with this spec.
        hyperhive_tests::docker::started_with_specs(
            &docker,
            &real,
            since,
            &want,
            Duration::from_secs(120),
        )
        .await;
        // The first is a first deploy; the rest are rebuilds.
        if i > 0 {
            running.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
    }
    drop(h);
    running
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
