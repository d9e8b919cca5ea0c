//! The checker: every [`SAMPLE_EVERY`](super::SAMPLE_EVERY) it asks the
//! controller (`status --json`, the real binary), then each hive's dockerd
//! (bollard, straight to the private socket) and `/proc`, and judges every
//! row with [`judge`](super::judge). It also tells the fault driver when
//! the hives a fault touched are back to the whole truth (see
//! [`Shared::watch`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions};
use bollard::{Docker, API_DEFAULT_VERSION};
use serde_json::Value;
use swarm_queue_client::containers::{LABEL_AGENT, LABEL_HIVE, LABEL_SPEC};
use swarm_queue_client::Declaration;

use super::judge::{self, ContainerFact, DockerView};
use super::{SAMPLE_EVERY, STALE_AFTER};

/// Docker samples kept per hive: far more than [`judge::CONVERGED_GRACE`]
/// plus [`STALE_AFTER`] need.
const HISTORY: Duration = Duration::from_secs(60);
/// A `status` run that takes longer is killed and counted unavailable.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// Kept examples of false claims and of hives shown not fresh while up (all are counted).
const MAX_EXAMPLES: usize = 20;

/// What the oracle knows about one hive's process and dockerd.
pub struct HiveTruth {
    pub name: String,
    pub docker_socket: PathBuf,
    pub pid: Option<u32>,
    /// When the oracle killed or stopped it (or first saw it gone).
    pub down_since: Option<Instant>,
    /// When it was last started or continued.
    pub up_since: Instant,
    history: VecDeque<(Instant, DockerView)>,
}

impl HiveTruth {
    pub fn new(name: &str, docker_socket: PathBuf, pid: Option<u32>) -> HiveTruth {
        HiveTruth {
            name: name.to_string(),
            docker_socket,
            pid,
            down_since: None,
            up_since: Instant::now(),
            history: VecDeque::new(),
        }
    }
}

/// Every declaration the oracle put, by bucket generation (a recreated
/// bucket starts its revisions again at 1) and revision.
#[derive(Default)]
pub struct Ledger {
    pub generation: u32,
    decls: BTreeMap<(u32, String, u64), Declaration>,
    latest: BTreeMap<String, u64>,
    ever: BTreeMap<String, BTreeSet<String>>,
}

impl Ledger {
    pub fn record(&mut self, hive: &str, revision: u64, decl: &Declaration) {
        self.decls
            .insert((self.generation, hive.to_string(), revision), decl.clone());
        self.latest.insert(hive.to_string(), revision);
        self.ever
            .entry(hive.to_string())
            .or_default()
            .extend(decl.agents.keys().map(|a| a.as_str().to_string()));
    }

    /// The bucket was made again: revisions start over.
    pub fn new_generation(&mut self) {
        self.generation += 1;
        self.latest.clear();
    }

    fn get(&self, generation: u32, hive: &str, revision: u64) -> Option<&Declaration> {
        self.decls.get(&(generation, hive.to_string(), revision))
    }

    fn latest(&self, hive: &str) -> Option<(u64, &Declaration)> {
        let r = *self.latest.get(hive)?;
        Some((r, self.get(self.generation, hive, r)?))
    }

    fn ever(&self, hive: &str) -> BTreeSet<String> {
        self.ever.get(hive).cloned().unwrap_or_default()
    }
}

/// The hives a fault touched, and when they were all back to the truth.
pub struct Watch {
    pub since: Instant,
    pub hives: Vec<usize>,
    pub healed_at: Option<Instant>,
}

/// The checker's counters.
#[derive(Default, Debug)]
pub struct Counts {
    pub samples: u64,
    pub rows: u64,
    /// `status --json` failed or timed out (NATS down, say).
    pub unavailable: u64,
    /// Converged rows not judged: the wanted bucket was remade mid-sample.
    pub ambiguous: u64,
    pub false_fresh: u64,
    pub false_converged: u64,
    /// Informational: a live, running hive shown stale (its publishes fail).
    pub stale_while_up: u64,
    pub examples: Vec<String>,
    /// The last sample in which every hive was wholly true.
    pub all_true_at: Option<Instant>,
    /// Per hive, why its last sample was not the whole truth.
    pub why_not: BTreeMap<String, String>,
    pub sample_time: Duration,
}

/// What the driver and the checker share.
pub struct Shared {
    pub t0: Instant,
    pub controller_config: PathBuf,
    pub hives: Mutex<Vec<HiveTruth>>,
    pub ledger: Mutex<Ledger>,
    pub counts: Mutex<Counts>,
    pub watch: Mutex<Option<Watch>>,
    stop: AtomicBool,
}

