//! Deciding, apart from doing: pure functions from (declared, installed
//! record, power intent, what Docker shows) to the jobs that close the gap,
//! and to whether a revision has converged.
//!
//! Rules that come from hard lessons:
//! - Level-triggered: every round compares the *declaration* (not only the
//!   installed record) with Docker, so a first deploy, rebuild or start that
//!   failed is tried again; the per-agent backoff ([`crate::agents::retry`])
//!   decides when.
//! - Only the durable installed record and a valid declaration drive
//!   retirement, and only the record drives orphan reaping; what Docker
//!   happens to show is never a reason to delete by itself. What is removed
//!   is what Docker shows with this hive's labels (by id), not whatever
//!   holds the expected name.
//! - "I could not look" is never "nothing is there": callers pass `None`
//!   for an input they could not read, and the functions then decide nothing
//!   destructive.
//! - A revision is converged only on complete evidence: every declared agent
//!   observed with the declared spec and the wanted power, every job queued
//!   for the revision done, and no retired agent still present.

use std::collections::{BTreeMap, BTreeSet};

use swarm_queue_client::{AgentName, AgentSpec, Power};

/// An agent the hive has installed (durable record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub spec: String,
}

/// An agent's containers as Docker shows them (only ones with this hive's
/// label). Normally one; a renamed copy makes two.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The main container (the one with the expected name, else the first)
    /// runs.
    pub running: bool,
    /// The spec label on the main container.
    pub spec: Option<String>,
    /// Every container id with this agent's label.
    pub ids: Vec<String>,
    /// Docker's health status of the main container, when it has a check.
    pub health: Option<String>,
    /// How many of its health checks in a row have failed, when Docker
    /// calls it unhealthy (read by an inspect then, and only then).
    pub failing_streak: Option<u64>,
}

impl Seen {
    /// More than one container carries this agent's label.
    pub fn duplicated(&self) -> bool {
        self.ids.len() > 1
    }
}

/// A job to queue.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    FirstDeploy(AgentName),
    Rebuild {
        agent: AgentName,
        relock: bool,
    },
    Retire(AgentName),
    /// Start or stop to match wanted power.
    Reconcile(AgentName),
    /// A container with our labels whose agent is not in the installed
    /// record, past its grace period.
    ReapOrphan(AgentName),
    /// Running but unhealthy for the spec's `restart_on_unhealthy` checks
    /// in a row: stop and start it (the stop counts as an exit, so the
    /// crash-loop backoff spaces out the next one).
    RestartUnhealthy(AgentName),
}

impl Action {
    pub fn agent(&self) -> &AgentName {
        match self {
            Action::FirstDeploy(a)
            | Action::Retire(a)
            | Action::Reconcile(a)
            | Action::ReapOrphan(a)
            | Action::RestartUnhealthy(a)
            | Action::Rebuild { agent: a, .. } => a,
        }
    }
}

/// Whether this build knows every field of `spec`. One it does not know
/// may be a constraint it cannot honour (a user, a network): the agent is
/// then left as it is, neither created nor rebuilt, and never counted as
/// declared ([`convergence_gap`]).
pub fn understood(spec: &AgentSpec) -> bool {
    spec.unknown.is_empty()
}

