//! One hive's agent rows: what is declared joined with what is reported,
//! and the small texts the rows and the convergence rules share.

use std::time::Duration;

use swarm_queue_client::{JobSummary, Observed, Power, Unsettled};

use super::{retry_text, AgentRow, ByName, Declared, Reported, ReportedAgent};
use crate::age::human_age;

/// One row per agent that is declared, reported, or both, sorted by name.
pub(super) fn agent_rows(
    declared: Option<&Declared>,
    reported: Option<&Reported>,
    age: Duration,
) -> Vec<AgentRow> {
    let (none_declared, none_reported) = (ByName::default(), ByName::default());
    let hashes = declared.map_or(&none_declared, |d| &d.spec_hashes);
    let reports = reported.map_or(&none_reported, |r| &r.agents);
    hashes
        .outer_join(reports)
        .map(|(name, hash, report)| {
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
                    if let Some(u) = unsettled_text(a, age) {
                        off.push(u);
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
                image_digest: report.and_then(|a| a.image_digest.as_ref().map(|d| d.to_string())),
                health: report.and_then(|a| a.health.clone()),
                retry: report.and_then(|a| a.retry.clone()).map(|mut r| {
                    r.next_try_in_secs = r.next_try_in_secs.saturating_sub(age.as_secs());
                    r
                }),
                unsettled: report.and_then(|a| a.unsettled),
                exits: report
                    .and_then(|a| a.exits.clone())
                    .map(|e| exits_now(e, age)),
                note,
            }
        })
        .collect()
}

/// `e` as of now: its ages grown and its countdown shrunk by `age`, the
/// status entry's age.
fn exits_now(
    mut e: swarm_queue_client::ExitReport,
    age: Duration,
) -> swarm_queue_client::ExitReport {
    let secs = age.as_secs();
    e.first = e.first.map(|s| s.saturating_add(secs));
    e.since = e.since.map(|s| s.saturating_add(secs));
    e.next_in = e.next_in.map(|s| s.saturating_sub(secs));
    e
}

/// Whether what Docker shows is what the hive wants. `None`: cannot tell.
pub(super) fn observed_matches(wanted: Power, observed: Observed) -> Option<bool> {
    match (wanted, observed) {
        (_, Observed::Unknown) => None,
        (Power::Up, Observed::Running) | (Power::Down, Observed::Stopped) => Some(true),
        _ => Some(false),
    }
}

/// Why the hive does not count the agent as declared, with its exit
/// evidence: "crash loop: exited 3 (5 times in 4m00s), next start in 40s",
/// "OOM-killed: exited 137 (1 time in 0s), starting again". `None` when
/// the hive counts it as declared, or only its health check fails (which
/// is said on its own).
pub(super) fn unsettled_text(a: &ReportedAgent, age: Duration) -> Option<String> {
    let why = a.unsettled?;
    if why == Unsettled::Unhealthy || a.health.as_deref() == Some("unhealthy") {
        return None;
    }
    let Some(e) = a.exits.as_ref().filter(|e| e.count > 0) else {
        return Some(why.to_string());
    };
    let code = e.code.map_or_else(|| "?".to_string(), |c| c.to_string());
    let span = e
        .first
        .map(|s| format!(" in {}", human_age(Duration::from_secs(s) + age)))
        .unwrap_or_default();
    let times = if e.count == 1 { "time" } else { "times" };
    let history = format!("exited {code} ({} {times}{span})", e.count);
    let next = e
        .next_in
        .map(|s| s.saturating_sub(age.as_secs()))
        .filter(|s| *s > 0);
    let head = if e.oom {
        "OOM-killed: "
    } else if why == Unsettled::Backoff || e.count > 1 {
        "crash loop: "
    } else {
        ""
    };
    Some(match (why, next) {
        (Unsettled::Young, _) => format!("{why}; before: {head}{history}"),
        (_, Some(n)) => format!(
            "{head}{history}, next start in {}",
            human_age(Duration::from_secs(n))
        ),
        (_, None) => format!("{head}{history}, starting again"),
    })
}

pub(super) fn job_text(agent: &str, job: &JobSummary) -> String {
    let mut s = format!("{agent}: job {} ({}) {}", job.id, job.kind, job.state);
    if let Some(e) = &job.error {
        s.push_str(": ");
        s.push_str(e);
    }
    s
}
