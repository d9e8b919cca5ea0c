//! The oracle's swarm and its faults: one nats-server, three `hive`
//! processes each on its own [`PrivateDockerd`] (so a dockerd can be killed
//! without touching the machine's), and the controller's config. Every
//! fault is one method of [`World`] that injects it, holds it, ends it and
//! says when it ended and which hives it touched; the driver then watches
//! for the truth through the [`checker`](super::checker).
//!
//! Dropped in field order: hives (killed by pid), private dockerds (their
//! containers, images, bridges and dirs), the host image, nats-server, and
//! the temp dir with the controller config.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use swarm_queue_client::containers::{LABEL_AGENT, LABEL_HIVE, LABEL_MANAGED, LABEL_SPEC};
use swarm_queue_client::{
    open_or_create, AgentName, AgentSpec, Bucket, BucketSettings, Declaration,
};

use swarm_queue_client::buckets::WANTED_BUCKET;

use super::checker::{lock, HiveTruth, Shared};
use super::plan::{FaultKind, Step};
use super::{MIN_RUNNING, PUBLISH_INTERVAL, STALE_AFTER};
use crate::docker::{PrivateDockerd, TestImage, OOM_COMMAND, OOM_MEMORY_MB};
use crate::hive::{HiveProc, HiveSpec};
use crate::kv::Swarm;
use crate::{unique_name, NatsServer};

/// The longest a fault waits for a job to fail (the default retry policy
/// gives up after about a minute).
const MAX_HOLD: Duration = Duration::from_secs(150);
/// A registry nobody listens on: a pull from it fails at once.
const NO_REGISTRY: &str = "127.0.0.1:9";
/// The crash-loop fault's agent: exits 3 after 3 s, shorter than
/// [`MIN_RUNNING`], so no run of it is ever as declared.
const CRASH_COMMAND: [&str; 3] = ["sh", "-c", "sleep 3; exit 3"];
/// The agent the crash-loop and OOM faults make misbehave: every hive has it.
const VICTIM: &str = "a";

/// One declared agent, as the oracle wants it.
#[derive(Debug, Clone)]
struct Agent {
    image: String,
    command: Vec<String>,
    memory_mb: Option<u64>,
}

impl Agent {
    fn healthy(image: &str) -> Agent {
        Agent {
            image: image.to_string(),
            command: vec!["/bin/sleep".into(), "3600".into()],
            memory_mb: None,
        }
    }
}

/// What a fault did: when it ended and whom it touched.
pub struct Injected {
    pub heal_at: Instant,
    pub hives: Vec<usize>,
    pub note: String,
}

pub struct World {
    pub hives: Vec<HiveProc>,
    pub dockerds: Vec<PrivateDockerd>,
    pub image: TestImage,
    pub nats: NatsServer,
    pub kv: Swarm,
    pub shared: Arc<Shared>,
    pub names: Vec<String>,
    versions: Vec<u32>,
    /// Per hive: agent name → what it runs.
    agents: Vec<BTreeMap<String, Agent>>,
    late: u32,
    _dir: tempfile::TempDir,
}

fn socket_path(d: &PrivateDockerd) -> PathBuf {
    PathBuf::from(d.host().trim_start_matches("unix://"))
}

/// Run blocking harness code (process start and stop) off the runtime's
/// async path.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

impl World {
    pub async fn start() -> World {
        let nats = NatsServer::start();
        let kv = Swarm::connect(&nats.url()).await;
        for b in Bucket::ALL {
            open_or_create(&kv.js, b, &BucketSettings::default_for(b))
                .await
                .expect("the swarm's buckets");
        }
        let image = TestImage::busybox("oracle");
        let names: Vec<String> = (0..3).map(|i| unique_name(&format!("oracle{i}"))).collect();
        let dir = tempfile::Builder::new()
            .prefix("hhtest-oracle-")
            .tempdir()
            .expect("temp dir");
        let controller_config = crate::swarm::write_controller_config(
            dir.path(),
            &names,
            STALE_AFTER.as_secs(),
            &nats.url(),
        );
        let mut dockerds = Vec::new();
        let mut hives = Vec::new();
        let mut truths = Vec::new();
        for n in &names {
            let d = blocking(PrivateDockerd::start);
            blocking(|| d.load_image(&image.reference));
            let extra = format!(
                "docker_host = {:?}\nreconcile_interval_secs = 1\nmin_running_secs = {}",
                d.host(),
                MIN_RUNNING.as_secs()
            );
            let h = HiveProc::start(HiveSpec {
                name: Some(n),
                nats_url: Some(&nats.url()),
                publish_interval_secs: PUBLISH_INTERVAL.as_secs(),
                extra: &extra,
                ..Default::default()
            });
            truths.push(HiveTruth::new(n, socket_path(&d), h.daemon.pid()));
            dockerds.push(d);
            hives.push(h);
        }
        let a = |r: &str| BTreeMap::from([(VICTIM.to_string(), Agent::healthy(r))]);
        World {
            agents: names.iter().map(|_| a(&image.reference)).collect(),
            versions: vec![0; names.len()],
            hives,
            dockerds,
            nats,
            kv,
            shared: Shared::new(controller_config, truths),
            names,
            image,
            late: 0,
            _dir: dir,
        }
    }

