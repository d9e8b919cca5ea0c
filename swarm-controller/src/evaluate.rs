//! The heart of the controller: what one hive's row says, as a pure function
//! of the roster, the hive's status entry, its wanted entry and the reader's
//! clock.
//!
//! **Freshness** is the KV entry's own timestamp (set by the server when the
//! value landed) against the reader's clock, never anything in the payload:
//! a hive with a wrong clock can only mislead about itself, and not even
//! that. `stopped` (a clean shutdown) shows at once; an undecodable value is
//! `unknown` with its decode error, never `fresh`.
//!
//! **Convergence** compares revisions, never payloads: the declared revision
//! is the KV revision of `hyperhive-wanted/<hive>`, and the hive reports the
//! revision it has read (`seen_revision`) and the one it converged on
//! (`converged_revision`). `converged` needs fresh and complete evidence: the
//! hive says it converged on exactly the declared revision, and reports
//! every declared agent with the declared spec hash and an observed state
//! that matches its wanted power. A hive that says nothing about an agent
//! has not converged on it; a stale report is no evidence at all.
//!
//! Nothing here does I/O or reads a clock; `now` is an argument. The table
//! tests at the bottom are the specification.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use swarm_queue_client::payload::readiness_matches_key;
use swarm_queue_client::{
    decode, AgentName, Declaration, HiveName, HiveState, JobSummary, Observed, Power, Readiness,
    RetryStatus,
};
use time::OffsetDateTime;

use crate::config::RosterEntry;

/// How recent a hive's report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Freshness {
    Fresh,
    Stale,
    Unknown,
    Unrostered,
    Stopped,
}

impl Freshness {
    pub const ALL: [Freshness; 5] = [
        Freshness::Fresh,
        Freshness::Stale,
        Freshness::Unknown,
        Freshness::Unrostered,
        Freshness::Stopped,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::Unknown => "unknown",
            Freshness::Unrostered => "unrostered",
            Freshness::Stopped => "stopped",
        }
    }
}

impl fmt::Display for Freshness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a hive is on the way to its declared revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Convergence {
    Published,
    Progressing,
    Converged,
    Degraded,
    Failed,
    Unknown,
}

impl Convergence {
    pub const ALL: [Convergence; 6] = [
        Convergence::Converged,
        Convergence::Progressing,
        Convergence::Published,
        Convergence::Degraded,
        Convergence::Failed,
        Convergence::Unknown,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Convergence::Published => "published",
            Convergence::Progressing => "progressing",
            Convergence::Converged => "converged",
            Convergence::Degraded => "degraded",
            Convergence::Failed => "failed",
            Convergence::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Convergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value of `hyperhive-status/<hive>`, decoded once when it arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusEntry {
    /// KV revision of this value.
    pub revision: u64,
    /// When the server stored it: the only clock freshness trusts.
    pub created: OffsetDateTime,
    /// The readiness, or why it could not be read.
    pub readiness: Result<Readiness, String>,
    /// Things the reader should know (for example a newer schema).
    pub notes: Vec<String>,
}

impl StatusEntry {
    /// Decode a status value stored under `key`. A value that claims to be
    /// another hive is refused: it is no evidence about this one.
    pub fn decode(key: &str, revision: u64, created: OffsetDateTime, bytes: &[u8]) -> Self {
        let (readiness, notes) = match decode::<Readiness>(bytes) {
            Ok(d) => {
                let claims_other = HiveName::new(key)
                    .map(|k| !readiness_matches_key(&d.value, &k))
                    .unwrap_or(true);
                if claims_other {
                    (
                        Err(format!(
                            "the value stored under key {key:?} says it is hive {:?}",
                            d.value.hive.as_str()
                        )),
                        d.warnings,
                    )
                } else {
                    (Ok(d.value), d.warnings)
                }
            }
            Err(e) => (Err(e.to_string()), Vec::new()),
        };
        StatusEntry {
            revision,
            created,
            readiness,
            notes,
        }
    }
}

/// A decoded declaration with each agent's spec hash computed once.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub declaration: Declaration,
    pub spec_hashes: BTreeMap<AgentName, String>,
}

impl Declared {
    pub fn new(declaration: Declaration) -> Self {
        let spec_hashes = declaration
            .agents
            .iter()
            .map(|(name, spec)| (name.clone(), spec.spec_hash()))
            .collect();
        Declared {
            declaration,
            spec_hashes,
        }
    }
}

/// One value of `hyperhive-wanted/<hive>`.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedEntry {
    /// KV revision: the declaration's identity.
    pub revision: u64,
    pub created: OffsetDateTime,
    pub declared: Result<Declared, String>,
    pub notes: Vec<String>,
}

