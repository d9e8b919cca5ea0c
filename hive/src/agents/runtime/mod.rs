//! # The container runtime
//!
//! The job worker talks to containers only through [`ContainerRuntime`], a
//! narrow trait: ping, image exists, pull, build, create, start, stop,
//! remove, inspect, list. [`DockerRuntime`] implements it over `bollard`;
//! unit tests use an in-memory fake. Nothing else in the hive calls Docker.
//!
//! **Ownership.** A runtime is made for one hive and enforces, inside every
//! method that changes a container, that the container carries that hive's
//! `org.hyperhive.hive` label: it inspects first and refuses a foreign
//! container with [`RuntimeError::Foreign`]. Several hives can share a
//! dockerd, and an operator's own containers may sit next to ours; nothing
//! the hive decides can reach them, whatever the bug upstream.
//!
//! **Errors** are typed and say whether trying again can help
//! ([`RuntimeError::is_transient`]): Docker unreachable, a timeout or a
//! registry hiccup is transient; a missing image, a failed build or a
//! foreign container is not.
//!
//! The volumes and networks agents name are the hive's own Docker objects
//! too ([`objects`]): made with its labels, refused without them.
//!
//! Build contexts ([`context`]) are a directory inside an allowed root
//! ([`confine`]) or a git checkout the hive makes with the `git` CLI;
//! either is streamed to Docker as a tar under a size cap.
//! Pulls send the registry logins of the hive's `registry_auth_file`
//! ([`registry_auth`]).

pub mod admit;
pub mod confine;
pub mod context;
mod docker;
#[cfg(test)]
pub mod fake;
pub mod logs;
pub mod objects;
pub mod pull_progress;
pub mod registry_auth;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use swarm_queue_client::containers::{
    container_name, LABEL_AGENT, LABEL_HIVE, LABEL_MANAGED, LABEL_SPEC, STATE_MOUNT,
};
use swarm_queue_client::{AgentName, AgentSpec, HiveName};

pub use docker::{
    docker_time_ms, log_config, ContainerEvent, DockerRuntime, EventAction, RunState,
};

/// Receives progress lines of a pull or build, as they come.
pub type ProgressFn<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A host path mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

impl Bind {
    /// Docker's `host:container[:ro]` form.
    pub fn to_docker(&self) -> String {
        let ro = if self.read_only { ":ro" } else { "" };
        format!("{}:{}{ro}", self.host.display(), self.container)
    }
}

/// Docker's `security_opt` on every container the hive creates: the kernel's
/// `no_new_privs` on each of its processes, so none gains privileges through
/// a setuid binary or file capabilities.
pub const NO_NEW_PRIVILEGES: &str = "no-new-privileges:true";

/// The largest build context sent to Docker, unless configured.
pub const DEFAULT_BUILD_CONTEXT_MAX_BYTES: u64 = 1 << 30;
/// The most processes and threads one agent's container may hold, unless
/// configured: a busy agent (a runtime's thread pool, a few child
/// processes such as git or a shell) uses tens to a few hundred, and a fork
/// bomb stops here instead of taking the host's process table.
pub const DEFAULT_CONTAINER_PIDS_LIMIT: u64 = 512;
/// Docker's `json-file` log of each agent container is capped at this many
/// MB (10^6 bytes, as Docker counts `max-size`) a file, unless configured
/// (Docker's own default never rotates).
pub const DEFAULT_CONTAINER_LOG_MAX_MB: u64 = 10;
/// How many such log files are kept, the oldest dropped, unless configured.
pub const DEFAULT_CONTAINER_LOG_FILES: u64 = 3;
/// What the hive config sets on every container it creates, outside the
/// agent's spec and its hash: a change (or an upgrade to a hive that sets
/// something new here) reaches each container at its next create, and
/// rebuilds none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    /// Docker's pids limit (`container_pids_limit`).
    pub pids: i64,
    /// Docker's `json-file` log: at most this many MB (10^6 bytes) a file
    /// (`container_log_max_mb`) …
    pub log_max_mb: u64,
    /// … and this many files (`container_log_files`), the oldest dropped.
    pub log_files: u64,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            pids: DEFAULT_CONTAINER_PIDS_LIMIT as i64,
            log_max_mb: DEFAULT_CONTAINER_LOG_MAX_MB,
            log_files: DEFAULT_CONTAINER_LOG_FILES,
        }
    }
}

