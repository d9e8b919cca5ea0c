//! A staged rollout over N simulated hives (`-- --rollout`; `--quick`: N =
//! 200), against the same change written to all of them at once.
//!
//! The hives are [`crate::fleet`]'s, labelled `role = "sim"` in the roster;
//! the swarm file declares one agent for the group of all of them. Three
//! changes, each timed from the controller process's start:
//!
//! 1. `declare` of image `sim/img:1` to every hive (the first declaration);
//! 2. the bare baseline: `declare` of `sim/img:2`, every hive at once, until
//!    every hive reports converged on the revision written for it;
//! 3. `declare --rollout` of `sim/img:3` in the waves 1, 1%, 10%, 100%:
//!    each wave's write (from the end of the previous wave to the
//!    controller's "wrote" line) and wait (from "wrote" to its "every hive
//!    converged" line), by the time each line reached the bench.
//!
//! Each change is also checked by the bench's own watch of the wanted and
//! status buckets: it is not done until every hive's status shows it
//! converged on the revision its wanted key got. The controller's peak
//! memory (`ru_maxrss`) and the rollout state's size in the bucket are
//! reported too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hyperhive_tests::{controller_bin, NatsServer};
use serde_json::Value;
use swarm_queue_client::{open_or_create, Bucket, BucketSettings};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::measure::{proc_kib, WRAP};

const WAVES: &str = r#"["1", "1%", "10%", "100%"]"#;
const LIMIT: Duration = Duration::from_secs(900);

/// One change's figures.
struct Change {
    /// From the controller's start to every hive converged (bench's watch).
    converged_s: f64,
    /// The controller process's wall time and peak RSS.
    process_s: f64,
    peak_kib: u64,
    /// Per wave: hives, write s, wait s (rollout only).
    waves: Vec<(usize, f64, f64)>,
}

pub async fn bench(ns: &[usize]) {
    println!("rollout: 1 nats-server, waves {WAVES}");
    println!(
        "| N | change | hives written | write s | wait until converged s | total s | vs all at once | controller peak MiB |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for &n in ns {
        run(n).await;
    }
}

async fn run(n: usize) {
    let nats = NatsServer::start();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut buckets = Vec::new();
    for b in [Bucket::Status, Bucket::Wanted, Bucket::Rollouts] {
        let settings = BucketSettings::default_for(b);
        buckets.push(open_or_create(&js, b, &settings).await.unwrap());
    }
    let [status, wanted, rollouts] = <[_; 3]>::try_from(buckets).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("hhtest-rollout-bench-")
        .tempdir()
        .unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("sim{i:05}")).collect();
    let config = roster(dir.path(), &names, &nats.url());
    let fleet = crate::fleet::start(&names, &[nats.url()], dir.path()).await;
    crate::all_fresh(&config, &status, n, Instant::now()).await;
    let tracker = Tracker::start(&wanted, &status).await;

    let first = change(&config, dir.path(), &tracker, n, "1", None).await;
    let bare = change(&config, dir.path(), &tracker, n, "2", None).await;
    let staged = change(&config, dir.path(), &tracker, n, "3", Some(WAVES)).await;
    let state_bytes = bucket_bytes(&rollouts).await;

    let mib = |k: u64| k as f64 / 1024.0;
    for (name, c) in [("first declare", &first), ("all at once", &bare)] {
        println!(
            "| {n} | {name} | {n} | | | {:.2} | {:.2} | {:.1} |",
            c.converged_s,
            c.converged_s / bare.converged_s,
            mib(c.peak_kib)
        );
    }
    let mut at = 0.0;
    for (i, (hives, write, wait)) in staged.waves.iter().enumerate() {
        at += write + wait;
        println!(
            "| {n} | rollout wave {} | {hives} | {write:.2} | {wait:.2} | {:.2} | {:.2} | |",
            i + 1,
            write + wait,
            (write + wait) / bare.converged_s
        );
    }
    println!(
        "| {n} | rollout, whole | {n} | | | {:.2} | {:.2} | {:.1} |",
        staged.converged_s,
        staged.converged_s / bare.converged_s,
        mib(staged.peak_kib)
    );
    println!(
        "FIGURES: rollout n={n} all_at_once_s={:.2} rollout_s={:.2} ratio={:.2} waves={} waves_sum_s={at:.2} controller_peak_mib={:.1} bare_controller_peak_mib={:.1} state_values={} state_bytes={} bench_rss_mib={:.1} process_s={:.2}",
        bare.converged_s,
        staged.converged_s,
        staged.converged_s / bare.converged_s,
        staged.waves.len(),
        mib(staged.peak_kib),
        mib(bare.peak_kib),
        state_bytes.0,
        state_bytes.1,
        mib(proc_kib(std::process::id(), "VmRSS:")),
        staged.process_s,
    );
    drop(fleet);
}

