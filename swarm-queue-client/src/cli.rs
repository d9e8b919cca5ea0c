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
/// prints, for scripts to read. Written by [`write_stdout`]; the error is
/// only the value's own.
pub fn print_json(value: &impl Serialize) -> serde_json::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_stdout(text.as_bytes());
    Ok(())
}

/// Standard output's reader went away ([`write_stdout`]).
static READER_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// A write to standard output failed for another reason ([`write_stdout`]).
static WRITE_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Write `bytes` to standard output, flushed; through [`out!`],
/// [`outln!`] and [`print_json`]. Rust's `print!` panics when the write
/// fails; this never stops the verb, whose work (a declaration, a rollout
/// it drives, a job it waits for) does not depend on who reads about it:
/// - when the reader went away (`roster | head -1`), the rest of the
///   output is dropped and [`reader_gone`] says so, for a follow to end
///   quietly;
/// - any other failure (a full disk under `> file`) is said once on
///   stderr, and [`settle`] turns the verb's success into
///   [`EXIT_FAILURE`]: its output is not whole.
pub fn write_stdout(bytes: &[u8]) {
    use std::io::Write;
    use std::sync::atomic::Ordering::Relaxed;
    if READER_GONE.load(Relaxed) || WRITE_FAILED.load(Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => READER_GONE.store(true, Relaxed),
        Err(e) => {
            WRITE_FAILED.store(true, Relaxed);
            drop(out);
            eprintln!("cannot write to standard output: {e}");
        }
    }
}

/// Whether standard output's reader went away: a verb that follows
/// (`events --follow`, `logs --follow`) ends then, with [`EXIT_OK`].
pub fn reader_gone() -> bool {
    READER_GONE.load(std::sync::atomic::Ordering::Relaxed)
}

/// A verb's exit code once its output is written: [`EXIT_FAILURE`]
/// instead of success when a write to standard output failed other than
/// by its reader leaving ([`write_stdout`]).
pub fn settle(code: i32) -> i32 {
    if code == EXIT_OK && WRITE_FAILED.load(std::sync::atomic::Ordering::Relaxed) {
        EXIT_FAILURE
    } else {
        code
    }
}

/// [`write_stdout`] of formatted text, as `print!`.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(::std::format!($($arg)*).as_bytes())
    };
}

/// [`write_stdout`] of formatted text and a newline, as `println!`.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(b"\n")
    };
    ($($arg:tt)*) => {{
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        $crate::cli::write_stdout(line.as_bytes())
    }};
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
