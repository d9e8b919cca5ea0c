//! Convergence as an ordered table of rules.
//!
//! First the inputs must be readable at all ([`comparable`]): a status that
//! does not decode, nothing declared, a declaration that does not decode, or
//! no status are each `unknown`, in that order. Then the evidence is gathered
//! once ([`Evidence`]) and the [`RULES`] are tried top to bottom; the first
//! that applies gives the verdict, and a hive no rule objects to has
//! converged. The order is the specification: for example a failed job
//! beats an unreported agent while the hive is still converging, but once
//! the hive claims convergence, missing evidence is said first.

use std::time::Duration;

use swarm_queue_client::{HiveState, Level, Observed};

use super::agents::{job_text, observed_matches, unsettled_text};
use super::{
    human_age, retry_text, Convergence, Declared, Freshness, HashText, Reported, ReportedAgent,
    StatusEntry, WantedEntry,
};

/// A convergence and why, in words.
pub(super) type Verdict = (Convergence, String);

/// Where `hive` is on the way to its declared revision, and why.
pub(super) fn convergence(
    timely: Freshness,
    age: Option<Duration>,
    status: Option<&StatusEntry>,
    wanted: Option<&WantedEntry>,
) -> Verdict {
    let (rev, declared, reported) = match comparable(status, wanted) {
        Ok(inputs) => inputs,
        Err(verdict) => return verdict,
    };
    let evidence = Evidence::gather(timely, age, rev, declared, reported);
    RULES
        .iter()
        .find_map(|rule| (rule.verdict)(&evidence))
        .unwrap_or_else(|| converged(&evidence))
}

/// One named rule: `verdict` is `None` when the rule does not apply.
struct Rule {
    #[allow(dead_code)] // The name documents the table and shows in a debugger.
    name: &'static str,
    verdict: fn(&Evidence<'_>) -> Option<Verdict>,
}

/// The rules, in the order they are tried.
const RULES: &[Rule] = &[
    Rule {
        name: "stale report",
        verdict: stale,
    },
    Rule {
        name: "hive stopped",
        verdict: stopped,
    },
    Rule {
        name: "no declaration read",
        verdict: nothing_read,
    },
    Rule {
        name: "older declaration read",
        verdict: older_read,
    },
    Rule {
        name: "newer revision than declared",
        verdict: newer_read,
    },
    Rule {
        name: "a job failed while converging",
        verdict: failed_while_converging,
    },
    Rule {
        name: "converging",
        verdict: converging,
    },
    Rule {
        name: "claims convergence, agents unreported",
        verdict: claimed_but_unreported,
    },
    Rule {
        name: "claims convergence, Docker state unknown",
        verdict: claimed_but_cannot_tell,
    },
    Rule {
        name: "a job failed",
        verdict: failed,
    },
    Rule {
        name: "health checks pending",
        verdict: health_starting,
    },
    Rule {
        name: "drift or an unhealthy hive",
        verdict: degraded,
    },
];

/// The declared revision, its declaration and the hive's status, or why
/// they cannot be compared.
fn comparable<'a>(
    status: Option<&'a StatusEntry>,
    wanted: Option<&'a WantedEntry>,
) -> Result<(u64, &'a Declared, &'a Reported), Verdict> {
    let unknown = |why: String| (Convergence::Unknown, why);
    // An undecodable status is the first thing to say: it is never hidden
    // behind anything else about the hive.
    let reported = match status.map(|s| &s.reported) {
        Some(Err(e)) => return Err(unknown(format!("the hive's status does not decode: {e}"))),
        Some(Ok(r)) => Some(r),
        None => None,
    };
    let Some(w) = wanted else {
        return Err(unknown(
            "nothing is declared for this hive (no key in hyperhive-wanted)".into(),
        ));
    };
    let rev = w.revision;
    let declared = match &w.declared {
        Ok(d) => d,
        Err(e) => {
            return Err(unknown(format!(
                "declared revision {rev} does not decode: {e}"
            )))
        }
    };
    let Some(r) = reported else {
        return Err(unknown(format!(
            "revision {rev} is declared, but the hive has no status to compare it with"
        )));
    };
    Ok((rev, declared, r))
}

/// Everything the rules look at, gathered once.
struct Evidence<'a> {
    timely: Freshness,
    /// The report's age in words ("42s").
    ago: String,
    rev: u64,
    /// The newest revision the hive says it has read or converged on.
    seen: Option<u64>,
    reported: &'a Reported,
    declared_agents: usize,
    agents: AgentFindings,
}

impl<'a> Evidence<'a> {
    fn gather(
        timely: Freshness,
        age: Option<Duration>,
        rev: u64,
        declared: &Declared,
        reported: &'a Reported,
    ) -> Self {
        Evidence {
            timely,
            ago: age.map(human_age).unwrap_or_default(),
            rev,
            seen: reported.seen_revision.max(reported.converged_revision),
            reported,
            declared_agents: declared.spec_hashes.len(),
            agents: AgentFindings::gather(declared, reported, age.unwrap_or_default()),
        }
    }

