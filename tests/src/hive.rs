//! A real `hive` process configured by a test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::{hive_bin, Daemon};

/// Settings for one hive under test. `extra` is appended to the TOML file.
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
        let daemon = Daemon::spawn(&hive_bin(), &["run", "--config", &cfg], spec.envs, &log);
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
        let body = resp.json().await.expect("readiness JSON");
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

/// Warning keys in a readiness JSON document.
pub fn warning_keys(readiness: &serde_json::Value) -> Vec<String> {
    readiness["warnings"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
