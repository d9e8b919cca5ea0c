use super::*;
use swarm_queue_client::test_support::{agent_status, HiveStatusBuilder};
use swarm_queue_client::{
    AgentName, AgentSpec, AgentStatus, Declaration, HiveStatus, Level, Warning,
};

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

fn hive_status(
    state: HiveState,
    seen: Option<u64>,
    converged: Option<u64>,
    agents: Vec<(&str, AgentStatus)>,
) -> HiveStatus {
    HiveStatusBuilder::new("alpha", state)
        .revisions(seen, converged)
        .agents(agents)
        .build()
}

fn status_at(age_secs: i64, r: HiveStatus) -> StatusEntry {
    StatusEntry {
        revision: 3,
        created: t0() - time::Duration::seconds(age_secs),
        reported: Ok(r.into()),
        notes: vec![],
    }
}

fn run(rostered: bool, status: Option<&StatusEntry>, wanted: Option<&WantedEntry>) -> HiveRow {
    run_linked(rostered, status, wanted, None)
}

fn run_linked(
    rostered: bool,
    status: Option<&StatusEntry>,
    wanted: Option<&WantedEntry>,
    link: Option<&Link>,
) -> HiveRow {
    let roster = RosterEntry::default();
    evaluate(Inputs {
        name: "alpha",
        roster: rostered.then_some(&roster),
        status,
        wanted,
        hold: None,
        now: t0(),
        stale_after: STALE_AFTER,
        link,
    })
}

/// The connection rule: a closed connection turns a fresh (or stale)
/// report `offline` at once and its convergence into no evidence; an open
/// one changes nothing (a hung hive still turns stale); a clean stop, an
/// undecodable or a missing status keep their own freshness; without
/// events the row says the KV-timestamp rule applied.
#[test]
fn a_closed_connection_turns_the_row_offline() {
    let down = Link::Down {
        why: "its NATS connection closed 1s ago (Client Closed)".into(),
    };
    let w = wanted(5, declaration(&[("bot", "img:1")]));
    let fresh = status_at(5, ok_hive(5, 5));
    let old = status_at(STALE_AFTER.as_secs() as i64 + 30, ok_hive(5, 5));
    let stopped = status_at(5, hive_status(HiveState::Stopped, Some(5), Some(5), vec![]));
    let cases: [(&StatusEntry, Option<&Link>, Freshness, FreshnessRule); 6] = [
        (&fresh, None, Freshness::Fresh, FreshnessRule::KvTimestamp),
        (
            &fresh,
            Some(&Link::Up),
            Freshness::Fresh,
            FreshnessRule::Connection,
        ),
        (
            &old,
            Some(&Link::Up),
            Freshness::Stale,
            FreshnessRule::Connection,
        ),
        (
            &fresh,
            Some(&down),
            Freshness::Offline,
            FreshnessRule::Connection,
        ),
        (
            &old,
            Some(&down),
            Freshness::Offline,
            FreshnessRule::Connection,
        ),
        (
            &stopped,
            Some(&down),
            Freshness::Stopped,
            FreshnessRule::Connection,
        ),
    ];
    for (st, link, freshness, rule) in cases {
        let row = run_linked(true, Some(st), Some(&w), link);
        assert_eq!(
            (row.freshness, row.freshness_rule),
            (freshness, rule),
            "{row:#?}"
        );
        if freshness == Freshness::Offline {
            assert!(
                row.freshness_reason.contains("connection closed"),
                "{row:#?}"
            );
            assert_eq!(row.convergence, Convergence::Unknown, "{row:#?}");
            assert!(row.reason.contains("offline"), "{row:#?}");
            assert!(row.stale_at.is_none());
        }
    }
    let none = run_linked(true, None, Some(&w), Some(&down));
    assert_eq!(none.freshness, Freshness::Unknown);
}

