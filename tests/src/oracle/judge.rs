//! What the oracle counts as a false claim, as pure functions.
//!
//! **False `fresh`.** The controller calls a hive fresh when its last status
//! entry is at most `stale_after` old. A hive whose process died (or was
//! stopped) at `d` may have published just before `d`, so the controller
//! may honestly call it fresh until `d + stale_after`. A `fresh` row is false
//! only when the controller was asked at `t` with `t - d > stale_after +`
//! [`FRESH_SLACK`]. The slack covers a put that was already on the wire
//! when the signal landed (the server stamps it on arrival).
//!
//! **False `converged`.** The controller calls a hive converged on revision
//! R from a status entry stamped `s`. That entry can only be as good as the
//! hive's own look at Docker: the converger looks at least every
//! `hive::agents::converger::OBSERVE_EVERY` (5 s) and the publisher sends the
//! latest look every publish interval (1 s). Docker is sampled by the oracle
//! every 250 ms, so a state that held between two samples can be missed by
//! one period, and a sample itself takes up to another. The claim is false
//! when *no* oracle sample of that hive's dockerd in
//! `[s - CONVERGED_GRACE, now]` matched R's declaration, with
//! [`CONVERGED_GRACE`] = 5 s + 1 s + 2 × 250 ms. A claim on a revision the
//! oracle never declared is false outright.
//!
//! **Docker matches a declaration** when every declared agent has exactly
//! one container labelled for this hive and agent, with the declared spec
//! hash in its spec label, stopped when its power is `down`, and otherwise
//! running, not OOM-killed, and started at least [`MIN_RUNNING`] before the
//! look (Docker's own `StartedAt`: an agent in a crash loop that has just
//! been started again is not yet as declared, whatever the hive says); and
//! no agent this hive was ever declared but is not now has a container left.
//! Containers with agent labels the oracle never declared (the hostile one)
//! are not judged: they are the attack, not the hive's work.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use swarm_queue_client::{Declaration, Power};

use super::MIN_RUNNING;

/// In-flight puts when a hive is killed or stopped.
pub const FRESH_SLACK: Duration = Duration::from_millis(250);

/// How old the Docker evidence behind a converged claim may honestly be,
/// before the claim's own status timestamp (see the module docs).
pub const CONVERGED_GRACE: Duration = Duration::from_millis(
    hive::agents::converger::OBSERVE_EVERY.as_millis() as u64
        + super::PUBLISH_INTERVAL.as_millis() as u64
        + 2 * super::SAMPLE_EVERY.as_millis() as u64,
);

/// One container of a hive, as its dockerd shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFact {
    pub agent: String,
    pub running: bool,
    pub spec: String,
    /// How long it had run when Docker was asked (from its `StartedAt`);
    /// `None` when it does not run or Docker did not say.
    pub running_for: Option<Duration>,
    /// Docker's `OOMKilled`: its last run ended in a memory kill.
    pub oom_killed: bool,
}

/// What one dockerd showed: `None` when it could not be asked.
pub type DockerView = Option<Vec<ContainerFact>>;

/// Why Docker does not match `decl`, or `None` when it does.
pub fn disagreement(
    decl: &Declaration,
    ever_declared: &BTreeSet<String>,
    view: &DockerView,
) -> Option<String> {
    let Some(seen) = view else {
        return Some("dockerd cannot be asked".into());
    };
    let mut by_agent: BTreeMap<&str, Vec<&ContainerFact>> = BTreeMap::new();
    for c in seen {
        by_agent.entry(c.agent.as_str()).or_default().push(c);
    }
    for (name, spec) in &decl.agents {
        let want_running = spec.power.unwrap_or_default() == Power::Up;
        let hash = spec.spec_hash();
        match by_agent.get(name.as_str()).map(Vec::as_slice) {
            None | Some([]) => return Some(format!("{name}: no container")),
            Some([c]) if c.spec != hash => {
                return Some(format!("{name}: spec {} is not {hash}", short(&c.spec)))
            }
            Some([c]) if c.running != want_running => {
                let oom = if c.oom_killed { " (OOM-killed)" } else { "" };
                return Some(format!(
                    "{name}: running={} wanted {want_running}{oom}",
                    c.running
                ));
            }
            Some([c]) if want_running => {
                if let Some(young) = not_settled(c) {
                    return Some(format!("{name}: {young}"));
                }
            }
            Some([_]) => {}
            Some(many) => return Some(format!("{name}: {} containers", many.len())),
        }
    }
    for name in ever_declared {
        let declared = decl.agents.keys().any(|a| a.as_str() == name);
        if !declared && by_agent.contains_key(name.as_str()) {
            return Some(format!("{name}: retired but its container is left"));
        }
    }
    None
}

