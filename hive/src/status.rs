//! The one place that decides "is this hive OK".
//!
//! Every part of the hive reports into [`StatusBoard`] (warnings it raises and
//! clears by key, publish outcomes, the agents' observed state, the
//! revisions). [`StatusBoard::snapshot`] turns that into one [`Snapshot`]: the
//! `HiveStatus` that is published, served on `/health/ready` and shown by the
//! CLI, and the metrics taken from the same values. Two producers of "is this
//! hive OK" would be free to disagree; here there is one.

mod metrics;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use swarm_queue_client::limits::{
    MAX_AGENTS_PER_HIVE, MAX_SHORT_LEN, MAX_WARNINGS, SCHEMA_VERSION,
};
use swarm_queue_client::{AgentName, AgentStatus, HiveName, HiveState, HiveStatus, Level, Warning};
use tokio::sync::Notify;

pub use metrics::render_metrics;

/// Warning keys, so the part that raises a warning is the part that clears it.
pub mod keys {
    pub const HIVE_NAME_MISSING: &str = "hive_name_missing";
    pub const NATS_NOT_CONFIGURED: &str = "nats_not_configured";
    pub const NATS_UNREACHABLE: &str = "nats_unreachable";
    pub const STATUS_PUBLISH: &str = "swarm_status_publish";
    pub const DOCKER: &str = "docker";
    pub const WANTED: &str = "wanted_declaration";
    /// The declaration in force has fields this build does not know (or a
    /// newer schema): what they ask for is not done.
    pub const WANTED_IGNORED: &str = "wanted_fields_ignored";
    /// The wanted bucket does not answer (deleted, or not created yet).
    pub const WANTED_BUCKET: &str = "wanted_bucket";
    /// The wanted bucket was made again; its lower revision was taken.
    pub const WANTED_RESET: &str = "wanted_reset";
    /// The credentials bucket does not answer.
    pub const CREDENTIALS_BUCKET: &str = "credentials_bucket";
    /// The credentials bucket was made again.
    pub const CREDENTIALS_RESET: &str = "credentials_reset";
    pub const RECONCILER: &str = "reconciler";
    pub const CREDENTIALS: &str = "credentials";
    /// A delivery refused for what is below the agent's dir (a link).
    pub const CREDENTIAL_REFUSED: &str = "credential_refused";
    pub const KNOWLEDGE: &str = "knowledge";
    pub const JOBS: &str = "jobs";
    pub const AGENT_HEALTH: &str = "agent_health";
    pub const ODD_CONTAINERS: &str = "odd_containers";
}

/// How many failed publishes in a row before the hive warns that the swarm
/// sees it as stale.
pub const PUBLISH_FAILURES_BEFORE_WARNING: u32 = 3;

/// The shared status of one hive process: what every part reports.
#[derive(Debug)]
pub struct StatusBoard {
    hive: Option<HiveName>,
    xkey: Option<String>,
    inner: Mutex<Inner>,
    /// Woken whenever something that is published changes, so the publisher
    /// can send a fresh status without waiting a full interval.
    pub changed: Notify,
    /// Woken when a job finishes, so the converger looks again at once.
    pub job_progress: Notify,
    /// Counts status publishes that succeeded after failing: the buckets
    /// answer again although the connection may never have dropped (a
    /// stream got a new leader, a leaf node's link to the hub came back).
    /// The wanted task reads its key on every change, as after a reconnect,
    /// because a doorbell rung while the buckets were out of reach is lost.
    pub buckets_back: tokio::sync::watch::Sender<u64>,
    /// Counts changes of the seen or converged revision: what the swarm
    /// waits for after a declaration. The publisher wakes on it even while
    /// its puts fail (it ignores [`StatusBoard::changed`] then), so a converged
    /// revision goes out as soon as the buckets take it again, not after
    /// the failed put's backoff.
    pub revisions_changed: tokio::sync::watch::Sender<u64>,
}

/// Figures that go to `/metrics`, from the same lock as the `HiveStatus`.
#[derive(Debug, Clone)]
pub struct MetricsData {
    pub publish_failures_total: u64,
    pub publish_successes_total: u64,
    pub publish_consecutive_failures: u32,
    /// Seconds since the last successful publish; `None` if never.
    pub last_publish_age_secs: Option<f64>,
    /// (kind, state) -> count of finished jobs since start.
    pub job_outcomes: BTreeMap<(String, String), u64>,
}

