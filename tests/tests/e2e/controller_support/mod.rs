//! What the controller's end-to-end tests share: a real nats-server with
//! the hives' three buckets, a controller config with a roster, the controller
//! binary run as a one-shot command or as `serve`, and real `HiveStatus`
//! values written into the status bucket the way a hive writes them.

#![allow(dead_code)] // each test file uses a different part

pub mod six;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::{controller_bin, wait_until, Daemon, NatsServer};
use swarm_queue_client::credentials::XKey;
// Each test file uses a different part, this one too.
#[allow(unused_imports)]
pub use swarm_queue_client::test_support::agent_status;
use swarm_queue_client::test_support::HiveStatusBuilder;
use swarm_queue_client::{
    encode_pretty, open_or_create, AgentName, AgentSpec, AgentStatus, Bucket, BucketSettings,
    HiveState, HiveStatus,
};

pub const T: Duration = Duration::from_secs(30);

/// A nats-server, its buckets, and a controller config in a temp dir.
pub struct Env {
    pub nats: NatsServer,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub client: async_nats::Client,
    pub status: kv::Store,
    pub wanted: kv::Store,
    pub credentials: kv::Store,
}

/// The output of one controller command.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl Env {
    /// `roster` hives in the config; `extra` is appended to the top level
    /// (before any table).
    pub async fn new(roster: &[&str], extra: &str) -> Env {
        let nats = NatsServer::start();
        let dir = tempfile::Builder::new()
            .prefix("hhtest-controller-")
            .tempdir()
            .unwrap();
        let mut text = format!("{extra}\n[nats]\nurl = {:?}\n", nats.url());
        for hive in roster {
            text.push_str(&format!(
                "\n[hives.{hive}]\nlabels = {{ test = \"yes\" }}\n"
            ));
        }
        let config = dir.path().join("controller.toml");
        std::fs::write(&config, text).unwrap();
        let client = async_nats::connect(nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        let mut stores = Vec::new();
        for b in [Bucket::Status, Bucket::Wanted, Bucket::Credentials] {
            stores.push(
                open_or_create(&js, b, &BucketSettings::default_for(b))
                    .await
                    .unwrap(),
            );
        }
        let [status, wanted, credentials]: [kv::Store; 3] = stores.try_into().unwrap();
        Env {
            nats,
            dir,
            config,
            client,
            status,
            wanted,
            credentials,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Run `swarm-controller --config <config> <args>` to completion.
    pub async fn run(&self, args: &[&str]) -> Run {
        run_controller(Some(&self.config), args).await
    }

    /// `status --json`, parsed.
    pub async fn status(&self) -> serde_json::Value {
        let r = self.run(&["status", "--json"]).await;
        assert_eq!(r.code, 0, "status failed: {r:?}");
        r.json()
    }

    /// The row of `hive` in `status --json`.
    pub async fn row(&self, hive: &str) -> serde_json::Value {
        hive_row(&self.status().await, hive).unwrap_or_else(|| panic!("no row for {hive}"))
    }

    /// Wait until `hive`'s row satisfies `check`; return it.
    pub async fn wait_row(
        &self,
        hive: &str,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        wait_until(T, what, || async {
            let row = hive_row(&self.status().await, hive)?;
            check(&row).then_some(row)
        })
        .await
    }

    /// Put a status the way a hive does (pretty JSON under its own key).
    pub async fn put_status(&self, status: &HiveStatus) -> u64 {
        let bytes = encode_pretty(status).unwrap();
        self.status
            .put(status.hive.as_str(), Bytes::from(bytes))
            .await
            .unwrap()
    }

    pub async fn put_raw_status(&self, key: &str, bytes: &[u8]) -> u64 {
        self.status
            .put(key, Bytes::copy_from_slice(bytes))
            .await
            .unwrap()
    }

    /// `roster` hives, the controller sealing with a key made here first
    /// (`controller.xkey`, 0600), so a hive can be told to trust it.
    pub async fn with_controller_xkey(roster: &[&str]) -> (Env, XKey) {
        use std::os::unix::fs::PermissionsExt;
        let env = Env::new(roster, "xkey_seed_file = \"controller.xkey\"").await;
        let controller = XKey::new();
        let seed_path = env.path("controller.xkey");
        std::fs::write(&seed_path, controller.seed().unwrap()).unwrap();
        std::fs::set_permissions(&seed_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (env, controller)
    }

    /// A real `hive` named `hive` on this server, trusting `controller`.
    pub fn trusting_hive(&self, hive: &str, controller: &XKey) -> HiveProc {
        let url = self.nats.url();
        let extra = format!(
            "trusted_controller_xkeys = [\"{}\"]",
            controller.public_key()
        );
        HiveProc::start(HiveSpec {
            name: Some(hive),
            nats_url: Some(&url),
            extra: &extra,
            ..Default::default()
        })
    }

    /// Start `serve` on a free port; returns the daemon and its base URL.
    pub async fn serve(&self, log: &str) -> (Daemon, String) {
        serve_with(&self.config, &self.path(log)).await
    }
}

/// Run the controller binary with an optional `--config`.
pub async fn run_controller(config: Option<&Path>, args: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new(controller_bin());
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.args(args)
        .env_remove("HYPERHIVE_NATS_URL")
        .env_remove("HYPERHIVE_CONTROLLER_CONFIG")
        .env("RUST_LOG", "warn");
    let out = cmd.output().await.expect("run the controller binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run the controller binary with `--config config` and a standard
/// output whose reader has already gone (`… | head -1` once `head` quit);
/// its stdout is empty in the answer.
pub async fn run_controller_unread(config: &Path, args: &[&str]) -> Run {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    // Spawned, not `output()`, which would give it a pipe of its own.
    let child = tokio::process::Command::new(controller_bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("HYPERHIVE_NATS_URL")
        .env_remove("HYPERHIVE_CONTROLLER_CONFIG")
        .env("RUST_LOG", "warn")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the controller binary");
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} still runs two minutes after its reader left"))
        .expect("wait for the controller binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Start `serve` with `config`, on a port the kernel picks.
pub async fn serve_with(config: &Path, log: &Path) -> (Daemon, String) {
    hyperhive_tests::process::serve_controller(config, log).await
}

pub fn hive_row(report: &serde_json::Value, hive: &str) -> Option<serde_json::Value> {
    report["hives"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == hive)
        .cloned()
}

pub fn agent(name: &str) -> AgentName {
    AgentName::new(name).unwrap()
}

pub fn image_spec(image: &str) -> AgentSpec {
    AgentSpec {
        image: Some(image.into()),
        ..Default::default()
    }
}

/// A status as a hive would publish it (the one builder the controller's
/// unit tests use too).
pub fn hive_status(
    hive: &str,
    state: HiveState,
    seen: Option<u64>,
    converged: Option<u64>,
    agents: Vec<(&str, AgentStatus)>,
) -> HiveStatus {
    HiveStatusBuilder::new(hive, state)
        .revisions(seen, converged)
        .agents(agents)
        .build()
}
