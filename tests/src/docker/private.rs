//! A private dockerd for one test: its own socket, data and exec roots and
//! bridge, killed and started again without touching the machine's dockerd.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::docker_cli as cli;

/// A private dockerd for one test, on its own socket, data root and exec
/// root, so a test can kill and restart "Docker" without touching the
/// machine's dockerd.
///
/// It gets its own Linux bridge (`hhtb<pid><n>`, a 10.231.x.0/24 subnet)
/// and no iptables rules. Never `--bridge=none`: a dockerd started that way
/// deletes the machine's `docker0` bridge, which breaks every other
/// container on the host. Stopped, its containers removed, its bridge
/// deleted and its directories unmounted and deleted on drop.
pub struct PrivateDockerd {
    dir: tempfile::TempDir,
    bridge: String,
    child: Option<std::process::Child>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl PrivateDockerd {
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-dockerd-")
            .tempdir()
            .expect("temp dir for dockerd");
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let bridge = format!("hhtb{}{n}", pid % 100_000);
        let subnet = (pid + n) % 250 + 1;
        ip(&["link", "add", &bridge, "type", "bridge"]).expect("a bridge for dockerd");
        let mut d = PrivateDockerd {
            dir,
            bridge,
            child: None,
        };
        ip(&[
            "addr",
            "add",
            &format!("10.231.{subnet}.1/24"),
            "dev",
            &d.bridge,
        ])
        .expect("the bridge's address");
        ip(&["link", "set", &d.bridge, "up"]).expect("the bridge up");
        if let Err(e) = d.try_spawn() {
            panic!("{e}");
        }
        d
    }

    /// `unix://<dir>/docker.sock`, the hive's `docker_host`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.dir.path().join("docker.sock").display())
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        cli::forget(Some(&self.host()));
        let p = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p.join("dockerd.log"))
            .expect("dockerd log");
        // Its own TMPDIR, removed with the rest of `dir`: dockerd and the
        // containerd it starts write there (containerd dumps its stacks to
        // `containerd.<pid>.stacks.log` when asked, which one full run left
        // in the run's shared temporary directory).
        let tmp = p.join("tmp");
        std::fs::create_dir_all(&tmp).expect("the private dockerd's TMPDIR");
        let child = Command::new("dockerd")
            .env("TMPDIR", &tmp)
            .arg("--data-root")
            .arg(p.join("data"))
            .arg("--exec-root")
            .arg(p.join("exec"))
            .arg("--pidfile")
            .arg(p.join("dockerd.pid"))
            .arg("-H")
            .arg(self.host())
            .arg(format!("--bridge={}", self.bridge))
            .args(["--iptables=false", "--ip-masq=false"])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .map_err(|e| format!("could not start dockerd: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .cli(&["version", "--format", "{{.Server.Version}}"])
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "the private dockerd did not answer in 30 s:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Run `docker -H <this> args`; its stdout, or its stderr as the error.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = cli::run_at(Some(&self.host()), args, cli::LIMIT).map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Copy `reference` from the machine's dockerd into this one.
    pub fn load_image(&self, reference: &str) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker save {reference} | docker -H {} load",
                self.host()
            ))
            .stdout(std::process::Stdio::null())
            .status()
            .expect("docker save | load");
        assert!(
            status.success(),
            "loading {reference} into the private dockerd"
        );
    }

    /// SIGKILL this dockerd (its own pid) and the containerd it started
    /// (by the pid in its exec root), and wait until that one is gone:
    /// a restart that finds it half dead times out starting its own.
    pub fn kill(&mut self) {
        let containerd =
            std::fs::read_to_string(self.dir.path().join("exec/containerd/containerd.pid"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(pid) = containerd {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::path::Path::new(&format!("/proc/{pid}")).exists()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Pids of processes still tied to this dockerd's exec root (container
    /// shims and what they run), for the last-resort cleanup.
    fn leftover_pids(&self) -> Vec<String> {
        let marker = self.dir.path().display().to_string();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmd).contains(&marker) {
                pids.push(name);
            }
        }
        pids
    }

    /// Send `sig` (`STOP`, `CONT`) to this dockerd, by its pid.
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([&format!("-{sig}"), &c.id().to_string()])
                .status();
        }
    }

    /// Start it again on the same socket and data.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default()
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        // Killed and not restarted: start it once more to clean up after it
        // (its container shims outlive it).
        if self.child.is_none() {
            let _ = self.try_spawn();
        }
        if self.child.is_some() {
            if let Ok(ids) = self.cli(&["ps", "-aq"]) {
                for id in ids.lines() {
                    let _ = self.cli(&["rm", "-f", id]);
                }
            }
            // SIGTERM: dockerd stops its containerd and unmounts its layers.
            if let Some(mut c) = self.child.take() {
                let _ = Command::new("kill")
                    .args(["-TERM", &c.id().to_string()])
                    .status();
                let _ = c.wait();
            }
        }
        // Whatever survived (a shim after a failed restart) goes by pid,
        // then every mount under the dir, deepest first.
        for pid in self.leftover_pids() {
            let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).output();
            let _ = Command::new("kill").args(["-KILL", &pid]).output();
        }
        let marker = self.dir.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut points: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|m| m.starts_with(&marker))
            .collect();
        points.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in points {
            let _ = Command::new("umount").args(["-l", m]).output();
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