    fn claims_converged(&self) -> bool {
        self.reported.converged_revision == Some(self.rev)
    }
}

/// What is off about the declared agents, one text per finding.
#[derive(Default)]
struct AgentFindings {
    unreported: Vec<String>,
    cannot_tell: Vec<String>,
    failed: Vec<String>,
    /// Failed jobs whose running container is still the declared one.
    failed_in_place: Vec<String>,
    drift: Vec<String>,
    working: Vec<String>,
    /// Agents whose health check has not passed yet: not converged.
    starting: Vec<String>,
}

impl AgentFindings {
    fn gather(declared: &Declared, r: &Reported, age: Duration) -> Self {
        let mut found = AgentFindings::default();
        let mut undeclared = Vec::new();
        for (agent, hash, report) in declared.spec_hashes.outer_join(&r.agents) {
            let (hash, a) = match (hash, report) {
                (Some(hash), Some(a)) => (hash, a),
                (Some(_), None) => {
                    found.unreported.push(agent.to_string());
                    continue;
                }
                (None, Some(a)) => {
                    if a.observed == Observed::Running {
                        undeclared.push(format!("{agent} runs but is not declared"));
                    }
                    continue;
                }
                (None, None) => continue,
            };
            found.add_health(agent.as_str(), a.health.as_deref());
            let spec_ok = a.spec.as_ref() == Some(hash);
            let power_ok = observed_matches(a.wanted, a.observed);
            // Restarting, in a crash-loop delay or not up long enough: the
            // hive does not count it as declared, and neither does this.
            let unsettled = unsettled_text(a, age);
            // A first start still inside `min_running_secs` is on its way,
            // like a pending health check: not converged, not a fault. With
            // exits behind it, it is a crash loop between two crashes.
            if spec_ok && power_ok == Some(true) && just_started(a) {
                found
                    .starting
                    .push(format!("{agent} (up for less than min_running_secs)"));
                found.add_job(agent.as_str(), hash, a, false, age);
                continue;
            }
            let in_place = spec_ok && power_ok == Some(true) && unsettled.is_none();
            found.add_job(agent.as_str(), hash, a, in_place, age);
            if power_ok.is_none() {
                found
                    .cannot_tell
                    .push(format!("{agent}: Docker state unknown"));
            } else if !in_place {
                found
                    .drift
                    .push(drift_text(agent.as_str(), hash, a, power_ok, unsettled));
            }
        }
        // After the declared agents' findings, as they always came.
        found.drift.extend(undeclared);
        found
    }

    fn add_health(&mut self, agent: &str, health: Option<&str>) {
        match health {
            Some("unhealthy") => self
                .drift
                .push(format!("{agent} is unhealthy (its health check fails)")),
            Some("starting") => self.starting.push(format!("{agent} (health: starting)")),
            _ => {}
        }
    }

    fn add_job(
        &mut self,
        agent: &str,
        hash: &HashText,
        a: &ReportedAgent,
        in_place: bool,
        age: Duration,
    ) {
        let Some(job) = &a.last_job else { return };
        // A job belongs to this declaration when the hive was working towards
        // the spec declared now (or does not say which spec it worked on).
        let job_is_current = a.declared_spec.as_ref().is_none_or(|d| d == hash);
        if job.state == "failed" && job_is_current {
            let text = match &a.retry {
                Some(r) => format!(
                    "{agent}: job {} ({}) {}",
                    job.id,
                    job.kind,
                    retry_text(r, age)
                ),
                None => job_text(agent, job),
            };
            if in_place {
                self.failed_in_place.push(text);
            } else {
                self.failed.push(text);
            }
        } else if job.state == "pending" || job.state == "running" {
            self.working.push(job_text(agent, job));
        }
    }
}

/// Running, but not yet for `min_running_secs`, and never exited before.
fn just_started(a: &ReportedAgent) -> bool {
    a.unsettled == Some(swarm_queue_client::Unsettled::Young)
        && a.health.as_deref() != Some("unhealthy")
        && a.exits.as_ref().is_none_or(|e| e.count == 0)
}

/// "bot stopped (wanted up), crash loop: exited 3 (5 times in 4m00s), next
/// start in 40s, runs spec sha256:… (declared sha256:…)".
fn drift_text(
    agent: &str,
    hash: &HashText,
    a: &ReportedAgent,
    power_ok: Option<bool>,
    unsettled: Option<String>,
) -> String {
    let mut what = Vec::new();
    if power_ok == Some(false) {
        what.push(format!("{} (wanted {})", a.observed, a.wanted));
    }
    what.extend(unsettled);
    if a.spec.as_ref() != Some(hash) {
        what.push(match &a.spec {
            Some(spec) => format!("runs spec {} (declared {})", spec.short(), hash.short()),
            None => format!("no container spec (declared {})", hash.short()),
        });
    }
    format!("{agent} {}", what.join(", "))
}

