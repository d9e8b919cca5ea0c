//! A real `hive` process configured by a test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::{hive_bin, Daemon};

/// How long an agent must run to count as up on a test's hive, unless the
/// test's `extra` says `min_running_secs` itself: short, so that each of the
/// suite's many convergences does not wait out the shipped 10 s, and not 0,
/// so that every test still passes through the young state.
pub const TEST_MIN_RUNNING_SECS: u64 = 2;

/// Settings for one hive under test. `extra` is appended to the TOML file;
/// without `min_running_secs` in it, the hive gets
/// [`TEST_MIN_RUNNING_SECS`].
pub struct HiveSpec<'a> {
    pub name: Option<&'a str>,
    pub nats_url: Option<&'a str>,
    pub publish_interval_secs: u64,
    pub extra: &'a str,
    /// Environment for the process (for example a test hook).
    pub envs: &'a [(&'a str, &'a str)],
    /// The state dir, when the test prepares it (a small tmpfs, say);
    /// otherwise `state` in the hive's temp dir.
    pub state_dir: Option<&'a Path>,
    /// The process's working directory (`/` as under systemd); `None`
    /// keeps the test's own.
    pub cwd: Option<&'a Path>,
}

impl Default for HiveSpec<'_> {
    fn default() -> Self {
        HiveSpec {
            name: None,
            nats_url: None,
            publish_interval_secs: 1,
            extra: "",
            envs: &[],
            state_dir: None,
            cwd: None,
        }
    }
}

/// A running hive with its own state dir, killed on drop.
pub struct HiveProc {
    pub daemon: Daemon,
    pub state_dir: PathBuf,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl HiveProc {
    pub fn start(spec: HiveSpec<'_>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-hive-")
            .tempdir()
            .unwrap();
        let state_dir = spec
            .state_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.path().join("state"));
        let mut toml = format!(
            "state_dir = {:?}\nhttp_listen = \"127.0.0.1:0\"\npublish_interval_secs = {}\n",
            state_dir.display().to_string(),
            spec.publish_interval_secs
        );
        if let Some(n) = spec.name {
            toml.push_str(&format!("name = {n:?}\n"));
        }
        if !spec.extra.contains("min_running_secs") {
            toml.push_str(&format!("min_running_secs = {TEST_MIN_RUNNING_SECS}\n"));
        }
        // Top-level keys must come before any table.
        let (top, tables) = match spec.extra.find("\n[") {
            Some(i) if !spec.extra.starts_with('[') => spec.extra.split_at(i),
            _ if spec.extra.starts_with('[') => ("", spec.extra),
            _ => (spec.extra, ""),
        };
        toml.push_str(top);
        toml.push('\n');
        if let Some(u) = spec.nats_url {
            toml.push_str(&format!("[nats]\nurl = {u:?}\n"));
        }
        toml.push_str(tables);
        toml.push('\n');
        let config_path = dir.path().join("hive.toml");
        std::fs::write(&config_path, toml).unwrap();
        let log = dir.path().join("hive.log");
        let cfg = config_path.display().to_string();
        let args = ["run", "--config", &cfg];
        let daemon = Daemon::spawn_in(spec.cwd, &hive_bin(), &args, spec.envs, &log);
        HiveProc {
            daemon,
            state_dir,
            config_path,
            _dir: dir,
        }
    }

    /// Base URL of the TCP listener (health and metrics), once the hive
    /// listens.
    pub async fn api(&self) -> String {
        let file = self.state_dir.join("api.addr");
        let addr = crate::wait_until(Duration::from_secs(20), "the hive's api.addr", || {
            let file = file.clone();
            async move {
                std::fs::read_to_string(&file)
                    .ok()
                    .filter(|s| s.ends_with('\n'))
            }
        })
        .await;
        format!("http://{}", addr.trim())
    }

