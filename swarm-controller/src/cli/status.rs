//! `status` and `status --watch`: load the fleet from the status and wanted
//! buckets, print the report (table or `--json`), and with `--watch` print
//! it again on every KV change, whenever a fresh row turns stale and
//! whenever a hive's NATS connection opens or closes (when the server gives
//! connection events, [`crate::presence`]), until SIGINT or SIGTERM.

use std::io::{IsTerminal, Write};
use std::sync::RwLock;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::kv;
use time::OffsetDateTime;
use tokio::sync::watch;

use swarm_queue_client::cli::{shutdown_signal, EXIT_OK};

use super::early::EarlyRead;
use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::evaluate::Link;
use crate::fleet::Fleet;
use crate::nats;
use crate::presence::watch::Watcher;
use crate::render::Report;

/// How long `status` may take to read both buckets (10,000 hives take well
/// under a second; this only turns a stuck server into an error).
const LOAD_WAIT: Duration = Duration::from_secs(120);

/// How the report is printed.
#[derive(Debug, Clone, Copy)]
struct Output {
    json: bool,
    watch: bool,
}

/// Standard output's reader went away: `status --json | head -c 300`, or
/// `status --watch` into a reader that quit. The command ends quietly with
/// success, as a reader that has read enough asks; any other failure to
/// write is an error.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed by its reader")]
struct ReaderLeft;

/// A failed write to standard output, as [`ReaderLeft`] when its reader
/// went away.
fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        ReaderLeft.into()
    } else {
        // The words every other verb uses (`swarm_queue_client::cli::write_stdout`).
        anyhow::Error::from(e).context("cannot write to standard output")
    }
}

/// `status [--json] [--watch]`; `early`: the one-look read begun while the
/// config was read, used when that config names the same NATS settings.
pub(crate) async fn status_cmd(
    config: Config,
    json: bool,
    watch_mode: bool,
    early: Option<EarlyRead>,
) -> anyhow::Result<i32> {
    let early = early.filter(|e| {
        let same = e.nats == config.nats;
        if !same {
            tracing::debug!(
                "the config's NATS settings are not its [nats] tables' alone: read again"
            );
        }
        same
    });
    let done = match early {
        Some(early) if !watch_mode => early.finish(config, json).await,
        _ => status_until_done(config, json, watch_mode).await,
    };
    match done {
        Err(e) if e.is::<ReaderLeft>() => Ok(EXIT_OK),
        done => done,
    }
}

/// `read` within [`LOAD_WAIT`], its error said as a reader of the buckets.
pub(super) async fn within_load_wait<T>(
    read: impl std::future::Future<Output = Result<T, nats::NatsError>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(LOAD_WAIT, read)
        .await
        .map_err(|_| anyhow::anyhow!("reading the buckets took over {LOAD_WAIT:?}"))?
        .context("reading the status and wanted buckets")
}

async fn status_until_done(config: Config, json: bool, watch_mode: bool) -> anyhow::Result<i32> {
    let out = Output {
        json,
        watch: watch_mode,
    };
    // The roster's rows are laid out while the connection opens, and the
    // connection events and the rollout are asked for while the buckets
    // are read: each wait overlaps another (at 10,000 hives, about 10 ms
    // of laying out and 3 ms of asking).
    let nats_config = config.nats.clone();
    let opening = tokio::spawn(async move {
        let conn = nats::connect(&nats_config, CONNECT_WAIT).await?;
        let buckets = nats::open_buckets(&conn, &nats_config).await?;
        Ok::<_, nats::NatsError>((conn, buckets))
    });
    let fleet = RwLock::new(if watch_mode {
        Fleet::for_config(&config, OffsetDateTime::now_utc())
    } else {
        Fleet::for_one_look(config)
    });
    let (conn, buckets) = opening.await.context("opening the connection")??;
    let linkable = fleet.read().unwrap_or_else(|p| p.into_inner()).linkable();
    // Once: every row is evaluated once, as it is printed. Watching: the
    // fleet keeps its rows' classes and deadlines up to date.
    let read = within_load_wait(async {
        if watch_mode {
            nats::load(&buckets, &fleet).await
        } else {
            nats::read_values(&buckets, &fleet).await
        }
    });
    let (follower, watcher, rollout) = tokio::join!(
        read,
        Watcher::start(&conn.client, linkable),
        rollout_summary(&buckets.rollouts)
    );
    let follower = follower?;
    if !watch_mode {
        return print_once(fleet, watcher.as_ref(), rollout, json);
    }
    if let Some(w) = &watcher {
        apply_links(&fleet, w.links());
    }
    show(&fleet, rollout, out)?;
    watch_fleet(&fleet, follower, watcher, &buckets.rollouts, out).await
}

/// The end of a one-look `status`: the fleet that was read, with the
/// connection events' links when there are any, printed once.
pub(super) fn print_once(
    fleet: RwLock<Fleet>,
    watcher: Option<&Watcher>,
    rollout: Option<serde_json::Value>,
    json: bool,
) -> anyhow::Result<i32> {
    let mut fleet = fleet.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = watcher {
        fleet.note_links(w.links());
    }
    show_once(&fleet, rollout, json)?;
    // The process ends once this returns: freeing every hive's entry one
    // at a time would only make the caller wait longer.
    std::mem::forget(fleet);
    Ok(EXIT_OK)
}

