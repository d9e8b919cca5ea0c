//! Docker resources for tests, built locally (no registry is reachable) and
//! removed when their guard drops. Uses the `docker` CLI: a client this
//! project did not write.

use std::process::Command;
use std::time::Duration;

use crate::docker_cli as cli;

mod private;
pub use private::PrivateDockerd;

/// Run `docker` with `args`; panic with its stderr on failure.
pub fn docker(args: &[&str]) -> String {
    let out = cli::run(args).unwrap_or_else(|e| panic!("{e}"));
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
    cli::run(&["info", "--format", "{{.ServerVersion}}"])
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

/// A root filesystem in a temporary directory: Debian's static busybox and
/// a link for each applet the tests' containers run.
pub fn busybox_rootfs() -> tempfile::TempDir {
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
        "sh", "sleep", "echo", "cat", "ls", "true", "false", "env", "touch", "mkdir",
    ] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    root
}

/// `docker import` the tree at `root` as `reference`, with `sleep 3600` as
/// its command; the new image's id.
pub fn import_rootfs(root: &std::path::Path, reference: &str) -> String {
    let tarball = root.with_extension("tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(root)
        .arg("-cf")
        .arg(&tarball)
        .arg(".")
        .status()
        .expect("tar");
    assert!(
        status.success(),
        "tar of the rootfs {} failed",
        root.display()
    );
    let id = docker(&[
        "import",
        "--change",
        "CMD [\"/bin/sleep\", \"3600\"]",
        &tarball.display().to_string(),
        reference,
    ]);
    let _ = std::fs::remove_file(&tarball);
    id
}

/// A busybox image built from `/bin/busybox` (Debian's busybox-static)
/// through `docker import`; removed on drop.
pub struct TestImage {
    pub reference: String,
}

impl TestImage {
    pub fn busybox(tag: &str) -> Self {
        require_docker();
        let root = busybox_rootfs();
        let reference = format!("{}:latest", crate::unique_name(tag));
        import_rootfs(root.path(), &reference);
        TestImage { reference }
    }
}

impl Drop for TestImage {
    fn drop(&mut self) {
        remove_image(&self.reference);
    }
}

/// A command for a [`TestImage`] agent that Docker kills for memory at once
/// under a [`OOM_MEMORY_MB`] limit: the shell holds about 64 MB in a
/// variable, then sleeps.
pub const OOM_COMMAND: [&str; 3] = [
    "sh",
    "-c",
    "x=$(head -c 64000000 /dev/zero | tr '\\0' a); sleep 100",
];
/// The `memory_mb` an agent running [`OOM_COMMAND`] is declared with.
pub const OOM_MEMORY_MB: u64 = 8;

/// Remove `reference` and every container made from it, by the image's id.
/// Containers still using the image would turn `rmi -f` into a mere untag
/// and leave a dangling image behind, whatever order a test dropped its
/// guards in; and a hive that is still running may make a container from
/// the image again between the two steps (seen with four test threads:
/// a `<none>` image with this harness's `sleep 3600` command). So both
/// steps go by id, and are repeated until the image is gone, at most
/// [`REMOVE_TRIES`] times; whatever is still there then is the leftovers
/// check's to report.
pub fn remove_image(reference: &str) {
    let Some(id) = image_id(reference) else {
        return;
    };
    for _ in 0..REMOVE_TRIES {
        if let Ok(out) = cli::run(&["ps", "-aq", "--filter", &format!("ancestor={id}")]) {
            for c in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = cli::run(&["rm", "-f", c]);
            }
        }
        let _ = cli::run(&["rmi", "-f", &id]);
        if image_id(&id).is_none() || cli::is_hung(None) {
            return;
        }
    }
    eprintln!("image {reference} ({id}) is still there after {REMOVE_TRIES} rounds of removal");
}

/// How many rounds [`remove_image`] gives a racing container.
const REMOVE_TRIES: usize = 20;

