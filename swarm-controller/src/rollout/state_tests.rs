//! Table tests of the rollout plan and of [`judge_wave`].

use super::*;
use crate::rollout::settings::WaveSize;
use swarm_queue_client::{AgentName, AgentSpec};

fn hive(n: usize) -> HiveName {
    HiveName::new(format!("h{n}")).unwrap()
}

pub(crate) fn decl(image: &str) -> Declaration {
    Declaration::new(
        [(
            AgentName::new("web").unwrap(),
            AgentSpec {
                image: Some(image.into()),
                ..Default::default()
            },
        )]
        .into(),
    )
}

/// A rollout of `hives` in `waves`, hive `i` getting `declaration(i)` over
/// revision `i + 1`.
pub(crate) fn plan(
    hives: Vec<HiveName>,
    waves: Vec<WaveSize>,
    max_failed: usize,
    declaration: impl Fn(usize) -> Declaration,
) -> Rollout {
    let settings = RolloutSettings {
        waves,
        max_failed,
        ..Default::default()
    };
    let changes = hives
        .into_iter()
        .enumerate()
        .map(|(i, hive)| Change {
            hive,
            expected_revision: Some(i as u64 + 1),
            had_declaration: true,
            declaration: declaration(i),
        })
        .collect();
    Rollout::plan(
        "r1".into(),
        "swarm.toml".into(),
        settings,
        "c1".into(),
        changes,
    )
}

fn rollout(n: usize, max_failed: usize) -> Rollout {
    let waves = vec![
        WaveSize::Count(1),
        WaveSize::Percent(50),
        WaveSize::Percent(100),
    ];
    plan((0..n).map(hive).collect(), waves, max_failed, |_| {
        decl("web:2")
    })
}

fn row(name: &HiveName, convergence: Convergence, freshness: Freshness, declared: u64) -> HiveRow {
    HiveRow {
        name: name.to_string(),
        rostered: true,
        labels: BTreeMap::new(),
        freshness,
        age_secs: Some(1),
        age_ms: Some(1000),
        status_time: None,
        status_time_ms: None,
        status_revision: Some(1),
        freshness_reason: String::new(),
        convergence,
        reason: format!("because {convergence}"),
        declared_revision: Some(declared),
        seen_revision: Some(declared),
        converged_revision: Some(declared),
        state: Some("ok".into()),
        ready: Some(true),
        version: None,
        warnings: vec![],
        agents: vec![],
        problems: vec![],
        stale_at: None,
    }
}

#[test]
fn the_plan_splits_waves_and_stores_each_declaration_once() {
    let r = rollout(6, 0);
    let sizes: Vec<usize> = r.waves.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![1, 2, 3]);
    assert_eq!(r.declarations.len(), 1);
    assert_eq!(r.target(&hive(3)), Some(&decl("web:2")));
    assert_eq!(r.counts().waiting, 6);
    assert!(r
        .line()
        .contains("running, wave 1 of 3: 0 done, 0 written, 6 waiting, 0 failed"));
}

#[test]
fn a_wave_is_done_only_when_each_hive_is_fresh_and_converged_on_its_revision() {
    let mut r = rollout(6, 0);
    let h0 = hive(0);
    // Not written yet.
    assert!(matches!(judge_wave(&mut r, |_| None), Verdict::Waiting(_)));
    r.hives.get_mut(&h0).unwrap().written_revision = Some(10);
    let cases: Vec<(Convergence, Freshness, u64, &str)> = vec![
        (Convergence::Converged, Freshness::Fresh, 9, "waiting"),
        (Convergence::Converged, Freshness::Stale, 10, "waiting"),
        (Convergence::Progressing, Freshness::Fresh, 10, "waiting"),
        (Convergence::Unknown, Freshness::Fresh, 10, "waiting"),
        (Convergence::Published, Freshness::Fresh, 10, "waiting"),
        (Convergence::Failed, Freshness::Fresh, 10, "halt"),
        (Convergence::Degraded, Freshness::Fresh, 10, "halt"),
        (Convergence::Converged, Freshness::Fresh, 11, "halt"),
        (Convergence::Converged, Freshness::Fresh, 10, "done"),
    ];
    for (c, f, declared, want) in cases {
        let mut r = r.clone();
        let v = judge_wave(&mut r, |h| Some(row(h, c, f, declared)));
        let got = match &v {
            Verdict::Done => "done",
            Verdict::Waiting(_) => "waiting",
            Verdict::Halt { .. } => "halt",
        };
        assert_eq!(got, want, "{c} {f} declared {declared}: {v:?}");
        if let Verdict::Halt { hive, reason } = v {
            assert_eq!(hive, h0);
            assert!(!reason.is_empty());
            assert_eq!(r.hives[&h0].step, Step::Failed);
        }
    }
}