/// One consistent view: what is published and what metrics say.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub status: HiveStatus,
    pub metrics: MetricsData,
}

#[derive(Debug, Default, Clone)]
struct PublishStats {
    consecutive_failures: u32,
    total_failures: u64,
    total_successes: u64,
    last_success: Option<Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    warnings: BTreeMap<String, Warning>,
    publish: PublishStats,
    agents: BTreeMap<AgentName, AgentStatus>,
    /// Pulls under way, by agent: shown in the agent's entry.
    image_progress: BTreeMap<AgentName, String>,
    /// Repo digests of the images the agents' containers run.
    image_digests: BTreeMap<AgentName, String>,
    /// Docker's health status of each agent that has a health check.
    agent_health: BTreeMap<AgentName, String>,
    /// When each backing-off agent's next try is due; turned into
    /// `retry.next_try_in_secs` as of each snapshot, so the number is true
    /// when it is published and a countdown alone never wakes the publisher.
    retry_due: BTreeMap<AgentName, tokio::time::Instant>,
    /// Each agent's last start and exit, wall clock: turned into the
    /// `exits.*_secs` of each snapshot, like `retry_due`.
    exit_times: BTreeMap<AgentName, ExitTimes>,
    converged_revision: Option<u64>,
    seen_revision: Option<u64>,
    job_outcomes: BTreeMap<(String, String), u64>,
    stopping: bool,
}

/// One agent's exit times in ms since the epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitTimes {
    pub first_exit_ms: Option<i64>,
    /// The last start while it runs, the last exit while it does not.
    pub since_ms: Option<i64>,
    /// When a crash-loop delay ends.
    pub next_start_ms: Option<i64>,
}

impl ExitTimes {
    /// The report's countdowns as of `now`: whole seconds, the wait rounded
    /// up so "in 0 s" only once it is due, each saturated at the bound.
    fn fill(&self, report: &mut swarm_queue_client::ExitReport, now: i64) {
        use swarm_queue_client::limits::MAX_EXIT_SECS;
        let secs = |ms: i64| (ms.max(0) as u64 / 1000).min(MAX_EXIT_SECS);
        report.first = self.first_exit_ms.map(|t| secs(now - t));
        report.since = self.since_ms.map(|t| secs(now - t));
        report.next_in = self
            .next_start_ms
            .map(|t| secs((t - now).saturating_add(999)))
            .filter(|s| *s > 0);
    }
}

/// Used in the local `HiveStatus` when no name is configured; such a hive
/// never publishes, so the placeholder never reaches the swarm.
const UNNAMED: &str = "unnamed";