/// The fields of `spec` this build does not know, named and joined
/// ("user, network"); `None` when it knows them all ([`understood`]).
pub fn unknown_fields(spec: &AgentSpec) -> Option<String> {
    let names: Vec<&str> = spec.unknown.keys().map(String::as_str).collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// What a new declaration asks for, against the installed record and what
/// Docker shows (`seen`; empty when Docker has not been looked at yet).
///
/// - declared, not installed: first deploy, or a rebuild when Docker shows
///   this hive's container for the agent with another spec (see
///   [`not_installed`]);
/// - declared, installed with another spec: rebuild;
/// - installed, not declared: retire;
/// - declared with a field this build does not know: nothing.
pub fn plan_declaration(
    declared: &BTreeMap<AgentName, AgentSpec>,
    installed: &BTreeMap<AgentName, Installed>,
    seen: &BTreeMap<AgentName, Seen>,
) -> Vec<Action> {
    let mut out = Vec::new();
    for (agent, spec) in declared.iter().filter(|(_, s)| understood(s)) {
        match installed.get(agent) {
            None => out.push(not_installed(agent, spec, seen)),
            Some(i) if i.spec != spec.spec_hash() => out.push(Action::Rebuild {
                agent: agent.clone(),
                relock: false,
            }),
            Some(_) => {}
        }
    }
    for agent in installed.keys() {
        if !declared.contains_key(agent) {
            out.push(Action::Retire(agent.clone()));
        }
    }
    out
}

/// A declared agent with no installed record: a first deploy, which adopts
/// a container of this hive's that already runs the declared spec (one a
/// crash cut off before it was recorded). A container of this hive's for
/// the agent with another spec (or none) is what a job store lost or moved
/// aside leaves behind when the declaration changed meanwhile: a first
/// deploy would refuse to replace it, so it is rebuilt.
fn not_installed(agent: &AgentName, spec: &AgentSpec, seen: &BTreeMap<AgentName, Seen>) -> Action {
    match seen.get(agent) {
        Some(found) if found.spec.as_deref() != Some(spec.spec_hash().as_str()) => {
            Action::Rebuild {
                agent: agent.clone(),
                relock: false,
            }
        }
        _ => Action::FirstDeploy(agent.clone()),
    }
}

/// Inputs to one reconciler round. `busy` holds agents with a pending or
/// running job: the reconciler leaves them to that job.
pub struct RoundInput<'a> {
    /// The current valid declaration; `None` when none could be read, and
    /// then only the installed record is repaired and nothing is retired.
    pub declared: Option<&'a BTreeMap<AgentName, AgentSpec>>,
    pub installed: &'a BTreeMap<AgentName, Installed>,
    pub power: &'a BTreeMap<AgentName, Power>,
    pub seen: &'a BTreeMap<AgentName, Seen>,
    pub busy: &'a BTreeSet<AgentName>,
    /// Orphans (labelled containers not in the record) whose grace period
    /// has passed.
    pub orphans_past_grace: &'a BTreeSet<AgentName>,
}

/// Close the gap between the declaration, the installed record and Docker,
/// for every agent without a job in flight:
/// - declared, not installed (a first deploy that failed): first deploy;
/// - declared, installed with another spec (a rebuild that failed): rebuild;
/// - installed, not in the declaration (a retire that failed): retire;
/// - container missing, spec label differs, or more than one container
///   with the agent's label: rebuild; wanted up but stopped, or down but
///   running: reconcile;
/// - orphan past its grace period: reap;
/// - running, unhealthy, and failed `restart_on_unhealthy` checks in a
///   row: restart.
///
/// Without a declaration only the installed record is repaired.
pub fn plan_round(input: &RoundInput<'_>) -> Vec<Action> {
    let mut out = Vec::new();
    let idle = |a: &AgentName| !input.busy.contains(a);
    match input.declared {
        Some(declared) => {
            for (agent, spec) in declared.iter().filter(|(a, _)| idle(a)) {
                let rebuild = Action::Rebuild {
                    agent: agent.clone(),
                    relock: false,
                };
                if !understood(spec) {
                    // Left as it is: what is installed is kept running.
                    if let Some(i) = input.installed.get(agent) {
                        out.extend(repair(input, agent, i));
                    }
                    continue;
                }
                match input.installed.get(agent) {
                    None => out.push(not_installed(agent, spec, input.seen)),
                    Some(i) if i.spec != spec.spec_hash() => out.push(rebuild),
                    Some(i) => out
                        .extend(repair(input, agent, i).or_else(|| unhealthy(input, agent, spec))),
                }
            }
            for agent in input.installed.keys().filter(|a| idle(a)) {
                if !declared.contains_key(agent) {
                    out.push(Action::Retire(agent.clone()));
                }
            }
        }
        None => {
            for (agent, inst) in input.installed.iter().filter(|(a, _)| idle(a)) {
                out.extend(repair(input, agent, inst));
            }
        }
    }
    for agent in input.orphans_past_grace {
        if !input.installed.contains_key(agent) && !input.busy.contains(agent) {
            out.push(Action::ReapOrphan(agent.clone()));
        }
    }
    out
}

