//! sd_notify without a dependency: `READY=1` once the local API listens,
//! `WATCHDOG=1` every half `WATCHDOG_USEC`, `STOPPING=1` on shutdown. Does
//! nothing when not started by systemd (`NOTIFY_SOCKET` unset).
//!
//! Kept rather than the `sd-notify` crate: that crate connects to
//! `NOTIFY_SOCKET` as a file path, so it cannot reach an abstract-namespace
//! socket (`@…`), which sd_notify(3) allows; this is one datagram send.
//!
//! The watchdog is fed only while every essential task runs (the
//! supervisor's [`TaskBoard`]): a hive whose wanted watch, converger, job
//! worker or event listener cannot stay up is restarted by systemd once
//! `WatchdogSec` passes, instead of looking alive.

use std::sync::Arc;
use std::time::Duration;

use crate::shutdown::Shutdown;
use crate::supervisor::TaskBoard;

pub fn notify_ready() {
    send("READY=1");
}

pub fn notify_stopping() {
    send("STOPPING=1");
}

/// The watchdog interval systemd asked for, halved; none when the watchdog
/// is meant for another process (`WATCHDOG_PID`).
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let pid = std::env::var("WATCHDOG_PID").ok();
    if pid.is_some_and(|p| p.parse() != Ok(std::process::id())) {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Ping the watchdog every `interval` while every essential task runs,
/// until shutdown.
pub async fn run_watchdog(interval: Duration, board: Arc<TaskBoard>, shutdown: Shutdown) {
    feed_watchdog(interval, board, shutdown, send).await
}

fn send(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send_to(&socket, state) {
        tracing::warn!(error = %e, state, "sd_notify failed");
    }
}

/// Send `state` to the notify socket `socket`: a path, or an abstract name
/// when it starts with `@`.
fn send_to(socket: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    let bytes = socket.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(socket))?;
    }
    Ok(())
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
        if !shutdown.sleep(interval).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use swarm_queue_client::HiveName;

    use super::*;
    use crate::status::StatusBoard;
    use crate::supervisor::{Role, Supervisor};

    /// A notification reaches a socket named by path and one in the
    /// abstract namespace (`@…`), as systemd may give either.
    #[test]
    fn notifications_reach_path_and_abstract_sockets() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let by_path = UnixDatagram::bind(&path).unwrap();
        send_to(path.as_os_str(), "READY=1").unwrap();
        let name = format!("hhtest-notify-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_sock = UnixDatagram::bind_addr(&addr).unwrap();
        send_to(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let mut buf = [0u8; 64];
        let n = by_path.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let n = abstract_sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    /// The watchdog is fed while the essential task runs, starved while it
    /// is down, and fed again once it is back.
    #[tokio::test(start_paused = true)]
    async fn the_watchdog_is_fed_only_while_every_essential_task_runs() {
        let (trigger, shutdown) = crate::shutdown::channel();
        let board = Arc::new(StatusBoard::new(
            Some(HiveName::new("alpha").unwrap()),
            None,
        ));
        let mut sup = Supervisor::new(board, shutdown.clone());
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
