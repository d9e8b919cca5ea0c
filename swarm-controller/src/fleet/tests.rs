use super::*;
use swarm_queue_client::test_support::HiveStatusBuilder;
use swarm_queue_client::{encode, HiveName, HiveState, HiveStatus};

use crate::config::RosterEntry;
use crate::evaluate::{Convergence, Freshness};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn status_bytes(hive: &str) -> Vec<u8> {
    encode(&HiveStatusBuilder::new(hive, HiveState::Ok).build()).unwrap()
}

fn roster(names: &[&str]) -> Roster {
    names
        .iter()
        .map(|n| (HiveName::new(*n).unwrap(), RosterEntry::default()))
        .collect()
}

fn put(fleet: &mut Fleet, key: &str, at: OffsetDateTime, now: OffsetDateTime) -> Change {
    let value = status_bytes(key);
    fleet.apply(update(key, at, Operation::Put, &value), now)
}

fn update<'a>(
    key: &'a str,
    at: OffsetDateTime,
    operation: Operation,
    value: &'a [u8],
) -> Update<'a> {
    Update {
        source: Source::Status,
        key,
        revision: 1,
        created: at,
        operation,
        value,
    }
}

fn row(change: Change) -> ViewRow {
    match change.row {
        Some(r) => *r,
        None => panic!("{} removed", change.name),
    }
}

#[test]
fn rostered_hives_start_unknown_and_counts_follow_updates() {
    let mut fleet = Fleet::new(roster(&["a", "b"]), Duration::from_secs(10), t0());
    assert_eq!(fleet.summary().freshness["unknown"], 2);
    let r = row(put(&mut fleet, "a", t0(), t0()));
    assert_eq!(r.freshness, Freshness::Fresh);
    let s = fleet.summary();
    assert_eq!((s.freshness["fresh"], s.freshness["unknown"]), (1, 1));
    assert_eq!(s.line, "2 hives: 1 fresh, 1 unknown | 2 unknown");
    assert_eq!(fleet.stats().values_decoded, 1);
}

#[test]
fn unrostered_keys_appear_and_go_away_when_deleted() {
    let mut fleet = Fleet::new(roster(&["a"]), Duration::from_secs(10), t0());
    let r = row(put(&mut fleet, "stray", t0(), t0()));
    assert_eq!(r.freshness, Freshness::Unrostered);
    assert_eq!(fleet.summary().hives, 2);
    let gone = fleet.apply(update("stray", t0(), Operation::Delete, b""), t0());
    assert_eq!((gone.name.as_str(), gone.row.is_none()), ("stray", true));
    assert_eq!(
        gone.before.map(|c| c.freshness),
        Some(Freshness::Unrostered)
    );
    assert_eq!(fleet.summary().hives, 1);
    // A rostered hive whose key is deleted stays, as unknown.
    put(&mut fleet, "a", t0(), t0());
    let r = row(fleet.apply(update("a", t0(), Operation::Purge, b""), t0()));
    assert_eq!(r.freshness, Freshness::Unknown);
}

#[test]
fn expire_recomputes_only_rows_that_ran_out() {
    let mut fleet = Fleet::new(roster(&["a", "b", "c"]), Duration::from_secs(10), t0());
    put(&mut fleet, "a", t0(), t0());
    put(&mut fleet, "b", t0() + time::Duration::seconds(5), t0());
    assert_eq!(
        fleet.next_stale_at(),
        Some(t0() + time::Duration::seconds(10))
    );
    assert!(fleet.expire(t0() + time::Duration::seconds(10)).is_empty());
    let changed = fleet.expire(t0() + time::Duration::seconds(11));
    assert_eq!(changed.len(), 1);
    let r = row(changed.into_iter().next().unwrap());
    assert_eq!((r.name.as_str(), r.freshness), ("a", Freshness::Stale));
    let s = fleet.summary();
    assert_eq!(
        (
            s.freshness["fresh"],
            s.freshness["stale"],
            s.freshness["unknown"]
        ),
        (1, 1, 1)
    );
    // A new report makes it fresh again, with a new deadline.
    put(
        &mut fleet,
        "a",
        t0() + time::Duration::seconds(12),
        t0() + time::Duration::seconds(12),
    );
    assert_eq!(fleet.summary().freshness["fresh"], 2);
    assert_eq!(
        fleet.next_stale_at(),
        Some(t0() + time::Duration::seconds(15))
    );
}

