//! The hive's configuration: a TOML file, overridden by environment
//! (`HYPERHIVE_HIVE_NAME`, `HYPERHIVE_NATS_URL`), overridden by flags.
//!
//! Loading never connects to anything. Every problem is collected, so
//! `hive --check-config` prints all of them at once, and each names the
//! field and the bad value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use swarm_queue_client::{HiveName, NatsConfig};

use crate::agents::runtime::admit::HostPolicy;

pub use crate::agents::runtime::{
    DEFAULT_BUILD_CONTEXT_MAX_BYTES, DEFAULT_CONTAINER_LOG_FILES, DEFAULT_CONTAINER_LOG_MAX_MB,
    DEFAULT_CONTAINER_PIDS_LIMIT,
};

mod host;

pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:7390";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/hyperhive";
/// The operator API's socket when the state dir is the default one.
pub const DEFAULT_API_SOCKET: &str = "/var/lib/hyperhive/hive.sock";
/// The bounds of `container_pids_limit`: below 16 even an init, a shell
/// and the agent run short; above 65,536 the limit no longer protects a
/// host that runs many agents.
pub const CONTAINER_PIDS_LIMIT_RANGE: std::ops::RangeInclusive<u64> = 16..=65_536;
/// The bounds of `container_log_max_mb`.
pub const CONTAINER_LOG_MAX_MB_RANGE: std::ops::RangeInclusive<u64> = 1..=1024;
/// The bounds of `container_log_files`.
pub const CONTAINER_LOG_FILES_RANGE: std::ops::RangeInclusive<u64> = 1..=100;

/// The file as written. Every field is optional; unknown keys are refused so
/// a typo is an error, not a silently ignored setting.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub name: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub http_listen: Option<String>,
    pub http_allowed_hosts: Vec<String>,
    pub publish_interval_secs: Option<u64>,
    pub reconcile_interval_secs: Option<u64>,
    pub orphan_grace_secs: Option<u64>,
    pub agent_retry_base_secs: Option<u64>,
    pub jitter_percent: Option<u64>,
    pub crash_backoff_first_secs: Option<u64>,
    pub crash_backoff_max_secs: Option<u64>,
    pub crash_backoff_reset_secs: Option<u64>,
    pub min_running_secs: Option<u64>,
    pub trusted_controller_xkeys: Vec<String>,
    pub xkey_seed_file: Option<PathBuf>,
    pub knowledge_repo: Option<String>,
    pub docker_host: Option<String>,
    pub api_socket: Option<PathBuf>,
    pub api_socket_group: Option<String>,
    pub api_token_file: Option<PathBuf>,
    pub build_roots: Vec<PathBuf>,
    pub build_context_max_bytes: Option<u64>,
    pub container_pids_limit: Option<u64>,
    pub container_log_max_mb: Option<u64>,
    pub container_log_files: Option<u64>,
    pub port_addresses: Vec<String>,
    pub volume_roots: Vec<PathBuf>,
    pub registry_auth_file: Option<PathBuf>,
    pub nats: NatsConfig,
}

