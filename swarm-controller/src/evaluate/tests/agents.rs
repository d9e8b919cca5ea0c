//! Agent rows, retries and crash loops: what each agent's report makes
//! of the row.

use super::*;

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