#[test]
fn storing_then_refreshing_all_equals_applying_one_by_one() {
    let mut one_by_one = Fleet::new(roster(&["a", "b"]), Duration::from_secs(10), t0());
    let mut stored = Fleet::new(roster(&["a", "b"]), Duration::from_secs(10), t0());
    for key in ["a", "stray"] {
        let value = status_bytes(key);
        one_by_one.apply(update(key, t0(), Operation::Put, &value), t0());
        stored.store(update(key, t0(), Operation::Put, &value));
    }
    stored.refresh_all(t0());
    assert_eq!(stored.summary(), one_by_one.summary());
    assert_eq!(stored.peek_rows(t0()), one_by_one.peek_rows(t0()));
    assert_eq!(stored.next_stale_at(), one_by_one.next_stale_at());
    assert_eq!(stored.stats(), one_by_one.stats());
}

#[test]
fn rows_are_sorted_and_complete() {
    let mut fleet = Fleet::new(roster(&["b", "a"]), Duration::from_secs(10), t0());
    put(&mut fleet, "zz", t0(), t0());
    let rows = fleet.peek_rows(t0());
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "zz"]);
    assert_eq!(fleet.summary(), Summary::of_rows(&rows));
}

fn progressing_status(hive: &str) -> Vec<u8> {
    let mut r: HiveStatus = swarm_queue_client::decode(&status_bytes(hive))
        .unwrap()
        .value;
    r.seen_revision = Some(1);
    encode(&r).unwrap()
}

fn declaration() -> Vec<u8> {
    let mut agents = std::collections::BTreeMap::new();
    agents.insert(
        swarm_queue_client::AgentName::new("bot").unwrap(),
        swarm_queue_client::AgentSpec {
            image: Some("local/bot:1".into()),
            ..Default::default()
        },
    );
    encode(&swarm_queue_client::Declaration::new(agents)).unwrap()
}

#[test]
fn a_declaration_progressing_too_long_needs_attention_with_no_kv_update() {
    let mut fleet = Fleet::new(roster(&["a"]), Duration::from_secs(1000), t0());
    fleet.set_progress_limit(Duration::from_secs(60), t0());
    let wanted = declaration();
    let status = progressing_status("a");
    let mut up = update("a", t0(), Operation::Put, &wanted);
    up.source = Source::Wanted;
    fleet.apply(up, t0());
    let r = row(fleet.apply(update("a", t0(), Operation::Put, &status), t0()));
    assert_eq!(
        (r.convergence, r.attention.clone()),
        (Convergence::Progressing, None)
    );
    assert_eq!(fleet.summary().attention, 0);
    assert_eq!(
        fleet.next_stale_at(),
        Some(t0() + time::Duration::seconds(60))
    );
    let seq = fleet.seq();
    let changed = fleet.expire(t0() + time::Duration::seconds(61));
    assert_eq!(changed.len(), 1);
    let c = &changed[0];
    assert!(c.seq > seq);
    assert_eq!(c.before.and_then(|b| b.attention), None);
    assert_eq!(
        c.after().and_then(|a| a.attention),
        Some(crate::view::Attention::SlowProgress)
    );
    assert_eq!(fleet.summary().attention, 1);
    // Then the stale deadline remains.
    assert_eq!(
        fleet.next_stale_at(),
        Some(t0() + time::Duration::seconds(1000))
    );
}

#[test]
fn select_filters_orders_worst_first_and_pages_without_evaluating() {
    let names = ["a", "b", "c", "d", "e"];
    let mut fleet = Fleet::new(roster(&names), Duration::from_secs(10), t0());
    // a and c report; b, d, e never do (unknown: they need attention).
    put(&mut fleet, "a", t0(), t0());
    let later = t0() + time::Duration::seconds(5);
    put(&mut fleet, "c", later, later);
    // a goes stale: it ranks before the unknown ones.
    fleet.expire(t0() + time::Duration::seconds(11));
    let q = |pairs: &[(&str, &str)]| Query::parse(pairs).unwrap();
    let sel = fleet.select(&q(&[("sort", "attention")]));
    assert_eq!(sel.names, ["a", "b", "d", "e", "c"]);
    assert_eq!(sel.matched, 5);
    let sel = fleet.select(&q(&[
        ("sort", "attention"),
        ("offset", "1"),
        ("limit", "2"),
    ]));
    assert_eq!(
        (sel.names.as_slice(), sel.matched),
        (&["b".to_string(), "d".into()][..], 5)
    );
    let sel = fleet.select(&q(&[("attention", "false")]));
    assert_eq!(sel.names, ["c"]);
    let sel = fleet.select(&q(&[("freshness", "unknown"), ("name", "d")]));
    assert_eq!(
        (sel.names.as_slice(), sel.matched),
        (&["d".to_string()][..], 1)
    );
    assert_eq!(fleet.summary().attention, 4);
    let sel = fleet.select(&q(&[("label", "site=x")]));
    assert_eq!(sel.matched, 0);
}