impl StatusBoard {
    pub fn new(hive: Option<HiveName>, xkey: Option<String>) -> Self {
        StatusBoard {
            hive,
            xkey,
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
            job_progress: Notify::new(),
            buckets_back: tokio::sync::watch::Sender::new(0),
            revisions_changed: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock would be a bug elsewhere; the data
        // (warnings and counters) stays usable, so recover it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn hive(&self) -> Option<&HiveName> {
        self.hive.as_ref()
    }

    /// Raise (or update) a warning under `key`.
    pub fn raise(&self, key: &str, level: Level, message: impl AsRef<str>) {
        let w = Warning::new(key, level, message);
        let mut inner = self.lock();
        if inner.warnings.get(key) != Some(&w) {
            tracing::warn!(key, level = ?level, message = %w.message, "status warning raised");
            inner.warnings.insert(key.to_string(), w);
            drop(inner);
            self.changed.notify_one();
        }
    }

    /// Clear the warning under `key`, if any.
    pub fn clear(&self, key: &str) {
        let mut inner = self.lock();
        if inner.warnings.remove(key).is_some() {
            tracing::info!(key, "status warning cleared");
            drop(inner);
            self.changed.notify_one();
        }
    }

    pub fn has_warning(&self, key: &str) -> bool {
        self.lock().warnings.contains_key(key)
    }

    /// Record a successful status publish; clears the publish warning.
    pub fn publish_succeeded(&self) {
        let mut inner = self.lock();
        let after_failures = inner.publish.consecutive_failures > 0;
        inner.publish.consecutive_failures = 0;
        inner.publish.total_successes += 1;
        inner.publish.last_success = Some(Instant::now());
        drop(inner);
        self.clear(keys::STATUS_PUBLISH);
        if after_failures {
            self.buckets_back.send_modify(|n| *n += 1);
        }
    }

    /// Record a failed publish; after [`PUBLISH_FAILURES_BEFORE_WARNING`] in a
    /// row, warn that the swarm sees this hive as stale.
    pub fn publish_failed(&self, error: &str) {
        let mut inner = self.lock();
        inner.publish.consecutive_failures += 1;
        inner.publish.total_failures += 1;
        let n = inner.publish.consecutive_failures;
        drop(inner);
        if n >= PUBLISH_FAILURES_BEFORE_WARNING {
            self.raise(
                keys::STATUS_PUBLISH,
                Level::Warn,
                format!(
                    "publishing status is failing ({n} failures in a row, last: {error}); \
                     the swarm sees this hive as stale; the hive itself is fine"
                ),
            );
        }
    }

    /// The agents' status, and when each backing-off agent is next tried.
    pub fn set_agents(
        &self,
        agents: BTreeMap<AgentName, AgentStatus>,
        retry_due: BTreeMap<AgentName, tokio::time::Instant>,
    ) {
        let mut inner = self.lock();
        inner.retry_due = retry_due;
        if inner.agents != agents {
            inner.agents = agents;
            drop(inner);
            self.changed.notify_one();
        }
    }

    /// Each agent's start and exit times; they change the published
    /// countdowns only, so they wake no publish.
    pub fn set_exit_times(&self, times: BTreeMap<AgentName, ExitTimes>) {
        self.lock().exit_times = times;
    }

    /// Show (or, with `None`, stop showing) how far the pull of `agent`'s
    /// image has come. The caller throttles: each change is published.
    pub fn set_image_progress(&self, agent: &AgentName, progress: Option<&str>) {
        let mut inner = self.lock();
        let changed = match progress {
            Some(p) => {
                inner
                    .image_progress
                    .insert(agent.clone(), p.to_string())
                    .as_deref()
                    != Some(p)
            }
            None => inner.image_progress.remove(agent).is_some(),
        };
        drop(inner);
        if changed {
            self.changed.notify_one();
        }
    }

    /// The repo digest each agent's container runs, as last observed.
    pub fn set_image_digests(&self, digests: BTreeMap<AgentName, String>) {
        let mut inner = self.lock();
        if inner.image_digests != digests {
            inner.image_digests = digests;
            drop(inner);
            self.changed.notify_one();
        }
    }

    /// Docker's health status of each agent with a health check; any
    /// `unhealthy` one raises the `agent_health` warning, naming it.
    pub fn set_agent_health(&self, health: BTreeMap<AgentName, String>) {
        let unhealthy: Vec<&str> = health
            .iter()
            .filter(|(_, h)| h.as_str() == "unhealthy")
            .map(|(a, _)| a.as_str())
            .collect();
        if unhealthy.is_empty() {
            self.clear(keys::AGENT_HEALTH);
        } else {
            self.raise(
                keys::AGENT_HEALTH,
                Level::Warn,
                if unhealthy.len() == 1 {
                    format!(
                        "agent {} is unhealthy: its health check fails",
                        unhealthy[0]
                    )
                } else {
                    format!(
                        "agents {} are unhealthy: their health checks fail",
                        unhealthy.join(", ")
                    )
                },
            );
        }
        let mut inner = self.lock();
        if inner.agent_health != health {
            inner.agent_health = health;
            drop(inner);
            self.changed.notify_one();
        }
    }

    pub fn set_revisions(&self, seen: Option<u64>, converged: Option<u64>) {
        let mut inner = self.lock();
        if inner.seen_revision != seen || inner.converged_revision != converged {
            inner.seen_revision = seen;
            inner.converged_revision = converged;
            drop(inner);
            self.revisions_changed.send_modify(|n| *n += 1);
            self.changed.notify_one();
        }
    }

    pub fn record_job_outcome(&self, kind: &str, state: &str) {
        *self
            .lock()
            .job_outcomes
            .entry((kind.to_string(), state.to_string()))
            .or_default() += 1;
        self.job_progress.notify_one();
    }

    /// From now on the hive reports `stopped`.
    pub fn set_stopping(&self) {
        self.lock().stopping = true;
        self.changed.notify_one();
    }

    /// The one computation of the status, and the metrics beside it.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.lock();
        let status = compute(self.hive.clone(), self.xkey.clone(), &inner, &[]);
        let metrics = MetricsData {
            publish_failures_total: inner.publish.total_failures,
            publish_successes_total: inner.publish.total_successes,
            publish_consecutive_failures: inner.publish.consecutive_failures,
            last_publish_age_secs: inner
                .publish
                .last_success
                .map(|t| t.elapsed().as_secs_f64()),
            job_outcomes: inner.job_outcomes.clone(),
        };
        Snapshot { status, metrics }
    }
}