    /// The operator API's socket, once the hive serves on it.
    pub async fn socket(&self) -> PathBuf {
        let path = self.state_dir.join("hive.sock");
        crate::wait_until(Duration::from_secs(20), "the hive's hive.sock", || {
            let path = path.clone();
            async move {
                use std::os::unix::fs::FileTypeExt;
                std::fs::symlink_metadata(&path)
                    .ok()
                    .filter(|m| m.file_type().is_socket())
                    .map(|_| path)
            }
        })
        .await
    }

    /// A client of the operator API on the hive's socket.
    pub async fn job_api(&self) -> crate::jobs::JobApi {
        crate::jobs::JobApi::new(&self.socket().await.display().to_string())
    }

    /// GET `/health/ready`: (status code, parsed body).
    pub async fn ready(&self) -> (u16, serde_json::Value) {
        let url = format!("{}/health/ready", self.api().await);
        let resp = reqwest::get(&url).await.expect("GET /health/ready");
        let code = resp.status().as_u16();
        let body = resp.json().await.expect("status JSON");
        (code, body)
    }

    /// SIGKILL the hive and start it again on the same config and state,
    /// with `envs` as its environment; the log continues in the same file.
    pub fn kill_and_restart(&mut self, envs: &[(&str, &str)]) {
        self.daemon.kill();
        // The new process picks a new port and writes its own address, and
        // binds its own socket: `socket()` waits for the new one.
        let _ = std::fs::remove_file(self.state_dir.join("api.addr"));
        let _ = std::fs::remove_file(self.state_dir.join("hive.sock"));
        let log = self.config_path.with_file_name("hive.log");
        let cfg = self.config_path.display().to_string();
        self.daemon = Daemon::spawn(&hive_bin(), &["run", "--config", &cfg], envs, &log);
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }
}

/// Warning keys in a hive status JSON document.
pub fn warning_keys(status: &serde_json::Value) -> Vec<String> {
    status["warnings"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One hive with no NATS, its operator API, a busybox image for its agents
/// and a guard on its containers: for tests that drive the hive through
/// its socket. Fields drop in order: the hive is killed first, then its
/// containers are removed, then the image they ran (an image still in use
/// by a container would only be untagged and left behind).
pub struct LocalHive {
    pub hive_name: String,
    pub hive: HiveProc,
    pub api: crate::jobs::JobApi,
    _containers: crate::docker::ContainerGuard,
    pub image: crate::docker::TestImage,
}

impl LocalHive {
    /// A hive named after `test`, `extra` appended to its config.
    pub async fn start(test: &str, extra: &str) -> LocalHive {
        Self::start_named(crate::unique_name(test), test, extra).await
    }

    /// The same with the hive's name given (a roster made before it), the
    /// image named after `test`.
    pub async fn start_named(hive_name: String, test: &str, extra: &str) -> LocalHive {
        let containers = crate::docker::ContainerGuard::new(&hive_name);
        let image = crate::docker::TestImage::busybox(test);
        let hive = HiveProc::start(HiveSpec {
            name: Some(&hive_name),
            extra,
            ..Default::default()
        });
        let api = hive.job_api().await;
        LocalHive {
            hive_name,
            hive,
            api,
            image,
            _containers: containers,
        }
    }

    pub fn container(&self, agent: &str) -> String {
        format!("hyperhive.{}.{agent}", self.hive_name)
    }

    /// Names of every container with this hive's label.
    pub fn containers(&self) -> Vec<String> {
        let out = crate::docker::docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=org.hyperhive.hive={}", self.hive_name),
            "--format",
            "{{.Names}}",
        ]);
        out.lines().map(str::to_string).collect()
    }

    pub fn inspect(&self, agent: &str, format: &str) -> String {
        crate::docker::docker(&["inspect", "--format", format, &self.container(agent)])
    }

    pub fn running(&self, agent: &str) -> bool {
        self.inspect(agent, "{{.State.Running}}") == "true"
    }
}
