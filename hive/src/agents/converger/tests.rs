//! Unit tests of the converger on the fake runtime and tokio's paused clock.
use std::sync::atomic::Ordering;

use swarm_queue_client::RetryStatus;

use super::*;
use crate::agents::jobs::{now_ms, JobFilter, JobRequest};
use crate::agents::runtime::fake::FakeRuntime;

fn converger(dir: &std::path::Path, interval: Duration) -> Converger<FakeRuntime> {
    let hive = HiveName::new("alpha").unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(None);
    Converger::new(ConvergerDeps {
        store: JobStore::open(&dir.join("hive.db")).unwrap(),
        runtime: Arc::new(FakeRuntime::new("alpha")),
        hive: hive.clone(),
        board: Arc::new(StatusBoard::new(Some(hive), None)),
        wake: Arc::new(Notify::new()),
        wanted: rx,
        reconcile_interval: interval,
        orphan_grace: Duration::from_secs(600),
        retry_base: crate::agents::retry::DEFAULT_BASE,
        docker_changed: Arc::new(Notify::new()),
        crash: crate::agents::crashloop::CrashPolicy::default(),
        planned: Default::default(),
    })
}

/// Run one pass once the next round is due, returning the gap to the
/// round after it.
async fn round_gap(c: &mut Converger<FakeRuntime>) -> Duration {
    tokio::time::advance(c.next_round.saturating_duration_since(Instant::now())).await;
    c.pass().await;
    c.next_round.saturating_duration_since(Instant::now())
}

#[tokio::test(start_paused = true)]
async fn failing_rounds_back_off_doubling_to_an_hour_and_reset_after_a_clean_one() {
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_secs(30);
    let mut c = converger(dir.path(), interval);
    assert_eq!(round_gap(&mut c).await, interval, "a clean first round");

    c.deps.runtime.unreachable.store(true, Ordering::SeqCst);
    let mut gaps = Vec::new();
    for _ in 0..10 {
        gaps.push(round_gap(&mut c).await.as_secs());
    }
    assert_eq!(gaps, [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600, 3600]);
    let r = c.deps.board.snapshot().status;
    assert!(!r.ready, "Docker unreachable makes the hive not ready");
    let keys: Vec<_> = r.warnings.iter().map(|w| w.key.as_str()).collect();
    assert!(keys.contains(&crate::status::keys::DOCKER), "{keys:?}");
    assert!(keys.contains(&crate::status::keys::RECONCILER), "{keys:?}");

    c.deps.runtime.unreachable.store(false, Ordering::SeqCst);
    assert_eq!(
        round_gap(&mut c).await,
        interval,
        "reset after a clean round"
    );
    let r = c.deps.board.snapshot().status;
    assert!(r.ready && r.warnings.is_empty(), "{:?}", r.warnings);
}

/// Fail the first ready node of the oldest claimable job, for good.
fn fail_next_node(c: &Converger<FakeRuntime>) {
    c.deps.store.blocking(|s| {
        let claim = s.claim(now_ms(), None).unwrap().expect("a ready node");
        let outcome = crate::agents::jobs::Outcome::Failed {
            error: "image local/x:1 is not available".into(),
            transient: false,
        };
        s.finish(claim.job, claim.seq, outcome, &Default::default(), now_ms())
            .unwrap();
    });
}

fn job_count(c: &Converger<FakeRuntime>) -> usize {
    let all = JobFilter {
        all: true,
        agent: None,
    };
    c.deps.store.blocking(|s| s.jobs(&all).unwrap().len())
}

fn web_retry(c: &Converger<FakeRuntime>) -> Option<RetryStatus> {
    let r = c.deps.board.snapshot().status;
    r.agents[&AgentName::new("web").unwrap()].retry.clone()
}

#[tokio::test(start_paused = true)]
async fn a_failed_first_deploy_is_queued_again_after_a_per_agent_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = converger(dir.path(), Duration::from_secs(1));
    let (tx, rx) = tokio::sync::watch::channel(None);
    c.deps.wanted = rx;
    let declaration: swarm_queue_client::Declaration = serde_json::from_value(
        serde_json::json!({ "schema": 1, "agents": { "web": { "image": "local/x:1" } } }),
    )
    .unwrap();
    tx.send(Some(Arc::new(Wanted {
        revision: 1,
        declaration,
        created_ns: None,
    })))
    .unwrap();
    c.pass().await;
    assert_eq!(job_count(&c), 1, "the declaration's first deploy");

    // Each failure backs web off, twice as long each time; then a new job.
    for (attempt, wait) in [(1u32, 30u64), (2, 60), (3, 120)] {
        fail_next_node(&c);
        let jobs = job_count(&c);
        round_gap(&mut c).await;
        let retry = web_retry(&c).expect("a retry while failing");
        assert_eq!(retry.attempts, attempt);
        assert_eq!(retry.step.as_deref(), Some("seed_power"));
        assert!(retry.error.as_deref().unwrap().contains("local/x:1"));
        assert!(retry.next_try_in_secs <= wait && retry.next_try_in_secs + 2 >= wait);
        tokio::time::advance(Duration::from_secs(wait - 2)).await;
        c.pass().await;
        assert_eq!(job_count(&c), jobs, "nothing new before the backoff ends");
        tokio::time::advance(Duration::from_secs(2)).await;
        c.pass().await;
        assert_eq!(job_count(&c), jobs + 1, "a new job once it is due");
    }

    // An operator's job for web starts the count again.
    fail_next_node(&c);
    round_gap(&mut c).await;
    assert_eq!(web_retry(&c).unwrap().attempts, 4);
    let web = AgentName::new("web").unwrap();
    let spec = swarm_queue_client::AgentSpec {
        image: Some("local/x:1".into()),
        ..Default::default()
    };
    c.deps.store.blocking(|s| {
        s.enqueue(
            &web,
            JobRequest::Rebuild {
                spec,
                relock: false,
                revision: None,
            },
            now_ms(),
        )
        .unwrap()
    });
    round_gap(&mut c).await;
    assert_eq!(web_retry(&c), None, "reset by the operator's job");
    fail_next_node(&c);
    round_gap(&mut c).await;
    assert_eq!(web_retry(&c).unwrap().attempts, 1);
}