fn unknown(why: String) -> Option<Verdict> {
    Some((Convergence::Unknown, why))
}

fn stale(e: &Evidence<'_>) -> Option<Verdict> {
    let word = match e.timely {
        Freshness::Stale => "stale",
        Freshness::Offline => "and the hive is offline",
        _ => return None,
    };
    Some((
        Convergence::Unknown,
        format!(
            "the last report is {} old ({word}), so it is no evidence about revision {}",
            e.ago, e.rev
        ),
    ))
}

fn stopped(e: &Evidence<'_>) -> Option<Verdict> {
    (e.timely == Freshness::Stopped).then(|| {
        (
            Convergence::Unknown,
            format!(
                "the hive shut down cleanly {} ago; nothing there is converging on revision {}",
                e.ago, e.rev
            ),
        )
    })
}

fn nothing_read(e: &Evidence<'_>) -> Option<Verdict> {
    e.seen.is_none().then(|| {
        (
            Convergence::Published,
            format!(
                "revision {} is declared; the hive has not read any declaration yet",
                e.rev
            ),
        )
    })
}

fn older_read(e: &Evidence<'_>) -> Option<Verdict> {
    let seen = e.seen.filter(|&s| s < e.rev)?;
    Some((
        Convergence::Published,
        format!(
            "revision {} is declared; the hive has read only up to revision {seen}",
            e.rev
        ),
    ))
}

fn newer_read(e: &Evidence<'_>) -> Option<Verdict> {
    let seen = e.seen.filter(|&s| s > e.rev)?;
    unknown(format!(
        "the hive reports revision {seen}, newer than the declared revision {} \
         (was the wanted bucket recreated?)",
        e.rev
    ))
}

fn failed_while_converging(e: &Evidence<'_>) -> Option<Verdict> {
    if e.claims_converged() {
        return None;
    }
    failed(e)
}

fn converging(e: &Evidence<'_>) -> Option<Verdict> {
    if e.claims_converged() {
        return None;
    }
    let mut detail = e.agents.working.clone();
    if !e.agents.unreported.is_empty() {
        detail.push(format!(
            "not reported yet: {}",
            e.agents.unreported.join(", ")
        ));
    }
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(": {}", detail.join("; "))
    };
    Some((
        Convergence::Progressing,
        format!(
            "the hive read revision {} and is converging on it{detail}",
            e.rev
        ),
    ))
}

fn claimed_but_unreported(e: &Evidence<'_>) -> Option<Verdict> {
    if e.agents.unreported.is_empty() {
        return None;
    }
    unknown(format!(
        "the hive says it converged on revision {} but reports nothing about {}",
        e.rev,
        e.agents.unreported.join(", ")
    ))
}

fn claimed_but_cannot_tell(e: &Evidence<'_>) -> Option<Verdict> {
    if e.agents.cannot_tell.is_empty() {
        return None;
    }
    unknown(format!(
        "the hive says it converged on revision {}, but {}",
        e.rev,
        e.agents.cannot_tell.join("; ")
    ))
}

fn failed(e: &Evidence<'_>) -> Option<Verdict> {
    if e.agents.failed.is_empty() {
        return None;
    }
    Some((
        Convergence::Failed,
        format!("revision {} failed: {}", e.rev, e.agents.failed.join("; ")),
    ))
}

fn health_starting(e: &Evidence<'_>) -> Option<Verdict> {
    if e.agents.starting.is_empty() || !e.agents.drift.is_empty() {
        return None;
    }
    Some((
        Convergence::Progressing,
        format!(
            "the hive runs revision {}; waiting for agents to come up: {}",
            e.rev,
            e.agents.starting.join(", ")
        ),
    ))
}

fn degraded(e: &Evidence<'_>) -> Option<Verdict> {
    let mut degraded = e.agents.drift.clone();
    degraded.extend(
        e.agents
            .failed_in_place
            .iter()
            .map(|f| format!("{f} (the running container is still the declared one)")),
    );
    let r = e.reported;
    if r.state != HiveState::Ok {
        let mut why = format!("the hive is {}", r.state);
        let worst: Vec<&str> = r
            .warnings
            .iter()
            .filter(|w| w.level != Level::Info)
            .map(|w| w.message.as_str())
            .collect();
        if !worst.is_empty() {
            why.push_str(": ");
            why.push_str(&worst.join("; "));
        }
        degraded.push(why);
    }
    if degraded.is_empty() {
        return None;
    }
    Some((
        Convergence::Degraded,
        format!(
            "converged on revision {}, but {}",
            e.rev,
            degraded.join("; ")
        ),
    ))
}

/// What no rule objected to: the hive runs the declaration.
fn converged(e: &Evidence<'_>) -> Verdict {
    let n = e.declared_agents;
    (
        Convergence::Converged,
        format!(
            "converged on revision {}: {n} agent{} as declared, reported {} ago",
            e.rev,
            if n == 1 { "" } else { "s" },
            e.ago
        ),
    )
}