/// Values given on the command line; each wins over the file and the
/// environment.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub name: Option<String>,
    pub nats_url: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub http_listen: Option<String>,
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct HiveConfig {
    /// `None` when no name was given: the hive still runs locally, without
    /// publishing, and says so in a warning.
    pub name: Option<HiveName>,
    pub state_dir: PathBuf,
    /// The probes and metrics (and the API only with remote writes on);
    /// loopback only.
    pub http_listen: SocketAddr,
    /// Names besides IP literals, `localhost` and this machine's own name
    /// that the TCP listener answers to (see
    /// [`swarm_queue_client::http_host`]): for scrapers and proxies that
    /// reach it by a DNS name.
    pub http_allowed_hosts: Vec<String>,
    pub publish_interval: Duration,
    pub reconcile_interval: Duration,
    pub orphan_grace: Duration,
    /// The first retry of an agent whose job failed comes this long after
    /// the failure; each further one twice as late, capped at an hour.
    pub agent_retry_base: Duration,
    /// How far each periodic read and status put is spread around its
    /// interval, in percent, and whether reconnects are drawn below their
    /// backoff (0: neither); see [`swarm_queue_client::jitter`].
    pub jitter_percent: u8,
    /// When an agent that exits is started again, and how long it must
    /// run to count as up (see [`crate::agents::crashloop`]).
    pub crash: crate::agents::crashloop::CrashPolicy,
    pub trusted_controller_xkeys: Vec<String>,
    pub xkey_seed_file: PathBuf,
    pub knowledge_repo: Option<String>,
    pub docker_host: Option<String>,
    /// The operator API's Unix socket (`<state>/hive.sock` by default).
    pub api_socket: PathBuf,
    /// The group the socket is given (mode 0660); `None` keeps the
    /// daemon's own group.
    pub api_socket_group: Option<String>,
    /// Set only when the operator enabled remote writes: the TCP listener
    /// then serves the API to requests that carry this bearer token.
    pub api_token: Option<ApiToken>,
    /// Directories a build context may name, besides the knowledge
    /// checkout and the hive's own clones under `<state>/builds`.
    pub build_roots: Vec<PathBuf>,
    /// The largest build context streamed to Docker.
    pub build_context_max_bytes: u64,
    /// Docker's pids limit and log cap on every container the hive
    /// creates.
    pub container_limits: crate::agents::runtime::HostLimits,
    /// What agents' ports and host-path volumes may use ([`HostPolicy`]).
    pub host: HostPolicy,
    /// A Docker `config.json` whose logins go with pulls; re-read when it
    /// changes (see [`crate::agents::runtime::registry_auth`]).
    pub registry_auth_file: Option<PathBuf>,
    pub nats: NatsConfig,
}

/// The bearer token for remote writes, read from a 0600 file. Its `Debug`
/// never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(pub String);

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(…)")
    }
}

impl HiveConfig {
    pub fn db_path(&self) -> PathBuf {
        self.state_dir.join("hive.db")
    }

    pub fn agents_dir(&self) -> PathBuf {
        self.state_dir.join("agents")
    }

    pub fn knowledge_dir(&self) -> PathBuf {
        self.state_dir.join("knowledge")
    }
}

/// Every problem found, one line each.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .problems.join("\n  - "))]
pub struct ConfigErrors {
    pub problems: Vec<String>,
}

/// The longest publish interval: past an hour the swarm would see the hive
/// as stale between two publishes under any sensible `stale_after_secs`.
pub const MAX_PUBLISH_INTERVAL_SECS: u64 = 3600;
/// The longest reconcile interval: a day.
pub const MAX_RECONCILE_INTERVAL_SECS: u64 = 86_400;
/// The longest orphan grace: thirty days.
pub const MAX_ORPHAN_GRACE_SECS: u64 = 30 * 86_400;

