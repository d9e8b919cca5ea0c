//! What the scale bench reads off the processes it runs: memory, the fd
//! limit, the peak memory of a child process, percentiles, and the
//! JetStream consumers the server holds.
//!
//! Peak memory of a child (`status --json`) comes from `wait4`, which hands
//! back the reaped child's own `rusage` (`/proc/<pid>/status` is gone once
//! it has exited). But Linux starts a child's `ru_maxrss` at the peak of the
//! memory it was spawned from, and a child of the bench starts from the
//! bench's own (all N clients: a GiB at 10,000). So the bench runs the
//! child through itself as a small wrapper ([`WRAP`]): a fresh process that
//! holds nothing (a few MiB), spawns the child and reaps it with `wait4`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`); 0 when unreadable.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Open file descriptors of `pid` (a server's connections and store files).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// CPU time `pid` has used so far (user + system), from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Duration {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the rest follow its `)`.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11) // fields 3..=13; utime and stime are fields 14 and 15
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(ticks as f64 / hz)
}

/// CPU time (user + system) of this process's children that have been
/// reaped so far: the difference across one child's run is that child's.
pub fn children_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of a plain C struct, and
    // getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Raise this process's soft `RLIMIT_NOFILE` to its hard limit, so N
/// connections fit; the nats-servers it starts inherit it. The new soft
/// limit.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}

/// The first argument that makes the bench binary the wrapper:
/// `<bench> --wrap-measure <result file> <program> <args>...`.
pub const WRAP: &str = "--wrap-measure";

/// One finished child process: its output, wall time and peak memory.
pub struct Measured {
    pub success: bool,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub wall: Duration,
    /// `ru_maxrss` of the child alone (KiB on Linux), spawned from the
    /// wrapper.
    pub peak_rss_kib: u64,
}

/// Run `program args` through the wrapper to its end. Blocking: call it
/// from `spawn_blocking`.
pub fn run_measured(program: &Path, args: &[&str], dir: &Path) -> std::io::Result<Measured> {
    let result = tempfile::NamedTempFile::new_in(dir)?;
    let t0 = Instant::now();
    let out = Command::new(std::env::current_exe()?)
        .arg(WRAP)
        .arg(result.path())
        .arg(program)
        .args(args)
        .env_remove("HYPERHIVE_NATS_URL")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()?;
    let wall = t0.elapsed();
    let text = std::fs::read_to_string(result.path())?;
    let mut fields = text.split_whitespace().map(|v| v.parse::<i64>().ok());
    let code = fields.next().flatten();
    let peak_rss_kib = fields.next().flatten().and_then(|k| u64::try_from(k).ok());
    Ok(Measured {
        success: out.status.success() && code == Some(0),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        wall,
        peak_rss_kib: peak_rss_kib.unwrap_or(0),
    })
}

/// The wrapper's whole work (`args` after [`WRAP`]): spawn the program
/// with this process's stdout and stderr, reap it with `wait4`, and write
/// "<exit code> <ru_maxrss KiB>" to the result file.
pub fn wrapper(args: &[String]) -> std::io::Result<()> {
    let [result, program, rest @ ..] = args else {
        return Err(std::io::Error::other(format!(
            "{WRAP} <result file> <program> <args>..."
        )));
    };
    let child = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of a plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child, writing only into the two locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    std::fs::write(result, format!("{code} {}\n", usage.ru_maxrss))
}

/// The `p` quantile (0..=1) of `samples`, nearest rank; NaN when empty.
pub fn pct(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

/// JetStream consumers the server holds, from `$JS.API.INFO` and the
/// consumer list of each bucket's stream.
#[derive(Debug, Default, Clone, Copy)]
pub struct Consumers {
    /// The account's count (`$JS.API.INFO`): every consumer on the server.
    pub total: usize,
    /// Of the buckets' consumers, those a live subscriber is bound to
    /// (`push_bound`); the rest are ephemeral consumers of processes that
    /// ended, which the server drops after their inactive threshold (30 s
    /// for async-nats's ordered consumers).
    pub bound: usize,
}

pub async fn consumers(js: &async_nats::jetstream::Context) -> Consumers {
    let total = js.query_account().await.map(|a| a.consumers).unwrap_or(0);
    let mut bound = 0;
    for stream in ["KV_hyperhive-status", "KV_hyperhive-wanted"] {
        let Ok(s) = js.get_stream(stream).await else {
            continue;
        };
        let mut list = s.consumers();
        while let Some(info) = list.next().await {
            bound += usize::from(info.is_ok_and(|i| i.push_bound));
        }
    }
    Consumers { total, bound }
}