impl WantedEntry {
    pub fn decode(revision: u64, created: OffsetDateTime, bytes: &[u8]) -> Self {
        let (declared, notes) = match decode::<Declaration>(bytes) {
            Ok(d) => (Ok(Declared::new(d.value)), d.warnings),
            Err(e) => (Err(e.to_string()), Vec::new()),
        };
        WantedEntry {
            revision,
            created,
            declared,
            notes,
        }
    }
}

/// One agent of a hive's row: what is declared next to what is reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentRow {
    pub name: String,
    /// In the current declaration.
    pub declared: bool,
    /// Reported by the hive.
    pub reported: bool,
    pub wanted: Option<Power>,
    pub observed: Option<Observed>,
    /// The declared spec matches the running one (None: cannot tell).
    pub spec_matches: Option<bool>,
    pub last_job: Option<JobSummary>,
    /// Repo digest (`sha256:…`) of the image the agent runs, as reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// Docker's health status (`starting`, `healthy`, `unhealthy`), when
    /// the agent has a health check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// While the hive backs off before trying the agent again: the failing
    /// step, attempts, and seconds until the next try as of *now* (anchored
    /// to the status entry's timestamp).
    pub retry: Option<RetryStatus>,
    /// What is off about it, if anything.
    pub note: Option<String>,
}

/// A warning the hive raised about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowWarning {
    pub key: String,
    pub level: String,
    pub message: String,
}

/// Everything the controller says about one hive: a row of `status`, of
/// `/api/status` and of the dashboard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HiveRow {
    pub name: String,
    pub rostered: bool,
    pub labels: BTreeMap<String, String>,
    pub freshness: Freshness,
    /// Age of the status entry by the reader's clock, whole seconds.
    pub age_secs: Option<u64>,
    /// The same, in milliseconds, so the dashboard can tick from it.
    pub age_ms: Option<u64>,
    /// The status entry's own timestamp (RFC 3339).
    pub status_time: Option<String>,
    /// The same, in milliseconds since the Unix epoch.
    pub status_time_ms: Option<i64>,
    pub status_revision: Option<u64>,
    pub freshness_reason: String,
    pub convergence: Convergence,
    /// Why the hive has this convergence, in words.
    pub reason: String,
    pub declared_revision: Option<u64>,
    pub seen_revision: Option<u64>,
    pub converged_revision: Option<u64>,
    /// The hive's own state (`ok`, `degraded`, …) when its status decodes.
    pub state: Option<String>,
    pub ready: Option<bool>,
    pub version: Option<String>,
    pub warnings: Vec<RowWarning>,
    pub agents: Vec<AgentRow>,
    /// Decode warnings and errors of the stored values, never hidden.
    pub problems: Vec<String>,
    /// When this row turns stale if nothing new arrives (fresh rows only).
    #[serde(skip)]
    pub stale_at: Option<OffsetDateTime>,
}

/// Everything [`evaluate`] needs about one hive.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub name: &'a str,
    /// `None`: not on the roster.
    pub roster: Option<&'a RosterEntry>,
    pub status: Option<&'a StatusEntry>,
    pub wanted: Option<&'a WantedEntry>,
    pub now: OffsetDateTime,
    pub stale_after: Duration,
}

