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
use super::{PUBLISH_INTERVAL, STALE_AFTER};
use crate::docker::{PrivateDockerd, TestImage};
use crate::hive::{HiveProc, HiveSpec};
use crate::kv::Swarm;
use crate::{unique_name, NatsServer};

/// The longest a fault waits for a job to fail (the default retry policy
/// gives up after about a minute).
const MAX_HOLD: Duration = Duration::from_secs(150);
/// A registry nobody listens on: a pull from it fails at once.
const NO_REGISTRY: &str = "127.0.0.1:9";

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
    /// Per hive: agent name → image reference.
    agents: Vec<BTreeMap<String, String>>,
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
            let extra = format!("docker_host = {:?}\nreconcile_interval_secs = 1", d.host());
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
        let a = |r: &str| BTreeMap::from([("a".to_string(), r.to_string())]);
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
            .map(|(name, image)| {
                let spec = AgentSpec {
                    image: Some(image.clone()),
                    command: Some(vec!["/bin/sleep".into(), "3600".into()]),
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
    async fn readiness(&self, i: usize) -> Option<Value> {
        let addr = std::fs::read_to_string(self.hives[i].state_dir.join("api.addr")).ok()?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let url = format!("http://{}/health/ready", addr.trim());
        client.get(url).send().await.ok()?.json().await.ok()
    }

    async fn last_job(&self, i: usize, agent: &str) -> Option<Value> {
        let r = self.readiness(i).await?;
        Some(r["agents"][agent]["last_job"].clone()).filter(|j| !j.is_null())
    }

    /// Hold a fault until hive `i` reports a failed job newer than `after`
    /// for `agent` (so the fault lasted past the job's retry window), at
    /// most [`MAX_HOLD`]. A note for the log.
    async fn hold_until_job_failed(&self, i: usize, agent: &str, after: u64) -> String {
        let start = Instant::now();
        while start.elapsed() < MAX_HOLD {
            if let Some(j) = self.last_job(i, agent).await {
                if j["state"] == "failed" && j["id"].as_u64().unwrap_or(0) > after {
                    // A little past the failure, so a retry that comes at
                    // once would fail too.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    let error = super::judge::short(j["error"].as_str().unwrap_or(""));
                    return format!(
                        "job {} of {agent} failed after {:.1}s ({error})",
                        j["id"],
                        start.elapsed().as_secs_f64()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        format!("no failed job of {agent} within {MAX_HOLD:?}")
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
            FaultKind::Declare => {
                if step.toggle_b {
                    let image = self.image.reference.clone();
                    if self.agents[i].remove("b").is_none() {
                        self.agents[i].insert("b".into(), image);
                    }
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
        self.agents[i].insert(agent.clone(), reference.clone());
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
