//! Reconnect storms (`-- --storm`; `--quick`: N = 200): the nats-server
//! restarted under N simulated hives, with the hive's default jitter and
//! with jitter off, one after the other in one run.
//!
//! Each mode starts its own server and fleet ([`crate::fleet`]: the real
//! connect, publisher and wanted code, so the real reconnect delays and
//! spread waits), waits until the controller's `status --json` shows every
//! hive fresh, lets the boot's burst pass ([`SETTLE`]), then SIGKILLs the
//! server and starts it again on the same port and store. Measured from
//! the kill:
//!
//! - **server back**: until the new server logs that it is ready;
//! - **all landed**: until every hive's first status put after the kill is
//!   stored, by the entries' own server time (a put is what makes a hive
//!   fresh again at the controller: before it, the hive's last status ages
//!   from the kill on); p50 the same for half of them;
//! - **most puts in 100 ms**: the largest number of those first puts stored
//!   in one 100 ms window, how much of the fleet arrives at once;
//! - the new server's **CPU** (`/proc/<pid>/stat`): its CPU time from its
//!   start until [`TAIL`] after all landed (which takes in each hive's
//!   settle read a second into its session), and the highest share of a
//!   core over one [`SAMPLE`]; and its **peak RSS** (`VmHWM` in
//!   `/proc/<pid>/status`) over the same time; and this process's CPU time
//!   from the kill to then (**clients CPU**): the N clients share the
//!   machine with the server, and on a small machine they, not the server,
//!   can be what the recovery waits for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use hyperhive_tests::swarm::write_controller_config;
use hyperhive_tests::{wait_until, NatsServer};
use swarm_queue_client::{jitter, open_or_create, Bucket, BucketSettings};

use crate::measure::{cpu_time, proc_kib};

/// After all fresh, before the kill: the boot's puts and reads are done
/// (a second in the quick form, whose fleet is small).
const SETTLE: Duration = Duration::from_secs(5);
const QUICK_SETTLE: Duration = Duration::from_secs(1);
/// After all landed, still measured: the settle reads and late retries.
const TAIL: Duration = Duration::from_secs(2);
/// One CPU sample.
const SAMPLE: Duration = Duration::from_millis(100);
/// Longest wait for every hive to land again.
const LIMIT: Duration = Duration::from_secs(600);

/// One mode's recovery, times from the kill.
struct Recovery {
    jitter_percent: u8,
    back_s: f64,
    all_landed_s: f64,
    p50_landed_s: f64,
    peak_puts: usize,
    cpu_s: f64,
    peak_cpu: f64,
    peak_rss_kib: u64,
    /// This process's CPU time over the same span: the N clients, which
    /// share the machine with the server.
    clients_cpu_s: f64,
}