/// The repair an installed agent needs to match its record and power.
fn repair(input: &RoundInput<'_>, agent: &AgentName, inst: &Installed) -> Option<Action> {
    let want = input.power.get(agent).copied().unwrap_or(Power::Up);
    let rebuild = Action::Rebuild {
        agent: agent.clone(),
        relock: false,
    };
    match input.seen.get(agent) {
        None => Some(rebuild),
        Some(s) if s.spec.as_deref() != Some(inst.spec.as_str()) || s.duplicated() => Some(rebuild),
        Some(s) if s.running != (want == Power::Up) => Some(Action::Reconcile(agent.clone())),
        Some(_) => None,
    }
}

/// A restart for a running agent that Docker calls unhealthy and whose
/// checks have failed as often in a row as its spec allows.
fn unhealthy(input: &RoundInput<'_>, agent: &AgentName, spec: &AgentSpec) -> Option<Action> {
    let limit = u64::from(spec.restart_on_unhealthy?);
    let s = input.seen.get(agent)?;
    let failing = s.running && s.health.as_deref() == Some("unhealthy");
    (failing && s.failing_streak.unwrap_or(0) >= limit)
        .then(|| Action::RestartUnhealthy(agent.clone()))
}

/// Labelled containers whose agent is not in the installed record.
pub fn orphans(
    installed: &BTreeMap<AgentName, Installed>,
    seen: &BTreeMap<AgentName, Seen>,
    busy: &BTreeSet<AgentName>,
) -> BTreeSet<AgentName> {
    seen.keys()
        .filter(|a| !installed.contains_key(*a) && !busy.contains(*a))
        .cloned()
        .collect()
}

/// Why a revision is not converged yet; `None` means converged.
pub fn convergence_gap(
    declared: &BTreeMap<AgentName, AgentSpec>,
    power: &BTreeMap<AgentName, Power>,
    seen: &BTreeMap<AgentName, Seen>,
    installed: &BTreeMap<AgentName, Installed>,
    jobs_for_revision: &[(AgentName, JobOutcome)],
) -> Option<String> {
    for (agent, outcome) in jobs_for_revision {
        match outcome {
            JobOutcome::Done => {}
            JobOutcome::Failed => return Some(format!("the job for {agent} failed")),
            JobOutcome::Active => return Some(format!("the job for {agent} is still running")),
        }
    }
    for (agent, spec) in declared {
        if let Some(fields) = unknown_fields(spec) {
            return Some(format!(
                "{agent} declares fields this hive does not know ({fields}): left as it is"
            ));
        }
        let want_spec = spec.spec_hash();
        let Some(s) = seen.get(agent) else {
            return Some(format!("{agent} has no container"));
        };
        if s.spec.as_deref() != Some(want_spec.as_str()) {
            return Some(format!("{agent} runs another spec"));
        }
        if s.duplicated() {
            return Some(format!("{agent} has {} containers", s.ids.len()));
        }
        if installed.get(agent).map(|i| &i.spec) != Some(&want_spec) {
            return Some(format!(
                "{agent} is not recorded as installed with this spec"
            ));
        }
        let want = power
            .get(agent)
            .copied()
            .or(spec.power)
            .unwrap_or(Power::Up);
        if s.running != (want == Power::Up) {
            return Some(format!(
                "{agent} is {} but wanted {want}",
                if s.running { "running" } else { "stopped" }
            ));
        }
    }
    for agent in installed.keys().chain(seen.keys()) {
        if !declared.contains_key(agent) {
            return Some(format!("{agent} is not declared but still present"));
        }
    }
    None
}