impl HostLimits {
    /// Docker's log driver and its options: `json-file`, size-capped and
    /// rotated, whatever the daemon's own default driver is.
    pub fn log_driver(&self) -> (&'static str, BTreeMap<String, String>) {
        let options = BTreeMap::from([
            ("max-size".to_string(), format!("{}m", self.log_max_mb)),
            ("max-file".to_string(), self.log_files.to_string()),
        ]);
        ("json-file", options)
    }
}

/// What one agent's container is made from (see [`ContainerSpec::for_agent`]).
#[derive(Debug, Clone)]
pub struct AgentContainer<'a> {
    pub hive: &'a HiveName,
    pub agent: &'a AgentName,
    pub spec: &'a AgentSpec,
    /// Already resolved: pulled or built.
    pub image: &'a str,
    /// The agent's state directory on the host, mounted at `/state`.
    pub state_dir: &'a Path,
    /// The knowledge directory, read-only, once the hive has one.
    pub extra_binds: Vec<Bind>,
    /// The hive config's limits on every container.
    pub limits: HostLimits,
    /// The spec's ports, admitted by the hive config ([`admit::ports`]).
    pub ports: Vec<admit::PublishedPort>,
    /// The spec's host-path volumes, each confined to the hive config's
    /// `volume_roots`.
    pub volume_binds: Vec<Bind>,
}

/// A named Docker volume mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedVolume {
    /// `hyperhive.<hive>.<name>` ([`admit::object_name`]).
    pub docker_name: String,
    pub target: String,
    pub read_only: bool,
}

/// One image build: the directory `context` (with `dockerfile` inside it),
/// tagged `tag` when done.
#[derive(Debug, Clone, Copy)]
pub struct BuildRequest<'a> {
    pub context: &'a Path,
    pub dockerfile: &'a str,
    pub tag: &'a str,
    /// Rebuild every step instead of reusing cached layers (a relock).
    pub no_cache: bool,
}

/// Everything needed to create one agent's container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    /// `hyperhive.<hive>.<agent>`.
    pub name: String,
    pub image: String,
    /// The four `org.hyperhive.*` labels.
    pub labels: BTreeMap<String, String>,
    /// `KEY=value` pairs.
    pub env: Vec<String>,
    /// Replaces the image's command when set.
    pub command: Option<Vec<String>>,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    /// The state directory at `/state`, then any extra mounts.
    pub binds: Vec<Bind>,
    /// The spec's health check; `None` leaves the image's own.
    pub health: Option<swarm_queue_client::HealthSpec>,
    /// The hive's pids limit and log cap ([`HostLimits`]).
    pub limits: HostLimits,
    /// Run as this user instead of the image's.
    pub user: Option<String>,
    /// Docker's stop timeout on the container: every stop of it (a power
    /// down, a rebuild, a retire) waits this long before SIGKILL.
    pub stop_grace_secs: Option<u64>,
    pub ports: Vec<admit::PublishedPort>,
    /// `bridge`, `none` or the hive's own network; `None` is Docker's
    /// default bridge.
    pub network: Option<String>,
    pub volumes: Vec<NamedVolume>,
}

