//! Daemon processes under test: spawned with their output captured to a
//! file, stopped by their own pid on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Set in the environment of a test binary (`hh-hive`,
/// `hh-swarm-controller`), it prints the checkout it was built from and
/// exits.
pub const WHICH_TREE: &str = "HYPERHIVE_TESTS_WHICH_TREE";

/// Path of the `hive` binary built for this test run.
pub fn hive_bin() -> PathBuf {
    sibling_bin("hh-hive")
}

/// Path of the `swarm-controller` binary built for this test run.
pub fn controller_bin() -> PathBuf {
    sibling_bin("hh-swarm-controller")
}

/// `swarm-controller --config <config> status --json`, parsed; `Err` with
/// its stderr when the verb fails (for example while NATS is down), or
/// when the document is not the one line it writes into a pipe (indented
/// only on a terminal).
pub fn status_json(config: &Path) -> Result<serde_json::Value, String> {
    let out = Command::new(controller_bin())
        .arg("--config")
        .arg(config)
        .args(["status", "--json"])
        .env_remove("HYPERHIVE_NATS_URL")
        .output()
        .map_err(|e| format!("run the controller: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let lines = out.stdout.iter().filter(|b| **b == b'\n').count();
    if lines != 1 || out.stdout.last() != Some(&b'\n') {
        return Err(format!(
            "status --json into a pipe wrote {lines} lines, not one line"
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("status --json is not JSON: {e}"))
}

/// `swarm-controller --config <config> status --json --watch` as a child
/// process (killed on drop), and its stdout's lines: one report a line.
pub fn status_watch(
    config: &Path,
) -> (
    tokio::process::Child,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(controller_bin())
        .arg("--config")
        .arg(config)
        .args(["status", "--json", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn status --watch");
    let stdout = child.stdout.take().expect("a piped stdout");
    (child, tokio::io::BufReader::new(stdout).lines())
}

/// `swarm-controller --config CONFIG serve` on a loopback port the kernel
/// picks, its output in `log`: the daemon and its base URL
/// (`http://127.0.0.1:PORT`, from the `listening on` line) once it listens.
pub async fn serve_controller(config: &Path, log: &Path) -> (Daemon, String) {
    let cfg = config.display().to_string();
    let daemon = Daemon::spawn(
        &controller_bin(),
        &["--config", &cfg, "serve", "--http-listen", "127.0.0.1:0"],
        &[],
        log,
    );
    let url = crate::wait_until(SERVE_LISTENS_WITHIN, "the controller to listen", || async {
        let text = std::fs::read_to_string(log).ok()?;
        let line = text.lines().find(|l| l.starts_with("listening on "))?;
        Some(
            line.trim_start_matches("listening on ")
                .trim_end_matches('/')
                .to_string(),
        )
    })
    .await;
    (daemon, url)
}

/// `serve` reads both buckets before it listens: at 10,000 hives that
/// takes a few seconds on a loaded machine.
const SERVE_LISTENS_WITHIN: std::time::Duration = std::time::Duration::from_secs(120);

/// A daemon started by a test. Its stdout and stderr go to `log_path`.
pub struct Daemon {
    child: Option<Child>,
    bin: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log_path: PathBuf,
    /// The working directory; `None` keeps the test's own.
    cwd: Option<PathBuf>,
}

impl Daemon {
    pub fn spawn(bin: &Path, args: &[&str], envs: &[(&str, &str)], log_path: &Path) -> Self {
        Self::spawn_in(None, bin, args, envs, log_path)
    }

    /// [`Daemon::spawn`] with `cwd` as the working directory (kept on a
    /// restart): a daemon started by systemd runs in `/`.
    pub fn spawn_in(
        cwd: Option<&Path>,
        bin: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        log_path: &Path,
    ) -> Self {
        let mut d = Daemon {
            child: None,
            bin: bin.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log_path: log_path.to_path_buf(),
            cwd: cwd.map(Path::to_path_buf),
        };
        d.start();
        d
    }

    /// (Re)start with the same arguments, appending to the same log.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "daemon already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open daemon log");
        let err = log.try_clone().expect("clone log handle");
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.args)
            .env_remove("HYPERHIVE_HIVE_NAME")
            .env_remove("HYPERHIVE_NATS_URL")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        self.child = Some(cmd.spawn().expect("spawn daemon"));
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether the process is still alive (it has not exited by itself).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send a signal to this daemon's own pid.
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let status = Command::new("kill")
                .args([&format!("-{sig}"), &pid.to_string()])
                .status()
                .expect("run kill");
            assert!(status.success(), "kill -{sig} {pid} failed");
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        self.signal("TERM");
        let mut c = self.child.take()?;
        c.wait().ok().and_then(|s| s.code())
    }

    /// Wait for the process to exit by itself.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        c.wait().ok().and_then(|s| s.code())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- log of {} ---\n{}",
                self.bin.display(),
                self.log()
                    .lines()
                    .rev()
                    .take(80)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

/// The test crate's own binaries (`src/bin/hh-*.rs`) are thin wrappers over
/// the same library entry points as `hive` and `swarm-controller`. Cargo
/// builds them before it runs this crate's integration tests, into the
/// `deps/` folder the test executable runs from (as `hh_hive-<hash>`) and
/// links them up one level (as `hh-hive`).
///
/// Several checkouts of this workspace may share one target dir (the
/// project's rule on a small machine). The linked-up `hh-hive` is then
/// whichever checkout built last, even while this test runs; so the path
/// taken is the newest `deps/hh_hive-*` that says it was built from this
/// very checkout (asked with [`WHICH_TREE`]), and it stays that path for
/// the whole test process.
fn sibling_bin(name: &str) -> PathBuf {
    static FOUND: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = found.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("current test executable");
    let deps = exe
        .parent()
        .expect("test executable lives in target/<profile>/deps");
    let stem = format!("{}-", name.replace('-', "_"));
    let mut candidates: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(deps)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| {
                    let file = e.file_name().to_string_lossy().to_string();
                    file.starts_with(&stem) && !file.contains('.')
                })
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    let here = env!("CARGO_MANIFEST_DIR");
    let bin = candidates
        .into_iter()
        .map(|(_, path)| path)
        .find(|path| built_from(path).as_deref() == Some(here))
        .unwrap_or_else(|| {
            panic!(
                "no {name} built from {here} in {}; run the tests with `cargo test -p hyperhive-tests`, which builds it",
                deps.display()
            )
        });
    found.push((name.to_string(), bin.clone()));
    bin
}

fn built_from(bin: &Path) -> Option<String> {
    let out = Command::new(bin).env(WHICH_TREE, "1").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The script of a talker agent: it prints `ready`, then each text the
/// test drops into its state dir as `say` ([`say_markers`]).
pub const TALKER: &str = "echo ready; while :; do if [ -e /state/say ]; then cat /state/say; \
                          rm /state/say; fi; sleep 0.05; done";

/// Drop five markers into a talker's `say` file (in its state dir
/// `agent_dir`) and read each from a follow's `lines`; the slowest, from
/// the file's appearance to the line read. `within` bounds each wait so a
/// lost line fails the test rather than hanging it; it is not a timing
/// claim (the logs bench measures the latency, against `docker logs
/// --follow` in the same run).
pub async fn say_markers(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    agent_dir: &std::path::Path,
    within: std::time::Duration,
) -> std::time::Duration {
    let all = marker_latencies(lines, agent_dir, 5, within).await;
    all.into_iter().max().unwrap_or_default()
}

/// Have a [`TALKER`] print `line` once: it appears whole in its `say` file
/// (in its state dir `agent_dir`) at the instant returned.
pub fn say_line(agent_dir: &std::path::Path, line: &str) -> std::time::Instant {
    let say = agent_dir.join("say");
    let tmp = say.with_extension("tmp");
    std::fs::write(&tmp, format!("{line}\n")).unwrap();
    let at = std::time::Instant::now();
    std::fs::rename(&tmp, &say).unwrap();
    at
}

/// [`say_markers`] with `count` markers: each one's latency, in order.
pub async fn marker_latencies(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    agent_dir: &std::path::Path,
    count: usize,
    within: std::time::Duration,
) -> Vec<std::time::Duration> {
    let say = agent_dir.join("say");
    let mut took = Vec::with_capacity(count);
    for i in 0..count {
        let marker = format!("marker {i} {}", crate::unique_name("m"));
        let at = say_line(agent_dir, &marker);
        let got = tokio::time::timeout(within, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{marker:?} not shown within {within:?}"))
            .unwrap();
        took.push(at.elapsed());
        assert_eq!(got.as_deref(), Some(marker.as_str()));
        // The talker deletes the file after printing it: the next marker
        // dropped before that would be deleted unprinted.
        let gone = async {
            while say.exists() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(within, gone)
            .await
            .unwrap_or_else(|_| panic!("the talker did not take {marker:?} within {within:?}"));
    }
    took
}