/// Lock, ignoring poison: a panicking driver still wants the figures.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(controller_config: PathBuf, hives: Vec<HiveTruth>) -> Arc<Shared> {
        Arc::new(Shared {
            t0: Instant::now(),
            controller_config,
            hives: Mutex::new(hives),
            ledger: Mutex::new(Ledger::default()),
            counts: Mutex::new(Counts::default()),
            watch: Mutex::new(None),
            stop: AtomicBool::new(false),
        })
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Seconds since the oracle started, for log lines.
    pub fn at(&self, t: Instant) -> String {
        format!(
            "+{:.1}s",
            t.saturating_duration_since(self.t0).as_secs_f64()
        )
    }
}

/// Sample until [`Shared::stop`].
pub async fn run(shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        sample(&shared).await;
        let took = start.elapsed();
        lock(&shared.counts).sample_time += took;
        tokio::time::sleep(SAMPLE_EVERY.saturating_sub(took)).await;
    }
}

/// The containers labelled for `hive` in the dockerd at `socket`, each
/// inspected for how long it has run and whether it was OOM-killed.
pub async fn docker_view(socket: &std::path::Path, hive: &str) -> DockerView {
    let docker = Docker::connect_with_unix(socket.to_str()?, 3, API_DEFAULT_VERSION).ok()?;
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_HIVE}={hive}")])]);
    let options = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let found = docker.list_containers(Some(options)).await.ok()?;
    let mut facts = Vec::new();
    for c in found {
        let labels = c.labels.unwrap_or_default();
        let running = c.state.map(|s| s.to_string()).as_deref() == Some("running");
        // A container gone between the list and the look is neither
        // running for long nor known to be OOM-killed.
        let state = match c.id {
            Some(id) => docker
                .inspect_container(&id, None::<InspectContainerOptions>)
                .await
                .ok()
                .and_then(|i| i.state),
            None => None,
        };
        let started_ms = state
            .as_ref()
            .and_then(|s| s.started_at.as_deref())
            .and_then(hive::agents::runtime::docker_time_ms);
        facts.push(ContainerFact {
            agent: labels.get(LABEL_AGENT).cloned().unwrap_or_default(),
            running,
            spec: labels.get(LABEL_SPEC).cloned().unwrap_or_default(),
            running_for: started_ms
                .filter(|_| running)
                .map(|s| Duration::from_millis((wall_ms() - s).max(0) as u64)),
            oom_killed: state.and_then(|s| s.oom_killed).unwrap_or(false),
        });
    }
    Some(facts)
}

