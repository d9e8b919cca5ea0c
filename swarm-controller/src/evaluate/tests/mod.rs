use super::*;
use swarm_queue_client::test_support::{agent_status, HiveStatusBuilder};
use swarm_queue_client::{
    AgentName, AgentSpec, AgentStatus, Declaration, HiveStatus, Level, Warning,
};

mod agents;
mod convergence;
mod holds;

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
