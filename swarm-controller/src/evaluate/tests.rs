use super::*;
use swarm_queue_client::test_support::{agent_status, ReadinessBuilder};
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
    agent_status(&spec(image), observed, job)
}

fn readiness(
    state: HiveState,
    seen: Option<u64>,
    converged: Option<u64>,
    agents: Vec<(&str, AgentStatus)>,
) -> Readiness {
    ReadinessBuilder::new("alpha", state)
        .revisions(seen, converged)
        .agents(agents)
        .build()
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
        readiness: Err(EntryError::Undecodable(
            "readiness is not valid: expected value".into(),
        )),
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
    let err = entry.readiness.unwrap_err().to_string();
    assert!(
        err.contains("\"beta\"") && err.contains("\"alpha\""),
        "{err}"
    );
    let garbage = StatusEntry::decode("alpha", 4, t0(), b"{not json");
    assert!(garbage
        .readiness
        .unwrap_err()
        .to_string()
        .contains("readiness is not valid"));
}

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
            "bot: job 42 (first_deploy) running",
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
    assert!(retry_text(&r, Duration::from_secs(400)).starts_with("failed at image, retry due now"));

    // A failed agent with a retry: the reason says so.
    let mut status = agent("img:1", Observed::Missing, Some(("failed", Some("boom"))));
    status.retry = Some(r);
    let d = declaration(&[("web", "img:1")]);
    let mut ready = ok_hive(3, 2);
    ready.agents.insert(AgentName::new("web").unwrap(), status);
    let row = run(true, Some(&status_at(60, ready)), Some(&wanted(3, d)));
    assert_eq!(row.convergence, Convergence::Failed, "{}", row.reason);
    assert!(
        row.reason
            .contains("web: job 42 (first_deploy) failed at image, retrying in 4m00s (attempt 5)"),
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