/// Warnings that a status in `hyperhive-status` disproves by being there:
/// they are for the hive's own `/health/ready`, not for the bucket.
const REFUTED_BY_A_PUT: [&str; 2] = [keys::STATUS_PUBLISH, keys::NATS_UNREACHABLE];

impl StatusBoard {
    /// The status to put into `hyperhive-status`: as [`StatusBoard::snapshot`],
    /// without the warnings that its arrival disproves ("publishing status
    /// is failing", "NATS unreachable"). The put that carries it succeeded,
    /// so those would tell the controller of a fault that just ended, and
    /// make a hive look degraded (halting a staged rollout) for as long as
    /// it takes the next status to say it cleared.
    pub fn published_status(&self) -> HiveStatus {
        let inner = self.lock();
        compute(
            self.hive.clone(),
            self.xkey.clone(),
            &inner,
            &REFUTED_BY_A_PUT,
        )
    }
}

fn compute(
    hive: Option<HiveName>,
    xkey: Option<String>,
    inner: &Inner,
    leave_out: &[&str],
) -> HiveStatus {
    // Highest level first so that, if there are more warnings than a payload
    // may carry, the ones dropped are the least severe.
    let mut warnings: Vec<Warning> = inner
        .warnings
        .values()
        .filter(|w| !leave_out.contains(&w.key.as_str()))
        .cloned()
        .collect();
    warnings.sort_by(|a, b| b.level.cmp(&a.level).then(a.key.cmp(&b.key)));
    warnings.truncate(MAX_WARNINGS);
    let worst = warnings.iter().map(|w| w.level).max();
    let state = if inner.stopping {
        HiveState::Stopped
    } else {
        match worst {
            Some(Level::Error) | Some(Level::Unknown) => HiveState::Failing,
            Some(Level::Warn) => HiveState::Degraded,
            _ => HiveState::Ok,
        }
    };
    let ready = matches!(state, HiveState::Ok | HiveState::Degraded);
    HiveStatus {
        schema: SCHEMA_VERSION,
        hive: hive.unwrap_or_else(|| HiveName::new(UNNAMED).expect("constant is a valid name")),
        ready,
        state,
        warnings,
        converged_revision: inner.converged_revision,
        seen_revision: inner.seen_revision,
        agents: agents(inner),
        xkey,
        version: env!("CARGO_PKG_VERSION").to_string(),
        agent_spec: Some(swarm_queue_client::AGENT_SPEC),
    }
}

/// The agents' entries with each pull under way shown in its agent's
/// entry; an agent whose image is pulled before it is reported at all (a
/// first deploy from the local API) appears as wanted up and missing.
fn agents_with_progress(inner: &Inner) -> BTreeMap<AgentName, AgentStatus> {
    let mut agents = inner.agents.clone();
    for (agent, progress) in &inner.image_progress {
        let entry = agents.entry(agent.clone()).or_insert_with(|| {
            AgentStatus::new(
                swarm_queue_client::Power::Up,
                swarm_queue_client::Observed::Missing,
            )
        });
        entry.image_progress = Some(swarm_queue_client::limits::clip(progress, MAX_SHORT_LEN));
    }
    for (agent, entry) in agents.iter_mut() {
        if let Some(d) = inner.image_digests.get(agent) {
            entry.image_digest = Some(swarm_queue_client::limits::clip(d, MAX_SHORT_LEN));
        }
        if let Some(h) = inner.agent_health.get(agent) {
            entry.health = Some(swarm_queue_client::limits::clip(h, MAX_SHORT_LEN));
        }
    }
    agents.into_iter().take(MAX_AGENTS_PER_HIVE).collect()
}

