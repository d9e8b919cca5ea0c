//! Unit tests of the converger on the fake runtime and tokio's paused clock.
use std::sync::atomic::Ordering;

use super::*;
use crate::runtime::fake::FakeRuntime;

fn converger(dir: &std::path::Path, interval: Duration) -> Converger<FakeRuntime> {
    let hive = HiveName::new("alpha").unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(None);
    Converger {
        deps: ConvergerDeps {
            store: JobStore::open(&dir.join("hive.db")).unwrap(),
            runtime: Arc::new(FakeRuntime::new("alpha")),
            hive: hive.clone(),
            health: Arc::new(Health::new(Some(hive), None)),
            wake: Arc::new(Notify::new()),
            wanted: rx,
            reconcile_interval: interval,
            orphan_grace: Duration::from_secs(600),
            retry_base: crate::retry::DEFAULT_BASE,
        },
        applied: None,
        revision_jobs: Vec::new(),
        converged: None,
        orphan_first_seen: BTreeMap::new(),
        next_round: Instant::now(),
        backoff: interval,
        retries: Retries::new(crate::retry::DEFAULT_BASE),
        queued: BTreeMap::new(),
        reaped: BTreeMap::new(),
    }
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
    let r = c.deps.health.snapshot().readiness;
    assert!(!r.ready, "Docker unreachable makes the hive not ready");
    let keys: Vec<_> = r.warnings.iter().map(|w| w.key.as_str()).collect();
    assert!(keys.contains(&crate::readiness::keys::DOCKER), "{keys:?}");
    assert!(
        keys.contains(&crate::readiness::keys::RECONCILER),
        "{keys:?}"
    );

    c.deps.runtime.unreachable.store(false, Ordering::SeqCst);
    assert_eq!(
        round_gap(&mut c).await,
        interval,
        "reset after a clean round"
    );
    let r = c.deps.health.snapshot().readiness;
    assert!(r.ready && r.warnings.is_empty(), "{:?}", r.warnings);
}