/// Print the report once: the JSON document written row by row as each is
/// evaluated, or the table.
fn show_once(fleet: &Fleet, rollout: Option<serde_json::Value>, json: bool) -> anyhow::Result<()> {
    widen_stdout_pipe();
    let now = OffsetDateTime::now_utc();
    // Indented for a person at a terminal; one line for a script's pipe or
    // file: at 10,000 hives 11.3 MB instead of 18.7, and the binary's wall
    // time fell from a median 226.1 to 204.7 ms (twelve alternated runs).
    let pretty = std::io::stdout().is_terminal();
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    if json {
        crate::render::write_fleet(fleet, now, rollout.as_ref(), pretty, &mut stdout).map_err(
            // A failed write keeps its own error, message and all.
            |e| {
                if e.is_io() {
                    stdout_error(e.into())
                } else {
                    e.into()
                }
            },
        )?;
        writeln!(stdout).map_err(stdout_error)?;
    } else {
        let mut report = Report::of_fleet(fleet, now);
        report.rollout = rollout;
        write!(stdout, "{}", report.table()).map_err(stdout_error)?;
    }
    stdout.flush().map_err(stdout_error)
}

/// A pipe holds 64 KiB by default, so the document of 10,000 hives
/// (18.7 MB then, indented) went out in about 300 turns of this process
/// and its reader.
/// Ask for 1 MiB, the most an unprivileged process gets by default
/// (`/proc/sys/fs/pipe-max-size`); when the kernel refuses, only the pace
/// changes. Anything but a pipe is left alone. At 10,000 hives, ten runs
/// of the binary with and ten without, alternated: writing the document
/// into the bench's pipe took a median 41.2 ms against 47.5 ms.
pub fn widen_stdout_pipe() {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = std::io::stdout().as_raw_fd();
        // SAFETY: fstat fills a zeroed stat of our own stdout; F_SETPIPE_SZ
        // only sets that pipe's capacity.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
                libc::fcntl(fd, libc::F_SETPIPE_SZ, 1 << 20);
            }
        }
    }
}

fn apply_links(fleet: &RwLock<Fleet>, links: Vec<(String, Link)>) -> usize {
    fleet
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .set_links(links, OffsetDateTime::now_utc())
        .len()
}

/// The next links from `watcher`, or never without one.
async fn next_links(watcher: &mut Option<Watcher>) -> Vec<(String, Link)> {
    match watcher {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// Print the report again on each change or expiry, until a signal.
async fn watch_fleet(
    fleet: &RwLock<Fleet>,
    mut follower: nats::Follower,
    mut watcher: Option<Watcher>,
    rollouts: &kv::Store,
    out: Output,
) -> anyhow::Result<i32> {
    let (stop_tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    loop {
        let next_stale = next_wake(fleet);
        tokio::select! {
            // Cancel-safe: an entry not yet taken stays in the watch.
            change = follower.apply_next(fleet) => {
                let _ = change;
                show(fleet, rollout_summary(rollouts).await, out)?;
            }
            // Cancel-safe: see `Watcher::next`.
            links = next_links(&mut watcher) => {
                if apply_links(fleet, links) > 0 {
                    show(fleet, rollout_summary(rollouts).await, out)?;
                }
            }
            // Cancel-safe: a sleep holds nothing.
            _ = tokio::time::sleep(next_stale) => {
                let expired = fleet
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .expire(OffsetDateTime::now_utc());
                if !expired.is_empty() {
                    show(fleet, rollout_summary(rollouts).await, out)?;
                }
            }
            _ = stop.wait_for(|s| *s) => return Ok(EXIT_OK),
        }
    }
}

/// Until the next fresh row turns stale (just after), at most a second.
fn next_wake(fleet: &RwLock<Fleet>) -> Duration {
    fleet
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .next_stale_at()
        .map(|at| {
            Duration::try_from(at - OffsetDateTime::now_utc()).unwrap_or(Duration::ZERO)
                + Duration::from_millis(5)
        })
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(1))
}

/// Print the fleet's report: one JSON line per report when watching, the
/// table redrawn in place on a terminal.
fn show(
    fleet: &RwLock<Fleet>,
    rollout: Option<serde_json::Value>,
    out: Output,
) -> anyhow::Result<()> {
    let mut report = {
        let f = fleet.read().unwrap_or_else(|p| p.into_inner());
        Report::of_fleet(&f, OffsetDateTime::now_utc())
    };
    report.rollout = rollout;
    let mut text = Vec::new();
    if out.json {
        serde_json::to_writer(&mut text, &report)?;
        text.push(b'\n');
    } else {
        if out.watch && std::io::stdout().is_terminal() {
            text.extend_from_slice(b"\x1b[H\x1b[2J");
        }
        text.extend_from_slice(report.table().as_bytes());
        if out.watch {
            text.push(b'\n');
        }
    }
    // Not `print!`, which panics when the reader has gone.
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&text)
        .and_then(|()| stdout.flush())
        .map_err(stdout_error)
}

/// The stored rollout for `status`; a read error is logged, not fatal, since
/// the fleet's rows do not depend on it.
pub(super) async fn rollout_summary(rollouts: &kv::Store) -> Option<serde_json::Value> {
    match crate::rollout::store::read(rollouts).await {
        Ok(stored) => stored
            .as_ref()
            .map(|s| crate::rollout::report::summary_json(Some(s), OffsetDateTime::now_utc())),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the rollout state");
            None
        }
    }
}