/// The state of one job queued for a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    Active,
    Done,
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::test_names::{agent as a, spec};

    /// A reconciler round with no job in flight, no power intent and no
    /// orphan past its grace.
    fn idle_round(
        declared: &BTreeMap<AgentName, AgentSpec>,
        installed: &BTreeMap<AgentName, Installed>,
        seen: &BTreeMap<AgentName, Seen>,
    ) -> Vec<Action> {
        plan_round(&RoundInput {
            declared: Some(declared),
            installed,
            power: &BTreeMap::new(),
            seen,
            busy: &BTreeSet::new(),
            orphans_past_grace: &BTreeSet::new(),
        })
    }

    fn inst(s: &AgentSpec) -> Installed {
        Installed {
            spec: s.spec_hash(),
        }
    }

    #[test]
    fn declaration_plans() {
        let s1 = spec("img:1");
        let s2 = spec("img:2");
        struct Case {
            name: &'static str,
            declared: Vec<(&'static str, AgentSpec)>,
            installed: Vec<(&'static str, Installed)>,
            want: Vec<Action>,
        }
        let cases = vec![
            Case {
                name: "new agent is first-deployed",
                declared: vec![("web", s1.clone())],
                installed: vec![],
                want: vec![Action::FirstDeploy(a("web"))],
            },
            Case {
                name: "same spec does nothing",
                declared: vec![("web", s1.clone())],
                installed: vec![("web", inst(&s1))],
                want: vec![],
            },
            Case {
                name: "changed spec is rebuilt",
                declared: vec![("web", s2.clone())],
                installed: vec![("web", inst(&s1))],
                want: vec![Action::Rebuild {
                    agent: a("web"),
                    relock: false,
                }],
            },
            Case {
                name: "power alone is not a rebuild",
                declared: vec![(
                    "web",
                    AgentSpec {
                        power: Some(Power::Down),
                        ..s1.clone()
                    },
                )],
                installed: vec![("web", inst(&s1))],
                want: vec![],
            },
            Case {
                name: "undeclared installed agent is retired",
                declared: vec![("web", s1.clone())],
                installed: vec![("web", inst(&s1)), ("old", inst(&s1))],
                want: vec![Action::Retire(a("old"))],
            },
            Case {
                name: "explicit empty declaration retires everything",
                declared: vec![],
                installed: vec![("web", inst(&s1)), ("db", inst(&s2))],
                want: vec![Action::Retire(a("db")), Action::Retire(a("web"))],
            },
        ];
        for c in cases {
            let declared = c.declared.into_iter().map(|(n, s)| (a(n), s)).collect();
            let installed = c.installed.into_iter().map(|(n, i)| (a(n), i)).collect();
            let mut got = plan_declaration(&declared, &installed, &BTreeMap::new());
            got.sort();
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn a_container_without_a_record_is_adopted_with_its_spec_and_rebuilt_with_another() {
        let s1 = spec("img:1");
        let s2 = spec("img:2");
        let declared: BTreeMap<_, _> = [(a("web"), s2.clone())].into();
        let installed = BTreeMap::new();
        let found = |s: Option<&AgentSpec>| -> BTreeMap<AgentName, Seen> {
            let seen = Seen {
                running: true,
                spec: s.map(AgentSpec::spec_hash),
                ids: vec!["c1".into()],
                ..Default::default()
            };
            [(a("web"), seen)].into()
        };
        let first = vec![Action::FirstDeploy(a("web"))];
        let rebuild = vec![Action::Rebuild {
            agent: a("web"),
            relock: false,
        }];
        for (seen, want, why) in [
            (BTreeMap::new(), &first, "no container: a first deploy"),
            (
                found(Some(&s2)),
                &first,
                "the declared spec: a first deploy, which adopts it",
            ),
            (found(Some(&s1)), &rebuild, "another spec: rebuilt"),
            (found(None), &rebuild, "no spec label: rebuilt"),
        ] {
            assert_eq!(
                &plan_declaration(&declared, &installed, &seen),
                want,
                "{why}"
            );
            let round = idle_round(&declared, &installed, &seen);
            assert_eq!(&round, want, "a reconciler round: {why}");
        }
    }

    #[test]
    fn reconciler_rounds() {
        let s1 = spec("img:1");
        let h = s1.spec_hash();
        let installed: BTreeMap<_, _> = [(a("web"), inst(&s1))].into();
        let up: BTreeMap<_, _> = [(a("web"), Power::Up)].into();
        let down: BTreeMap<_, _> = [(a("web"), Power::Down)].into();
        let none = BTreeSet::new();
        let seen = |running: bool, spec: Option<&str>| -> BTreeMap<AgentName, Seen> {
            [(
                a("web"),
                Seen {
                    health: None,
                    running,
                    spec: spec.map(str::to_string),
                    ids: vec!["c1".into()],
                    failing_streak: None,
                },
            )]
            .into()
        };
        let rebuild = vec![Action::Rebuild {
            agent: a("web"),
            relock: false,
        }];
        type Case<'a> = (
            &'a str,
            BTreeMap<AgentName, Seen>,
            &'a BTreeMap<AgentName, Power>,
            Vec<Action>,
        );
        let cases: Vec<Case> = vec![
            ("healthy", seen(true, Some(&h)), &up, vec![]),
            (
                "missing container is recreated",
                BTreeMap::new(),
                &up,
                rebuild.clone(),
            ),
            (
                "stopped but wanted up is started",
                seen(false, Some(&h)),
                &up,
                vec![Action::Reconcile(a("web"))],
            ),
            (
                "running but wanted down is stopped",
                seen(true, Some(&h)),
                &down,
                vec![Action::Reconcile(a("web"))],
            ),
            (
                "stopped and wanted down is fine",
                seen(false, Some(&h)),
                &down,
                vec![],
            ),
            (
                "spec drift is rebuilt",
                seen(true, Some("sha256:other")),
                &up,
                rebuild.clone(),
            ),
        ];
        for (name, seen, power, want) in cases {
            let got = plan_round(&RoundInput {
                declared: None,
                installed: &installed,
                power,
                seen: &seen,
                busy: &none,
                orphans_past_grace: &none,
            });
            assert_eq!(got, want, "{name}");
        }
        // An agent with a job in flight is left to that job.
        let busy: BTreeSet<_> = [a("web")].into();
        let got = plan_round(&RoundInput {
            declared: None,
            installed: &installed,
            power: &up,
            seen: &BTreeMap::new(),
            busy: &busy,
            orphans_past_grace: &none,
        });
        assert!(got.is_empty());
    }

    #[test]
    fn rounds_compare_the_declaration_not_only_the_record() {
        let (s1, s2) = (spec("img:1"), spec("img:2"));
        let one = |running: bool, spec: &AgentSpec| Seen {
            health: None,
            running,
            spec: Some(spec.spec_hash()),
            ids: vec!["c1".into()],
            failing_streak: None,
        };
        let rebuild = |n: &str| Action::Rebuild {
            agent: a(n),
            relock: false,
        };
        struct Case {
            name: &'static str,
            declared: Option<Vec<(&'static str, AgentSpec)>>,
            installed: Vec<(&'static str, Installed)>,
            seen: Vec<(&'static str, Seen)>,
            busy: Vec<&'static str>,
            want: Vec<Action>,
        }
        let cases = vec![
            Case {
                name: "a first deploy that failed is tried again",
                declared: Some(vec![("web", s1.clone())]),
                installed: vec![],
                seen: vec![],
                busy: vec![],
                want: vec![Action::FirstDeploy(a("web"))],
            },
            Case {
                name: "a rebuild that failed is tried again",
                declared: Some(vec![("web", s2.clone())]),
                installed: vec![("web", inst(&s1))],
                seen: vec![("web", one(true, &s1))],
                busy: vec![],
                want: vec![rebuild("web")],
            },
            Case {
                name: "a start that failed is tried again",
                declared: Some(vec![("web", s1.clone())]),
                installed: vec![("web", inst(&s1))],
                seen: vec![("web", one(false, &s1))],
                busy: vec![],
                want: vec![Action::Reconcile(a("web"))],
            },
            Case {
                name: "a retire that failed is tried again",
                declared: Some(vec![]),
                installed: vec![("old", inst(&s1))],
                seen: vec![("old", one(true, &s1))],
                busy: vec![],
                want: vec![Action::Retire(a("old"))],
            },
            Case {
                name: "a renamed copy next to the container is rebuilt away",
                declared: Some(vec![("web", s1.clone())]),
                installed: vec![("web", inst(&s1))],
                seen: vec![(
                    "web",
                    Seen {
                        health: None,
                        ids: vec!["c1".into(), "c2".into()],
                        ..one(true, &s1)
                    },
                )],
                busy: vec![],
                want: vec![rebuild("web")],
            },
            Case {
                name: "as declared: nothing",
                declared: Some(vec![("web", s1.clone())]),
                installed: vec![("web", inst(&s1))],
                seen: vec![("web", one(true, &s1))],
                busy: vec![],
                want: vec![],
            },
            Case {
                name: "a job in flight is left alone",
                declared: Some(vec![("web", s1.clone())]),
                installed: vec![("old", inst(&s1))],
                seen: vec![],
                busy: vec!["web", "old"],
                want: vec![],
            },
            Case {
                name: "no declaration: the record is repaired, nothing retired or deployed",
                declared: None,
                installed: vec![("web", inst(&s1))],
                seen: vec![],
                busy: vec![],
                want: vec![rebuild("web")],
            },
        ];
        for c in cases {
            let declared: Option<BTreeMap<_, _>> = c
                .declared
                .map(|d| d.into_iter().map(|(n, s)| (a(n), s)).collect());
            let installed = c.installed.into_iter().map(|(n, i)| (a(n), i)).collect();
            let seen = c.seen.into_iter().map(|(n, s)| (a(n), s)).collect();
            let busy = c.busy.into_iter().map(a).collect();
            let mut got = plan_round(&RoundInput {
                declared: declared.as_ref(),
                installed: &installed,
                power: &BTreeMap::new(),
                seen: &seen,
                busy: &busy,
                orphans_past_grace: &BTreeSet::new(),
            });
            got.sort();
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn orphans_come_only_from_the_record() {
        let s1 = spec("img:1");
        let installed: BTreeMap<_, _> = [(a("web"), inst(&s1))].into();
        let seen: BTreeMap<_, _> = [
            (
                a("web"),
                Seen {
                    health: None,
                    running: true,
                    spec: Some(s1.spec_hash()),
                    ..Default::default()
                },
            ),
            (
                a("stray"),
                Seen {
                    health: None,
                    running: true,
                    spec: None,
                    ..Default::default()
                },
            ),
            (
                a("deploying"),
                Seen {
                    health: None,
                    running: false,
                    spec: None,
                    ..Default::default()
                },
            ),
        ]
        .into();
        let busy: BTreeSet<_> = [a("deploying")].into();
        let o = orphans(&installed, &seen, &busy);
        assert_eq!(o, [a("stray")].into());
        let got = plan_round(&RoundInput {
            declared: None,
            installed: &installed,
            power: &BTreeMap::new(),
            seen: &seen,
            busy: &busy,
            orphans_past_grace: &o,
        });
        assert_eq!(got, vec![Action::ReapOrphan(a("stray"))]);
    }

    #[test]
    fn an_agent_with_a_field_this_build_does_not_know_is_left_as_it_is() {
        let old = spec("img:1");
        let mut newer = spec("img:2");
        newer.unknown.insert("user_ns".into(), "remap".into());
        let mut fresh = spec("img:3");
        fresh.unknown.insert("network_policy".into(), "deny".into());
        let declared: BTreeMap<_, _> = [(a("web"), newer.clone()), (a("new"), fresh)].into();
        let installed: BTreeMap<_, _> = [(a("web"), inst(&old))].into();
        // Neither rebuilt (web runs img:1) nor created (new), nor retired.
        assert_eq!(
            plan_declaration(&declared, &installed, &BTreeMap::new()),
            vec![]
        );
        let running = |up: bool| Seen {
            running: up,
            spec: Some(old.spec_hash()),
            ids: vec!["c1".into()],
            health: None,
            failing_streak: None,
        };
        let round = |seen: BTreeMap<AgentName, Seen>| idle_round(&declared, &installed, &seen);
        assert_eq!(round([(a("web"), running(true))].into()), vec![]);
        // What is installed is still kept up: a stopped web is started.
        assert_eq!(
            round([(a("web"), running(false))].into()),
            vec![Action::Reconcile(a("web"))]
        );
        // Never converged, and the reason names the field.
        let seen: BTreeMap<_, _> = [(a("web"), running(true))].into();
        let gap = convergence_gap(&declared, &BTreeMap::new(), &seen, &installed, &[]);
        let gap = gap.expect("not converged");
        assert!(
            gap.contains("declares fields this hive does not know (network_policy)")
                || gap.contains("declares fields this hive does not know (user_ns)"),
            "{gap}"
        );
    }

    #[test]
    fn convergence_needs_complete_evidence() {
        let s1 = spec("img:1");
        let h = s1.spec_hash();
        let declared: BTreeMap<_, _> = [(a("web"), s1.clone())].into();
        let installed: BTreeMap<_, _> = [(a("web"), inst(&s1))].into();
        let running: BTreeMap<_, _> = [(
            a("web"),
            Seen {
                health: None,
                running: true,
                spec: Some(h.clone()),
                ..Default::default()
            },
        )]
        .into();
        let done = vec![(a("web"), JobOutcome::Done)];
        let up = BTreeMap::new();
        assert_eq!(
            convergence_gap(&declared, &up, &running, &installed, &done),
            None
        );
        // Nothing observed is not converged.
        assert!(convergence_gap(&declared, &up, &BTreeMap::new(), &installed, &done).is_some());
        // A failed or active job is not converged.
        for o in [JobOutcome::Failed, JobOutcome::Active] {
            assert!(
                convergence_gap(&declared, &up, &running, &installed, &[(a("web"), o)]).is_some()
            );
        }
        // Wrong spec, not recorded, wrong power: not converged.
        let other: BTreeMap<_, _> = [(
            a("web"),
            Seen {
                health: None,
                running: true,
                spec: Some("sha256:x".into()),
                ..Default::default()
            },
        )]
        .into();
        assert!(convergence_gap(&declared, &up, &other, &installed, &done).is_some());
        assert!(convergence_gap(&declared, &up, &running, &BTreeMap::new(), &done).is_some());
        let down: BTreeMap<_, _> = [(a("web"), Power::Down)].into();
        assert!(convergence_gap(&declared, &down, &running, &installed, &done).is_some());
        // A retired agent still present is not converged.
        let mut extra = running.clone();
        extra.insert(
            a("old"),
            Seen {
                health: None,
                running: true,
                spec: None,
                ..Default::default()
            },
        );
        assert!(convergence_gap(&declared, &up, &extra, &installed, &done).is_some());
        // Empty declaration, nothing left: converged.
        assert_eq!(
            convergence_gap(
                &BTreeMap::new(),
                &up,
                &BTreeMap::new(),
                &BTreeMap::new(),
                &[]
            ),
            None
        );
    }

    #[test]
    fn an_unhealthy_agent_is_restarted_only_past_its_checks_and_only_if_it_asks() {
        let mut asks = spec("img:1");
        asks.restart_on_unhealthy = Some(3);
        let plain = spec("img:1");
        let installed: BTreeMap<_, _> = [(a("w"), inst(&asks))].into();
        let installed_plain: BTreeMap<_, _> = [(a("w"), inst(&plain))].into();
        let seen = |health: &str, streak: u64, running: bool| -> BTreeMap<_, _> {
            [(
                a("w"),
                Seen {
                    running,
                    spec: Some(asks.spec_hash()),
                    ids: vec!["c1".into()],
                    health: Some(health.into()),
                    failing_streak: Some(streak),
                },
            )]
            .into()
        };
        let round = |declared: &AgentSpec, inst: &BTreeMap<_, _>, seen: &BTreeMap<_, _>| {
            let declared: BTreeMap<_, _> = [(a("w"), declared.clone())].into();
            plan_round(&RoundInput {
                declared: Some(&declared),
                installed: inst,
                power: &BTreeMap::new(),
                seen,
                busy: &BTreeSet::new(),
                orphans_past_grace: &BTreeSet::new(),
            })
        };
        let restart = vec![Action::RestartUnhealthy(a("w"))];
        assert_eq!(
            round(&asks, &installed, &seen("unhealthy", 3, true)),
            restart
        );
        assert_eq!(
            round(&asks, &installed, &seen("unhealthy", 7, true)),
            restart
        );
        assert_eq!(
            round(&asks, &installed, &seen("unhealthy", 2, true)),
            vec![]
        );
        assert_eq!(round(&asks, &installed, &seen("healthy", 9, true)), vec![]);
        assert_eq!(round(&asks, &installed, &seen("starting", 9, true)), vec![]);
        // Not running: that is a reconcile (a start), not a restart.
        assert_eq!(
            round(&asks, &installed, &seen("unhealthy", 9, false)),
            vec![Action::Reconcile(a("w"))]
        );
        // Without the field an unhealthy agent is only shown, never touched.
        assert_eq!(
            round(&plain, &installed_plain, &seen("unhealthy", 50, true)),
            vec![]
        );
    }
}