/// Why a running container is not yet an agent as declared: OOM-killed, or
/// started less than [`MIN_RUNNING`] ago (or at a time Docker did not say).
fn not_settled(c: &ContainerFact) -> Option<String> {
    if c.oom_killed {
        return Some("OOM-killed".into());
    }
    match c.running_for {
        None => Some("running, start time unknown".into()),
        Some(d) if d < MIN_RUNNING => Some(format!(
            "running for {:.1}s, less than min_running {MIN_RUNNING:?}",
            d.as_secs_f64()
        )),
        Some(_) => None,
    }
}

/// Whether a `fresh` row is false: the process has been down longer than
/// the staleness the design allows.
pub fn false_fresh(
    claimed_fresh: bool,
    down_since: Option<Instant>,
    asked_at: Instant,
    stale_after: Duration,
) -> bool {
    claimed_fresh
        && down_since
            .is_some_and(|d| asked_at.saturating_duration_since(d) > stale_after + FRESH_SLACK)
}

/// Whether a `converged` row is false: no sample in the evidence window
/// (`matches`: when Docker was sampled and whether it matched the claimed
/// revision) shows Docker as declared.
pub fn false_converged(
    evidence_at: Instant,
    now: Instant,
    matches: impl IntoIterator<Item = (Instant, bool)>,
) -> bool {
    !matches
        .into_iter()
        .any(|(t, ok)| ok && t + CONVERGED_GRACE >= evidence_at && t <= now)
}