#[test]
fn max_failed_tolerates_that_many_and_earlier_waves_are_judged_again() {
    let mut r = rollout(6, 1);
    r.hives.get_mut(&hive(0)).unwrap().written_revision = Some(10);
    let failed = |h: &HiveName| Some(row(h, Convergence::Failed, Freshness::Fresh, 10));
    assert_eq!(judge_wave(&mut r, failed), Verdict::Done);
    assert_eq!(r.counts().failed, 1);
    r.wave = 1;
    for i in 1..3 {
        r.hives.get_mut(&hive(i)).unwrap().written_revision = Some(20 + i as u64);
    }
    // Wave 2: h1 converged, h2 degraded: two failed in all, one too many.
    let v = judge_wave(&mut r, |h| {
        let declared = r_written(h);
        let c = if h == &hive(2) {
            Convergence::Degraded
        } else if h == &hive(0) {
            Convergence::Failed
        } else {
            Convergence::Converged
        };
        Some(row(h, c, Freshness::Fresh, declared))
    });
    assert!(matches!(v, Verdict::Halt { .. }), "{v:?}");
    assert_eq!(r.counts().done, 1);
}

fn r_written(h: &HiveName) -> u64 {
    match h.as_str() {
        "h0" => 10,
        "h1" => 21,
        _ => 22,
    }
}

#[test]
fn the_state_round_trips_through_json_with_the_outcome_at_the_top() {
    let mut r = rollout(3, 0);
    r.outcome = Outcome::Halted {
        halted_wave: 0,
        hive: Some(hive(0)),
        reason: "failed: x".into(),
    };
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["outcome"], "halted");
    assert_eq!(v["hive"], "h0");
    let back: Rollout = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
    assert!(
        r.line()
            .contains("halted at wave 1 of 3: hive h0: failed: x"),
        "{}",
        r.line()
    );
}

#[test]
fn after_a_resume_a_failure_waits_for_the_deadline() {
    let mut r = rollout(6, 0);
    let h0 = hive(0);
    let t = r.hives.get_mut(&h0).unwrap();
    t.written_revision = Some(10);
    t.retried_at_status = Some(5);
    let failed = |h: &HiveName| Some(row(h, Convergence::Failed, Freshness::Fresh, 10));
    match judge_wave(&mut r, failed) {
        Verdict::Waiting(w) => assert!(w[0].1.contains("asked to try again"), "{w:?}"),
        v => panic!("{v:?}"),
    }
    let done = |h: &HiveName| Some(row(h, Convergence::Converged, Freshness::Fresh, 10));
    assert_eq!(judge_wave(&mut r, done), Verdict::Done);
}

/// The state of a rollout must fit in one KV value
/// (`limits::MAX_VALUE_BYTES`); this measures how many hives that allows
/// with 30-character hive names, and the docs quote it.
#[test]
fn how_many_hives_one_rollout_state_holds() {
    let changes = |n: usize| -> Vec<Change> {
        (0..n)
            .map(|i| Change {
                hive: HiveName::new(format!("hive-{i:05}-{}", "x".repeat(19))).unwrap(),
                expected_revision: Some(100_000 + i as u64),
                had_declaration: true,
                declaration: decl("web:2"),
            })
            .collect()
    };
    let mut r = Rollout::plan(
        "r1796114011715".into(),
        "/etc/hyperhive/swarm.toml".into(),
        RolloutSettings::default(),
        "c1234-1796114011715".into(),
        changes(1000),
    );
    for (i, t) in r.hives.values_mut().enumerate() {
        t.written_revision = Some(200_000 + i as u64);
        t.step = Step::Done;
    }
    let bytes = serde_json::to_vec(&r).unwrap().len();
    let per_hive = bytes / 1000;
    let fits = swarm_queue_client::limits::MAX_VALUE_BYTES / per_hive;
    println!("rollout state: {per_hive} bytes per hive; one value holds about {fits} hives");
    assert!(fits >= 2000, "{per_hive} bytes per hive");
}
