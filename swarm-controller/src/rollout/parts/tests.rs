//! Cutting and joining a rollout's state: what is joined is what was cut,
//! every part fits, and the waves keep their hives and order.

use super::*;
use crate::rollout::settings::WaveSize;
use crate::rollout::state::tests::{decl, plan};
use crate::rollout::state::Step;

/// `n` hives in waves 1, 1%, 10%, 100% (not in name order: the waves must
/// keep the plan's order); `distinct` different declarations.
fn rollout(n: usize, distinct: usize) -> Rollout {
    let waves = vec![
        WaveSize::Count(1),
        WaveSize::Percent(1),
        WaveSize::Percent(10),
        WaveSize::Percent(100),
    ];
    let hives = (0..n)
        .map(|i| HiveName::new(format!("h{:05}", (i * 7919) % n)).unwrap())
        .collect();
    plan(hives, waves, 0, |i| {
        decl(&format!("registry.example/web:{}", i % distinct))
    })
}

/// Join what `cut` made, as the store would after reading it back.
fn round_trip(r: &Rollout) -> (Cut, Rollout) {
    let cut = cut(r).unwrap();
    let hives = cut
        .hives
        .iter()
        .map(|b| serde_json::from_slice::<HivePart>(b).unwrap())
        .collect();
    let declarations = cut
        .declarations
        .iter()
        .map(|b| serde_json::from_slice::<DeclarationPart>(b).unwrap())
        .collect();
    let joined = join(cut.head.clone(), hives, declarations).unwrap();
    (cut, joined)
}

#[test]
fn ten_thousand_hives_cut_into_parts_that_fit_and_join_to_the_same_rollout() {
    let mut r = rollout(10_000, 10_000);
    for (i, t) in r.hives.values_mut().enumerate() {
        if i % 3 == 0 {
            t.step = Step::Failed;
            t.written_revision = Some(i as u64);
            t.reason = Some(format!("agent web failed: {}", "x".repeat(i % 200)));
        }
    }
    let (cut, joined) = round_trip(&r);
    assert_eq!(joined, r);
    assert!(cut.hives.len() > 1 && cut.declarations.len() > 1, "{cut:?}");
    for part in cut.hives.iter().chain(&cut.declarations) {
        assert!(part.len() <= PART_BUDGET, "{} bytes", part.len());
    }
    let head = serde_json::to_vec(&cut.head).unwrap();
    assert!(head.len() < 4096, "the head is {} bytes", head.len());
    let whole = serde_json::to_vec(&r).unwrap().len();
    assert!(
        whole > swarm_queue_client::limits::MAX_VALUE_BYTES,
        "the test should be past one value: {whole}"
    );
}

#[test]
fn small_rollouts_are_one_part_of_each_kind() {
    let r = rollout(6, 1);
    let (cut, joined) = round_trip(&r);
    assert_eq!(joined, r);
    assert_eq!((cut.hives.len(), cut.declarations.len()), (1, 1));
}

#[test]
fn the_same_state_cuts_to_the_same_bytes_and_one_change_to_one_part() {
    let mut r = rollout(5_000, 1);
    let before = cut(&r).unwrap();
    assert_eq!(cut(&r).unwrap().hives, before.hives);
    let last = r.waves.last().unwrap().last().unwrap().clone();
    r.hives.get_mut(&last).unwrap().step = Step::Done;
    let after = cut(&r).unwrap();
    let changed: Vec<usize> = (0..after.hives.len())
        .filter(|k| before.hives.get(*k) != after.hives.get(*k))
        .collect();
    assert_eq!(changed, vec![after.hives.len() - 1]);
    assert_eq!(after.declarations, before.declarations);
}

#[test]
fn a_row_larger_than_the_budget_gets_a_part_of_its_own() {
    let mut r = rollout(3, 1);
    let first = r.waves[0][0].clone();
    r.hives.get_mut(&first).unwrap().reason = Some("y".repeat(PART_BUDGET + 10));
    let (cut, joined) = round_trip(&r);
    assert_eq!(joined, r);
    assert_eq!(cut.hives.len(), 2);
    assert!(cut.hives[0].len() > PART_BUDGET);
}

#[test]
fn parts_that_disagree_with_the_head_are_refused() {
    let r = rollout(20, 1);
    let cut = cut(&r).unwrap();
    let mut head = cut.head.clone();
    head.wave_sizes.push(5);
    let hives = vec![serde_json::from_slice::<HivePart>(&cut.hives[0]).unwrap()];
    let err = join(head, hives, vec![]).unwrap_err();
    assert_eq!(
        err,
        JoinError::Count {
            waves: 25,
            rows: 20
        }
    );
    let mut twice: HivePart = serde_json::from_slice(&cut.hives[0]).unwrap();
    let again = twice.hives[0].clone();
    twice.hives.push(again.clone());
    let err = join(cut.head.clone(), vec![twice], vec![]).unwrap_err();
    assert_eq!(err, JoinError::Twice(again.0));
}

#[test]
fn part_keys_are_valid_kv_keys_under_the_head_and_the_writer() {
    let tag = writer_tag("c1234-1796114011715");
    assert_eq!(tag, "c1234-1796114011715");
    for driver in [
        "(the rollout state was removed)",
        "",
        "a.b",
        &"x".repeat(65),
    ] {
        let t = writer_tag(driver);
        assert!(t.starts_with('w') && t.len() == 17, "{driver:?} -> {t}");
    }
    assert_ne!(writer_tag("a.b"), writer_tag("a_b"));
    for key in [hive_part_key(&tag, 0), declaration_part_key(&tag, 12)] {
        assert!(key.starts_with("current.c1234-1796114011715."), "{key}");
        assert!(key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-'));
    }
}
