//! What the two command lines, `hive` and `swarm-controller`, share
//! (feature `cli`): their exit codes, how they set up logging, how a
//! `--json` answer is printed, and the signal that stops a long-running
//! one. One copy, so the two cannot drift apart.

use serde::Serialize;

/// Done as asked.
pub const EXIT_OK: i32 = 0;
/// Failed at run time: NATS, Docker or the hive's API, or a refused request.
pub const EXIT_FAILURE: i32 = 1;
/// The command line was wrong (the code clap exits with for it).
pub const EXIT_USAGE: i32 = 2;
/// The configuration is invalid (sysexits' `EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

/// Log to stderr. The filter is `RUST_LOG` when it is set and valid, else
/// `default` (for example `info` for a daemon, `warn` for a one-shot
/// verb). With `json` each event is one JSON line (for journald and log
/// shippers); otherwise text, coloured only on a terminal, so a log file
/// or journald gets plain text. A second call changes nothing.
pub fn init_logging(default: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(!json && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Print `value` on stdout as indented JSON and a newline: what `--json`
/// prints, for scripts to read.
pub fn print_json(value: &impl Serialize) -> serde_json::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Until SIGINT or SIGTERM, whichever comes first (logged at `info`). When
/// SIGTERM cannot be listened for, a warning says so and SIGINT alone
/// stops the process.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops this process");
            None
        }
    };
    let term = async {
        match &mut term {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        _ = term => tracing::info!("SIGTERM received"),
    }
}
