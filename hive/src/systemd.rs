//! sd_notify without a dependency: `READY=1` once the local API listens,
//! `WATCHDOG=1` every half `WATCHDOG_USEC`, `STOPPING=1` on shutdown. Does
//! nothing when not started by systemd (`NOTIFY_SOCKET` unset).
//!
//! The watchdog is fed only while every essential task runs (the
//! supervisor's [`TaskBoard`]): a hive whose wanted watch, converger, job
//! worker or event listener cannot stay up is restarted by systemd once
//! `WatchdogSec` passes, instead of looking alive.

use std::sync::Arc;
use std::time::Duration;

use crate::shutdown::Shutdown;
use crate::supervisor::TaskBoard;

fn send(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "sd_notify: cannot create socket");
            return;
        }
    };
    let bytes = path.as_encoded_bytes();
    let result = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(&path))
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, state, "sd_notify failed");
    }
}

pub fn notify_ready() {
    send("READY=1");
}

pub fn notify_stopping() {
    send("STOPPING=1");
}

/// The watchdog interval systemd asked for, halved.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Ping the watchdog every `interval` while every essential task runs,
/// until shutdown.
pub async fn run_watchdog(interval: Duration, board: Arc<TaskBoard>, shutdown: Shutdown) {
    feed_watchdog(interval, board, shutdown, send).await
}

/// [`run_watchdog`] with the sending apart, so a test can count the pings.
async fn feed_watchdog(
    interval: Duration,
    board: Arc<TaskBoard>,
    mut shutdown: Shutdown,
    mut notify: impl FnMut(&str),
) {
    let mut starved = false;
    loop {
        let down = board.essential_down();
        if down.is_empty() {
            if starved {
                tracing::info!("every essential task runs again: feeding the systemd watchdog");
            }
            notify("WATCHDOG=1");
        } else if !starved {
            tracing::error!(tasks = ?down, "essential tasks are down: not feeding the systemd watchdog");
        }
        starved = !down.is_empty();
        tokio::select! {
            // Both branches are cancel-safe.
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use swarm_queue_client::HiveName;

    use super::*;
    use crate::readiness::Health;
    use crate::supervisor::{Role, Supervisor};

    /// The watchdog is fed while the essential task runs, starved while it
    /// is down, and fed again once it is back.
    #[tokio::test(start_paused = true)]
    async fn the_watchdog_is_fed_only_while_every_essential_task_runs() {
        let (trigger, shutdown) = crate::shutdown::channel();
        let health = Arc::new(Health::new(Some(HiveName::new("alpha").unwrap()), None));
        let mut sup = Supervisor::new(health, shutdown.clone());
        // The task dies at 10.5 s; the supervisor starts it again 1 s later.
        let runs = Arc::new(Mutex::new(0));
        let r = runs.clone();
        sup.spawn("events", Role::Essential, move |mut s| {
            let first = {
                let mut n = r.lock().unwrap();
                *n += 1;
                *n == 1
            };
            async move {
                if first {
                    tokio::time::sleep(Duration::from_millis(10_500)).await;
                } else {
                    s.wait().await;
                }
            }
        });
        let pings: Arc<Mutex<Vec<u64>>> = Arc::default();
        let p = pings.clone();
        let t0 = tokio::time::Instant::now();
        let dog = tokio::spawn(feed_watchdog(
            Duration::from_secs(1),
            sup.board(),
            shutdown,
            move |state| {
                assert_eq!(state, "WATCHDOG=1");
                p.lock().unwrap().push(t0.elapsed().as_secs());
            },
        ));
        tokio::time::sleep(Duration::from_millis(14_500)).await;
        trigger.trigger();
        dog.await.unwrap();
        sup.drain(Duration::from_secs(1)).await;
        // Down from 10.5 s to 11.5 s: the ping due at 11 s is not sent.
        let got = pings.lock().unwrap().clone();
        assert_eq!(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14]);
    }
}