/// Read the file (when given) and apply environment and flags.
pub fn load(
    path: Option<&Path>,
    overrides: &Overrides,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HiveConfig, ConfigErrors> {
    let file = read_file(path)?;
    let mut problems = Vec::new();
    let (agent_retry_base, crash) = agent_backoffs(&file, &mut problems);
    let container_limits = container_limits(&file, &mut problems);
    let host = host::host_policy(&file.port_addresses, &file.volume_roots, &mut problems);
    // A command-line value, else the environment's (when not empty).
    let given = |over: &Option<String>, var: &str| {
        over.clone().or_else(|| env(var).filter(|s| !s.is_empty()))
    };
    let name_text = given(&overrides.name, "HYPERHIVE_HIVE_NAME").or(file.name);
    let name = hive_name(name_text, &mut problems);
    let nats_url = given(&overrides.nats_url, "HYPERHIVE_NATS_URL");
    let nats = nats_config(file.nats, nats_url, &mut problems);
    let listen = overrides
        .http_listen
        .as_deref()
        .or(file.http_listen.as_deref());
    let http_listen = http_listen(listen, &mut problems);
    let state_dir = overrides
        .state_dir
        .clone()
        .or(file.state_dir)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    check_state_dir(&state_dir, &mut problems);
    check_xkeys(&file.trusted_controller_xkeys, &mut problems);
    let publish_interval = PUBLISH_INTERVAL.read(file.publish_interval_secs, &mut problems);
    let reconcile_interval = RECONCILE_INTERVAL.read(file.reconcile_interval_secs, &mut problems);
    let orphan_grace = ORPHAN_GRACE.read(file.orphan_grace_secs, &mut problems);
    let api_token = api_token(file.api_token_file.as_deref(), &mut problems);
    let build_context_max_bytes = check_builds_and_access(
        &file.build_roots,
        file.build_context_max_bytes,
        file.api_socket_group.as_deref(),
        file.registry_auth_file.as_deref(),
        &file.http_allowed_hosts,
        &mut problems,
    );
    let jitter_percent = jitter_percent(file.jitter_percent, &mut problems);
    if !problems.is_empty() {
        return Err(ConfigErrors { problems });
    }
    Ok(HiveConfig {
        // Both default to paths in the state dir, so before it moves.
        api_socket: file
            .api_socket
            .unwrap_or_else(|| state_dir.join("hive.sock")),
        xkey_seed_file: file
            .xkey_seed_file
            .unwrap_or_else(|| state_dir.join("xkey.seed")),
        name,
        state_dir,
        http_listen,
        http_allowed_hosts: file.http_allowed_hosts,
        publish_interval,
        reconcile_interval,
        orphan_grace,
        agent_retry_base,
        jitter_percent,
        crash,
        trusted_controller_xkeys: file.trusted_controller_xkeys,
        knowledge_repo: file.knowledge_repo.filter(|s| !s.trim().is_empty()),
        docker_host: file.docker_host,
        api_socket_group: file.api_socket_group,
        api_token,
        build_roots: file.build_roots,
        build_context_max_bytes,
        container_limits,
        host,
        registry_auth_file: file.registry_auth_file,
        nats,
    })
}

/// The config file parsed, or the defaults when none is given.
fn read_file(path: Option<&Path>) -> Result<FileConfig, ConfigErrors> {
    let Some(p) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(p).map_err(|e| ConfigErrors {
        problems: vec![format!("cannot read config file {}: {e}", p.display())],
    })?;
    toml::from_str::<FileConfig>(&text).map_err(|e| ConfigErrors {
        problems: vec![format!("{}: {e}", p.display())],
    })
}

fn hive_name(text: Option<String>, problems: &mut Vec<String>) -> Option<HiveName> {
    match HiveName::new(text?) {
        Ok(n) => Some(n),
        Err(e) => {
            problems.push(format!("name: {e}"));
            None
        }
    }
}

/// The file's NATS settings; a URL from a flag or the environment replaces
/// the file's servers.
fn nats_config(nats: NatsConfig, url: Option<String>, problems: &mut Vec<String>) -> NatsConfig {
    let nats = nats.with_url(url.as_deref());
    problems.extend(nats.check());
    nats
}

/// The HTTP listener's address: loopback only.
/// The given listen address, or the default.
fn http_listen(text: Option<&str>, problems: &mut Vec<String>) -> SocketAddr {
    let text = text.unwrap_or(DEFAULT_HTTP_LISTEN);
    match text.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => return a,
        Ok(a) => problems.push(format!(
            "http_listen = {a:?}: the hive's HTTP listener is loopback only (for example 127.0.0.1:7390); the operator API is on the Unix socket"
        )),
        Err(e) => problems.push(format!(
            "http_listen = {text:?} is not an address like 127.0.0.1:7390: {e}"
        )),
    }
    DEFAULT_HTTP_LISTEN
        .parse()
        .expect("constant address parses")
}