/// Alive and not stopped, by `/proc/<pid>/stat`.
pub fn process_up(pid: Option<u32>) -> bool {
    let Some(pid) = pid else { return false };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name in parentheses.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    !matches!(state, None | Some("T" | "t" | "Z" | "X" | "x"))
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

async fn controller_status(shared: &Shared) -> Result<Value, String> {
    let run = tokio::process::Command::new(crate::controller_bin())
        .arg("--config")
        .arg(&shared.controller_config)
        .args(["status", "--json"])
        .env_remove("HYPERHIVE_NATS_URL")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(STATUS_TIMEOUT, run)
        .await
        .map_err(|_| "status --json timed out".to_string())?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

async fn sample(shared: &Shared) {
    let generation_before = lock(&shared.ledger).generation;
    let asked = Instant::now();
    let asked_wall = wall_ms();
    let report = controller_status(shared).await;
    let targets: Vec<(String, PathBuf)> = lock(&shared.hives)
        .iter()
        .map(|h| (h.name.clone(), h.docker_socket.clone()))
        .collect();
    let mut views = Vec::new();
    for (name, socket) in &targets {
        views.push(docker_view(socket, name).await);
    }
    let seen_at = Instant::now();
    let generation_after = lock(&shared.ledger).generation;
    {
        let mut hives = lock(&shared.hives);
        for (h, v) in hives.iter_mut().zip(&views) {
            // A hive that died by itself: it died at some moment before
            // this look, so dating it now can only excuse, never invent, a
            // false claim. (Faults the oracle injects are dated exactly.)
            if h.down_since.is_none() && !process_up(h.pid) {
                h.down_since = Some(seen_at);
            }
            h.history.push_back((seen_at, v.clone()));
            while h
                .history
                .front()
                .is_some_and(|(t, _)| seen_at - *t > HISTORY)
            {
                h.history.pop_front();
            }
        }
    }
    let mut counts = lock(&shared.counts);
    counts.samples += 1;
    let report = match report {
        Ok(r) => r,
        Err(_) => {
            counts.unavailable += 1;
            return;
        }
    };
    let judged = Judged {
        asked,
        asked_wall,
        same_generation: generation_before == generation_after,
    };
    let mut all_true = true;
    let mut true_now = Vec::new();
    let hives = lock(&shared.hives);
    let ledger = lock(&shared.ledger);
    for (h, view) in hives.iter().zip(&views) {
        let row = report["hives"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["name"] == h.name.as_str()));
        let Some(row) = row else {
            all_true = false;
            true_now.push(false);
            continue;
        };
        counts.rows += 1;
        let ok = judge_row(shared, &judged, h, view, row, &ledger, &mut counts);
        all_true &= ok;
        true_now.push(ok);
    }
    if all_true {
        counts.all_true_at = Some(asked);
    }
    if let Some(w) = lock(&shared.watch).as_mut() {
        if w.healed_at.is_none() && asked >= w.since && w.hives.iter().all(|i| true_now[*i]) {
            w.healed_at = Some(asked);
        }
    }
}

struct Judged {
    asked: Instant,
    asked_wall: i64,
    same_generation: bool,
}

/// Count the false claims of one row; whether the row is the whole truth
/// (process up, fresh, converged on the latest declaration, and Docker as
/// declared).
fn judge_row(
    shared: &Shared,
    j: &Judged,
    h: &HiveTruth,
    view: &DockerView,
    row: &Value,
    ledger: &Ledger,
    counts: &mut Counts,
) -> bool {
    let fresh = row["freshness"] == "fresh";
    let converged = row["convergence"] == "converged";
    let example = |counts: &mut Counts, text: String| {
        if counts.examples.len() < MAX_EXAMPLES {
            counts
                .examples
                .push(format!("{} {}: {text}", shared.at(j.asked), h.name));
        }
    };
    if judge::false_fresh(fresh, h.down_since, j.asked, STALE_AFTER) {
        counts.false_fresh += 1;
        let down = h.down_since.map(|d| j.asked - d).unwrap_or_default();
        example(
            counts,
            format!(
                "false fresh: down for {down:?}, row age_ms {}",
                row["age_ms"]
            ),
        );
    }
    if !fresh && h.down_since.is_none() && j.asked - h.up_since > STALE_AFTER * 2 {
        counts.stale_while_up += 1;
        example(
            counts,
            format!(
                "not fresh while up for {:?}: {} (age_ms {})",
                j.asked - h.up_since,
                row["freshness_reason"],
                row["age_ms"]
            ),
        );
    }
    let ever = ledger.ever(&h.name);
    if converged {
        let revision = row["declared_revision"].as_u64().unwrap_or_default();
        if !j.same_generation {
            counts.ambiguous += 1;
        } else if let Some(decl) = ledger.get(ledger.generation, &h.name, revision) {
            let age_ms = (j.asked_wall - row["status_time_ms"].as_i64().unwrap_or(0)).max(0);
            let evidence_at = j
                .asked
                .checked_sub(Duration::from_millis(age_ms as u64))
                .unwrap_or(shared.t0);
            let matches = h
                .history
                .iter()
                .map(|(t, v)| (*t, judge::disagreement(decl, &ever, v).is_none()));
            if judge::false_converged(evidence_at, Instant::now(), matches) {
                counts.false_converged += 1;
                let why = judge::disagreement(decl, &ever, view).unwrap_or_default();
                example(
                    counts,
                    format!("false converged on revision {revision}: docker says {why}"),
                );
            }
        } else {
            counts.false_converged += 1;
            example(
                counts,
                format!("converged on revision {revision}, never declared"),
            );
        }
    }
    let why_not = if h.down_since.is_some() {
        Some("process down".to_string())
    } else if !fresh {
        Some(format!(
            "{} ({})",
            row["freshness"], row["freshness_reason"]
        ))
    } else if !converged {
        Some(format!("{}: {}", row["convergence"], row["reason"]))
    } else {
        match ledger.latest(&h.name) {
            None => Some("nothing declared".into()),
            Some((r, _)) if row["declared_revision"].as_u64() != Some(r) => Some(format!(
                "controller shows revision {} not {r}",
                row["declared_revision"]
            )),
            Some((_, decl)) => {
                judge::disagreement(decl, &ever, view).map(|d| format!("docker: {d}"))
            }
        }
    };
    match why_not {
        None => {
            counts.why_not.remove(&h.name);
            true
        }
        Some(w) => {
            counts.why_not.insert(h.name.clone(), w);
            false
        }
    }
}