fn ok_hive(seen: u64, converged: u64) -> HiveStatus {
    hive_status(
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
        reported: Err(EntryError::Undecodable(
            "hive status is not valid: expected value".into(),
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
                hive_status(HiveState::Stopped, None, None, vec![]),
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
    let err = entry.reported.unwrap_err().to_string();
    assert!(
        err.contains("\"beta\"") && err.contains("\"alpha\""),
        "{err}"
    );
    let garbage = StatusEntry::decode("alpha", 4, t0(), b"{not json");
    assert!(garbage
        .reported
        .unwrap_err()
        .to_string()
        .contains("hive status is not valid"));
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
        hive_status(
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

/// A hive that claims revision 5 with `bot` as the hive reports it.
fn claimed_with(bot: AgentStatus) -> StatusEntry {
    status_at(
        10,
        hive_status(HiveState::Ok, Some(5), Some(5), vec![("bot", bot)]),
    )
}

#[test]
fn restarting_agents_are_never_converged_and_the_reason_names_the_crash() {
    use swarm_queue_client::{ExitReport, Unsettled};
    let decl = || declaration(&[("bot", "img:1")]);
    let exits = |oom, code, next_in| ExitReport {
        code: Some(code),
        oom,
        count: 5,
        first: Some(230),
        since: Some(12),
        next_in,
    };
    let with = |observed, unsettled, e: ExitReport| AgentStatus {
        unsettled: Some(unsettled),
        exits: Some(e),
        ..agent("img:1", observed, Some(("done", None)))
    };
    let cases = [
        (
            with(
                Observed::Stopped,
                Unsettled::Backoff,
                exits(false, 3, Some(50)),
            ),
            "bot stopped (wanted up), crash loop: exited 3 (5 times in 4m00s), next start in 40s",
        ),
        (
            with(Observed::Stopped, Unsettled::Exited, exits(true, 137, None)),
            "OOM-killed: exited 137 (5 times in 4m00s), starting again",
        ),
        (
            // Running again, but only for a moment: still not as declared.
            with(Observed::Running, Unsettled::Young, exits(false, 3, None)),
            "bot started too recently to count as up; before: crash loop: exited 3",
        ),
        (
            AgentStatus {
                unsettled: Some(Unsettled::Unknown),
                ..agent("img:1", Observed::Running, Some(("done", None)))
            },
            "bot not settled",
        ),
    ];
    for (bot, want) in cases {
        let row = run(true, Some(&claimed_with(bot)), Some(&wanted(5, decl())));
        assert_eq!(row.convergence, Convergence::Degraded, "{}", row.reason);
        assert!(row.reason.contains(want), "{}", row.reason);
        let agent = &row.agents[0];
        assert!(agent.note.is_some(), "{agent:?}");
    }
}

#[test]
fn a_first_start_inside_min_running_secs_is_progressing_not_degraded() {
    use swarm_queue_client::{ExitReport, Unsettled};
    let decl = || declaration(&[("bot", "img:1")]);
    let young = |exits: Option<ExitReport>| AgentStatus {
        unsettled: Some(Unsettled::Young),
        exits,
        ..agent("img:1", Observed::Running, Some(("done", None)))
    };
    // Never exited: on its way up.
    for exits in [None, Some(ExitReport::default())] {
        let row = run(
            true,
            Some(&claimed_with(young(exits))),
            Some(&wanted(5, decl())),
        );
        assert_eq!(row.convergence, Convergence::Progressing, "{}", row.reason);
        assert!(
            row.reason
                .contains("waiting for agents to come up: bot (up for less than min_running_secs)"),
            "{}",
            row.reason
        );
    }
    // Exited once before: still a fault, never progressing.
    let once = ExitReport {
        code: Some(1),
        count: 1,
        ..ExitReport::default()
    };
    let row = run(
        true,
        Some(&claimed_with(young(Some(once)))),
        Some(&wanted(5, decl())),
    );
    assert_eq!(row.convergence, Convergence::Degraded, "{}", row.reason);
    // Young on a spec that is not the declared one: drift, not starting.
    let other = AgentStatus {
        unsettled: Some(Unsettled::Young),
        ..agent("img:0", Observed::Running, Some(("done", None)))
    };
    let row = run(true, Some(&claimed_with(other)), Some(&wanted(5, decl())));
    assert_eq!(row.convergence, Convergence::Degraded, "{}", row.reason);
}

fn hold_at(age_secs: i64, ttl_secs: u64) -> crate::maintenance::HoldEntry {
    let hold = crate::maintenance::Hold {
        schema: 1,
        reason: "kernel update".into(),
        ttl_secs,
        by: "ops@host".into(),
    };
    crate::maintenance::HoldEntry::decode(
        9,
        t0() - time::Duration::seconds(age_secs),
        &serde_json::to_vec(&hold).unwrap(),
    )
}

fn run_held(
    status: Option<&StatusEntry>,
    wanted: Option<&WantedEntry>,
    hold: &crate::maintenance::HoldEntry,
    link: Option<&Link>,
) -> HiveRow {
    let roster = RosterEntry::default();
    evaluate(Inputs {
        name: "alpha",
        roster: Some(&roster),
        status,
        wanted,
        hold: Some(hold),
        now: t0(),
        stale_after: STALE_AFTER,
        link,
    })
}

/// A hold in force shows `maintenance` instead of stale or offline, with
/// the hold and its end in the row; convergence stays what the evidence
/// says (a stale report is none), and the row changes when the hold ends.
/// An expired hold is ignored.
#[test]
fn a_hold_in_force_shows_maintenance_and_keeps_convergence_from_evidence() {
    let w = wanted(5, declaration(&[("bot", "img:1")]));
    let stale = status_at(600, ok_hive(5, 5));
    let held = hold_at(60, 3600);
    let row = run_held(Some(&stale), Some(&w), &held, None);
    assert_eq!(row.freshness, Freshness::Maintenance);
    assert!(
        row.freshness_reason.starts_with("in maintenance until ")
            && row
                .freshness_reason
                .contains("(59m00s left), set by ops@host: kernel update")
            && row.freshness_reason.contains("over stale_after"),
        "{}",
        row.freshness_reason
    );
    assert_eq!(row.convergence, Convergence::Unknown, "{}", row.reason);
    assert_eq!(row.stale_at, held.until());
    let m = row.maintenance.as_ref().expect("the hold is shown");
    assert_eq!((m.reason.as_str(), m.left_secs), ("kernel update", 3540));
    let json = serde_json::to_value(&row).unwrap();
    assert_eq!(json["freshness"], "maintenance");
    assert_eq!(json["maintenance"]["by"], "ops@host");

    let down = Link::Down {
        why: "its NATS connection closed 5s ago".into(),
    };
    let fresh = status_at(5, ok_hive(5, 5));
    let row = run_held(Some(&fresh), Some(&w), &held, Some(&down));
    assert_eq!(row.freshness, Freshness::Maintenance);
    assert_eq!(row.convergence, Convergence::Unknown);

    // Fresh evidence still counts: converged stays converged.
    let row = run_held(Some(&fresh), Some(&w), &held, None);
    assert_eq!(
        (row.freshness, row.convergence),
        (Freshness::Maintenance, Convergence::Converged)
    );

    let expired = hold_at(3600, 3600);
    let row = run_held(Some(&stale), Some(&w), &expired, None);
    assert_eq!(row.freshness, Freshness::Stale);
    assert_eq!(row.maintenance, None);
}

#[test]
fn an_undecodable_hold_is_a_problem_and_no_hold() {
    let bad = crate::maintenance::HoldEntry::decode(4, t0(), b"nope");
    let stale = status_at(600, ok_hive(5, 5));
    let row = run_held(Some(&stale), None, &bad, None);
    assert_eq!(row.freshness, Freshness::Stale);
    assert!(
        row.problems
            .iter()
            .any(|p| p.starts_with("maintenance revision 4: ")),
        "{:?}",
        row.problems
    );
}