pub async fn bench(ns: &[usize], quick: bool) {
    let settle = if quick { QUICK_SETTLE } else { SETTLE };
    println!("storm: 1 nats-server restarted (SIGKILL, same port and store) under N hives");
    println!(
        "| N | jitter | server back s | all landed s | p50 landed s | most puts in 100 ms | server CPU s | peak CPU (100 ms) | server peak RSS MiB | clients CPU s |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in ns {
        let on = run(n, jitter::DEFAULT_PERCENT, settle).await;
        println!("{}", row(n, &on));
        let off = run(n, 0, settle).await;
        println!("{}", row(n, &off));
        let f = |r: &Recovery| {
            format!(
                "all_landed_s={:.2} p50_landed_s={:.2} peak_puts_100ms={} cpu_s={:.2} peak_cpu={:.2} peak_rss_mib={:.1} back_s={:.2} clients_cpu_s={:.2}",
                r.all_landed_s,
                r.p50_landed_s,
                r.peak_puts,
                r.cpu_s,
                r.peak_cpu,
                r.peak_rss_kib as f64 / 1024.0,
                r.back_s,
                r.clients_cpu_s
            )
        };
        let prefix = |p: &str, text: String| {
            text.split(' ')
                .map(|kv| format!("{p}_{kv}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "FIGURES: storm n={n} jitter_percent={} {} {}",
            on.jitter_percent,
            prefix("jitter", f(&on)),
            prefix("off", f(&off))
        );
    }
}

fn row(n: usize, r: &Recovery) -> String {
    let jitter = match r.jitter_percent {
        0 => "off".to_string(),
        p => format!("±{p} %, reconnect [0, backoff]"),
    };
    format!(
        "| {n} | {jitter} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.0} % | {:.1} | {:.2} |",
        r.back_s,
        r.all_landed_s,
        r.p50_landed_s,
        r.peak_puts,
        r.cpu_s,
        r.peak_cpu * 100.0,
        r.peak_rss_kib as f64 / 1024.0,
        r.clients_cpu_s
    )
}

async fn run(n: usize, jitter_percent: u8, settle: Duration) -> Recovery {
    let mut nats = NatsServer::start();
    let url = nats.url();
    let client = async_nats::connect(url.as_str()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut status = None;
    for b in [Bucket::Status, Bucket::Wanted] {
        let kv = open_or_create(&js, b, &BucketSettings::default_for(b))
            .await
            .unwrap();
        status = status.or(Some(kv));
    }
    let status = status.expect("the status bucket");
    let dir = tempfile::Builder::new()
        .prefix("hhtest-storm-")
        .tempdir()
        .unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("sim{i:05}")).collect();
    let fds_before = crate::measure::fd_count(std::process::id());
    let config = write_controller_config(dir.path(), &names, crate::STALE_AFTER_SECS, &url);
    let fleet = crate::fleet::start_with_jitter(
        &names,
        std::slice::from_ref(&url),
        dir.path(),
        jitter_percent,
    )
    .await;
    crate::all_fresh(&config, &status, n, Instant::now()).await;
    tokio::time::sleep(settle).await;

    let before = js
        .get_stream(format!("KV_{}", Bucket::Status.name()))
        .await
        .unwrap()
        .cached_info()
        .state
        .last_sequence;
    let clients_cpu = cpu_time(std::process::id());
    let killed_at = Instant::now();
    let killed_ns = unix_nanos(SystemTime::now());
    let nats = tokio::task::spawn_blocking(move || {
        nats.restart();
        nats
    })
    .await
    .unwrap();
    let back_s = killed_at.elapsed().as_secs_f64();
    let pid = nats.pid().expect("the restarted server");
    let peak = Arc::new(Mutex::new(0.0));
    let sampler = tokio::spawn(peak_cpu(pid, peak.clone()));
    let landed = first_puts_after(&status, before, killed_ns, n).await;
    tokio::time::sleep(TAIL).await;
    let cpu_s = cpu_time(pid).as_secs_f64();
    let clients_cpu_s = cpu_time(std::process::id())
        .saturating_sub(clients_cpu)
        .as_secs_f64();
    let peak_rss_kib = proc_kib(pid, "VmHWM:");
    sampler.abort();
    let peak_cpu = *peak.lock().unwrap();
    drop(fleet);
    // The next mode's fleet needs the fds this one's connections hold.
    let own_fds = || crate::measure::fd_count(std::process::id());
    wait_until(LIMIT, "the fleet's connections closed", || async {
        (own_fds() < fds_before + 100).then_some(())
    })
    .await;
    crate::report_server_log(0, &nats.log());
    let mut offsets: Vec<f64> = landed.values().copied().collect();
    offsets.sort_by(f64::total_cmp);
    Recovery {
        jitter_percent,
        back_s,
        all_landed_s: offsets.last().copied().unwrap_or(f64::NAN),
        p50_landed_s: crate::measure::pct(&offsets, 0.5),
        peak_puts: most_in_window(&offsets, SAMPLE.as_secs_f64()),
        cpu_s,
        peak_cpu,
        peak_rss_kib,
        clients_cpu_s,
    }
}

/// Each hive's first status put stored after `killed_ns` (found from
/// stream sequence `before + 1` on), as seconds after it; once all `n`.
async fn first_puts_after(
    status: &async_nats::jetstream::kv::Store,
    before: u64,
    killed_ns: i128,
    n: usize,
) -> HashMap<String, f64> {
    // The bench's own connection reconnects too: try until the watch is made.
    let mut watch = wait_until(
        Duration::from_secs(60),
        "a watch after the restart",
        || async { status.watch_all_from_revision(before + 1).await.ok() },
    )
    .await;
    let deadline = Instant::now() + LIMIT;
    let mut landed = HashMap::new();
    while landed.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} hives put a status after the restart",
            landed.len()
        );
        let Ok(Some(Ok(e))) = tokio::time::timeout(Duration::from_secs(5), watch.next()).await
        else {
            continue;
        };
        let at = e.created.unix_timestamp_nanos();
        if at >= killed_ns {
            let after = (at - killed_ns) as f64 / 1e9;
            landed.entry(e.key).or_insert(after);
        }
    }
    landed
}

/// Sample `pid`'s CPU time every [`SAMPLE`] and keep in `peak` the highest
/// share of one core it used over one sample; runs until aborted.
async fn peak_cpu(pid: u32, peak: Arc<Mutex<f64>>) {
    let mut last = (Instant::now(), cpu_time(pid));
    let mut tick = tokio::time::interval(SAMPLE);
    loop {
        tick.tick().await;
        let now = (Instant::now(), cpu_time(pid));
        let wall = (now.0 - last.0).as_secs_f64();
        if wall > 0.0 {
            let share = now.1.saturating_sub(last.1).as_secs_f64() / wall;
            let mut p = peak.lock().unwrap();
            *p = p.max(share);
        }
        last = now;
    }
}

/// The most of `sorted` (seconds) that fall in one window of `width`.
fn most_in_window(sorted: &[f64], width: f64) -> usize {
    let mut most = 0;
    let mut start = 0;
    for (end, t) in sorted.iter().enumerate() {
        while sorted[start] < t - width {
            start += 1;
        }
        most = most.max(end + 1 - start);
    }
    most
}

fn unix_nanos(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}
