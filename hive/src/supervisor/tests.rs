use std::sync::atomic::{AtomicU32, Ordering};

use swarm_queue_client::HiveName;

use super::*;

fn board() -> Arc<StatusBoard> {
    Arc::new(StatusBoard::new(
        Some(HiveName::new("alpha").unwrap()),
        None,
    ))
}

const S: fn(u64) -> Duration = Duration::from_secs;

#[test]
fn restart_delay_doubles_to_the_cap_and_resets_after_a_healthy_run() {
    let p = RestartPolicy::default();
    let table = [
        // (previous wait, how long the run lasted, next wait)
        (None, S(0), S(1)),
        (None, S(3600), S(1)),
        (Some(S(1)), S(0), S(2)),
        (Some(S(2)), S(5), S(4)),
        (Some(S(32)), S(59), S(60)),
        (Some(S(60)), S(0), S(60)),
        (Some(S(60)), S(60), S(1)),
        (Some(Duration::MAX), S(0), S(60)),
    ];
    for (previous, ran_for, want) in table {
        assert_eq!(
            p.next_delay(previous, ran_for),
            want,
            "previous {previous:?}, ran for {ran_for:?}"
        );
    }
}

/// Records when each start happened, relative to the test's start.
fn recorder() -> (Arc<Mutex<Vec<Duration>>>, Instant) {
    (Arc::default(), Instant::now())
}

#[tokio::test(start_paused = true)]
async fn a_task_that_keeps_returning_is_restarted_with_backoff() {
    let (trigger, shutdown) = crate::shutdown::channel();
    let h = board();
    let mut sup = Supervisor::new(h.clone(), shutdown);
    let (starts, t0) = recorder();
    let s = starts.clone();
    sup.spawn("wanted", Role::Essential, move |_| {
        s.lock().unwrap().push(t0.elapsed());
        async {}
    });
    // 1 + 2 + 4 + 8 + 16 + 32 + 60 + 60 = 183 s of waits: nine starts.
    tokio::time::sleep(S(190)).await;
    let got: Vec<u64> = starts.lock().unwrap().iter().map(|d| d.as_secs()).collect();
    assert_eq!(got, [0, 1, 3, 7, 15, 31, 63, 123, 183]);
    // Down between starts: named in the status, not ready.
    let r = h.snapshot().status;
    assert!(!r.ready, "{r:?}");
    let w = r.warnings.iter().find(|w| w.key == "task_wanted").unwrap();
    assert_eq!(w.level, Level::Error);
    assert!(w.message.contains("task wanted is down"), "{}", w.message);
    assert!(
        w.message.contains("returned without an error"),
        "{}",
        w.message
    );
    assert!(!sup.board().essential_up());
    trigger.trigger();
    sup.drain(S(1)).await;
    assert_eq!(starts.lock().unwrap().len(), 9, "no start after shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_caught_named_and_cleared_by_the_next_start() {
    let (trigger, shutdown) = crate::shutdown::channel();
    let h = board();
    let mut sup = Supervisor::new(h.clone(), shutdown);
    let board = sup.board();
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    sup.spawn("events", Role::Essential, move |mut shutdown| {
        let n = r.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                panic!("boom in the listener");
            }
            shutdown.wait().await;
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w = h.snapshot().status.warnings;
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].message.contains("panicked: boom in the listener"),
        "{w:?}"
    );
    assert_eq!(board.essential_down(), ["events"]);
    assert_eq!(board.is_up("events"), Some(false));
    tokio::time::sleep(S(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let r = h.snapshot().status;
    assert!(r.ready && r.warnings.is_empty(), "{r:?}");
    assert!(board.essential_up());
    trigger.trigger();
    sup.drain(S(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn an_auxiliary_task_down_leaves_the_hive_ready_and_the_error_named() {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot bind 127.0.0.1:7390")]
    struct BindError;
    let (trigger, shutdown) = crate::shutdown::channel();
    let h = board();
    let mut sup = Supervisor::new(h.clone(), shutdown);
    sup.spawn("http", Role::Auxiliary, |_| async {
        Err::<(), _>(BindError)
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let r = h.snapshot().status;
    assert!(r.ready, "{r:?}");
    assert!(r.warnings[0].message.contains("cannot bind 127.0.0.1:7390"));
    assert_eq!(r.warnings[0].level, Level::Warn);
    assert!(sup.board().essential_up());
    trigger.trigger();
    sup.drain(S(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_healthy_run_resets_the_backoff() {
    let (trigger, shutdown) = crate::shutdown::channel();
    let mut sup = Supervisor::new(board(), shutdown);
    let (starts, t0) = recorder();
    let s = starts.clone();
    let runs = Arc::new(AtomicU32::new(0));
    sup.spawn("converger", Role::Essential, move |_| {
        s.lock().unwrap().push(t0.elapsed());
        // Runs 0..3 die at once, run 3 lasts 100 s, the rest die at once.
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 3 {
                tokio::time::sleep(S(100)).await;
            }
        }
    });
    tokio::time::sleep(S(110)).await;
    let got: Vec<u64> = starts.lock().unwrap().iter().map(|d| d.as_secs()).collect();
    // 0, +1, +2, +4 = 7; runs till 107, then +1 (not +8) = 108.
    assert_eq!(got, [0, 1, 3, 7, 108]);
    trigger.trigger();
    sup.drain(S(1)).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_the_backoff_stops_the_keeper() {
    let (trigger, shutdown) = crate::shutdown::channel();
    let mut sup = Supervisor::new(board(), shutdown);
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    sup.spawn("worker", Role::Essential, move |_| {
        r.fetch_add(1, Ordering::SeqCst);
        async {}
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    trigger.trigger();
    let before = Instant::now();
    sup.drain(S(10)).await;
    assert!(before.elapsed() < S(1), "drained at once");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