impl ContainerSpec {
    /// The container for one agent: its spec's env, command and limits on
    /// the resolved image, its state directory bind-mounted at `/state`,
    /// then the extra mounts.
    pub fn for_agent(input: AgentContainer<'_>) -> ContainerSpec {
        let AgentContainer {
            hive,
            agent,
            spec,
            image,
            state_dir,
            extra_binds,
            limits,
            ports,
            volume_binds,
        } = input;
        let labels = BTreeMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_HIVE.to_string(), hive.to_string()),
            (LABEL_AGENT.to_string(), agent.to_string()),
            (LABEL_SPEC.to_string(), spec.spec_hash()),
        ]);
        let mut binds = vec![Bind {
            host: state_dir.to_path_buf(),
            container: STATE_MOUNT.to_string(),
            read_only: false,
        }];
        binds.extend(extra_binds);
        binds.extend(volume_binds);
        let volumes = spec
            .volumes
            .iter()
            .filter_map(|v| {
                Some(NamedVolume {
                    docker_name: admit::object_name(hive, v.name.as_ref()?.as_str()),
                    target: v.target.clone(),
                    read_only: !v.writable(),
                })
            })
            .collect();
        ContainerSpec {
            name: container_name(hive, agent),
            image: image.to_string(),
            labels,
            env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            command: spec.command.clone(),
            memory_bytes: spec
                .memory_mb
                .map(|mb| mb.saturating_mul(1024 * 1024).min(i64::MAX as u64) as i64),
            nano_cpus: spec.cpus.map(|c| (c * 1e9).round() as i64),
            binds,
            health: spec.health.clone(),
            limits,
            user: spec.user.clone(),
            stop_grace_secs: spec.stop_grace_secs,
            ports,
            network: admit::network_name(hive, spec),
            volumes,
        }
    }
}

/// What the runtime knows about one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    /// Without Docker's leading `/`.
    pub name: String,
    pub image: String,
    /// The id (`sha256:…`) of the image the container was created from:
    /// what it runs, whatever the reference's tag points to now.
    pub image_id: String,
    pub running: bool,
    /// Docker's word for the state: created, running, exited, …
    pub status: String,
    /// Docker's health status (`starting`, `healthy`, `unhealthy`);
    /// `None` without a health check.
    pub health: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The container's own stop timeout (its spec's `stop_grace_secs`),
    /// where Docker said it (an inspect does; a list does not).
    pub stop_grace_secs: Option<u64>,
    /// How many health checks in a row have failed (an inspect says; a
    /// list does not).
    pub failing_streak: Option<u64>,
}

impl ContainerInfo {
    /// The hive named in the ownership label, if any.
    pub fn owner(&self) -> Option<&str> {
        self.labels.get(LABEL_HIVE).map(String::as_str)
    }

    pub fn agent(&self) -> Option<&str> {
        self.labels.get(LABEL_AGENT).map(String::as_str)
    }

    /// The spec hash the container was created from.
    pub fn spec_hash(&self) -> Option<&str> {
        self.labels.get(LABEL_SPEC).map(String::as_str)
    }
}

/// Refuse a container that does not carry `hive`'s label. Every method
/// that changes a container calls this on a fresh inspect.
pub fn check_owner(hive: &HiveName, info: &ContainerInfo) -> Result<(), RuntimeError> {
    if info.owner() == Some(hive.as_str()) {
        Ok(())
    } else {
        Err(RuntimeError::Foreign {
            container: info.name.clone(),
            hive: hive.clone(),
            owner: info.owner().map(str::to_string),
        })
    }
}

