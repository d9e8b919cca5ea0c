//! Maintenance holds: what a hold in force, expired or undecodable makes
//! of the row.

use super::*;

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
