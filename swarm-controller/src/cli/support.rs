//! What the command line's verbs share below `cli/mod.rs`, which only
//! parses and dispatches: how long a one-shot verb waits for NATS, and the signal
//! that ends a long-running one. (Exit codes and `--json` printing are the
//! contract's `cli`, shared with the hive.)

use std::time::Duration;

/// How long a one-shot verb waits for NATS before giving up.
pub(crate) const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