/// A runtime failure, with what was being done to what.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "Docker is unreachable at {host}: {reason}. Check that dockerd is running and that \
         the hive may use that socket (docker_host in the hive config)"
    )]
    Unreachable { host: String, reason: String },
    #[error("Docker at {host} did not answer {op} {target} within {secs} s")]
    Timeout {
        host: String,
        op: &'static str,
        target: String,
        secs: u64,
    },
    #[error(
        "container {container} {}, not hive {hive}'s; this hive never touches it. \
         Rename or remove it yourself if the name is needed",
        match owner {
            Some(o) => format!("belongs to hive {o:?}"),
            None => "has no org.hyperhive.hive label".to_string(),
        }
    )]
    Foreign {
        container: String,
        hive: HiveName,
        owner: Option<String>,
    },
    #[error(
        "{kind} {name} {}, not hive {hive}'s; this hive never touches it. \
         Rename or remove it yourself if the name is needed",
        match owner {
            Some(o) => format!("belongs to hive {o:?}"),
            None => "has no org.hyperhive.hive label".to_string(),
        }
    )]
    ForeignObject {
        kind: objects::ObjectKind,
        name: String,
        hive: HiveName,
        owner: Option<String>,
    },
    #[error("container {container} does not exist")]
    NoSuchContainer { container: String },
    #[error("image {image} is not available: {message}")]
    NoSuchImage { image: String, message: String },
    #[error("container name {name} is already taken: {message}")]
    NameTaken { name: String, message: String },
    #[error("the pull of {image} failed: {message}")]
    Pull { image: String, message: String },
    #[error("registry {registry} refused the pull of {image}: {message}; {login}")]
    RegistryDenied {
        registry: String,
        image: String,
        message: String,
        /// Which login was sent, never the password.
        login: String,
    },
    #[error(transparent)]
    RegistryLogins(#[from] crate::agents::runtime::registry_auth::RegistryAuthError),
    #[error("the build of {tag} failed: {message}")]
    Build { tag: String, message: String },
    #[error("build context {context}: {reason}")]
    Context { context: String, reason: String },
    #[error(
        "build context {context} is larger than build_context_max_bytes = {max_bytes} bytes; \
         make the context smaller or raise build_context_max_bytes in the hive config"
    )]
    ContextTooLarge { context: String, max_bytes: u64 },
    #[error("agent {agent}: {what} is refused; {rule}")]
    Refused {
        agent: AgentName,
        what: String,
        rule: String,
    },
    #[error("`git {args}` failed: {reason}")]
    Git { args: String, reason: String },
    #[error("Docker {op} {target} failed: {source}")]
    Docker {
        op: &'static str,
        target: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        transient: bool,
    },
}

impl RuntimeError {
    /// Whether trying the same thing again later can succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            RuntimeError::Unreachable { .. }
            | RuntimeError::Timeout { .. }
            | RuntimeError::Pull { .. }
            // The file may be being rewritten; the next read sees it whole.
            | RuntimeError::RegistryLogins(_) => true,
            RuntimeError::Docker { transient, .. } => *transient,
            // A git fetch fails on a network hiccup as often as on a bad ref.
            RuntimeError::Git { .. } => true,
            _ => false,
        }
    }
}

