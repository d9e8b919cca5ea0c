//! Docker resources for tests, built locally (no registry is reachable) and
//! removed when their guard drops. Uses the `docker` CLI: a client this
//! project did not write.

use std::process::Command;

/// Run `docker` with `args`; panic with its stderr on failure.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker CLI (apt-get install docker.io)");
    assert!(
        out.status.success(),
        "docker {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether a Docker daemon answers.
pub fn docker_available() -> bool {
    Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Fail loudly when dockerd is not running: never skip silently.
pub fn require_docker() {
    assert!(
        docker_available(),
        "no Docker daemon answers; start dockerd (.ci/run does) or run `apt-get install docker.io`"
    );
}

/// A busybox image built from `/bin/busybox` (Debian's busybox-static)
/// through `docker import`; removed on drop.
pub struct TestImage {
    pub reference: String,
}

impl TestImage {
    pub fn busybox(tag: &str) -> Self {
        require_docker();
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .expect("busybox-static is not installed (apt-get install busybox-static)");
        let root = tempfile::Builder::new()
            .prefix("hhtest-rootfs-")
            .tempdir()
            .unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(busybox, bin.join("busybox")).unwrap();
        for applet in [
            "sh", "sleep", "echo", "cat", "ls", "true", "env", "touch", "mkdir",
        ] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        let reference = format!("{}:latest", crate::unique_name(tag));
        let tarball = root.path().with_extension("tar");
        let status = Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .arg("-cf")
            .arg(&tarball)
            .arg(".")
            .status()
            .expect("tar");
        assert!(status.success(), "tar of the busybox rootfs failed");
        let status = Command::new("docker")
            .args(["import", "--change", "CMD [\"/bin/sleep\", \"3600\"]"])
            .arg(&tarball)
            .arg(&reference)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("docker import");
        let _ = std::fs::remove_file(&tarball);
        assert!(status.success(), "docker import of busybox rootfs failed");
        TestImage { reference }
    }
}

impl Drop for TestImage {
    fn drop(&mut self) {
        // Containers still using the image would turn `rmi -f` into a mere
        // untag and leave a dangling image behind, whatever order a test
        // dropped its guards in.
        if let Ok(out) = Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("ancestor={}", self.reference),
            ])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.reference])
            .output();
    }
}

/// Removes every container carrying `org.hyperhive.hive=<hive>` on drop, so a
/// failed test leaves nothing behind.
pub struct ContainerGuard {
    pub hive: String,
}

impl ContainerGuard {
    pub fn new(hive: &str) -> Self {
        let g = ContainerGuard {
            hive: hive.to_string(),
        };
        g.remove_all();
        g
    }

    pub fn ids(&self) -> Vec<String> {
        let out = docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=org.hyperhive.hive={}", self.hive),
        ]);
        out.lines().map(str::to_string).collect()
    }

    pub fn remove_all(&self) {
        for id in self.ids() {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// Removes an image by reference on drop: for images a test makes the hive
/// build (their tags are the hive's, not `hhtest-…`).
pub struct ImageGuard {
    pub reference: String,
}

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.reference])
            .output();
    }
}

/// Removes a container by name on drop: for containers a test plants
/// without hyperhive labels, which [`ContainerGuard`] does not see.
pub struct NamedContainerGuard {
    pub name: String,
}

impl Drop for NamedContainerGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.name])
            .output();
    }
}

/// A unix socket at `path` that forwards every connection to the real
/// dockerd socket: a Docker that "comes back" for a hive configured with a
/// socket that did not exist, without stopping the machine's dockerd.
/// Runs on its own thread; stops and removes the socket on drop.
pub struct DockerSocketProxy {
    path: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where the machine's dockerd listens.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

impl DockerSocketProxy {
    pub fn start(path: &std::path::Path) -> Self {
        let _ = std::fs::remove_file(path);
        let listener = std::os::unix::net::UnixListener::bind(path).expect("bind proxy socket");
        listener.set_nonblocking(true).unwrap();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((mut client, _)) = accepted else { continue };
                            tokio::spawn(async move {
                                if let Ok(mut docker) = tokio::net::UnixStream::connect(DOCKER_SOCKET).await {
                                    let _ = tokio::io::copy_bidirectional(&mut client, &mut docker).await;
                                }
                            });
                        }
                    }
                }
            });
        });
        DockerSocketProxy {
            path: path.to_path_buf(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for DockerSocketProxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
