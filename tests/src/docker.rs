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
