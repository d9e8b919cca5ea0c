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
        min_converged_secs: 0,
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
        labels: crate::roster::Labels::default(),
        freshness,
        age_secs: Some(1),
        age_ms: Some(1000),
        status_time: None,
        status_time_ms: None,
        status_revision: Some(1),
        freshness_reason: String::new(),
        freshness_rule: crate::evaluate::FreshnessRule::KvTimestamp,
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
        maintenance: None,
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
    assert!(matches!(
        judge_wave(&mut r, 0, |_| None::<HiveRow>),
        Verdict::Waiting(_)
    ));
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
        let v = judge_wave(&mut r, 0, |h| Some(row(h, c, f, declared)));
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
    assert_eq!(judge_wave(&mut r, 0, failed), Verdict::Done);
    assert_eq!(r.counts().failed, 1);
    r.wave = 1;
    for i in 1..3 {
        r.hives.get_mut(&hive(i)).unwrap().written_revision = Some(20 + i as u64);
    }
    // Wave 2: h1 converged, h2 degraded: two failed in all, one too many.
    let v = judge_wave(&mut r, 0, |h| {
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
    match judge_wave(&mut r, 0, failed) {
        Verdict::Waiting(w) => assert!(w[0].1.contains("asked to try again"), "{w:?}"),
        v => panic!("{v:?}"),
    }
    let done = |h: &HiveName| Some(row(h, Convergence::Converged, Freshness::Fresh, 10));
    assert_eq!(judge_wave(&mut r, 0, done), Verdict::Done);
}

/// A row of `name` converged on revision 10 whose agent `a` has exited
/// `count` times, `backoff` when the hive holds it in a crash-loop delay.
fn agent_row(name: &HiveName, count: u32, backoff: bool) -> HiveRow {
    let mut r = row(name, Convergence::Converged, Freshness::Fresh, 10);
    if backoff {
        r.convergence = Convergence::Progressing;
    }
    r.agents = vec![crate::evaluate::AgentRow {
        name: "a".into(),
        declared: true,
        reported: true,
        wanted: Some(swarm_queue_client::Power::Up),
        observed: Some(swarm_queue_client::Observed::Running),
        spec_matches: Some(true),
        last_job: None,
        image_digest: None,
        health: None,
        retry: None,
        unsettled: backoff.then_some(Unsettled::Backoff),
        exits: Some(swarm_queue_client::ExitReport {
            code: Some(3),
            count,
            ..Default::default()
        }),
        note: backoff.then(|| "crash loop: exited 3 (2 times in 41s), next start in 10s".into()),
    }];
    r
}

#[test]
fn a_wave_is_done_only_after_its_hives_held_converged_with_no_exit() {
    let mut r = rollout(6, 0);
    r.settings.min_converged_secs = 30;
    let h0 = hive(0);
    r.hives.get_mut(&h0).unwrap().written_revision = Some(10);
    let at = |r: &mut Rollout, ms: i64, count: u32| {
        let v = judge_wave(r, ms, |h| Some(agent_row(h, count, false)));
        match v {
            Verdict::Waiting(w) => w[0].1.clone(),
            v => format!("{v:?}"),
        }
    };
    assert!(at(&mut r, 1_000, 0).contains("0s of min_converged_secs 30"));
    assert!(at(&mut r, 20_000, 0).contains("19s of min_converged_secs 30"));
    assert_eq!(r.hives[&h0].step, Step::Written);
    // An exit at 25 s: the 30 s start again from there.
    assert!(at(&mut r, 25_000, 1).contains("an agent exited"));
    assert!(at(&mut r, 50_000, 1).contains("25s of"));
    // Not converged for a moment (the agent too young): the soak is lost.
    let young = |h: &HiveName| {
        let mut x = agent_row(h, 1, false);
        x.convergence = Convergence::Progressing;
        Some(x)
    };
    assert!(matches!(
        judge_wave(&mut r, 52_000, young),
        Verdict::Waiting(_)
    ));
    assert_eq!(r.hives[&h0].soak, None);
    assert!(at(&mut r, 53_000, 1).contains("0s of"));
    assert_eq!(at(&mut r, 83_000, 1), "Done");
    assert_eq!(r.hives[&h0].step, Step::Done);
    assert_eq!(r.hives[&h0].soak, None, "a done hive keeps no soak");
}

#[test]
fn an_agent_in_a_crash_loop_halts_the_rollout_naming_hive_agent_and_exit_code() {
    let mut r = rollout(6, 0);
    let h0 = hive(0);
    r.hives.get_mut(&h0).unwrap().written_revision = Some(10);
    assert_eq!(
        judge_wave(&mut r, 0, |h| Some(agent_row(h, 0, false))),
        Verdict::Done
    );
    // Done in wave 1, then it crash-loops while wave 2 waits.
    r.wave = 1;
    match judge_wave(&mut r, 0, |h| Some(agent_row(h, 2, true))) {
        Verdict::Halt { hive, reason } => {
            assert_eq!(hive, h0);
            assert!(
                reason.contains("agent a is crash-looping") && reason.contains("exited 3"),
                "{reason}"
            );
        }
        v => panic!("{v:?}"),
    }
    assert_eq!(r.hives[&h0].step, Step::Failed);
}

/// How large a rollout's stored state is per hive (30-character hive
/// names, every hive written and done), and so how many values a rollout of
/// 10,000 hives takes; the docs quote it.
#[test]
fn how_large_the_rollout_state_is_per_hive() {
    let n = 10_000;
    let changes = (0..n)
        .map(|i| Change {
            hive: HiveName::new(format!("hive-{i:05}-{}", "x".repeat(19))).unwrap(),
            expected_revision: Some(100_000 + i as u64),
            had_declaration: true,
            declaration: decl("web:2"),
        })
        .collect();
    let mut r = Rollout::plan(
        "r1796114011715".into(),
        "/etc/hyperhive/swarm.toml".into(),
        RolloutSettings::default(),
        "c1234-1796114011715".into(),
        changes,
    );
    for (i, t) in r.hives.values_mut().enumerate() {
        t.written_revision = Some(200_000 + i as u64);
        t.step = Step::Done;
    }
    let cut = crate::rollout::parts::cut(&r).unwrap();
    let rows: usize = cut.hives.iter().map(Vec::len).sum();
    let head = serde_json::to_vec(&cut.head).unwrap().len();
    println!(
        "rollout state of {n} hives: {} bytes per hive, {} hive parts, {} declaration part(s), a {head}-byte head",
        rows / n,
        cut.hives.len(),
        cut.declarations.len()
    );
    assert!(rows / n < 250, "{} bytes per hive", rows / n);
    assert!(cut.hives.len() <= 10, "{} parts", cut.hives.len());
}

fn held(mut r: HiveRow) -> HiveRow {
    r.freshness = Freshness::Maintenance;
    r.maintenance = Some(crate::maintenance::HoldView {
        reason: "reboot".into(),
        by: "ops@host".into(),
        set_at: "2026-12-01T20:00:00Z".into(),
        until: "2026-12-01T22:00:00Z".into(),
        until_ms: 0,
        left_secs: 7200,
        active: true,
        revision: 1,
    });
    r
}

/// A hive in maintenance is skipped: not waited for, not failed, whatever
/// its convergence says, even when it was written before its hold; a done
/// hive stays done. The line counts it and says how it gets written.
#[test]
fn a_hive_in_maintenance_is_skipped_never_waited_for_nor_failed() {
    let mut r = rollout(3, 0);
    // Wave 1 is hive 0; wave 2 is hive 1; wave 3 is hive 2.
    for (i, rev) in [(0, 10), (1, 11)] {
        r.hives.get_mut(&hive(i)).unwrap().written_revision = Some(rev);
    }
    r.wave = 1;
    let done = hive(0);
    r.hives.get_mut(&done).unwrap().step = Step::Done;
    let v = judge_wave(&mut r, 0, |h| {
        let declared = r_rev(h);
        Some(held(row(
            h,
            Convergence::Failed,
            Freshness::Fresh,
            declared,
        )))
    });
    assert_eq!(v, Verdict::Done);
    assert_eq!(r.hives[&done].step, Step::Done);
    let t = &r.hives[&hive(1)];
    assert_eq!(t.step, Step::Skipped);
    assert!(
        t.reason
            .as_deref()
            .unwrap()
            .starts_with("in maintenance until "),
        "{t:?}"
    );
    assert_eq!(r.counts().skipped, 1);
    assert!(r
        .line()
        .contains("1 skipped (in maintenance; `rollout resume` writes them once it ends)"));
    // Once skipped it stays so until a resume, even with its hold gone.
    let v = judge_wave(&mut r, 0, |h| {
        let c = if h == &hive(1) {
            Convergence::Failed
        } else {
            Convergence::Converged
        };
        Some(row(h, c, Freshness::Fresh, r_rev(h)))
    });
    assert_eq!(v, Verdict::Done);
    assert_eq!(r.hives[&hive(1)].step, Step::Skipped);
}

fn r_rev(h: &HiveName) -> u64 {
    if h == &hive(0) {
        10
    } else {
        11
    }
}