/// The controller config: `names` in the roster, each labelled `role = "sim"`.
fn roster(dir: &Path, names: &[String], url: &str) -> PathBuf {
    let mut text = format!(
        "stale_after_secs = {}\n[nats]\nurl = {url:?}\n",
        crate::STALE_AFTER_SECS
    );
    for n in names {
        text.push_str(&format!("[hives.{n:?}]\nlabels = {{ role = \"sim\" }}\n"));
    }
    let path = dir.join("controller.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Declare `sim/img:<version>` for every hive (staged in `waves` when
/// given), and wait until each hive converged on its new revision.
async fn change(
    config: &Path,
    dir: &Path,
    tracker: &Tracker,
    n: usize,
    version: &str,
    waves: Option<&str>,
) -> Change {
    let rollout = waves
        .map(|w| {
            format!("[rollout]\nwaves = {w}\nwait_converged_secs = 600\nmin_converged_secs = 0\n")
        })
        .unwrap_or_default();
    let file = dir.join(format!("swarm-{version}.toml"));
    std::fs::write(
        &file,
        format!(
            "[groups.all]\nselect = {{ role = \"sim\" }}\n\n[groups.all.agents.a]\n\
             image = \"sim/img:{version}\"\n\n{rollout}"
        ),
    )
    .unwrap();
    let generation = tracker.next_generation();
    let cfg = config.display().to_string();
    let file = file.display().to_string();
    let mut args = vec!["--config", &cfg, "declare", &file];
    if waves.is_some() {
        args.push("--rollout");
    }
    let t0 = Instant::now();
    let (lines, result, process) = spawn_measured(&controller_bin(), &args, dir).await;
    let converged = tracker.wait_all(n, generation, t0).await;
    let waves = wave_times(&lines, t0);
    let text = std::fs::read_to_string(result.path()).unwrap_or_default();
    let peak_kib = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        text.starts_with("0 "),
        "declare {version} failed: {text}; its last lines: {:?}",
        lines.iter().rev().take(5).map(|l| &l.1).collect::<Vec<_>>()
    );
    Change {
        converged_s: converged.as_secs_f64(),
        process_s: process.as_secs_f64(),
        peak_kib,
        waves,
    }
}

/// Run `program args` under the measuring wrapper to its end; each stdout
/// line with the time it arrived, the wrapper's result file, the wall time.
async fn spawn_measured(
    program: &Path,
    args: &[&str],
    dir: &Path,
) -> (Vec<(Instant, String)>, tempfile::NamedTempFile, Duration) {
    let result = tempfile::NamedTempFile::new_in(dir).unwrap();
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .arg(WRAP)
        .arg(result.path())
        .arg(program)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(LIMIT, out.next_line())
        .await
        .expect("the controller printed nothing for 15 min")
    {
        lines.push((Instant::now(), line));
    }
    child.wait().await.unwrap();
    (lines, result, t0.elapsed())
}

/// Each wave's (hives, write s, wait s) from the controller's lines "wave k
/// of n: wrote …" and "wave k of n: every hive converged".
fn wave_times(lines: &[(Instant, String)], t0: Instant) -> Vec<(usize, f64, f64)> {
    let mut waves = Vec::new();
    let mut since = t0;
    let mut wrote: Option<(Instant, usize)> = None;
    for (at, line) in lines {
        if let Some(rest) = line.split_once(": wrote ").map(|(_, r)| r) {
            wrote = Some((*at, rest.split(", ").count()));
        } else if line.ends_with(": every hive converged") {
            if let Some((w, hives)) = wrote.take() {
                waves.push((hives, (w - since).as_secs_f64(), (*at - w).as_secs_f64()));
                since = *at;
            }
        }
    }
    waves
}

/// How many values the rollouts bucket holds now, and their bytes.
async fn bucket_bytes(store: &async_nats::jetstream::kv::Store) -> (usize, usize) {
    let keys: Vec<String> = match store.keys().await {
        Ok(k) => k.filter_map(|k| async { k.ok() }).collect().await,
        Err(_) => return (0, 0),
    };
    let mut bytes = 0;
    let mut values = 0;
    for k in keys {
        if let Ok(Some(e)) = store.entry(k.as_str()).await {
            values += 1;
            bytes += e.value.len();
        }
    }
    (values, bytes)
}

/// The bench's own view: each hive's wanted revision and the revision its
/// status says it converged on, from watches of both buckets.
struct Tracker {
    state: Arc<Mutex<Track>>,
    changed: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct Track {
    generation: u64,
    /// Hives written, and converged on that write, in this generation.
    written: usize,
    converged_now: usize,
    last_converged: Option<Instant>,
    /// hive -> (wanted revision, the generation it was written in).
    wanted: HashMap<String, (u64, u64)>,
    converged: HashMap<String, u64>,
    /// hive -> the generation of the write it converged on.
    done: HashMap<String, u64>,
}

impl Track {
    fn wanted(&mut self, hive: &str, revision: u64) {
        let g = self.generation;
        let before = self.wanted.insert(hive.to_string(), (revision, g));
        if before.map(|b| b.1) != Some(g) {
            self.written += 1;
        }
        if self.done.remove(hive) == Some(g) {
            self.converged_now -= 1;
        }
        self.check(hive);
    }

    fn status(&mut self, hive: &str, converged: u64) {
        self.converged.insert(hive.to_string(), converged);
        self.check(hive);
    }

    fn check(&mut self, hive: &str) {
        let (Some(&(want, g)), Some(&have)) = (self.wanted.get(hive), self.converged.get(hive))
        else {
            return;
        };
        if have >= want && !self.done.contains_key(hive) {
            self.done.insert(hive.to_string(), g);
            if g == self.generation {
                self.converged_now += 1;
                self.last_converged = Some(Instant::now());
            }
        }
    }
}

impl Tracker {
    async fn start(
        wanted: &async_nats::jetstream::kv::Store,
        status: &async_nats::jetstream::kv::Store,
    ) -> Tracker {
        let state = Arc::new(Mutex::new(Track::default()));
        let changed = Arc::new(tokio::sync::Notify::new());
        let mut w = wanted.watch_all().await.unwrap();
        let mut s = status.watch_all().await.unwrap();
        let (st, ch) = (state.clone(), changed.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    Some(Ok(e)) = w.next() => {
                        st.lock().unwrap().wanted(&e.key, e.revision);
                    }
                    Some(Ok(e)) = s.next() => {
                        let Ok(doc) = serde_json::from_slice::<Value>(&e.value) else { continue };
                        if let Some(c) = doc["converged_revision"].as_u64() {
                            st.lock().unwrap().status(&e.key, c);
                        }
                    }
                    else => break,
                }
                ch.notify_one();
            }
        });
        Tracker { state, changed }
    }

    /// Start a new change: writes seen from now on belong to it.
    fn next_generation(&self) -> u64 {
        let mut t = self.state.lock().unwrap();
        t.generation += 1;
        t.written = 0;
        t.converged_now = 0;
        t.last_converged = None;
        t.generation
    }

    /// Wait until all `n` hives were written in `generation` and converged
    /// on it; the time of the last one since `t0`.
    async fn wait_all(&self, n: usize, generation: u64, t0: Instant) -> Duration {
        let deadline = Instant::now() + LIMIT;
        loop {
            let notified = self.changed.notified();
            {
                let t = self.state.lock().unwrap();
                if t.generation == generation && t.written == n && t.converged_now == n {
                    return t.last_converged.map_or(Duration::ZERO, |l| l - t0);
                }
            }
            assert!(
                Instant::now() < deadline,
                "change {generation} never converged on all {n} hives"
            );
            let _ = tokio::time::timeout(Duration::from_secs(5), notified).await;
        }
    }
}
