//! The `docker` CLI with a bound on each call. A call that has not returned
//! within its limit is killed, and the daemon it went to is taken as hung:
//! every later call to that daemon from this test binary returns at once
//! with [`CliError::Skipped`]. A limit per call alone would not do: the
//! cleanup guards make many calls each, and a dockerd that stopped
//! answering would hold a run for hours before CI's own limit ended it with
//! no word of why. What the skipped calls would have removed is left for
//! the leftovers check at the end of `scripts/test` to name.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one call may take: generous (removing a container that is
/// being killed, or an image with many layers, takes seconds), and far
/// below CI's limit.
pub const LIMIT: Duration = Duration::from_secs(120);

/// The daemons taken as hung, by `-H` host (`""` for the default one).
static HUNG: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Why a call gave no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// The CLI could not be started.
    Spawn { call: String, error: String },
    /// It had not returned within `limit`: killed, and its daemon taken as
    /// hung.
    Hung { call: String, limit: Duration },
    /// Not run: an earlier call to the same daemon hung.
    Skipped { call: String },
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Spawn { call, error } => {
                write!(
                    f,
                    "{call}: could not run it: {error} (apt-get install docker.io)"
                )
            }
            CliError::Hung { call, limit } => write!(
                f,
                "{call} had not returned after {limit:?}; its daemon is taken as hung"
            ),
            CliError::Skipped { call } => write!(
                f,
                "{call} not run: an earlier call to its daemon had not returned within its limit"
            ),
        }
    }
}

/// `docker <args>` against the machine's dockerd, within [`LIMIT`].
pub fn run(args: &[&str]) -> Result<Output, CliError> {
    run_at(None, args, LIMIT)
}

/// `docker [-H host] <args>`, within `limit`.
pub fn run_at(host: Option<&str>, args: &[&str], limit: Duration) -> Result<Output, CliError> {
    let mut cmd = Command::new("docker");
    if let Some(h) = host {
        cmd.arg("-H").arg(h);
    }
    cmd.args(args);
    run_command(cmd, host, None, limit)
}

/// `cmd` (a `docker` command, its arguments and environment set; `host` the
/// daemon it goes to, `None` for the machine's), with `stdin` written to it,
/// within `limit`.
pub fn run_command(
    mut cmd: Command,
    host: Option<&str>,
    stdin: Option<&[u8]>,
    limit: Duration,
) -> Result<Output, CliError> {
    let call = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if is_hung(host) {
        return Err(CliError::Skipped { call });
    }
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::Spawn {
            call: call.clone(),
            error: e.to_string(),
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Small (a password): the pipe takes it whole; dropped, it closes.
        let _ = pipe.write_all(text);
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Ok(Output {
                    status,
                    stdout: stdout.join().unwrap_or_default(),
                    stderr: stderr.join().unwrap_or_default(),
                })
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => break,
        }
    }
    // Our own child, by its handle: killed and reaped. Its pipes close with
    // it, so the two readers end by themselves.
    let _ = child.kill();
    let _ = child.wait();
    HUNG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(host.unwrap_or_default().to_string());
    let err = CliError::Hung { call, limit };
    eprintln!("{err}: later docker calls to it from this test binary are skipped, and what they would have removed is left behind");
    Err(err)
}

/// Whether a call to `host` (`None`: the machine's dockerd) hung before.
pub fn is_hung(host: Option<&str>) -> bool {
    HUNG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(host.unwrap_or_default())
}

/// A daemon at `host` started (again): ask it again.
pub fn forget(host: Option<&str>) {
    HUNG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(host.unwrap_or_default());
}

/// Read `pipe` to its end on a thread of its own, so a chatty call cannot
/// fill its pipe and stall while it is waited for.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}
