//! sd_notify without a dependency: `READY=1` once the local API listens,
//! `WATCHDOG=1` every half `WATCHDOG_USEC`, `STOPPING=1` on shutdown. Does
//! nothing when not started by systemd (`NOTIFY_SOCKET` unset).

use std::time::Duration;

use crate::shutdown::Shutdown;

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

/// Ping the watchdog until shutdown.
pub async fn run_watchdog(interval: Duration, mut shutdown: Shutdown) {
    loop {
        send("WATCHDOG=1");
        tokio::select! {
            // Both branches are cancel-safe.
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