fn check_state_dir(state_dir: &Path, problems: &mut Vec<String>) {
    if state_dir.as_os_str().is_empty() {
        problems.push("state_dir is empty".into());
    } else if !state_dir.is_absolute() {
        problems.push(format!(
            "state_dir = {:?} must be an absolute path",
            state_dir.display().to_string()
        ));
    }
}

fn check_xkeys(keys: &[String], problems: &mut Vec<String>) {
    for key in keys {
        if swarm_queue_client::credentials::XKey::from_public_key(key).is_err() {
            problems.push(format!(
                "trusted_controller_xkeys: {key:?} is not a public xkey (it starts with X)"
            ));
        }
    }
}

/// Build roots and the context cap, the API socket's group, the registry
/// login file and the allowed HTTP host names; the context cap in force.
fn check_builds_and_access(
    build_roots: &[PathBuf],
    build_context_max_bytes: Option<u64>,
    api_socket_group: Option<&str>,
    registry_auth_file: Option<&Path>,
    http_allowed_hosts: &[String],
    problems: &mut Vec<String>,
) -> u64 {
    let build_context_max_bytes =
        build_context_max_bytes.unwrap_or(DEFAULT_BUILD_CONTEXT_MAX_BYTES);
    for root in build_roots {
        if !root.is_absolute() {
            problems.push(format!(
                "build_roots: {:?} must be an absolute path",
                root.display().to_string()
            ));
        }
    }
    if build_context_max_bytes == 0 {
        problems.push("build_context_max_bytes = 0: it must be at least 1".into());
    }
    if let Some(g) = api_socket_group {
        if g.trim().is_empty() {
            problems.push("api_socket_group is empty".into());
        }
    }
    if let Some(p) = registry_auth_file.filter(|p| !p.is_absolute()) {
        problems.push(format!(
            "registry_auth_file = {:?} must be an absolute path",
            p.display().to_string()
        ));
    }
    for name in http_allowed_hosts {
        if let Err(e) = swarm_queue_client::http_host::check_allowed_name(name) {
            problems.push(e.to_string());
        }
    }
    build_context_max_bytes
}

/// One interval setting in seconds, with its default and bounds. The upper
/// bound keeps every `Instant + Duration` the tasks compute far from
/// overflowing (a panic), and catches a value given in the wrong unit.
struct Interval {
    field: &'static str,
    default: u64,
    min: u64,
    max: u64,
}

impl Interval {
    fn read(&self, value: Option<u64>, problems: &mut Vec<String>) -> Duration {
        let v = value.unwrap_or(self.default);
        let field = self.field;
        if v < self.min {
            problems.push(format!("{field} = {v}: it must be at least {}", self.min));
        } else if v > self.max {
            problems.push(format!("{field} = {v}: it must be at most {}", self.max));
        }
        Duration::from_secs(v.clamp(self.min, self.max))
    }
}

/// `publish_interval_secs`.
const PUBLISH_INTERVAL: Interval = Interval {
    field: "publish_interval_secs",
    default: 60,
    min: 1,
    max: MAX_PUBLISH_INTERVAL_SECS,
};
/// `reconcile_interval_secs`.
const RECONCILE_INTERVAL: Interval = Interval {
    field: "reconcile_interval_secs",
    default: 30,
    min: 1,
    max: MAX_RECONCILE_INTERVAL_SECS,
};
/// `orphan_grace_secs`.
const ORPHAN_GRACE: Interval = Interval {
    field: "orphan_grace_secs",
    default: 600,
    min: 0,
    max: MAX_ORPHAN_GRACE_SECS,
};
/// `agent_retry_base_secs`.
const AGENT_RETRY_BASE: Interval = Interval {
    field: "agent_retry_base_secs",
    default: crate::agents::retry::DEFAULT_BASE.as_secs(),
    min: 1,
    max: crate::agents::retry::MAX_DELAY.as_secs(),
};

/// The longest first crash-loop delay: an hour.
pub const MAX_CRASH_FIRST_SECS: u64 = 3600;
/// The longest crash-loop delay and reset time: a day.
pub const MAX_CRASH_MAX_SECS: u64 = 86_400;