/// The operations the job worker needs from a container engine. Methods
/// that change a container refuse one without this runtime's hive label.
pub trait ContainerRuntime: objects::ObjectRuntime + Send + Sync + 'static {
    /// The hive whose containers this runtime may touch.
    fn hive(&self) -> &HiveName;

    /// Is the engine there at all.
    fn ping(&self) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    fn image_exists(&self, image: &str) -> impl Future<Output = Result<bool, RuntimeError>> + Send;

    /// Pull `image` (a missing tag means `latest`), reporting progress.
    fn pull(
        &self,
        image: &str,
        progress: ProgressFn<'_>,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Build `request`'s context and tag the result.
    fn build(
        &self,
        request: &BuildRequest<'_>,
        progress: ProgressFn<'_>,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Create (not start) a container; returns its id.
    fn create(
        &self,
        spec: &ContainerSpec,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;

    /// Start an owned container; no-op when it runs.
    fn start(&self, container: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Stop an owned container, killing it after `timeout`; no-op when it
    /// does not run.
    fn stop(
        &self,
        container: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Remove an owned container (forcefully); no-op when it is gone.
    fn remove(&self, container: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Any container, by name or id, owned or not (so callers can report a
    /// foreign one); `None` when there is none.
    fn inspect(
        &self,
        container: &str,
    ) -> impl Future<Output = Result<Option<ContainerInfo>, RuntimeError>> + Send;

    /// The repo digest (`sha256:…`, what a registry calls the manifest)
    /// of the local image `image_id`; `None` for an image that came from no
    /// registry (a local build).
    fn image_digest(
        &self,
        image_id: &str,
    ) -> impl Future<Output = Result<Option<String>, RuntimeError>> + Send;

    /// The id (`sha256:…`) of the local image `image`, if it is there.
    fn image_id(
        &self,
        image: &str,
    ) -> impl Future<Output = Result<Option<String>, RuntimeError>> + Send;

    /// Remove the local image `image_id` and every tag of it, unless a
    /// container uses it (never forced): `Ok(false)` when it is in use.
    /// Gone already counts as removed.
    fn remove_image(
        &self,
        image_id: &str,
    ) -> impl Future<Output = Result<bool, RuntimeError>> + Send;

    /// Every container carrying this hive's label, running or not.
    fn list(&self) -> impl Future<Output = Result<Vec<ContainerInfo>, RuntimeError>> + Send;

    /// The lines of the owned container `container` as `request` asks, read
    /// as the stream is polled. With `request.previous`: the lines written
    /// before its current run started (all of them when it ended and was
    /// not started again), or `None` when it has never ended.
    fn logs(
        &self,
        container: &str,
        request: &logs::LogRequest,
    ) -> impl Future<Output = Result<Option<logs::LogStream>, RuntimeError>> + Send;

    /// The containers carrying this hive's label and `agent`'s. A runtime
    /// that can filter does so: a hive of many agents otherwise lists all
    /// of them for each agent's stop and remove.
    fn list_agent(
        &self,
        agent: &AgentName,
    ) -> impl Future<Output = Result<Vec<ContainerInfo>, RuntimeError>> + Send {
        async move {
            let all = self.list().await?;
            Ok(all
                .into_iter()
                .filter(|c| c.agent() == Some(agent.as_str()))
                .collect())
        }
    }
}

/// The health status in the text `docker ps` shows for a container
/// (`Up 5 seconds (health: starting)`, `Up 2 minutes (unhealthy)`).
pub fn health_of_status_text(text: &str) -> Option<String> {
    let inner = text.rsplit_once('(')?.1.strip_suffix(')')?;
    let word = inner.strip_prefix("health: ").unwrap_or(inner);
    matches!(word, "starting" | "healthy" | "unhealthy").then(|| word.to_string())
}

/// Split an image reference into repository and tag for a pull; a digest
/// reference is passed whole, a missing tag means `latest` (Docker would
/// otherwise pull every tag).
pub fn split_image_ref(image: &str) -> (String, Option<String>) {
    if image.contains('@') {
        return (image.to_string(), None);
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => {
            let at = last_slash + i;
            (image[..at].to_string(), Some(image[at + 1..].to_string()))
        }
        None => (image.to_string(), Some("latest".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_read_from_the_status_text() {
        let cases = [
            ("Up 5 seconds (health: starting)", Some("starting")),
            ("Up 2 minutes (healthy)", Some("healthy")),
            ("Up 2 minutes (unhealthy)", Some("unhealthy")),
            ("Up 2 minutes", None),
            ("Exited (1) 3 seconds ago", None),
            ("Created", None),
        ];
        for (text, want) in cases {
            assert_eq!(health_of_status_text(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn image_refs_split_into_repo_and_tag() {
        let cases = [
            ("busybox", ("busybox", Some("latest"))),
            ("busybox:1.36", ("busybox", Some("1.36"))),
            ("localhost:5000/x/y", ("localhost:5000/x/y", Some("latest"))),
            ("localhost:5000/x/y:2", ("localhost:5000/x/y", Some("2"))),
            ("x@sha256:abcd", ("x@sha256:abcd", None)),
        ];
        for (input, (repo, tag)) in cases {
            let (r, t) = split_image_ref(input);
            assert_eq!((r.as_str(), t.as_deref()), (repo, tag), "{input}");
        }
    }

    #[test]
    fn container_spec_carries_labels_mounts_env_and_limits() {
        let hive = HiveName::new("alpha").unwrap();
        let agent = AgentName::new("mail-bot").unwrap();
        let spec = AgentSpec {
            image: Some("local/mail:1".into()),
            command: Some(vec!["mail".into(), "--serve".into()]),
            env: [("LOG".to_string(), "info".to_string())].into(),
            memory_mb: Some(256),
            cpus: Some(0.5),
            ..Default::default()
        };
        let knowledge = Bind {
            host: "/var/lib/hive/knowledge".into(),
            container: "/knowledge".into(),
            read_only: true,
        };
        let input = AgentContainer {
            hive: &hive,
            agent: &agent,
            spec: &spec,
            image: "local/mail:1",
            state_dir: Path::new("/var/lib/hive/agents/mail-bot"),
            extra_binds: vec![knowledge],
            limits: HostLimits::default(),
            ports: vec![],
            volume_binds: vec![],
        };
        let c = ContainerSpec::for_agent(input.clone());
        assert_eq!(c.name, "hyperhive.alpha.mail-bot");
        assert_eq!(c.labels["org.hyperhive.managed"], "true");
        assert_eq!(c.labels["org.hyperhive.hive"], "alpha");
        assert_eq!(c.labels["org.hyperhive.agent"], "mail-bot");
        assert_eq!(c.labels["org.hyperhive.spec"], spec.spec_hash());
        assert_eq!(c.env, vec!["LOG=info"]);
        assert_eq!(c.memory_bytes, Some(256 * 1024 * 1024));
        assert_eq!(c.nano_cpus, Some(500_000_000));
        let binds: Vec<String> = c.binds.iter().map(Bind::to_docker).collect();
        assert_eq!(
            binds,
            vec![
                "/var/lib/hive/agents/mail-bot:/state",
                "/var/lib/hive/knowledge:/knowledge:ro"
            ]
        );
        // The pids limit and the log cap are the hive's, outside the spec
        // hash: changing them (or upgrading to a hive that sets them)
        // rebuilds no container.
        assert_eq!(c.limits.pids, 512);
        let (driver, options) = c.limits.log_driver();
        assert_eq!(driver, "json-file");
        assert_eq!(options["max-size"], "10m");
        assert_eq!(options["max-file"], "3");
        let other = ContainerSpec::for_agent(AgentContainer {
            limits: HostLimits {
                pids: 64,
                log_max_mb: 1,
                log_files: 1,
            },
            ..input
        });
        assert_eq!(other.labels, c.labels);
    }

    #[test]
    fn ownership_is_the_hive_label_and_nothing_else() {
        let hive = HiveName::new("alpha").unwrap();
        let info = |owner: Option<&str>| ContainerInfo {
            id: "c1".into(),
            name: "hyperhive.alpha.x".into(),
            image: "i".into(),
            image_id: "sha256:i".into(),
            running: true,
            status: "running".into(),
            health: None,
            stop_grace_secs: None,
            failing_streak: None,
            labels: owner
                .map(|o| BTreeMap::from([(LABEL_HIVE.to_string(), o.to_string())]))
                .unwrap_or_default(),
        };
        assert!(check_owner(&hive, &info(Some("alpha"))).is_ok());
        let err = check_owner(&hive, &info(Some("beta"))).unwrap_err();
        assert!(
            err.to_string().contains("belongs to hive \"beta\""),
            "{err}"
        );
        assert!(!err.is_transient());
        let err = check_owner(&hive, &info(None)).unwrap_err();
        assert!(
            err.to_string()
                .contains("hyperhive.alpha.x has no org.hyperhive.hive label"),
            "{err}"
        );
    }
}
