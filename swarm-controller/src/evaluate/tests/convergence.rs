//! Convergence: every state from a real declaration and report.

use super::*;

#[test]
fn convergence_table() {
    use Convergence as C;
    let decl = || declaration(&[("bot", "img:1")]);
    let undecodable_wanted = WantedEntry {
        revision: 5,
        created: t0(),
        declared: Err(EntryError::Undecodable(
            "declaration is not valid: missing field `agents`".into(),
        )),
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
        hive_status(HiveState::Ok, Some(5), Some(5), vec![("bot", a)])
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
                hive_status(HiveState::Stopped, Some(5), Some(5), vec![]),
            )),
            Some(wanted(5, decl())),
            C::Unknown,
            "shut down cleanly",
        ),
        (
            "not read yet",
            Some(status_at(1, hive_status(HiveState::Ok, None, None, vec![]))),
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
                hive_status(
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
            "bot: job 42 (first_deploy) running",
        ),
        (
            "read, agent not reported yet",
            Some(status_at(
                1,
                hive_status(HiveState::Ok, Some(5), Some(4), vec![]),
            )),
            Some(wanted(5, decl())),
            C::Progressing,
            "not reported yet: bot",
        ),
        (
            "job failed",
            Some(status_at(
                1,
                hive_status(
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
                hive_status(
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
                hive_status(HiveState::Ok, Some(5), Some(5), vec![]),
            )),
            Some(wanted(5, declaration(&[]))),
            C::Converged,
            "0 agents",
        ),
        (
            "claims convergence, reports nothing about a declared agent",
            Some(status_at(
                1,
                hive_status(HiveState::Ok, Some(5), Some(5), vec![]),
            )),
            Some(wanted(5, decl())),
            C::Unknown,
            "reports nothing about bot",
        ),
        (
            "claims convergence, Docker state unknown",
            Some(status_at(
                1,
                hive_status(
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
            "waiting for agents to come up: bot (health: starting)",
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
                hive_status(
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
                hive_status(HiveState::Ok, Some(5), Some(5), vec![("bot", drifted_spec)]),
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
                hive_status(
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
                hive_status(
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
                hive_status(
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