const CRASH_FIRST: Interval = Interval {
    field: "crash_backoff_first_secs",
    default: crate::agents::crashloop::DEFAULT_FIRST.as_secs(),
    min: 1,
    max: MAX_CRASH_FIRST_SECS,
};
const CRASH_MAX: Interval = Interval {
    field: "crash_backoff_max_secs",
    default: crate::agents::crashloop::DEFAULT_MAX.as_secs(),
    min: 1,
    max: MAX_CRASH_MAX_SECS,
};
const CRASH_RESET: Interval = Interval {
    field: "crash_backoff_reset_secs",
    default: crate::agents::crashloop::DEFAULT_RESET_AFTER.as_secs(),
    min: 1,
    max: MAX_CRASH_MAX_SECS,
};
/// The same bound as an agent's own `min_running_secs` in a declaration.
const MIN_RUNNING: Interval = Interval {
    field: "min_running_secs",
    default: crate::agents::crashloop::DEFAULT_MIN_RUNNING.as_secs(),
    min: 0,
    max: swarm_queue_client::limits::MAX_MIN_RUNNING_SECS,
};

/// The per-agent backoffs: of a failed job (`agent_retry_base_secs`) and
/// of a crash loop, whose first delay may not exceed its longest.
fn agent_backoffs(
    file: &FileConfig,
    problems: &mut Vec<String>,
) -> (Duration, crate::agents::crashloop::CrashPolicy) {
    let retry_base = AGENT_RETRY_BASE.read(file.agent_retry_base_secs, problems);
    let first = CRASH_FIRST.read(file.crash_backoff_first_secs, problems);
    let max = CRASH_MAX.read(file.crash_backoff_max_secs, problems);
    if first > max {
        problems.push(format!(
            "crash_backoff_first_secs = {}: it must be at most crash_backoff_max_secs ({})",
            first.as_secs(),
            max.as_secs()
        ));
    }
    let crash = crate::agents::crashloop::CrashPolicy {
        first,
        max,
        reset_after: CRASH_RESET.read(file.crash_backoff_reset_secs, problems),
        min_running: MIN_RUNNING.read(file.min_running_secs, problems),
    };
    (retry_base, crash)
}

/// `container_pids_limit`, `container_log_max_mb` and
/// `container_log_files`, each within its range.
fn container_limits(
    file: &FileConfig,
    problems: &mut Vec<String>,
) -> crate::agents::runtime::HostLimits {
    let mut within = |field: &str,
                      value: Option<u64>,
                      default: u64,
                      range: std::ops::RangeInclusive<u64>,
                      what: &str| {
        let v = value.unwrap_or(default);
        let (min, max) = range.into_inner();
        if !(min..=max).contains(&v) {
            problems.push(format!(
                "{field} = {v}: it must be between {min} and {max} ({what}; the default is \
                 {default})"
            ));
        }
        v.clamp(min, max)
    };
    crate::agents::runtime::HostLimits {
        // Clamped to at most 65,536: it fits.
        pids: within(
            "container_pids_limit",
            file.container_pids_limit,
            DEFAULT_CONTAINER_PIDS_LIMIT,
            CONTAINER_PIDS_LIMIT_RANGE,
            "processes and threads per agent container",
        ) as i64,
        log_max_mb: within(
            "container_log_max_mb",
            file.container_log_max_mb,
            DEFAULT_CONTAINER_LOG_MAX_MB,
            CONTAINER_LOG_MAX_MB_RANGE,
            "MB per file of an agent container's log",
        ),
        log_files: within(
            "container_log_files",
            file.container_log_files,
            DEFAULT_CONTAINER_LOG_FILES,
            CONTAINER_LOG_FILES_RANGE,
            "log files kept per agent container",
        ),
    }
}