/// "42s", "3m05s", "2h01m", "3d04h".
pub fn human_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The row for one hive.
pub fn evaluate(i: Inputs<'_>) -> HiveRow {
    let age = i.status.map(|s| {
        let d = i.now - s.created;
        // A server clock ahead of ours gives a negative age: the entry is as
        // new as it can be.
        d.try_into().unwrap_or(Duration::ZERO)
    });
    let (timely, timely_reason) = timeliness(i.status, age, i.stale_after);
    let freshness = if i.roster.is_some() {
        timely
    } else {
        Freshness::Unrostered
    };
    let freshness_reason = if i.roster.is_some() {
        timely_reason
    } else {
        format!("not on this controller's roster; {timely_reason}")
    };
    let stale_at = match (timely, i.status) {
        (Freshness::Fresh, Some(s)) => Some(s.created + i.stale_after),
        _ => None,
    };

    let readiness = i.status.and_then(|s| s.readiness.as_ref().ok());
    let declared = i.wanted.and_then(|w| w.declared.as_ref().ok());
    let (convergence, reason) = convergence(timely, age, i.status, i.wanted);

    let mut problems = Vec::new();
    if let Some(s) = i.status {
        if let Err(e) = &s.readiness {
            problems.push(format!("status revision {}: {e}", s.revision));
        }
        problems.extend(s.notes.iter().cloned());
    }
    if let Some(w) = i.wanted {
        if let Err(e) = &w.declared {
            problems.push(format!("declaration revision {}: {e}", w.revision));
        }
        problems.extend(w.notes.iter().cloned());
    }

    HiveRow {
        name: i.name.to_string(),
        rostered: i.roster.is_some(),
        labels: i.roster.map(|r| r.labels.clone()).unwrap_or_default(),
        freshness,
        age_secs: age.map(|a| a.as_secs()),
        age_ms: age.map(|a| a.as_millis().try_into().unwrap_or(u64::MAX)),
        status_time: i.status.and_then(|s| {
            s.created
                .format(&time::format_description::well_known::Rfc3339)
                .ok()
        }),
        status_time_ms: i
            .status
            .map(|s| (s.created.unix_timestamp_nanos() / 1_000_000) as i64),
        status_revision: i.status.map(|s| s.revision),
        freshness_reason,
        convergence,
        reason,
        declared_revision: i.wanted.map(|w| w.revision),
        seen_revision: readiness.and_then(|r| r.seen_revision),
        converged_revision: readiness.and_then(|r| r.converged_revision),
        state: readiness.map(|r| r.state.to_string()),
        ready: readiness.map(|r| r.ready),
        version: readiness.map(|r| r.version.clone()),
        warnings: readiness
            .map(|r| {
                r.warnings
                    .iter()
                    .map(|w| RowWarning {
                        key: w.key.clone(),
                        level: serde_json::to_value(w.level)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_else(|| "unknown".into()),
                        message: w.message.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        agents: agent_rows(declared, readiness, age.unwrap_or_default()),
        problems,
        stale_at,
    }
}

fn timeliness(
    status: Option<&StatusEntry>,
    age: Option<Duration>,
    stale_after: Duration,
) -> (Freshness, String) {
    let (Some(s), Some(age)) = (status, age) else {
        return (
            Freshness::Unknown,
            "no status in hyperhive-status: the hive never reported, or its key was deleted".into(),
        );
    };
    let ago = human_age(age);
    match &s.readiness {
        Err(e) => (
            Freshness::Unknown,
            format!("the status stored {ago} ago does not decode: {e}"),
        ),
        Ok(r) if r.state == HiveState::Stopped => (
            Freshness::Stopped,
            format!("the hive shut down cleanly {ago} ago"),
        ),
        Ok(_) if age <= stale_after => (Freshness::Fresh, format!("reported {ago} ago")),
        Ok(_) => (
            Freshness::Stale,
            format!(
                "last report {ago} ago, over stale_after {}",
                human_age(stale_after)
            ),
        ),
    }
}

/// Whether what Docker shows is what the hive wants. `None`: cannot tell.
fn observed_matches(wanted: Power, observed: Observed) -> Option<bool> {
    match (wanted, observed) {
        (_, Observed::Unknown) => None,
        (Power::Up, Observed::Running) | (Power::Down, Observed::Stopped) => Some(true),
        _ => Some(false),
    }
}

fn short_hash(h: &str) -> &str {
    let end = "sha256:".len() + 12;
    h.get(..end).unwrap_or(h)
}

/// "failed at image, retrying in 4m00s (attempt 5): image local/x:1 is not
/// available". The hive counts `next_try_in_secs` from when it wrote the
/// status, so the countdown here is anchored to the entry's own timestamp:
/// `age` is how old that entry is by the reader's clock.
pub fn retry_text(r: &RetryStatus, age: Duration) -> String {
    let left = r.next_try_in_secs.saturating_sub(age.as_secs());
    let when = if left == 0 {
        "retry due now".to_string()
    } else {
        format!("retrying in {}", human_age(Duration::from_secs(left)))
    };
    let mut s = match &r.step {
        Some(step) => format!("failed at {step}, {when}"),
        None => format!("failed, {when}"),
    };
    s.push_str(&format!(" (attempt {})", r.attempts));
    if let Some(e) = &r.error {
        s.push_str(": ");
        s.push_str(e);
    }
    s
}

fn job_text(agent: &str, job: &JobSummary) -> String {
    let mut s = format!("{agent}: job {} ({}) {}", job.id, job.kind, job.state);
    if let Some(e) = &job.error {
        s.push_str(": ");
        s.push_str(e);
    }
    s
}

fn convergence(
    timely: Freshness,
    age: Option<Duration>,
    status: Option<&StatusEntry>,
    wanted: Option<&WantedEntry>,
) -> (Convergence, String) {
    use Convergence as C;
    let unknown = |why: String| (C::Unknown, why);
    // An undecodable status is the first thing to say: it is never hidden
    // behind anything else about the hive.
    let readiness = match status.map(|s| &s.readiness) {
        Some(Err(e)) => return unknown(format!("the hive's status does not decode: {e}")),
        Some(Ok(r)) => Some(r),
        None => None,
    };
    let Some(w) = wanted else {
        return unknown("nothing is declared for this hive (no key in hyperhive-wanted)".into());
    };
    let rev = w.revision;
    let declared = match &w.declared {
        Ok(d) => d,
        Err(e) => return unknown(format!("declared revision {rev} does not decode: {e}")),
    };
    let Some(r) = readiness else {
        return unknown(format!(
            "revision {rev} is declared, but the hive has no status to compare it with"
        ));
    };
    let ago = age.map(human_age).unwrap_or_default();
    match timely {
        Freshness::Stale => {
            return unknown(format!(
                "the last report is {ago} old (stale), so it is no evidence about revision {rev}"
            ))
        }
        Freshness::Stopped => {
            return unknown(format!(
            "the hive shut down cleanly {ago} ago; nothing there is converging on revision {rev}"
        ))
        }
        _ => {}
    }

    let seen = r.seen_revision.max(r.converged_revision);
    match seen {
        None => {
            return (
                C::Published,
                format!("revision {rev} is declared; the hive has not read any declaration yet"),
            )
        }
        Some(seen) if seen < rev => {
            return (
                C::Published,
                format!("revision {rev} is declared; the hive has read only up to revision {seen}"),
            )
        }
        Some(seen) if seen > rev => {
            return unknown(format!(
                "the hive reports revision {seen}, newer than the declared revision {rev} \
                 (was the wanted bucket recreated?)"
            ))
        }
        Some(_) => {}
    }

    // The hive has read exactly the declared revision: look at each agent.
    let mut unreported = Vec::new();
    let mut cannot_tell = Vec::new();
    let mut failed = Vec::new();
    let mut failed_in_place = Vec::new();
    let mut drift = Vec::new();
    let mut working = Vec::new();
    // Agents whose health check has not passed yet: not converged.
    let mut starting = Vec::new();
    for (agent, hash) in &declared.spec_hashes {
        let Some(a) = r.agents.get(agent) else {
            unreported.push(agent.to_string());
            continue;
        };
        match a.health.as_deref() {
            Some("unhealthy") => {
                drift.push(format!("{agent} is unhealthy (its health check fails)"))
            }
            Some("starting") => starting.push(format!("{agent} (health: starting)")),
            _ => {}
        }
        let spec_ok = a.spec.as_deref() == Some(hash.as_str());
        let power_ok = observed_matches(a.wanted, a.observed);
        let in_place = spec_ok && power_ok == Some(true);
        // A job belongs to this declaration when the hive was working towards
        // the spec declared now (or does not say which spec it worked on).
        let job_is_current = a.declared_spec.as_deref().is_none_or(|d| d == hash);
        if let Some(job) = &a.last_job {
            if job.state == "failed" && job_is_current {
                let text = match &a.retry {
                    Some(r) => format!(
                        "{agent}: job {} ({}) {}",
                        job.id,
                        job.kind,
                        retry_text(r, age.unwrap_or_default())
                    ),
                    None => job_text(agent.as_str(), job),
                };
                if in_place {
                    failed_in_place.push(text);
                } else {
                    failed.push(text);
                }
            } else if job.state == "pending" || job.state == "running" {
                working.push(job_text(agent.as_str(), job));
            }
        }
        if power_ok.is_none() {
            cannot_tell.push(format!("{agent}: Docker state unknown"));
        } else if !in_place {
            let mut what = Vec::new();
            if power_ok == Some(false) {
                what.push(format!("{} (wanted {})", a.observed, a.wanted));
            }
            if !spec_ok {
                what.push(match &a.spec {
                    Some(spec) => format!(
                        "runs spec {} (declared {})",
                        short_hash(spec),
                        short_hash(hash)
                    ),
                    None => format!("no container spec (declared {})", short_hash(hash)),
                });
            }
            drift.push(format!("{agent} {}", what.join(", ")));
        }
    }
    for (agent, a) in &r.agents {
        if !declared.spec_hashes.contains_key(agent) && a.observed == Observed::Running {
            drift.push(format!("{agent} runs but is not declared"));
        }
    }

    if r.converged_revision != Some(rev) {
        if !failed.is_empty() {
            return (
                C::Failed,
                format!("revision {rev} failed: {}", failed.join("; ")),
            );
        }
        let mut detail = working;
        if !unreported.is_empty() {
            detail.push(format!("not reported yet: {}", unreported.join(", ")));
        }
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(": {}", detail.join("; "))
        };
        return (
            C::Progressing,
            format!("the hive read revision {rev} and is converging on it{detail}"),
        );
    }

    // The hive says it converged on the declared revision; check the evidence.
    if !unreported.is_empty() {
        return unknown(format!(
            "the hive says it converged on revision {rev} but reports nothing about {}",
            unreported.join(", ")
        ));
    }
    if !cannot_tell.is_empty() {
        return unknown(format!(
            "the hive says it converged on revision {rev}, but {}",
            cannot_tell.join("; ")
        ));
    }
    if !failed.is_empty() {
        return (
            C::Failed,
            format!("revision {rev} failed: {}", failed.join("; ")),
        );
    }
    if !starting.is_empty() && drift.is_empty() {
        return (
            C::Progressing,
            format!(
                "the hive runs revision {rev}; waiting for health checks to pass: {}",
                starting.join(", ")
            ),
        );
    }
    let mut degraded = drift;
    degraded.extend(
        failed_in_place
            .into_iter()
            .map(|f| format!("{f} (the running container is still the declared one)")),
    );
    if r.state != HiveState::Ok {
        let mut why = format!("the hive is {}", r.state);
        let worst: Vec<&str> = r
            .warnings
            .iter()
            .filter(|w| w.level != swarm_queue_client::Level::Info)
            .map(|w| w.message.as_str())
            .collect();
        if !worst.is_empty() {
            why.push_str(": ");
            why.push_str(&worst.join("; "));
        }
        degraded.push(why);
    }
    if !degraded.is_empty() {
        return (
            C::Degraded,
            format!("converged on revision {rev}, but {}", degraded.join("; ")),
        );
    }
    let n = declared.spec_hashes.len();
    (
        C::Converged,
        format!(
            "converged on revision {rev}: {n} agent{} as declared, reported {ago} ago",
            if n == 1 { "" } else { "s" }
        ),
    )
}

fn agent_rows(
    declared: Option<&Declared>,
    readiness: Option<&Readiness>,
    age: Duration,
) -> Vec<AgentRow> {
    let mut names: Vec<&AgentName> = Vec::new();
    if let Some(d) = declared {
        names.extend(d.spec_hashes.keys());
    }
    if let Some(r) = readiness {
        names.extend(r.agents.keys());
    }
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let hash = declared.and_then(|d| d.spec_hashes.get(name));
            let report = readiness.and_then(|r| r.agents.get(name));
            let spec_matches = match (hash, report.and_then(|a| a.spec.as_ref())) {
                (Some(h), Some(s)) => Some(h == s),
                (Some(_), None) if report.is_some() => Some(false),
                _ => None,
            };
            let note = match (hash, report) {
                (Some(_), None) => Some("declared, not reported by the hive".to_string()),
                (None, Some(_)) => Some("reported, not declared".to_string()),
                (Some(_), Some(a)) => {
                    let mut off = Vec::new();
                    if observed_matches(a.wanted, a.observed) != Some(true) {
                        off.push(format!("{} (wanted {})", a.observed, a.wanted));
                    }
                    if spec_matches == Some(false) {
                        off.push("spec differs from the declaration".to_string());
                    }
                    if let Some(r) = &a.retry {
                        off.push(retry_text(r, age));
                    }
                    (!off.is_empty()).then(|| off.join(", "))
                }
                (None, None) => None,
            };
            AgentRow {
                name: name.to_string(),
                declared: hash.is_some(),
                reported: report.is_some(),
                wanted: report.map(|a| a.wanted),
                observed: report.map(|a| a.observed),
                spec_matches,
                last_job: report.and_then(|a| a.last_job.clone()),
                image_digest: report.and_then(|a| a.image_digest.clone()),
                health: report.and_then(|a| a.health.clone()),
                retry: report.and_then(|a| a.retry.clone()).map(|mut r| {
                    r.next_try_in_secs = r.next_try_in_secs.saturating_sub(age.as_secs());
                    r
                }),
                note,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::{AgentSpec, AgentStatus, Level, Warning};

    const STALE_AFTER: Duration = Duration::from_secs(120);

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn spec(image: &str) -> AgentSpec {
        AgentSpec {
            image: Some(image.into()),
            ..Default::default()
        }
    }

    fn declaration(agents: &[(&str, &str)]) -> Declaration {
        Declaration::new(
            agents
                .iter()
                .map(|(a, img)| (AgentName::new(*a).unwrap(), spec(img)))
                .collect(),
        )
    }

    fn wanted(revision: u64, d: Declaration) -> WantedEntry {
        WantedEntry {
            revision,
            created: t0(),
            declared: Ok(Declared::new(d)),
            notes: vec![],
        }
    }

    fn agent(image: &str, observed: Observed, job: Option<(&str, Option<&str>)>) -> AgentStatus {
        let hash = spec(image).spec_hash();
        AgentStatus {
            wanted: Power::Up,
            observed,
            spec: Some(hash.clone()),
            declared_spec: Some(hash),
            image_progress: None,
            image_digest: None,
            health: None,
            last_job: job.map(|(state, error)| JobSummary {
                id: 7,
                kind: "first_deploy".into(),
                state: state.into(),
                error: error.map(str::to_string),
            }),
            retry: None,
        }
    }

    fn readiness(
        state: HiveState,
        seen: Option<u64>,
        converged: Option<u64>,
        agents: Vec<(&str, AgentStatus)>,
    ) -> Readiness {
        Readiness {
            schema: 1,
            hive: HiveName::new("alpha").unwrap(),
            ready: state == HiveState::Ok,
            state,
            warnings: vec![],
            converged_revision: converged,
            seen_revision: seen,
            agents: agents
                .into_iter()
                .map(|(n, a)| (AgentName::new(n).unwrap(), a))
                .collect(),
            xkey: None,
            version: "0.1.0".into(),
        }
    }

    fn status_at(age_secs: i64, r: Readiness) -> StatusEntry {
        StatusEntry {
            revision: 3,
            created: t0() - time::Duration::seconds(age_secs),
            readiness: Ok(r),
            notes: vec![],
        }
    }

    fn run(rostered: bool, status: Option<&StatusEntry>, wanted: Option<&WantedEntry>) -> HiveRow {
        let roster = RosterEntry::default();
        evaluate(Inputs {
            name: "alpha",
            roster: rostered.then_some(&roster),
            status,
            wanted,
            now: t0(),
            stale_after: STALE_AFTER,
        })
    }

    fn ok_hive(seen: u64, converged: u64) -> Readiness {
        readiness(
            HiveState::Ok,
            Some(seen),
            Some(converged),
            vec![(
                "bot",
                agent("img:1", Observed::Running, Some(("done", None))),
            )],
        )
    }

    #[test]
    fn freshness_table() {
        let undecodable = StatusEntry {
            revision: 9,
            created: t0(),
            readiness: Err("readiness is not valid: expected value".into()),
            notes: vec![],
        };
        let cases: Vec<(&str, bool, Option<StatusEntry>, Freshness, &str)> = vec![
            ("no key", true, None, Freshness::Unknown, "never reported"),
            (
                "just now",
                true,
                Some(status_at(0, ok_hive(1, 1))),
                Freshness::Fresh,
                "0s ago",
            ),
            (
                "at the limit",
                true,
                Some(status_at(120, ok_hive(1, 1))),
                Freshness::Fresh,
                "2m00s",
            ),
            (
                "over the limit",
                true,
                Some(status_at(121, ok_hive(1, 1))),
                Freshness::Stale,
                "over stale_after",
            ),
            (
                "from the future",
                true,
                Some(status_at(-30, ok_hive(1, 1))),
                Freshness::Fresh,
                "0s ago",
            ),
            (
                "stopped, even when recent",
                true,
                Some(status_at(
                    1,
                    readiness(HiveState::Stopped, None, None, vec![]),
                )),
                Freshness::Stopped,
                "shut down cleanly",
            ),
            (
                "undecodable",
                true,
                Some(undecodable.clone()),
                Freshness::Unknown,
                "expected value",
            ),
            (
                "unrostered",
                false,
                Some(status_at(0, ok_hive(1, 1))),
                Freshness::Unrostered,
                "not on this controller's roster",
            ),
            (
                "unrostered and undecodable",
                false,
                Some(undecodable),
                Freshness::Unrostered,
                "expected value",
            ),
        ];
        for (what, rostered, status, want, reason) in cases {
            let row = run(rostered, status.as_ref(), None);
            assert_eq!(row.freshness, want, "{what}: {row:?}");
            assert!(
                row.freshness_reason.contains(reason),
                "{what}: {:?} lacks {reason:?}",
                row.freshness_reason
            );
        }
    }

    #[test]
    fn age_and_stale_deadline_come_from_the_entry_timestamp() {
        let s = status_at(30, ok_hive(1, 1));
        let row = run(true, Some(&s), None);
        assert_eq!(row.age_secs, Some(30));
        assert_eq!(row.age_ms, Some(30_000));
        assert_eq!(row.stale_at, Some(s.created + STALE_AFTER));
        assert_eq!(row.status_time.as_deref(), Some("2027-01-15T07:59:30Z"));
        let stale = run(true, Some(&status_at(500, ok_hive(1, 1))), None);
        assert_eq!(stale.stale_at, None);
    }

    #[test]
    fn a_value_under_another_hives_key_is_not_evidence() {
        let bytes = serde_json::to_vec(&ok_hive(1, 1)).unwrap();
        let entry = StatusEntry::decode("beta", 4, t0(), &bytes);
        let err = entry.readiness.unwrap_err();
        assert!(
            err.contains("\"beta\"") && err.contains("\"alpha\""),
            "{err}"
        );
        let garbage = StatusEntry::decode("alpha", 4, t0(), b"{not json");
        assert!(garbage
            .readiness
            .unwrap_err()
            .contains("readiness is not valid"));
    }

    #[test]
    fn convergence_table() {
        use Convergence as C;
        let decl = || declaration(&[("bot", "img:1")]);
        let undecodable_wanted = WantedEntry {
            revision: 5,
            created: t0(),
            declared: Err("declaration is not valid: missing field `agents`".into()),
            notes: vec![],
        };
        let drifted_spec = {
            let mut a = agent("img:0", Observed::Running, Some(("done", None)));
            a.declared_spec = Some(spec("img:1").spec_hash());
            a
        };
        let with_health = |h: &str| {
            let mut a = agent("img:1", Observed::Running, Some(("done", None)));
            a.health = Some(h.to_string());
            readiness(HiveState::Ok, Some(5), Some(5), vec![("bot", a)])
        };
        let degraded_hive = {
            let mut r = ok_hive(5, 5);
            r.state = HiveState::Degraded;
            r.warnings = vec![Warning::new("disk", Level::Warn, "disk 95% full")];
            r
        };
        type Case = (
            &'static str,
            Option<StatusEntry>,
            Option<WantedEntry>,
            C,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "nothing declared",
                Some(status_at(1, ok_hive(5, 5))),
                None,
                C::Unknown,
                "nothing is declared",
            ),
            (
                "declaration undecodable",
                Some(status_at(1, ok_hive(5, 5))),
                Some(undecodable_wanted),
                C::Unknown,
                "missing field `agents`",
            ),
            (
                "never reported",
                None,
                Some(wanted(5, decl())),
                C::Unknown,
                "no status",
            ),
            (
                "stale",
                Some(status_at(500, ok_hive(5, 5))),
                Some(wanted(5, decl())),
                C::Unknown,
                "stale",
            ),
            (
                "stopped",
                Some(status_at(
                    1,
                    readiness(HiveState::Stopped, Some(5), Some(5), vec![]),
                )),
                Some(wanted(5, decl())),
                C::Unknown,
                "shut down cleanly",
            ),
            (
                "not read yet",
                Some(status_at(1, readiness(HiveState::Ok, None, None, vec![]))),
                Some(wanted(5, decl())),
                C::Published,
                "not read any declaration",
            ),
            (
                "older revision read",
                Some(status_at(1, ok_hive(4, 4))),
                Some(wanted(5, decl())),
                C::Published,
                "only up to revision 4",
            ),
            (
                "newer than declared",
                Some(status_at(1, ok_hive(6, 6))),
                Some(wanted(5, decl())),
                C::Unknown,
                "newer than the declared",
            ),
            (
                "read, working",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(4),
                        vec![(
                            "bot",
                            agent("img:1", Observed::Missing, Some(("running", None))),
                        )],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Progressing,
                "bot: job 7 (first_deploy) running",
            ),
            (
                "read, agent not reported yet",
                Some(status_at(
                    1,
                    readiness(HiveState::Ok, Some(5), Some(4), vec![]),
                )),
                Some(wanted(5, decl())),
                C::Progressing,
                "not reported yet: bot",
            ),
            (
                "job failed",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Degraded,
                        Some(5),
                        Some(4),
                        vec![(
                            "bot",
                            agent(
                                "img:1",
                                Observed::Missing,
                                Some(("failed", Some("pull: no such image"))),
                            ),
                        )],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Failed,
                "pull: no such image",
            ),
            (
                "job of an older spec failed: still progressing",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(4),
                        vec![("bot", {
                            let mut a =
                                agent("img:0", Observed::Missing, Some(("failed", Some("old"))));
                            a.declared_spec = Some(spec("img:0").spec_hash());
                            a
                        })],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Progressing,
                "converging",
            ),
            (
                "converged",
                Some(status_at(1, ok_hive(5, 5))),
                Some(wanted(5, decl())),
                C::Converged,
                "1 agent as declared",
            ),
            (
                "empty declaration converged",
                Some(status_at(
                    1,
                    readiness(HiveState::Ok, Some(5), Some(5), vec![]),
                )),
                Some(wanted(5, declaration(&[]))),
                C::Converged,
                "0 agents",
            ),
            (
                "claims convergence, reports nothing about a declared agent",
                Some(status_at(
                    1,
                    readiness(HiveState::Ok, Some(5), Some(5), vec![]),
                )),
                Some(wanted(5, decl())),
                C::Unknown,
                "reports nothing about bot",
            ),
            (
                "claims convergence, Docker state unknown",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(5),
                        vec![("bot", agent("img:1", Observed::Unknown, None))],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Unknown,
                "Docker state unknown",
            ),
            (
                "converged, health check still starting",
                Some(status_at(1, with_health("starting"))),
                Some(wanted(5, decl())),
                C::Progressing,
                "waiting for health checks to pass: bot (health: starting)",
            ),
            (
                "converged, health check failing",
                Some(status_at(1, with_health("unhealthy"))),
                Some(wanted(5, decl())),
                C::Degraded,
                "bot is unhealthy",
            ),
            (
                "converged, health check passing",
                Some(status_at(1, with_health("healthy"))),
                Some(wanted(5, decl())),
                C::Converged,
                "1 agent as declared",
            ),
            (
                "converged but agent stopped",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(5),
                        vec![("bot", agent("img:1", Observed::Stopped, None))],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Degraded,
                "bot stopped (wanted up)",
            ),
            (
                "converged but spec drift",
                Some(status_at(
                    1,
                    readiness(HiveState::Ok, Some(5), Some(5), vec![("bot", drifted_spec)]),
                )),
                Some(wanted(5, decl())),
                C::Degraded,
                "runs spec",
            ),
            (
                "converged but hive degraded",
                Some(status_at(1, degraded_hive)),
                Some(wanted(5, decl())),
                C::Degraded,
                "disk 95% full",
            ),
            (
                "converged, undeclared agent still running",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(5),
                        vec![
                            ("bot", agent("img:1", Observed::Running, None)),
                            ("old", agent("img:9", Observed::Running, None)),
                        ],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Degraded,
                "old runs but is not declared",
            ),
            (
                "converged, a later redeploy failed but the declared container runs",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(5),
                        vec![(
                            "bot",
                            agent(
                                "img:1",
                                Observed::Running,
                                Some(("failed", Some("build broke"))),
                            ),
                        )],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Degraded,
                "build broke",
            ),
            (
                "converged, agent wanted down and stopped",
                Some(status_at(
                    1,
                    readiness(
                        HiveState::Ok,
                        Some(5),
                        Some(5),
                        vec![("bot", {
                            let mut a = agent("img:1", Observed::Stopped, None);
                            a.wanted = Power::Down;
                            a
                        })],
                    ),
                )),
                Some(wanted(5, decl())),
                C::Converged,
                "as declared",
            ),
        ];
        for (what, status, wanted, want, reason) in cases {
            let row = run(true, status.as_ref(), wanted.as_ref());
            assert_eq!(row.convergence, want, "{what}: {}", row.reason);
            assert!(
                row.reason.contains(reason),
                "{what}: {:?} lacks {reason:?}",
                row.reason
            );
        }
    }

    #[test]
    fn decode_problems_are_shown_never_hidden() {
        let bad = StatusEntry::decode("alpha", 2, t0(), br#"{"schema":1}"#);
        let row = run(true, Some(&bad), Some(&wanted(5, declaration(&[]))));
        assert_eq!(row.freshness, Freshness::Unknown);
        assert_eq!(row.convergence, Convergence::Unknown);
        assert!(
            row.problems[0].contains("status revision 2"),
            "{:?}",
            row.problems
        );
        assert!(row.reason.contains("does not decode"), "{}", row.reason);
    }

    #[test]
    fn agent_rows_join_declared_and_reported() {
        let s = status_at(
            1,
            readiness(
                HiveState::Ok,
                Some(5),
                Some(5),
                vec![
                    ("bot", agent("img:1", Observed::Running, None)),
                    ("old", agent("img:9", Observed::Missing, None)),
                ],
            ),
        );
        let w = wanted(5, declaration(&[("bot", "img:1"), ("new", "img:2")]));
        let row = run(true, Some(&s), Some(&w));
        let names: Vec<_> = row.agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["bot", "new", "old"]);
        assert_eq!(row.agents[0].spec_matches, Some(true));
        assert!(row.agents[0].note.is_none());
        assert!(row.agents[1]
            .note
            .as_deref()
            .unwrap()
            .contains("not reported"));
        assert!(row.agents[2]
            .note
            .as_deref()
            .unwrap()
            .contains("not declared"));
    }

    #[test]
    fn retry_countdown_is_anchored_to_the_entry_timestamp() {
        let r = RetryStatus {
            step: Some("image".into()),
            attempts: 5,
            next_try_in_secs: 300,
            error: Some("image local/x:1 is not available".into()),
        };
        assert_eq!(
            retry_text(&r, Duration::from_secs(60)),
            "failed at image, retrying in 4m00s (attempt 5): image local/x:1 is not available"
        );
        assert!(
            retry_text(&r, Duration::from_secs(400)).starts_with("failed at image, retry due now")
        );

        // A failed agent with a retry: the reason says so.
        let mut status = agent("img:1", Observed::Missing, Some(("failed", Some("boom"))));
        status.retry = Some(r);
        let d = declaration(&[("web", "img:1")]);
        let mut ready = ok_hive(3, 2);
        ready.agents.insert(AgentName::new("web").unwrap(), status);
        let row = run(true, Some(&status_at(60, ready)), Some(&wanted(3, d)));
        assert_eq!(row.convergence, Convergence::Failed, "{}", row.reason);
        assert!(
            row.reason.contains(
                "web: job 7 (first_deploy) failed at image, retrying in 4m00s (attempt 5)"
            ),
            "{}",
            row.reason
        );
        let web = row.agents.iter().find(|a| a.name == "web").unwrap();
        assert_eq!(web.retry.as_ref().unwrap().next_try_in_secs, 240);
        assert!(web.note.as_deref().unwrap().contains("retrying in 4m00s"));
    }

    #[test]
    fn human_ages() {
        for (secs, text) in [
            (0, "0s"),
            (59, "59s"),
            (65, "1m05s"),
            (7260, "2h01m"),
            (90_000, "1d01h"),
        ] {
            assert_eq!(human_age(Duration::from_secs(secs)), text);
        }
    }
}
