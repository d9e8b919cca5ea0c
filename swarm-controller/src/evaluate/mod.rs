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
//! **Maintenance**: a rostered hive with a maintenance hold in force (its
//! entry's server timestamp plus its TTL is after `now`) shows freshness
//! `maintenance` instead of whatever its status entry says (`stale`,
//! `offline`, …), with the hold in the row. Convergence is judged from the
//! status entry as always: a hold is no evidence, so a stale hive in
//! maintenance is `unknown`, never `converged`. An expired or undecodable
//! hold is ignored.
//!
//! Nothing here does I/O or reads a clock; `now` is an argument. The table
//! tests in `tests.rs` are the specification.
//!
//! Parts: this file holds the row types and [`evaluate`] (freshness and the
//! assembly of a row); `rules.rs` is convergence as an ordered table of
//! rules; `agents.rs` joins declared and reported agents into rows;
//! `entries.rs` is what is kept of each stored value, `hash_text.rs` a
//! spec hash or image digest kept as its 32 bytes.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use swarm_queue_client::{
    ExitReport, HiveState, JobSummary, Observed, Power, RetryStatus, Unsettled,
};
use time::OffsetDateTime;

use crate::age::human_age;
use crate::maintenance::{HoldEntry, HoldView};
use crate::roster::{Labels, RosterEntry};

mod agents;
mod entries;
mod hash_text;
mod rules;

pub use entries::{
    ByName, Declared, EntryError, Reported, ReportedAgent, StatusEntry, WantedEntry,
};
pub use hash_text::HashText;

/// How recent a hive's report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Freshness {
    Fresh,
    Stale,
    Unknown,
    Unrostered,
    Stopped,
    /// The status entry is there, but the server says the hive's NATS
    /// connection is gone (the connection rule, see [`Link`]).
    Offline,
    /// An operator put the hive in maintenance (a hold in
    /// `hyperhive-maintenance` still in force): down on purpose.
    Maintenance,
}

impl Freshness {
    pub const ALL: [Freshness; 7] = [
        Freshness::Fresh,
        Freshness::Stale,
        Freshness::Unknown,
        Freshness::Unrostered,
        Freshness::Stopped,
        Freshness::Offline,
        Freshness::Maintenance,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::Unknown => "unknown",
            Freshness::Unrostered => "unrostered",
            Freshness::Stopped => "stopped",
            Freshness::Offline => "offline",
            Freshness::Maintenance => "maintenance",
        }
    }
}

impl fmt::Display for Freshness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the NATS server says of a hive's connection, when the controller
/// hears its connect and disconnect events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// At least one connection of the hive is open.
    Up,
    /// None is: `why` says since when and why, in words.
    Down { why: String },
}

/// Which rule decided a row's freshness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FreshnessRule {
    /// The server's connection events: a closed connection shows at once.
    Connection,
    /// Only the status entry's age against `stale_after` (no events: no
    /// system account, or a hive on a leaf-node site).
    KvTimestamp,
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
    /// Why the hive does not count it as declared yet (an exit, a
    /// crash-loop delay, too young, unhealthy), as the hive reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<Unsettled>,
    /// Its exit evidence (code, OOM kill, count since the spec changed),
    /// with `first`, `since` and `next_in` as of *now*, like `retry`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exits: Option<ExitReport>,
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
    pub labels: Labels,
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
    /// Whether the connection events or only the entry's age decided.
    pub freshness_rule: FreshnessRule,
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
    /// The maintenance hold in force, if any (freshness is then
    /// `maintenance`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<HoldView>,
    /// When this row changes if nothing new arrives: a fresh row turns
    /// stale, a maintenance hold ends.
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
    /// The hive's maintenance hold, in force or not.
    pub hold: Option<&'a HoldEntry>,
    pub now: OffsetDateTime,
    pub stale_after: Duration,
    /// `None`: no connection events for this hive (the KV-timestamp rule).
    pub link: Option<&'a Link>,
}

/// The row for one hive.
pub fn evaluate(i: Inputs<'_>) -> HiveRow {
    let age = i.status.map(|s| {
        let d = i.now - s.created;
        // A server clock ahead of ours gives a negative age: the entry is as
        // new as it can be.
        d.try_into().unwrap_or(Duration::ZERO)
    });
    let (timely, timely_reason) = match (timeliness(i.status, age, i.stale_after), i.link) {
        ((Freshness::Fresh | Freshness::Stale, reported), Some(Link::Down { why })) => {
            (Freshness::Offline, format!("{why}; {reported}"))
        }
        (t, _) => t,
    };
    let maintenance = i.hold.and_then(|h| h.active(i.now));
    let (freshness, freshness_reason) = match (i.roster, &maintenance) {
        (None, _) => (
            Freshness::Unrostered,
            format!("not on this controller's roster; {timely_reason}"),
        ),
        (Some(_), Some(m)) => (
            Freshness::Maintenance,
            format!("in maintenance {}; {timely_reason}", m.line()),
        ),
        (Some(_), None) => (timely, timely_reason),
    };
    let stale_at = match (&maintenance, timely, i.status) {
        (Some(_), _, _) => i.hold.and_then(HoldEntry::until),
        (None, Freshness::Fresh, Some(s)) => Some(s.created + i.stale_after),
        _ => None,
    };

    let reported = i.status.and_then(|s| s.reported.as_ref().ok());
    let declared = i.wanted.and_then(|w| w.declared.as_ref().ok());
    let (convergence, reason) = rules::convergence(timely, age, i.status, i.wanted);

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
        freshness_rule: match i.link {
            Some(_) => FreshnessRule::Connection,
            None => FreshnessRule::KvTimestamp,
        },
        convergence,
        reason,
        declared_revision: i.wanted.map(|w| w.revision),
        seen_revision: reported.and_then(|r| r.seen_revision),
        converged_revision: reported.and_then(|r| r.converged_revision),
        state: reported.map(|r| r.state.to_string()),
        ready: reported.map(|r| r.ready),
        version: reported.map(|r| r.version.clone()),
        warnings: reported.map(row_warnings).unwrap_or_default(),
        agents: agents::agent_rows(declared, reported, age.unwrap_or_default()),
        problems: problems(i.status, i.wanted, i.hold),
        maintenance: maintenance.filter(|_| i.roster.is_some()),
        stale_at,
    }
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
    match &s.reported {
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

/// Decode warnings and errors of the stored values, never hidden.
fn problems(
    status: Option<&StatusEntry>,
    wanted: Option<&WantedEntry>,
    hold: Option<&HoldEntry>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(s) = status {
        if let Err(e) = &s.reported {
            problems.push(format!("status revision {}: {e}", s.revision));
        }
        problems.extend(s.notes.iter().cloned());
    }
    if let Some(w) = wanted {
        if let Err(e) = &w.declared {
            problems.push(format!("declaration revision {}: {e}", w.revision));
        }
        problems.extend(w.notes.iter().cloned());
    }
    if let Some(Err(e)) = hold.map(|h| &h.hold) {
        problems.push(format!(
            "maintenance revision {}: {e}; the hive is not held",
            hold.map_or(0, |h| h.revision)
        ));
    }
    problems
}

fn row_warnings(r: &Reported) -> Vec<RowWarning> {
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
}

#[cfg(test)]
mod tests;