/// A hold keeps a stale hive `maintenance` with no attention, and its end
/// is a deadline: the row turns stale with no KV update when it comes; a
/// deleted hold ends it at once.
#[test]
fn a_hold_shows_maintenance_until_it_ends_by_itself_or_is_deleted() {
    let stale_after = Duration::from_secs(10);
    let mut fleet = Fleet::new(roster(&["a"]), stale_after, t0());
    put(&mut fleet, "a", t0(), t0());
    let hold = serde_json::to_vec(&crate::maintenance::Hold {
        schema: 1,
        reason: "reboot".into(),
        ttl_secs: 60,
        by: "ops".into(),
    })
    .unwrap();
    let held = Update {
        source: Source::Maintenance,
        ..update("a", t0(), Operation::Put, &hold)
    };
    let r = row(fleet.apply(held, t0()));
    assert_eq!(r.freshness, Freshness::Maintenance);
    assert_eq!(fleet.next_stale_at(), Some(t0() + Duration::from_secs(60)));
    // Past stale_after nothing changes: still held, no attention.
    assert!(fleet.expire(t0() + Duration::from_secs(30)).is_empty());
    let s = fleet.summary();
    assert_eq!((s.freshness["maintenance"], s.attention), (1, 0));
    assert!(s.line.starts_with("1 hive: 1 maintenance |"), "{}", s.line);
    // The hold's end comes: stale, needing attention.
    let due = fleet.expire(t0() + Duration::from_secs(61));
    assert_eq!(due.len(), 1);
    let r = row(due.into_iter().next().unwrap());
    assert_eq!(r.freshness, Freshness::Stale);
    assert!(r.attention.is_some());
    // Held again, then the hold deleted: stale at once.
    let again = Update {
        created: t0() + Duration::from_secs(62),
        ..held
    };
    let r = row(fleet.apply(again, t0() + Duration::from_secs(62)));
    assert_eq!(r.freshness, Freshness::Maintenance);
    let off = Update {
        source: Source::Maintenance,
        ..update("a", t0(), Operation::Delete, b"")
    };
    let r = row(fleet.apply(off, t0() + Duration::from_secs(63)));
    assert_eq!(r.freshness, Freshness::Stale);
}

#[test]
fn one_hives_page_evaluates_its_row_only_whatever_the_fleet() {
    let cost = |hives: usize| {
        let names: Vec<String> = (0..hives).map(|i| format!("hive-{i:05}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut fleet = Fleet::new(roster(&refs), Duration::from_secs(10), t0());
        let probe = &names[hives / 2];
        put(&mut fleet, probe, t0(), t0());
        let before = fleet.rows_evaluated();
        let row = fleet.peek_row(probe, t0()).expect("its row");
        let ages = fleet.status_age(probe, t0()).expect("its ages");
        assert_eq!(row.name, *probe);
        assert_eq!(ages.len(), status_age::MINUTES);
        assert_eq!(ages.last().unwrap().updates, 1);
        assert!(fleet.peek_row("nobody", t0()).is_none());
        assert!(fleet.status_age("nobody", t0()).is_none());
        fleet.rows_evaluated() - before
    };
    assert_eq!(cost(10), 1);
    assert_eq!(cost(10_000), 1, "the page of one hive evaluates one row");
}

#[test]
fn rows_dealt_find_each_roster_entry_among_unrostered_hives() {
    // Rostered hives with labels, unrostered ones before, between and
    // after them: the walk along the roster gives each row what a lookup
    // gives it, whichever taker deals it.
    let mut roster = roster(&["b", "d", "f"]);
    for (name, entry) in roster.iter_mut() {
        entry
            .labels
            .insert("site".into(), format!("site-of-{}", name.as_str()));
    }
    let mut fleet = Fleet::new(roster, Duration::from_secs(10), t0());
    for key in ["a", "c", "d", "e", "g"] {
        put(&mut fleet, key, t0(), t0());
    }
    let names: Vec<String> = fleet.slots.keys().cloned().collect();
    assert_eq!(names, ["a", "b", "c", "d", "e", "f", "g"]);
    for of in 1..=3 {
        let mut dealt = Vec::new();
        for taker in 0..of {
            dealt.extend(fleet.rows_dealt(t0(), 2, taker, of));
        }
        dealt.sort_by(|x, y| x.name.cmp(&y.name));
        let looked_up: Vec<ViewRow> = names
            .iter()
            .map(|n| fleet.peek_row(n, t0()).unwrap())
            .collect();
        assert_eq!(dealt, looked_up, "{of} takers");
        for r in &dealt {
            assert_eq!(r.rostered, ["b", "d", "f"].contains(&r.name.as_str()));
            assert_eq!(
                r.labels.get("site").map(String::as_str),
                r.rostered.then(|| format!("site-of-{}", r.name)).as_deref()
            );
        }
    }
}