/// `jitter_percent`, at most [`swarm_queue_client::jitter::MAX_PERCENT`].
fn jitter_percent(value: Option<u64>, problems: &mut Vec<String>) -> u8 {
    use swarm_queue_client::jitter::{DEFAULT_PERCENT, MAX_PERCENT};
    let v = value.unwrap_or(DEFAULT_PERCENT.into());
    match u8::try_from(v).ok().filter(|p| *p <= MAX_PERCENT) {
        Some(p) => p,
        None => {
            problems.push(format!(
                "jitter_percent = {v}: it must be between 0 and {MAX_PERCENT} (the spread of \
                 each periodic read and status put around its interval; the default is \
                 {DEFAULT_PERCENT}, 0 turns jitter off)"
            ));
            MAX_PERCENT
        }
    }
}

/// The remote-writes token when a file is given; a problem when it is unusable.
fn api_token(path: Option<&Path>, problems: &mut Vec<String>) -> Option<ApiToken> {
    read_token_file(path?).map_err(|e| problems.push(e)).ok()
}

/// Read the remote-writes token, refusing a file group or others can read.
fn read_token_file(path: &Path) -> Result<ApiToken, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("api_token_file {shown}: cannot read it: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "api_token_file {shown} has mode {mode:04o}: it holds the API's bearer token, so \
             group and others must have no access (chmod 600 {shown})"
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("api_token_file {shown}: cannot read it: {e}"))?;
    let token = text.trim();
    if token.len() < 16 {
        return Err(format!(
            "api_token_file {shown} holds a token of {} characters; use at least 16 random ones \
             (for example `openssl rand -hex 32`)",
            token.len()
        ));
    }
    Ok(ApiToken(token.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn file_env_and_flags_in_order() {
        let f = write(
            "name = \"from-file\"\nstate_dir = \"/tmp/x\"\n[nats]\nurl = \"nats://file:4222\"\n",
        );
        let c = load(Some(f.path()), &Overrides::default(), no_env).unwrap();
        assert_eq!(c.name.unwrap().as_str(), "from-file");
        assert_eq!(c.nats.url.as_deref(), Some("nats://file:4222"));
        assert_eq!(c.publish_interval, Duration::from_secs(60));

        let env = |k: &str| match k {
            "HYPERHIVE_HIVE_NAME" => Some("from-env".to_string()),
            "HYPERHIVE_NATS_URL" => Some("nats://env:4222".to_string()),
            _ => None,
        };
        let c = load(Some(f.path()), &Overrides::default(), env).unwrap();
        assert_eq!(c.name.unwrap().as_str(), "from-env");
        assert_eq!(c.nats.url.as_deref(), Some("nats://env:4222"));

        let flags = Overrides {
            name: Some("from-flag".into()),
            nats_url: Some("nats://flag:4222".into()),
            ..Default::default()
        };
        let c = load(Some(f.path()), &flags, env).unwrap();
        assert_eq!(c.name.unwrap().as_str(), "from-flag");
        assert_eq!(c.nats.url.as_deref(), Some("nats://flag:4222"));
    }

    #[test]
    fn no_file_no_name_is_allowed() {
        let c = load(None, &Overrides::default(), no_env).unwrap();
        assert!(c.name.is_none());
        assert!(!c.nats.is_configured());
    }

    #[test]
    fn container_limits_have_defaults_and_bounds() {
        let cfg = load(None, &Overrides::default(), no_env).unwrap();
        let l = cfg.container_limits;
        assert_eq!((l.pids, l.log_max_mb, l.log_files), (512, 10, 3));
        let f = write(
            "container_pids_limit = 2048\ncontainer_log_max_mb = 1\ncontainer_log_files = 1\n",
        );
        let l = load(Some(f.path()), &Overrides::default(), no_env)
            .unwrap()
            .container_limits;
        assert_eq!((l.pids, l.log_max_mb, l.log_files), (2048, 1, 1));
        let cases = [
            (
                "container_pids_limit",
                vec![0, 15, 65_537, u64::MAX],
                "16 and 65536",
            ),
            (
                "container_log_max_mb",
                vec![0, 1025, u64::MAX],
                "1 and 1024",
            ),
            ("container_log_files", vec![0, 101, u64::MAX], "1 and 100"),
        ];
        for (field, bad, range) in cases {
            for bad in bad {
                let f = write(&format!("{field} = {bad}\n"));
                let e = load(Some(f.path()), &Overrides::default(), no_env)
                    .unwrap_err()
                    .to_string();
                let want = format!("{field} = {bad}: it must be between {range}");
                assert!(e.contains(&want), "{e}");
            }
        }
    }

    #[test]
    fn jitter_percent_has_a_default_and_a_bound_named_in_the_error() {
        let cfg = load(None, &Overrides::default(), no_env).unwrap();
        assert_eq!(cfg.jitter_percent, 20);
        for ok in [0, 50] {
            let f = write(&format!("jitter_percent = {ok}\n"));
            let cfg = load(Some(f.path()), &Overrides::default(), no_env).unwrap();
            assert_eq!(u64::from(cfg.jitter_percent), ok);
        }
        for bad in [51, 256, u64::MAX >> 1] {
            let f = write(&format!("jitter_percent = {bad}\n"));
            let e = load(Some(f.path()), &Overrides::default(), no_env)
                .unwrap_err()
                .to_string();
            let want = format!("jitter_percent = {bad}: it must be between 0 and 50");
            assert!(e.contains(&want), "{e}");
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_value() {
        let f = write(
            "name = \"Bad.Name\"\nhttp_listen = \"0.0.0.0:80\"\nstate_dir = \"rel\"\npublish_interval_secs = 0\ntrusted_controller_xkeys = [\"nope\"]\nregistry_auth_file = \"auth.json\"\n[nats]\nurl = \"http://[::1\"\n",
        );
        let e = load(Some(f.path()), &Overrides::default(), no_env).unwrap_err();
        let all = e.to_string();
        for want in [
            "Bad.Name",
            "0.0.0.0:80",
            "\"rel\"",
            "publish_interval_secs = 0",
            "\"nope\"",
            "registry_auth_file = \"auth.json\"",
            "http://[::1",
        ] {
            assert!(all.contains(want), "missing {want:?} in:\n{all}");
        }
    }

    #[test]
    fn intervals_have_upper_bounds_named_in_the_error() {
        let cases = [
            ("publish_interval_secs", MAX_PUBLISH_INTERVAL_SECS),
            ("reconcile_interval_secs", MAX_RECONCILE_INTERVAL_SECS),
            ("orphan_grace_secs", MAX_ORPHAN_GRACE_SECS),
            (
                "agent_retry_base_secs",
                crate::agents::retry::MAX_DELAY.as_secs(),
            ),
            ("crash_backoff_max_secs", MAX_CRASH_MAX_SECS),
            ("crash_backoff_reset_secs", MAX_CRASH_MAX_SECS),
            (
                "min_running_secs",
                swarm_queue_client::limits::MAX_MIN_RUNNING_SECS,
            ),
        ];
        for (field, max) in cases {
            let at = write(&format!("{field} = {max}\n"));
            load(Some(at.path()), &Overrides::default(), no_env)
                .unwrap_or_else(|e| panic!("{field} = {max} refused: {e}"));
            for past in [max + 1, i64::MAX as u64] {
                let f = write(&format!("{field} = {past}\n"));
                let e = load(Some(f.path()), &Overrides::default(), no_env);
                let text = e.expect_err(field).to_string();
                assert!(
                    text.contains(&format!("{field} = {past}: it must be at most {max}")),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn unknown_keys_and_syntax_errors_name_the_file() {
        let f = write("nmae = \"x\"\n");
        let e = load(Some(f.path()), &Overrides::default(), no_env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nmae"), "{e}");
        assert!(e.contains(&f.path().display().to_string()), "{e}");
        let e = load(
            Some(Path::new("/nonexistent/hive.toml")),
            &Overrides::default(),
            no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("/nonexistent/hive.toml"), "{e}");
    }
}