/// `sha256:0123456789ab…`, clipped to a printable, bounded form.
pub fn short(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(19)
        .collect();
    if s.chars().count() > 19 {
        format!("{clean}…({} chars)", s.chars().count())
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::{AgentName, AgentSpec};

    fn decl(agents: &[(&str, &str, Power)]) -> Declaration {
        Declaration::new(
            agents
                .iter()
                .map(|(n, v, p)| {
                    let spec = AgentSpec {
                        image: Some("img:1".into()),
                        env: [("V".to_string(), v.to_string())].into(),
                        power: Some(*p),
                        ..Default::default()
                    };
                    (AgentName::new(*n).unwrap(), spec)
                })
                .collect(),
        )
    }

    fn fact(agent: &str, running: bool, d: &Declaration, of: &str) -> ContainerFact {
        let spec = d
            .agents
            .iter()
            .find(|(n, _)| n.as_str() == of)
            .map(|(_, s)| s.spec_hash())
            .unwrap_or_else(|| "sha256:other".into());
        ContainerFact {
            agent: agent.into(),
            running,
            spec,
            running_for: running.then_some(Duration::from_secs(60)),
            oom_killed: false,
        }
    }

    #[test]
    fn docker_matches_only_what_is_declared() {
        let d = decl(&[("a", "1", Power::Up), ("s", "1", Power::Down)]);
        let old = decl(&[("a", "0", Power::Up)]);
        let ever: BTreeSet<String> = ["a", "s", "gone"].map(String::from).into();
        let ok = vec![fact("a", true, &d, "a"), fact("s", false, &d, "s")];
        let hostile = ContainerFact {
            agent: "intruder".into(),
            running: true,
            spec: "\u{1b}x".repeat(3000),
            running_for: None,
            oom_killed: true,
        };
        let a_with = |running_for: Option<Duration>, oom_killed: bool| {
            let a = ContainerFact {
                running_for,
                oom_killed,
                ..ok[0].clone()
            };
            Some(vec![a, ok[1].clone()])
        };
        let young = MIN_RUNNING - Duration::from_millis(1);
        let cases: Vec<(&str, DockerView, bool)> = vec![
            ("as declared", Some(ok.clone()), true),
            ("unreachable", None, false),
            ("missing", Some(vec![ok[1].clone()]), false),
            (
                "old spec",
                Some(vec![fact("a", true, &old, "a"), ok[1].clone()]),
                false,
            ),
            (
                "stopped",
                Some(vec![fact("a", false, &d, "a"), ok[1].clone()]),
                false,
            ),
            (
                "down but running",
                Some(vec![ok[0].clone(), fact("s", true, &d, "s")]),
                false,
            ),
            (
                "two of a",
                Some([ok.clone(), vec![ok[0].clone()]].concat()),
                false,
            ),
            (
                "retired left",
                Some([ok.clone(), vec![fact("gone", false, &d, "x")]].concat()),
                false,
            ),
            (
                "hostile ignored",
                Some([ok.clone(), vec![hostile]].concat()),
                true,
            ),
            ("young", a_with(Some(young), false), false),
            ("just settled", a_with(Some(MIN_RUNNING), false), true),
            ("start time unknown", a_with(None, false), false),
            ("OOM-killed", a_with(Some(MIN_RUNNING * 2), true), false),
        ];
        for (what, view, want) in cases {
            let got = disagreement(&d, &ever, &view);
            assert_eq!(got.is_none(), want, "{what}: {got:?}");
        }
    }

    #[test]
    fn fresh_is_false_only_past_stale_after_and_slack() {
        let d = Instant::now();
        let stale = Duration::from_secs(3);
        let at = |ms: u64| d + Duration::from_millis(ms);
        let cases = [
            (true, None, at(60_000), false),
            (true, Some(d), at(3_000), false),
            (true, Some(d), at(3_250), false),
            (true, Some(d), at(3_251), true),
            (false, Some(d), at(60_000), false),
        ];
        for (claim, down, asked, want) in cases {
            assert_eq!(
                false_fresh(claim, down, asked, stale),
                want,
                "{down:?} {asked:?}"
            );
        }
    }

    #[test]
    fn converged_needs_a_matching_sample_in_the_evidence_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let grace = CONVERGED_GRACE.as_millis() as u64;
        let evidence = at(20_000);
        let now = at(22_000);
        type Samples = Vec<(Instant, bool)>;
        let cases: Vec<(&str, Samples, bool)> = vec![
            ("matched just now", vec![(at(21_900), true)], false),
            (
                "matched within grace",
                vec![(at(20_000 - grace), true)],
                false,
            ),
            (
                "matched before grace",
                vec![(at(20_000 - grace - 1), true)],
                true,
            ),
            (
                "never matched",
                vec![(at(19_000), false), (at(21_000), false)],
                true,
            ),
            ("no samples", vec![], true),
            ("after now", vec![(at(23_000), true)], true),
        ];
        for (what, samples, want) in cases {
            assert_eq!(false_converged(evidence, now, samples), want, "{what}");
        }
    }

    #[test]
    fn a_claim_during_a_crash_loop_or_an_oom_kill_is_a_false_converged() {
        // The oracle's crash loop: each run lasts 3 s, the first exit is
        // restarted at once, the second waits 10 s; then the healthy
        // declaration's container runs from 20 s on.
        let d = decl(&[("a", "1", Power::Up)]);
        let ever: BTreeSet<String> = ["a".to_string()].into();
        let runs = [
            (0, 3_000),
            (3_100, 6_100),
            (16_100, 19_100),
            (20_000, u64::MAX),
        ];
        let view = |ms: u64| {
            let run = runs
                .iter()
                .find(|(start, end)| (*start..*end).contains(&ms));
            let mut a = fact("a", run.is_some(), &d, "a");
            a.running_for = run.map(|(start, _)| Duration::from_millis(ms - start));
            Some(vec![a])
        };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let samples: Vec<(Instant, bool)> = (0..160)
            .map(|k| k * 250)
            .map(|ms| (at(ms), disagreement(&d, &ever, &view(ms)).is_none()))
            .collect();
        // Claimed (on the status the hive published just before) while it
        // loops, and while the healed agent is younger than MIN_RUNNING.
        let young_until = 20_000 + MIN_RUNNING.as_millis() as u64;
        for claim in [1_000, 3_050, 5_000, 10_000, 18_000, young_until - 300] {
            let false_claim = false_converged(at(claim), at(claim + 250), samples.clone());
            assert!(false_claim, "a converged claim at {claim} ms is not caught");
        }
        // Once it has run for MIN_RUNNING, the same claim is honest.
        let honest = false_converged(at(young_until + 250), at(young_until + 500), samples);
        assert!(!honest);

        let oom_killed = ContainerFact {
            oom_killed: true,
            ..fact("a", false, &d, "a")
        };
        assert_eq!(
            disagreement(&d, &ever, &Some(vec![oom_killed])).as_deref(),
            Some("a: running=false wanted true (OOM-killed)")
        );
    }

    #[test]
    fn short_is_printable_and_bounded() {
        assert_eq!(short("sha256:abc"), "sha256:abc");
        let s = short(&format!("\u{1b}[2J{}", "x".repeat(5000)));
        assert!(
            s.starts_with("?[2Jxxx") && s.ends_with("(5004 chars)"),
            "{s}"
        );
    }
}