    fn declaration(&self, i: usize) -> Declaration {
        let agents = self.agents[i]
            .iter()
            .map(|(name, agent)| {
                let spec = AgentSpec {
                    image: Some(agent.image.clone()),
                    command: Some(agent.command.clone()),
                    memory_mb: agent.memory_mb,
                    env: [("V".to_string(), self.versions[i].to_string())].into(),
                    ..Default::default()
                };
                (
                    AgentName::new(name.as_str()).expect("a valid agent name"),
                    spec,
                )
            })
            .collect();
        Declaration::new(agents)
    }

    /// A new version of hive `i`'s declaration, put and recorded; its
    /// revision. Retries while NATS is coming back.
    pub async fn declare(&mut self, i: usize) -> u64 {
        self.versions[i] += 1;
        let decl = self.declaration(i);
        let text = serde_json::to_string(&decl).expect("a declaration serializes");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(store) = self.kv.js.get_key_value(WANTED_BUCKET).await {
                if let Ok(rev) = store.put(&self.names[i], text.clone().into()).await {
                    lock(&self.shared.ledger).record(&self.names[i], rev, &decl);
                    return rev;
                }
            }
            assert!(
                Instant::now() < deadline,
                "could not declare for {}",
                self.names[i]
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Hive `i`'s own `/health/ready` body, when it answers.
    async fn own_status(&self, i: usize) -> Option<Value> {
        let addr = std::fs::read_to_string(self.hives[i].state_dir.join("api.addr")).ok()?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let url = format!("http://{}/health/ready", addr.trim());
        client.get(url).send().await.ok()?.json().await.ok()
    }

    async fn last_job(&self, i: usize, agent: &str) -> Option<Value> {
        let r = self.own_status(i).await?;
        Some(r["agents"][agent]["last_job"].clone()).filter(|j| !j.is_null())
    }

    /// Hold a fault until hive `i` reports a failed job newer than `after`
    /// for `agent` (so the fault lasted past the job's retry window), at
    /// most [`MAX_HOLD`]. A note for the log.
    async fn hold_until_job_failed(&self, i: usize, agent: &str, after: u64) -> String {
        let start = Instant::now();
        let failed = hold_until(|| async move {
            let j = self.last_job(i, agent).await?;
            (j["state"] == "failed" && j["id"].as_u64().unwrap_or(0) > after).then_some(j)
        })
        .await;
        let Some(j) = failed else {
            return format!("no failed job of {agent} within {MAX_HOLD:?}");
        };
        // A little past the failure, so a retry that comes at once would
        // fail too.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let error = super::judge::short(j["error"].as_str().unwrap_or(""));
        format!(
            "job {} of {agent} failed after {:.1}s ({error})",
            j["id"],
            start.elapsed().as_secs_f64()
        )
    }

    fn mark_down(&self, i: usize, pid: Option<u32>) {
        let mut hives = lock(&self.shared.hives);
        hives[i].pid = pid;
        hives[i].down_since = Some(Instant::now());
    }

    fn mark_up(&self, i: usize) {
        let mut hives = lock(&self.shared.hives);
        hives[i].pid = self.hives[i].daemon.pid();
        hives[i].down_since = None;
        hives[i].up_since = Instant::now();
    }

    /// Inject `step`'s fault, hold it, end it.
    pub async fn inject(&mut self, step: &Step) -> Injected {
        let i = step.hive;
        let all: Vec<usize> = (0..self.names.len()).collect();
        let (hives, note) = match step.kind {
            FaultKind::NatsRestart => {
                blocking(|| self.nats.stop());
                tokio::time::sleep(step.hold).await;
                blocking(|| self.nats.restart());
                (all, format!("down {:?}", step.hold))
            }
            FaultKind::DockerdOutage => (vec![i], self.dockerd_outage(i).await),
            FaultKind::HiveKill => {
                self.hives[i].daemon.kill();
                self.mark_down(i, None);
                tokio::time::sleep(step.hold).await;
                self.hives[i].kill_and_restart(&[]);
                self.mark_up(i);
                (vec![i], format!("down {:?}", step.hold))
            }
            FaultKind::HiveStop => {
                self.hives[i].daemon.signal("STOP");
                self.mark_down(i, self.hives[i].daemon.pid());
                tokio::time::sleep(step.hold).await;
                self.hives[i].daemon.signal("CONT");
                self.mark_up(i);
                (vec![i], format!("stopped {:?}", step.hold))
            }
            FaultKind::ImageLate => (vec![i], self.image_late(i).await),
            FaultKind::WantedRecreate => (all, self.wanted_recreate().await),
            FaultKind::HostileLabel => (vec![i], self.hostile_label(i)),
            FaultKind::CrashLoop => (vec![i], self.crash_loop(i).await),
            FaultKind::Oom => (vec![i], self.oom(i).await),
            FaultKind::Declare => {
                if step.toggle_b && self.agents[i].remove("b").is_none() {
                    let b = Agent::healthy(&self.image.reference);
                    self.agents[i].insert("b".into(), b);
                }
                let rev = self.declare(i).await;
                let agents: Vec<&String> = self.agents[i].keys().collect();
                (vec![i], format!("revision {rev}, agents {agents:?}"))
            }
        };
        Injected {
            heal_at: Instant::now(),
            hives,
            note,
        }
    }

    async fn dockerd_outage(&mut self, i: usize) -> String {
        let before = self.last_job(i, "a").await.and_then(|j| j["id"].as_u64());
        blocking(|| self.dockerds[i].kill());
        let rev = self.declare(i).await;
        let held = self
            .hold_until_job_failed(i, "a", before.unwrap_or(0))
            .await;
        blocking(|| self.dockerds[i].restart());
        format!("revision {rev} put while down; {held}")
    }

    async fn image_late(&mut self, i: usize) -> String {
        self.late += 1;
        let agent = format!("late{}", self.late);
        let reference = format!("{NO_REGISTRY}/{}:1", unique_name("oracle-late"));
        let late = Agent::healthy(&reference);
        self.agents[i].insert(agent.clone(), late);
        let rev = self.declare(i).await;
        let held = self.hold_until_job_failed(i, &agent, 0).await;
        let tagged = self.dockerds[i].cli(&["tag", &self.image.reference, &reference]);
        assert!(tagged.is_ok(), "tag {reference}: {tagged:?}");
        format!("{agent} at revision {rev}; {held}; then the image appeared")
    }

    async fn wanted_recreate(&mut self) -> String {
        let stream_name = Bucket::Wanted.stream_name();
        let config = {
            let mut stream = self
                .kv
                .js
                .get_stream(&stream_name)
                .await
                .expect("wanted stream");
            stream
                .info()
                .await
                .expect("wanted stream info")
                .config
                .clone()
        };
        self.kv
            .js
            .delete_stream(&stream_name)
            .await
            .expect("delete the wanted bucket");
        lock(&self.shared.ledger).new_generation();
        self.kv
            .js
            .create_stream(config)
            .await
            .expect("make the wanted bucket again");
        let mut revs = Vec::new();
        for i in 0..self.names.len() {
            revs.push(self.declare(i).await);
        }
        format!("re-declared at revisions {revs:?}")
    }

    /// Agent [`VICTIM`] of hive `i` crash-loops until the hive's status
    /// shows it backing off, then is declared healthy again.
    async fn crash_loop(&mut self, i: usize) -> String {
        let (rev, spec) = self.misbehave(i, &CRASH_COMMAND, None).await;
        let start = Instant::now();
        let (kv, hive, spec) = (&self.kv, &self.names[i], &spec);
        let backoff = hold_until(|| async move {
            let (_, status) = kv.status(hive).await?;
            let a = &status["agents"][VICTIM];
            let count = a["exits"]["count"].as_u64().unwrap_or(0);
            let backing_off = a["unsettled"] == "backoff" || count >= 2;
            (a["spec"] == spec.as_str() && backing_off).then_some(count)
        })
        .await;
        let held = match backoff {
            Some(n) => format!(
                "backing off after {n} exits, {:.1}s",
                start.elapsed().as_secs_f64()
            ),
            None => format!("not seen backing off within {MAX_HOLD:?}"),
        };
        let healed = self.heal_victim(i).await;
        format!("{VICTIM} crash-looping at revision {rev}, {held}; healthy at revision {healed}")
    }

    /// Agent [`VICTIM`] of hive `i` holds far more memory than it is
    /// declared with, until its dockerd reports it OOM-killed; then it is
    /// declared healthy again.
    async fn oom(&mut self, i: usize) -> String {
        let (rev, spec) = self.misbehave(i, &OOM_COMMAND, Some(OOM_MEMORY_MB)).await;
        let start = Instant::now();
        let socket = socket_path(&self.dockerds[i]);
        let (socket, hive, spec) = (&socket, &self.names[i], &spec);
        let killed = hold_until(|| async move {
            let view = super::checker::docker_view(socket, hive).await?;
            view.iter()
                .any(|c| c.agent == VICTIM && c.spec == *spec && c.oom_killed)
                .then_some(())
        })
        .await;
        let held = match killed {
            Some(()) => format!("OOMKilled after {:.1}s", start.elapsed().as_secs_f64()),
            None => format!("not OOM-killed within {MAX_HOLD:?}"),
        };
        let healed = self.heal_victim(i).await;
        format!("{VICTIM} with memory_mb = {OOM_MEMORY_MB} at revision {rev}, {held}; healthy at revision {healed}")
    }

    /// Agent [`VICTIM`] of hive `i` declared to run `command`: the
    /// revision and the spec hash it will carry.
    async fn misbehave(
        &mut self,
        i: usize,
        command: &[&str],
        memory_mb: Option<u64>,
    ) -> (u64, String) {
        let victim = self.agents[i]
            .get_mut(VICTIM)
            .expect("every hive declares its victim agent");
        victim.command = command.iter().map(|s| s.to_string()).collect();
        victim.memory_mb = memory_mb;
        let rev = self.declare(i).await;
        let decl = self.declaration(i);
        let spec = decl
            .agents
            .iter()
            .find(|(name, _)| name.as_str() == VICTIM)
            .map(|(_, s)| s.spec_hash())
            .unwrap_or_default();
        (rev, spec)
    }

    /// Agent [`VICTIM`] of hive `i` declared healthy again; the revision.
    async fn heal_victim(&mut self, i: usize) -> u64 {
        let healthy = Agent::healthy(&self.image.reference);
        self.agents[i].insert(VICTIM.into(), healthy);
        self.declare(i).await
    }

    /// The name of hive `i`'s hostile container.
    pub fn hostile_name(&self, i: usize) -> String {
        format!("{}-hostile", self.names[i])
    }

    fn hostile_label(&self, i: usize) -> String {
        let spec = format!(
            "sha256:\u{1b}[2J\u{7}\r\n\t\u{7f}{}\u{202e}é",
            "x".repeat(4200)
        );
        let labels = [
            format!("{LABEL_MANAGED}=true"),
            format!("{LABEL_HIVE}={}", self.names[i]),
            format!("{LABEL_AGENT}=intruder"),
            format!("{LABEL_SPEC}={spec}"),
        ];
        let name = self.hostile_name(i);
        let mut args = vec!["run", "-d", "--name", &name];
        for l in &labels {
            args.extend(["--label", l.as_str()]);
        }
        args.extend([self.image.reference.as_str(), "/bin/sleep", "3600"]);
        let out = self.dockerds[i].cli(&args);
        assert!(out.is_ok(), "plant the hostile container: {out:?}");
        format!("{} spec label bytes", spec.len())
    }

    /// End the hostile-label fault.
    pub fn remove_hostile(&self, i: usize) {
        let _ = self.dockerds[i].cli(&["rm", "-f", &self.hostile_name(i)]);
    }
}

/// Poll `check` every 250 ms until it finds something, at most
/// [`MAX_HOLD`]: what it found, or `None` when the fault never showed.
async fn hold_until<T, F, Fut>(mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    while start.elapsed() < MAX_HOLD {
        if let Some(found) = check().await {
            return Some(found);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}
