//! A real Docker registry (Debian's `docker-registry`, distribution 2.8)
//! per test, on a free loopback port, with htpasswd authentication, its own
//! storage dir and config file; killed by its own pid on drop.
//!
//! dockerd treats `127.0.0.0/8` registries as insecure-allowed, so plain
//! HTTP works for pushes and pulls. Images are pushed with the `docker`
//! CLI logged in through a throwaway `DOCKER_CONFIG` dir, so the host's
//! own Docker login is never read or changed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

const INSTALL_HINT: &str = "docker-registry or htpasswd was not found: \
`apt-get install -y docker-registry apache2-utils` (scripts/lib.sh install_deps does it)";

/// An image pushed to a test registry.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// `<host>/<repo>:<tag>`.
    pub reference: String,
    /// `sha256:…`, the manifest digest the registry answered.
    pub digest: String,
}

/// A running registry owned by one test.
pub struct Registry {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    pub user: String,
    pub password: String,
}

impl Registry {
    /// Start a registry that accepts `user` with `password` only.
    pub fn start(user: &str, password: &str) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-registry-")
            .tempdir()
            .expect("temp dir for the registry");
        let out = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .unwrap_or_else(|e| panic!("htpasswd: {e}. {INSTALL_HINT}"));
        assert!(out.status.success(), "htpasswd failed");
        std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
        let mut registry = Registry {
            child: None,
            port: 0,
            dir,
            user: user.to_string(),
            password: password.to_string(),
        };
        // A port found free can be taken before the registry binds it;
        // try a few.
        for _ in 0..5 {
            if registry.spawn() {
                return registry;
            }
        }
        panic!("docker-registry did not start; log:\n{}", registry.log());
    }

    fn spawn(&mut self) -> bool {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let root = self.dir.path();
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  \
             delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    \
             realm: hyperhive-test\n    path: {}\n",
            root.join("data").display(),
            root.join("htpasswd").display()
        );
        let config_path = root.join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(root.join("registry.log")).unwrap();
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start docker-registry: {e}. {INSTALL_HINT}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            if answers_v2(port) {
                self.port = port;
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// `127.0.0.1:<port>`, the registry part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Make a busybox image with `blob_bytes` of random data in its own
    /// layer, push it as `<host>/<repo>:<tag>`, and remove it from the
    /// local dockerd so the next use has to pull it. Returns the reference
    /// and the digest the registry gave it.
    pub fn push_new_image(&self, repo: &str, tag: &str, blob_bytes: usize) -> Pushed {
        let reference = format!("{}/{repo}:{tag}", self.host());
        let root = crate::docker::busybox_rootfs();
        let mut blob = vec![0u8; blob_bytes];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut blob))
            .unwrap();
        std::fs::write(root.path().join("blob"), blob).unwrap();
        let imported = crate::docker::import_rootfs(root.path(), &reference);
        let out = self.docker_logged_in(&["push", &reference]);
        // `1: digest: sha256:… size: 527`
        let digest = out
            .split_whitespace()
            .find(|w| w.starts_with("sha256:"))
            .unwrap_or_else(|| panic!("no digest in the push output:\n{out}"))
            .to_string();
        // The id, not the tag: removes the image and its layer.
        crate::docker::docker(&["rmi", "-f", imported.trim()]);
        Pushed { reference, digest }
    }

    /// Run `docker` with a login to this registry in a throwaway config.
    fn docker_logged_in(&self, args: &[&str]) -> String {
        let config = self.dir.path().join("docker-cli");
        let run = |args: &[&str], stdin: Option<&str>| {
            let mut cmd = Command::new("docker");
            cmd.env("DOCKER_CONFIG", &config).args(args);
            let out = crate::docker_cli::run_command(
                cmd,
                None,
                stdin.map(str::as_bytes),
                crate::docker_cli::LIMIT,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                out.status.success(),
                "docker {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).to_string()
        };
        let host = self.host();
        run(
            &["login", "-u", &self.user, "--password-stdin", &host],
            Some(&self.password),
        );
        run(args, None)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        remove_images_from(&self.host());
    }
}

/// Write a Docker `config.json` at `path` holding `user`:`password` for
/// `host`, as `docker login` would.
pub fn write_auth_file(path: &Path, host: &str, user: &str, password: &str) {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let json = serde_json::json!({ "auths": { host: { "auth": auth } } });
    std::fs::write(path, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
}

/// Remove every local image whose reference starts with `host/`: whatever
/// a test pulled through that address.
pub fn remove_images_from(host: &str) {
    let Ok(out) = crate::docker_cli::run(&[
        "images",
        "--no-trunc",
        "--format",
        "{{.Repository}} {{.ID}}",
    ]) else {
        return;
    };
    let prefix = format!("{host}/");
    // By id: an image whose tag moved away is `<none>` and has no
    // reference left to remove it by.
    for (_, id) in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(repo, _)| repo.starts_with(&prefix))
    {
        let _ = crate::docker_cli::run(&["rmi", "-f", id]);
    }
}

/// A TCP proxy in front of a registry that sends the registry's answers at
/// most `bytes_per_sec`, so a pull lasts long enough for its progress to be
/// seen. Stopped (and its port closed) on drop.
pub struct SlowProxy {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl SlowProxy {
    pub fn start(target_port: u16, bytes_per_sec: usize) -> SlowProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(upstream) = TcpStream::connect(("127.0.0.1", target_port)) else {
                            continue;
                        };
                        let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                        std::thread::spawn(move || copy(c2, u2, None));
                        std::thread::spawn(move || copy(upstream, client, Some(bytes_per_sec)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        SlowProxy {
            port,
            stop,
            accept: Some(accept),
        }
    }

    /// `127.0.0.1:<port>`: use it as the registry host of references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        remove_images_from(&self.host());
    }
}

/// Whether something on `port` answers `GET /v2/` like a registry (200 or
/// 401).
fn answers_v2(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = "GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && (head.ends_with(b"401") || head.ends_with(b"200"))
}

/// Copy until either side closes, pacing to `rate` bytes a second.
fn copy(mut from: TcpStream, mut to: TcpStream, rate: Option<usize>) {
    let chunk = rate.map_or(64 * 1024, |r| (r / 20).max(1));
    let mut buf = vec![0u8; chunk];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if rate.is_some() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}