/// The agents as published: at most the bound, every field made valid
/// (a publish is refused only for a bug, never for what Docker showed), and
/// each retry's countdown as of now.
fn agents(inner: &Inner) -> BTreeMap<AgentName, AgentStatus> {
    let now = tokio::time::Instant::now();
    agents_with_progress(inner)
        .into_iter()
        .map(|(name, status)| {
            let mut status = status.sanitized();
            if let (Some(r), Some(due)) = (status.retry.as_mut(), inner.retry_due.get(&name)) {
                // Rounded up: "in 0 s" only once it is due.
                let left = due.saturating_duration_since(now);
                r.next_try_in_secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            }
            if let (Some(e), Some(t)) = (status.exits.as_mut(), inner.exit_times.get(&name)) {
                t.fill(e, crate::clock::now_ms());
            }
            (name, status)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> StatusBoard {
        StatusBoard::new(Some(HiveName::new("alpha").unwrap()), None)
    }

    #[tokio::test(start_paused = true)]
    async fn what_docker_showed_never_makes_the_status_unpublishable() {
        use swarm_queue_client::{JobSummary, Observed, Power, RetryStatus};
        let h = board();
        let hostile = format!("sha256:{}\u{7}\n{}", "f".repeat(64), "x".repeat(4100));
        let agent = AgentName::new("hostile").unwrap();
        let status = AgentStatus {
            wanted: Power::Up,
            observed: Observed::Stopped,
            spec: Some(hostile.clone()),
            declared_spec: None,
            image_progress: None,
            image_digest: None,
            health: None,
            last_job: Some(JobSummary {
                id: 1,
                kind: "first_deploy".into(),
                state: "failed".into(),
                error: Some(hostile.clone()),
            }),
            retry: Some(RetryStatus {
                step: Some(hostile.clone()),
                attempts: 3,
                next_try_in_secs: 0,
                error: Some(hostile),
            }),
            exits: Some(swarm_queue_client::ExitReport::default()),
            unsettled: Some(swarm_queue_client::Unsettled::Backoff),
        };
        let due = tokio::time::Instant::now() + std::time::Duration::from_millis(240_500);
        h.set_agents(
            [(agent.clone(), status)].into(),
            [(agent.clone(), due)].into(),
        );
        let now = crate::clock::now_ms();
        h.set_exit_times(
            [(
                agent.clone(),
                ExitTimes {
                    first_exit_ms: Some(now - 125_000),
                    since_ms: Some(now - 65_000),
                    next_start_ms: Some(now + 39_500),
                },
            )]
            .into(),
        );
        let r = h.snapshot().status;
        swarm_queue_client::encode(&r).expect("the status encodes");
        let a = &r.agents[&agent];
        let e = a.exits.as_ref().unwrap();
        assert_eq!((e.since, e.first), (Some(65), Some(125)));
        assert_eq!(e.next_in, Some(40), "rounded up");
        assert!(a.spec.as_deref().unwrap().starts_with("sha256:fff"));
        assert_eq!(
            a.retry.as_ref().unwrap().next_try_in_secs,
            241,
            "rounded up"
        );
        tokio::time::advance(std::time::Duration::from_secs(300)).await;
        let r = h.snapshot().status;
        assert_eq!(r.agents[&agent].retry.as_ref().unwrap().next_try_in_secs, 0);
    }

    #[test]
    fn pull_progress_shows_in_the_agents_entry_until_cleared() {
        let h = board();
        let agent = AgentName::new("app").unwrap();
        h.set_image_progress(&agent, Some("layers 1/2, 0.5/2.0 MB"));
        let r = h.snapshot().status;
        let a = &r.agents[&agent];
        assert_eq!(a.image_progress.as_deref(), Some("layers 1/2, 0.5/2.0 MB"));
        assert_eq!(a.observed, swarm_queue_client::Observed::Missing);
        h.set_image_progress(&agent, Some(&"x".repeat(500)));
        let r = h.snapshot().status;
        assert!(r.agents[&agent].image_progress.as_ref().unwrap().len() <= MAX_SHORT_LEN);
        swarm_queue_client::Payload::validate(&r).unwrap();
        h.set_image_progress(&agent, None);
        assert!(h.snapshot().status.agents.is_empty());
    }

    #[test]
    fn an_unhealthy_agent_degrades_the_hive_and_is_named() {
        let h = board();
        let a = |n: &str| AgentName::new(n).unwrap();
        h.set_agents(
            BTreeMap::from([(
                a("web"),
                AgentStatus::new(
                    swarm_queue_client::Power::Up,
                    swarm_queue_client::Observed::Running,
                ),
            )]),
            BTreeMap::new(),
        );
        h.set_agent_health(BTreeMap::from([(a("web"), "starting".to_string())]));
        let r = h.snapshot().status;
        assert_eq!(r.state, HiveState::Ok);
        assert_eq!(r.agents[&a("web")].health.as_deref(), Some("starting"));
        h.set_agent_health(BTreeMap::from([(a("web"), "unhealthy".to_string())]));
        let r = h.snapshot().status;
        assert_eq!(r.state, HiveState::Degraded);
        assert!(
            r.warnings[0].message.contains("agent web is unhealthy"),
            "{:?}",
            r.warnings
        );
        h.set_agent_health(BTreeMap::from([(a("web"), "healthy".to_string())]));
        assert_eq!(h.snapshot().status.state, HiveState::Ok);
    }

    #[test]
    fn state_follows_the_worst_warning() {
        let h = board();
        let r = h.snapshot().status;
        assert!(r.ready);
        assert_eq!(r.state, HiveState::Ok);
        h.raise(keys::NATS_UNREACHABLE, Level::Warn, "x");
        let r = h.snapshot().status;
        assert!(r.ready);
        assert_eq!(r.state, HiveState::Degraded);
        h.raise(keys::DOCKER, Level::Error, "docker down");
        let r = h.snapshot().status;
        assert!(!r.ready);
        assert_eq!(r.state, HiveState::Failing);
        h.clear(keys::DOCKER);
        h.clear(keys::NATS_UNREACHABLE);
        assert_eq!(h.snapshot().status.state, HiveState::Ok);
        h.set_stopping();
        let r = h.snapshot().status;
        assert_eq!(r.state, HiveState::Stopped);
        assert!(!r.ready);
    }

    #[test]
    fn a_published_status_leaves_out_the_warnings_its_arrival_disproves() {
        let h = board();
        for _ in 0..3 {
            h.publish_failed("timed out after 1s");
        }
        h.raise(keys::NATS_UNREACHABLE, Level::Warn, "unreachable");
        assert!(h.has_warning(keys::STATUS_PUBLISH));
        assert_eq!(h.snapshot().status.state, HiveState::Degraded);
        let published = h.published_status();
        assert_eq!(published.state, HiveState::Ok, "{published:?}");
        assert!(published.warnings.is_empty(), "{published:?}");
        // Any other warning still degrades what is published.
        h.raise(keys::DOCKER, Level::Warn, "docker is slow");
        let published = h.published_status();
        assert_eq!(published.state, HiveState::Degraded);
        let keys: Vec<&str> = published.warnings.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(keys, vec![keys::DOCKER]);
    }

    /// The publisher's wake-up while its puts fail: only a revision change
    /// counts, not its own failure warning.
    #[test]
    fn revision_changes_are_counted_apart_from_other_changes() {
        let h = board();
        let rx = h.revisions_changed.subscribe();
        for _ in 0..PUBLISH_FAILURES_BEFORE_WARNING + 1 {
            h.publish_failed("no ack");
        }
        assert!(!rx.has_changed().unwrap());
        h.set_revisions(Some(4), None);
        h.set_revisions(Some(4), None);
        assert_eq!(*rx.borrow(), 1);
        h.set_revisions(Some(4), Some(4));
        assert_eq!(*rx.borrow(), 2);
    }

    #[test]
    fn publish_warning_after_three_failures_cleared_by_one_success() {
        let h = board();
        h.publish_failed("e1");
        h.publish_failed("e2");
        assert!(!h.has_warning(keys::STATUS_PUBLISH));
        h.publish_failed("e3");
        let w = h.snapshot().status.warnings;
        assert_eq!(w.len(), 1);
        assert!(
            w[0].message.contains("3 failures in a row"),
            "{}",
            w[0].message
        );
        assert!(w[0].message.contains("the hive itself is fine"));
        let back = h.buckets_back.subscribe();
        h.publish_succeeded();
        assert!(h.snapshot().status.warnings.is_empty());
        assert_eq!(h.snapshot().metrics.publish_failures_total, 3);
        assert_eq!(*back.borrow(), 1, "a success after failures: buckets back");
        h.publish_succeeded();
        assert_eq!(*back.borrow(), 1, "a success after a success is not");
    }

    #[test]
    fn warnings_are_bounded_most_severe_kept() {
        let h = board();
        for i in 0..(MAX_WARNINGS + 5) {
            h.raise(&format!("info-{i:03}"), Level::Info, "i");
        }
        h.raise("zz-error", Level::Error, "e");
        let r = h.snapshot().status;
        assert_eq!(r.warnings.len(), MAX_WARNINGS);
        assert_eq!(r.warnings[0].key, "zz-error");
        swarm_queue_client::encode(&r).unwrap();
    }
}