/// The id of the local image `reference`, or `None` when Docker says there
/// is none (or its CLI cannot be asked). An inspect that fails for another
/// reason is asked again a few times before it is taken as none: taken at
/// once, it would leave the image behind (one run's leftovers check found
/// an image whose test had passed).
fn image_id(reference: &str) -> Option<String> {
    for _ in 0..IMAGE_ID_TRIES {
        let out = cli::run(&["image", "inspect", "--format", "{{.Id}}", reference]).ok()?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !id.is_empty() {
            return Some(id);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if err.to_lowercase().contains("no such image") {
            return None;
        }
        eprintln!(
            "docker image inspect {reference}: {}; asking again",
            err.trim()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// How many times [`image_id`] asks when the inspect fails for another
/// reason than a missing image.
const IMAGE_ID_TRIES: usize = 5;

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
        let out = docker(&["ps", "-aq", "--filter", &self.filter()]);
        out.lines().map(str::to_string).collect()
    }

    fn filter(&self) -> String {
        format!("label=org.hyperhive.hive={}", self.hive)
    }

    /// Remove them all. Quiet when the CLI fails (no daemon answers): it
    /// runs from `drop`, and a panic there while a test's failure unwinds
    /// aborts the test binary before any other guard has cleaned up.
    pub fn remove_all(&self) {
        let Ok(out) = cli::run(&["ps", "-aq", "--filter", &self.filter()]) else {
            return;
        };
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = cli::run(&["rm", "-f", id]);
        }
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// Removes every container, volume and network carrying
/// `org.hyperhive.hive=<hive>` on drop (the containers first: a volume or
/// network in use cannot go), so a failed test leaves none of them behind.
pub struct ObjectGuard {
    pub hive: String,
}

impl ObjectGuard {
    pub fn new(hive: &str) -> Self {
        let g = ObjectGuard {
            hive: hive.to_string(),
        };
        g.remove_all();
        g
    }

    /// The Docker names of this hive's `kind` (`volume` or `network`).
    /// Empty when the CLI fails: a guard's drop must not panic.
    pub fn names(&self, kind: &str) -> Vec<String> {
        let filter = format!("label=org.hyperhive.hive={}", self.hive);
        let out = cli::run(&[kind, "ls", "--filter", &filter, "--format", "{{.Name}}"]);
        out.map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
    }

    pub fn remove_all(&self) {
        ContainerGuard {
            hive: self.hive.clone(),
        }
        .remove_all();
        for kind in ["volume", "network"] {
            for name in self.names(kind) {
                let _ = cli::run(&[kind, "rm", &name]);
            }
        }
    }
}

impl Drop for ObjectGuard {
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
        let _ = cli::run(&["rmi", "-f", &self.reference]);
    }
}

/// Removes a container by name on drop: for containers a test plants
/// without hyperhive labels, which [`ContainerGuard`] does not see.
pub struct NamedContainerGuard {
    pub name: String,
}

impl Drop for NamedContainerGuard {
    fn drop(&mut self) {
        let _ = cli::run(&["rm", "-f", &self.name]);
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

/// Docker's clock, as an events query's `since` wants it: now, with
/// nanoseconds.
pub fn docker_now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    format!("{}.{:09}", t.as_secs(), t.subsec_nanos())
}

/// Wait until each agent of `want` (agent name → spec hash) of `hive` has
/// had a container started with that spec, reading Docker's own events
/// from `since` on (a start before `since` does not count); panics after
/// `limit`.
pub async fn started_with_specs(
    docker: &bollard::Docker,
    hive: &str,
    since: String,
    want: &std::collections::BTreeMap<String, String>,
    limit: Duration,
) {
    use futures_util::StreamExt;
    use swarm_queue_client::containers::{LABEL_AGENT, LABEL_HIVE, LABEL_SPEC};
    let filters = std::collections::HashMap::from([
        ("type".to_string(), vec!["container".to_string()]),
        ("event".to_string(), vec!["start".to_string()]),
        ("label".to_string(), vec![format!("{LABEL_HIVE}={hive}")]),
    ]);
    let mut events = docker.events(Some(bollard::query_parameters::EventsOptions {
        since: Some(since),
        until: None,
        filters: Some(filters),
    }));
    let mut started = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + limit;
    while started.len() < want.len() {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {} started within {limit:?}",
                    started.len(),
                    want.len()
                )
            })
            .expect("the event stream ended")
            .expect("a Docker event");
        let attrs = event.actor.and_then(|a| a.attributes).unwrap_or_default();
        if let (Some(agent), Some(spec)) = (attrs.get(LABEL_AGENT), attrs.get(LABEL_SPEC)) {
            if want.get(agent) == Some(spec) {
                started.insert(agent.clone());
            }
        }
    }
}
