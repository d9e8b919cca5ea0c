//! Benchmark: `status` over a large fleet, and the cost of one status
//! update while the dashboard is open.
//!
//! `cargo bench -p hyperhive-tests --bench status` (10,000 hives), or with
//! `-- --quick` (or `HH_BENCH_QUICK=1`) for a short CI run (500 hives);
//! `-- --hives N` for another fleet size (the 50,000-hive figures in
//! `docs/benchmarks-scale.md`).
//! With `HH_BENCH_HOLD=1` it fills the server, prints `HOLD <config>
//! <deployed config> <server pid>` and keeps the server until its standard
//! input closes, measuring nothing: a fleet to time or profile the binary
//! against by hand.
//!
//! A real nats-server (the harness's `NatsServer`) gets one status and one
//! declaration per hive from a generator (mixed converged / progressing /
//! failed / degraded / published hives, three agents each). Then, each in a fresh child
//! process so its peak memory (`VmHWM` from /proc/self/status) is its own:
//!
//! - **status**: connect, read both buckets, evaluate every hive, render
//!   the JSON document: the work of `status --json`. A child that only
//!   connects gives the baseline memory. The real binary is timed too.
//!   The floors are a bare watch of both buckets and the decode of the
//!   same values. These four are measured in rounds (eleven; three quick),
//!   each round one run of each in an order that turns, and the goal's
//!   ratio is given both from the medians and round by round, against
//!   that round's floors. Every process of the bench takes its memory
//!   from the controller's allocator (`swarm_controller::alloc`); each
//!   round also runs the binary and the decode floor with the C library's
//!   (`HYPERHIVE_ALLOCATOR=system`), to show what the allocator changes,
//!   and `--check-config` and the binary with the roster as a fleet
//!   deploys it (an nkey and two labels a hive, the labels in tables of
//!   their own, as NixOS's TOML writer gives them) beside the bare one.
//!   The floors are timed inside a process already connected; the
//!   binary's time also holds what any process pays, so each round also
//!   times a **process floor** for each roster: a child that starts,
//!   loads the config with its roster, connects, opens the buckets,
//!   writes as many bytes as the binary's document into a pipe read as
//!   the binary's is, and ends, doing none of the work (its config and
//!   connection one after the other, where the binary overlaps them).
//!   Each child also reports the CPU time it and the
//!   nats-server used over its measured span (`CLOCK_PROCESS_CPUTIME_ID`;
//!   the server's threads' `schedstat`), to tell a span that waits from
//!   one that has both cores busy.
//! - **dashboard**: `serve` with one open server-sent-events stream for the
//!   page the dashboard opens on (worst first, 100 rows). Each update puts
//!   the status of a hive that page shows and times it until that hive's
//!   row arrives on the stream; the server's own counters give the values
//!   decoded and bytes read per update. As many updates of hives the page
//!   does not show count what the page is sent for them (no row). In the
//!   same run a fresh full read of both buckets is timed and counted: the
//!   baseline an update would cost if it re-read everything, and the full
//!   `/api/status` document is the baseline of the page's snapshot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use hyperhive_tests::sse::EventStream;
use serde_json::{json, Value};
use swarm_controller::config::Config;
use swarm_controller::fleet::Fleet;
use swarm_queue_client::{
    encode_pretty, AgentName, AgentSpec, AgentStatus, Declaration, HiveName, HiveState, HiveStatus,
    JobSummary, Level, Observed, Power, Warning,
};
use time::OffsetDateTime;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The controller binary's allocator, so that the floors, the library
/// path and the dashboard are measured with the allocator `status` and
/// `serve` run with (`HYPERHIVE_ALLOCATOR=system` in a child's environment
/// turns it off there).
#[global_allocator]
static ALLOCATOR: swarm_controller::alloc::Allocator = swarm_controller::alloc::Allocator;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let mode = args.get(i + 1).ok_or("--child needs a mode")?;
        let config = PathBuf::from(args.get(i + 2).ok_or("--child needs a config")?);
        let extra = args.get(i + 3).cloned();
        // As the binary does, so the library path's memory is the binary's.
        swarm_controller::cli::cap_malloc_arenas();
        let rt = tokio::runtime::Runtime::new()?;
        if mode == "process" {
            let bytes = extra.ok_or("--child process needs a byte count")?.parse()?;
            // Kept to the end, as the binary keeps what it read: the
            // exit below runs no destructor.
            let _kept = rt.block_on(connected(&config))?;
            write_bytes(bytes)?;
            std::process::exit(0);
        }
        let out = rt.block_on(child(mode, &config, extra))?;
        println!("RESULT {out}");
        return Ok(());
    }
    let quick = args.iter().any(|a| a == "--quick")
        || std::env::var("HH_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let (mut hives, updates) = if quick { (500, 20) } else { (10_000, 200) };
    if let Some(i) = args.iter().position(|a| a == "--hives") {
        let n = args.get(i + 1).ok_or("--hives needs a number")?;
        hives = n
            .parse()
            .map_err(|e| format!("--hives {n:?}: not a number of hives ({e})"))?;
    }
    tokio::runtime::Runtime::new()?.block_on(parent(hives, updates, quick))
}

// ---------------------------------------------------------------------------
// The parent: server, generator, children, table.

fn hive_name(i: usize) -> String {
    format!("hive-{i:05}")
}

fn agents_for(i: usize) -> BTreeMap<AgentName, AgentSpec> {
    let mut agents = BTreeMap::new();
    for (name, image) in [
        ("web", "local/web"),
        ("worker", "local/worker"),
        ("cron", "local/cron"),
    ] {
        let mut spec = AgentSpec {
            image: Some(format!("{image}:{}", i % 7)),
            memory_mb: Some(256),
            ..Default::default()
        };
        spec.env.insert("LOG".into(), "info".into());
        spec.env.insert("HIVE_INDEX".into(), i.to_string());
        agents.insert(
            AgentName::new(name).unwrap_or_else(|_| unreachable!()),
            spec,
        );
    }
    agents
}

/// A status for hive `i` against declared revision `rev`; `generation`
/// varies the value between updates.
fn status_for(i: usize, rev: u64, generation: u64) -> HiveStatus {
    let agents = agents_for(i);
    let kind = i % 20;
    let (seen, converged, state) = match kind {
        0 => (
            Some(rev.saturating_sub(1)),
            Some(rev.saturating_sub(1)),
            HiveState::Ok,
        ), // published
        1 | 2 => (Some(rev), Some(rev.saturating_sub(1)), HiveState::Ok), // progressing
        3 => (Some(rev), None, HiveState::Degraded),                      // failed
        4 => (Some(rev), Some(rev), HiveState::Degraded),                 // degraded
        _ => (Some(rev), Some(rev), HiveState::Ok),                       // converged
    };
    let statuses = agents
        .iter()
        .map(|(name, spec)| {
            let failed = kind == 3 && name.as_str() == "web";
            let status = AgentStatus {
                wanted: Power::Up,
                observed: if failed {
                    Observed::Missing
                } else {
                    Observed::Running
                },
                spec: (!failed).then(|| spec.spec_hash()),
                declared_spec: Some(spec.spec_hash()),
                image_progress: None,
                image_digest: None,
                health: None,
                last_job: Some(JobSummary {
                    id: generation * 10 + i as u64,
                    kind: "rebuild".into(),
                    state: if failed {
                        "failed"
                    } else if kind == 1 {
                        "running"
                    } else {
                        "done"
                    }
                    .into(),
                    error: failed.then(|| "pull local/web: manifest unknown".to_string()),
                }),
                retry: None,
                exits: None,
                unsettled: None,
            };
            (name.clone(), status)
        })
        .collect();
    HiveStatus {
        schema: 1,
        hive: HiveName::new(hive_name(i)).unwrap_or_else(|_| unreachable!()),
        ready: state == HiveState::Ok,
        state,
        warnings: if state == HiveState::Degraded {
            vec![Warning::new(
                "disk",
                Level::Warn,
                "disk 91% full on /var/lib/docker",
            )]
        } else {
            vec![]
        },
        converged_revision: converged,
        seen_revision: seen,
        agents: statuses,
        xkey: Some("XAT3B2C5HOTUSD4RQ3TLNMEEGEBKUGBZUR2P6UXWYOVGSB6U6AYX4YSP".into()),
        version: format!("0.1.{generation}"),
        agent_spec: None,
    }
}

async fn put_all(
    store: &async_nats::jetstream::kv::Store,
    values: Vec<(String, Vec<u8>)>,
) -> Res<Vec<(String, u64)>> {
    let results: Vec<Res<(String, u64)>> = futures_util::stream::iter(values)
        .map(|(key, value)| {
            let store = store.clone();
            async move {
                let rev = store.put(key.as_str(), Bytes::from(value)).await?;
                Ok((key, rev))
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Both configs' settings before their rosters.
fn config_head(url: &str) -> String {
    format!("stale_after_secs = 3600\n[nats]\nurl = {url:?}\n")
}

/// Each run over its round's goal.
fn over_goals(runs: &[f64], goals: &[f64]) -> Vec<f64> {
    runs.iter()
        .zip(goals)
        .map(|(r, g)| r / g.max(1e-9))
        .collect()
}

/// The bench's config with each hive's nkey and labels, as a fleet deploys
/// it: `[hives.<name>]` with the nkey, `[hives.<name>.labels]` after it.
fn deployed_roster(url: &str, hives: usize) -> String {
    let mut text = config_head(url);
    for i in 0..hives {
        let name = hive_name(i);
        let nkey = nkeys::KeyPair::new_user().public_key();
        text.push_str(&format!(
            "\n[hives.{name}]\nnkey = \"{nkey}\"\n\n[hives.{name}.labels]\nsite = \"site-{}\"\nrack = \"r{}\"\n",
            i % 12,
            i % 40
        ));
    }
    text
}

/// `HH_BENCH_WRAP` (for example `heaptrack -o /tmp/status` or `perf record
/// -g -o /tmp/perf-{mode}.data`): a profiler every measured child runs
/// under; `{mode}` is replaced by the child's mode.
fn wrapped(exe: &Path, mode: &str) -> Command {
    let wrap = std::env::var("HH_BENCH_WRAP")
        .unwrap_or_default()
        .replace("{mode}", mode);
    let mut words = wrap.split_whitespace();
    match words.next() {
        Some(tool) => {
            let mut cmd = Command::new(tool);
            cmd.args(words).arg(exe);
            cmd
        }
        None => Command::new(exe),
    }
}

fn run_child(exe: &Path, mode: &str, config: &Path, extra: Option<&str>) -> Res<Value> {
    run_child_with(exe, mode, config, extra, None)
}

/// [`run_child`] with one more variable in the child's environment.
fn run_child_with(
    exe: &Path,
    mode: &str,
    config: &Path,
    extra: Option<&str>,
    env: Option<(&str, &str)>,
) -> Res<Value> {
    let mut cmd = wrapped(exe, mode);
    cmd.args(["--child", mode]).arg(config);
    if let Some(pid) = SERVER_PID.get() {
        cmd.env(SERVER_PID_ENV, pid.to_string());
    }
    if let Some(e) = extra {
        cmd.arg(e);
    }
    if let Some((key, value)) = env {
        cmd.env(key, value);
    }
    let out = cmd.stderr(Stdio::inherit()).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| format!("child {mode} printed no result ({}):\n{text}", out.status))?;
    Ok(serde_json::from_str(line)?)
}

/// The real binary, end to end (process start, config with the roster,
/// connect, read, evaluate, print JSON into a pipe): its wall time in ms
/// and peak memory in KiB; `system`: with every block from the C library.
fn run_binary(bin: &Path, config: &Path, system: bool) -> Res<(f64, u64)> {
    let mut cmd = Command::new(bin);
    cmd.arg("--config").arg(config).args(["status", "--json"]);
    if system {
        cmd.env("HYPERHIVE_ALLOCATOR", "system");
    }
    timed_measured(&mut cmd, "swarm-controller status --json")
}

/// [`run_measured`] timed from the spawn to the reap: the wall time in ms
/// and the peak memory in KiB; an error naming `what` when it fails.
fn timed_measured(cmd: &mut Command, what: &str) -> Res<(f64, u64)> {
    let t = Instant::now();
    let (ok, max_rss_kb) = run_measured(cmd)?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !ok {
        return Err(format!("{what} failed").into());
    }
    Ok((ms, max_rss_kb))
}

/// Runs `cmd` with its output read and thrown away (as a pipe, as a
/// script reads it), and returns whether it succeeded and its peak
/// resident memory in KiB, from the kernel's accounting of the reaped child.
fn run_measured(cmd: &mut Command) -> Res<(bool, u64)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let drain = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own unreaped child; std's Child is not waited on
    // after this (dropping it does not wait).
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if got != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()).into());
    }
    drain.join().map_err(|_| "stdout reader panicked")??;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    // ru_maxrss is in KiB on Linux.
    Ok((ok, usage.ru_maxrss as u64))
}

/// What a process pays that does none of the work: a child of this bench
/// that starts, loads `config` with its roster, connects, opens the
/// buckets, writes `bytes` into a pipe read as the binary's is, and ends.
/// Its wall time in ms, from the spawn to the reap.
fn run_process_floor(exe: &Path, config: &Path, bytes: u64) -> Res<f64> {
    let mut cmd = wrapped(exe, "process");
    cmd.args(["--child", "process"])
        .arg(config)
        .arg(bytes.to_string());
    Ok(timed_measured(&mut cmd, "the process floor's child")?.0)
}

/// The wall time of `cmd` run to its end with its output thrown away, in
/// milliseconds; an error when it fails.
fn timed_ok(cmd: &mut Command) -> Res<f64> {
    let t = Instant::now();
    let out = cmd.stdout(Stdio::null()).output()?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", out.status).into());
    }
    Ok(ms)
}

/// The nats-server's pid, for the children's CPU accounting.
static SERVER_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The median of `key` over `runs`.
fn median_of(runs: &[Value], key: &str) -> f64 {
    median(
        runs.iter()
            .map(|r| r[key].as_f64().unwrap_or(0.0))
            .collect(),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn parent(hives: usize, updates: usize, quick: bool) -> Res<()> {
    let nats = hyperhive_tests::NatsServer::start();
    if let Some(pid) = nats.pid() {
        let _ = SERVER_PID.set(pid);
    }
    let dir = tempfile::Builder::new().prefix("hhbench-").tempdir()?;
    let config = dir.path().join("controller.toml");
    let mut text = config_head(&nats.url());
    for i in 0..hives {
        text.push_str(&format!("[hives.{}]\n", hive_name(i)));
    }
    std::fs::write(&config, text)?;
    // The same roster as a fleet deploys it: nats-config needs each hive's
    // nkey, and labels place it; written as a TOML writer writes nested
    // maps (NixOS's `formats.toml`), the labels in a table of their own.
    let deployed = dir.path().join("controller-deployed.toml");
    std::fs::write(&deployed, deployed_roster(&nats.url(), hives))?;

    let client = async_nats::connect(nats.url()).await?;
    let js = async_nats::jetstream::new(client.clone());
    let settings = swarm_queue_client::BucketSettings::default();
    let status =
        swarm_queue_client::open_or_create(&js, swarm_queue_client::Bucket::Status, &settings)
            .await?;
    let wanted =
        swarm_queue_client::open_or_create(&js, swarm_queue_client::Bucket::Wanted, &settings)
            .await?;

    let gen_start = Instant::now();
    let declarations = (0..hives)
        .map(|i| {
            Ok((
                hive_name(i),
                encode_pretty(&Declaration::new(agents_for(i)))?,
            ))
        })
        .collect::<Res<Vec<_>>>()?;
    let declared: BTreeMap<String, u64> =
        put_all(&wanted, declarations).await?.into_iter().collect();
    let mut status_bytes = 0usize;
    let statuses = (0..hives)
        .map(|i| {
            let v = encode_pretty(&status_for(i, declared[&hive_name(i)], 0))?;
            status_bytes += v.len();
            Ok((hive_name(i), v))
        })
        .collect::<Res<Vec<_>>>()?;
    put_all(&status, statuses).await?;
    let gen_secs = gen_start.elapsed().as_secs_f64();
    if std::env::var_os("HH_BENCH_HOLD").is_some() {
        println!(
            "HOLD {} {} {}",
            config.display(),
            deployed.display(),
            nats.pid().unwrap_or(0)
        );
        std::io::copy(&mut std::io::stdin(), &mut std::io::sink())?;
        return Ok(());
    }

    let exe = std::env::current_exe()?;
    let baseline = run_child(&exe, "connect", &config, None)?;
    // The goal's measures are taken in rounds: each round runs the bare
    // watch, the decode floor, the library path and the binary once (and
    // the binary and the decode floor with the C library's allocator), in
    // an order that turns round by round, so that each ratio compares runs
    // made seconds apart. On this machine a floor measured once moved by
    // half between runs minutes apart, which a ratio of medians taken in
    // blocks carried whole.
    let bin = hyperhive_tests::process::controller_bin();
    let rounds = if quick { 3 } else { 11 };
    let (mut raws, mut decodes, mut runs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut bin_runs, mut bin_rss_kb) = (Vec::new(), 0);
    // The same binary and the decode floor with every block from the C
    // library (`HYPERHIVE_ALLOCATOR=system`, as before stop 39): what the
    // allocator changes, in the same rounds.
    let (mut system_bin_runs, mut system_decodes) = (Vec::new(), Vec::new());
    // What only a process pays, measured in each round beside the binary:
    // its start and exit with no work (`--version`), and those with the
    // config and its roster (`--check-config`).
    let (mut version_runs, mut check_runs) = (Vec::new(), Vec::new());
    // The deployed roster's `--check-config`, and the binary with it.
    let (mut deployed_checks, mut deployed_runs) = (Vec::new(), Vec::new());
    let mut deployed_rss_kb = 0;
    // And all a process pays without doing the work (`run_process_floor`),
    // writing as many bytes as the binary's document has, for each roster.
    let doc_bytes = |config: &Path| -> Res<u64> {
        let r = run_child(&exe, "status", config, None)?;
        r["json_bytes"]
            .as_u64()
            .ok_or_else(|| "the status child gave no json_bytes".into())
    };
    let (bare_bytes, deployed_bytes) = (doc_bytes(&config)?, doc_bytes(&deployed)?);
    let (mut process_runs, mut deployed_process_runs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        process_runs.push(run_process_floor(&exe, &config, bare_bytes)?);
        deployed_process_runs.push(run_process_floor(&exe, &deployed, deployed_bytes)?);
        version_runs.push(timed_ok(Command::new(&bin).arg("--version"))?);
        check_runs.push(timed_ok(
            Command::new(&bin).arg("--check-config").arg(&config),
        )?);
        deployed_checks.push(timed_ok(
            Command::new(&bin).arg("--check-config").arg(&deployed),
        )?);
        let (ms, max_rss_kb) = run_binary(&bin, &deployed, false)?;
        deployed_runs.push(ms);
        deployed_rss_kb = deployed_rss_kb.max(max_rss_kb);
        for step in 0..6 {
            match (round + step) % 6 {
                0 => raws.push(run_child(&exe, "raw-watch", &config, None)?),
                1 => decodes.push(run_child(&exe, "decode", &config, None)?),
                2 => runs.push(run_child(&exe, "status", &config, None)?),
                3 => {
                    let (ms, max_rss_kb) = run_binary(&bin, &config, false)?;
                    bin_runs.push(ms);
                    bin_rss_kb = bin_rss_kb.max(max_rss_kb);
                }
                4 => system_bin_runs.push(run_binary(&bin, &config, true)?.0),
                _ => system_decodes.push(run_child_with(
                    &exe,
                    "decode",
                    &config,
                    None,
                    Some(("HYPERHIVE_ALLOCATOR", "system")),
                )?),
            }
        }
    }
    let status_ms = median_of(&runs, "total_ms");
    let load_ms = median_of(&runs, "load_ms");
    let write_ms = median_of(&runs, "write_ms");
    let hwm_kb = runs
        .iter()
        .map(|r| r["vm_hwm_kb"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let base_kb = baseline["vm_hwm_kb"].as_u64().unwrap_or(0);
    let summary = runs[0]["summary"].as_str().unwrap_or("").to_string();
    let bin_ms = median(bin_runs.clone());
    let deployed_ms = median(deployed_runs.clone());
    let version_ms = median(version_runs);
    let check_ms = median(check_runs.clone());
    // Each round's goal, from that round's floors.
    let goals: Vec<f64> = raws
        .iter()
        .zip(&decodes)
        .map(|(r, d)| {
            1.5 * r["raw_ms"].as_f64().unwrap_or(0.0) + d["decode_ms"].as_f64().unwrap_or(0.0)
        })
        .collect();
    let library_ratios: Vec<f64> = runs
        .iter()
        .zip(&goals)
        .map(|(r, g)| r["total_ms"].as_f64().unwrap_or(0.0) / g.max(1e-9))
        .collect();
    let binary_ratios = over_goals(&bin_runs, &goals);
    let deployed_ratios = over_goals(&deployed_runs, &goals);
    // The binary against the goal with that round's `--check-config`
    // added: what the floors, measured inside one process, never pay.
    let process_ratios: Vec<f64> = bin_runs
        .iter()
        .zip(goals.iter().zip(&check_runs))
        .map(|(b, (g, c))| b / (g + c).max(1e-9))
        .collect();

    // The binary against the goal with all that a process pays without the
    // work added (start, config and roster, connection, the pipe, end).
    let plus =
        |floors: &[f64]| -> Vec<f64> { goals.iter().zip(floors).map(|(g, f)| g + f).collect() };
    let fixed_ratios = over_goals(&bin_runs, &plus(&process_runs));
    let deployed_fixed_ratios = over_goals(&deployed_runs, &plus(&deployed_process_runs));

    let dash = run_child(&exe, "dashboard", &config, Some(&updates.to_string()))?;

    println!();
    println!(
        "swarm-controller status benchmark ({})",
        if quick { "quick" } else { "full" }
    );
    println!("hives: {hives}, agents per hive: 3, status bytes total: {status_bytes} (mean {} B per hive), generated and put in {gen_secs:.2} s", status_bytes / hives.max(1));
    println!("fleet: {summary}");
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| status (library path), total, median of {rounds} rounds | {status_ms:.1} ms |");
    println!("| - read the buckets, decode and keep each value (KV watch with history) | {load_ms:.1} ms |");
    println!(
        "| - evaluate every row once and write the JSON document as it goes | {write_ms:.1} ms |"
    );
    println!("| `swarm-controller status --json` binary, wall, median of {rounds} rounds | {bin_ms:.1} ms |");
    println!("| - of which process start and exit, no work (`--version`), median of {rounds} rounds | {version_ms:.1} ms |");
    println!("| - of which process start and exit with the config and its roster (`--check-config`), median of {rounds} rounds | {check_ms:.1} ms |");
    println!(
        "| the roster as deployed (an nkey and two labels a hive, {} KB): `--check-config`; the binary; its peak memory | {:.1}; {:.1} ms; {:.1} MiB |",
        std::fs::metadata(&deployed)?.len() / 1000,
        median(deployed_checks),
        deployed_ms,
        deployed_rss_kb as f64 / 1024.0
    );
    println!(
        "| binary minus library path (medians); minus `--check-config` as well (the connection's set-up, the pipe) | {:.1}; {:.1} ms |",
        bin_ms - status_ms,
        bin_ms - status_ms - check_ms
    );
    println!(
        "| peak memory (max RSS) of the `status --json` binary | {:.1} MiB |",
        bin_rss_kb as f64 / 1024.0
    );
    let raw_ms = median_of(&raws, "raw_ms");
    let decode_ms = median_of(&decodes, "decode_ms");
    println!(
        "| floor: both buckets through a bare KV watch, no decode, median of {rounds} rounds | {raw_ms:.1} ms |"
    );
    println!(
        "| decode floor: the same values decoded into the contract's types, nothing else, median of {rounds} rounds | {decode_ms:.1} ms |"
    );
    let goal_ms = 1.5 * raw_ms + decode_ms;
    println!("| goal: 1.5 x the bare watch + the decode floor (medians) | {goal_ms:.1} ms |");
    println!(
        "| ratio of the medians: status (library path) / goal; binary / goal | {:.2}x; {:.2}x |",
        status_ms / goal_ms.max(1e-9),
        bin_ms / goal_ms.max(1e-9)
    );
    let process_ms = median(process_runs);
    let deployed_process_ms = median(deployed_process_runs);
    println!(
        "| process floor: a process that starts, loads the config and its roster, connects, opens the buckets, writes the document's {bare_bytes} bytes into a pipe and ends, and does nothing else; the same with the roster as deployed ({deployed_bytes} bytes), medians of {rounds} rounds | {process_ms:.1}; {deployed_process_ms:.1} ms |"
    );
    println!(
        "| ratio of the medians: binary / (goal + process floor); with the roster as deployed | {:.2}x; {:.2}x |",
        bin_ms / (goal_ms + process_ms).max(1e-9),
        deployed_ms / (goal_ms + deployed_process_ms).max(1e-9)
    );
    let system_bin_ms = median(system_bin_runs.clone());
    let system_decode_ms = median_of(&system_decodes, "decode_ms");
    let system_goal_ms = 1.5 * raw_ms + system_decode_ms;
    println!(
        "| with every block from the C library (`HYPERHIVE_ALLOCATOR=system`): binary; decode floor; goal with that floor, median of {rounds} rounds | {system_bin_ms:.1}; {system_decode_ms:.1}; {system_goal_ms:.1} ms |"
    );
    println!(
        "| - binary / goal, both with the C library's allocator; the binary with it / the binary as built | {:.2}x; {:.2}x |",
        system_bin_ms / system_goal_ms.max(1e-9),
        system_bin_ms / bin_ms.max(1e-9)
    );
    for (what, ratios) in [
        ("status (library path) / that round's goal", &library_ratios),
        ("binary / that round's goal", &binary_ratios),
        (
            "binary / (that round's goal + its `--check-config`)",
            &process_ratios,
        ),
        (
            "binary with the roster as deployed / that round's goal",
            &deployed_ratios,
        ),
        (
            "binary / (that round's goal + its process floor)",
            &fixed_ratios,
        ),
        (
            "binary with the roster as deployed / (that round's goal + its process floor with that roster)",
            &deployed_fixed_ratios,
        ),
    ] {
        println!(
            "| ratio round by round, {what}: median (lowest to highest); rounds at or under 1 | {:.2}x ({:.2}x to {:.2}x); {} of {rounds} |",
            median(ratios.clone()),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
            ratios.iter().filter(|r| **r <= 1.0).count()
        );
    }
    // Where the CPU went: on 2 cores a span's wall time is at least the
    // CPU used in it (the reader's and the server's) over the cores.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_row = |what: &str, wall: f64, own: f64, server: f64| {
        println!(
            "| CPU: {what}: reader; nats-server; their sum / {cores} cores, against the wall | {own:.1}; {server:.1}; {:.1} ms against {wall:.1} ms |",
            (own + server) / cores
        );
    };
    let spans: [(&str, f64, &[Value], &str); 4] = [
        ("status read", load_ms, &runs, "load"),
        ("status evaluate and write", write_ms, &runs, "write"),
        ("bare watch floor", raw_ms, &raws, "raw"),
        ("decode floor", decode_ms, &decodes, "decode"),
    ];
    for (what, wall, of, key) in spans {
        cpu_row(
            what,
            wall,
            median_of(of, &format!("{key}_cpu_ms")),
            median_of(of, &format!("{key}_server_cpu_ms")),
        );
    }
    println!(
        "| per hive: status (library path); binary | {:.1} us; {:.1} us |",
        status_ms * 1000.0 / hives as f64,
        bin_ms * 1000.0 / hives as f64
    );
    println!(
        "| peak memory (VmHWM) of status | {:.1} MiB |",
        hwm_kb as f64 / 1024.0
    );
    println!(
        "| peak memory of a child that only connects | {:.1} MiB |",
        base_kb as f64 / 1024.0
    );
    println!(
        "| status memory above that baseline | {:.1} MiB ({:.1} KiB per hive) |",
        (hwm_kb.saturating_sub(base_kb)) as f64 / 1024.0,
        (hwm_kb.saturating_sub(base_kb)) as f64 / hives as f64
    );
    let f = |k: &str| dash[k].as_f64().unwrap_or(0.0);
    println!(
        "| dashboard: serve start (full read) | {:.1} ms |",
        f("start_ms")
    );
    println!(
        "| dashboard: SSE snapshot of the first page (100 rows) | {:.0} KiB |",
        f("snapshot_bytes") / 1024.0
    );
    println!(
        "| baseline: the full `/api/status` document | {:.0} KiB |",
        f("full_bytes") / 1024.0
    );
    println!(
        "| update of a hive the page does not show: bytes sent to the page, mean ({updates} updates) | {:.1} B |",
        f("hidden_bytes_per_update")
    );
    println!(
        "| - events sent for them: rows / summaries (half of them moved a fleet count) | {:.0} / {:.0} |",
        f("hidden_rows"),
        f("hidden_summaries")
    );
    println!("| update: KV put -> SSE row event, p50 / p95 / max ({updates} updates) | {:.2} / {:.2} / {:.2} ms |", f("p50_ms"), f("p95_ms"), f("max_ms"));
    println!(
        "| update: values decoded per update | {:.2} |",
        f("decodes_per_update")
    );
    println!(
        "| update: bytes decoded per update | {:.0} B |",
        f("bytes_per_update")
    );
    println!(
        "| update: bytes pushed per update (SSE) | {:.0} B |",
        f("push_bytes_per_update")
    );
    println!("| baseline full re-read: time | {:.1} ms |", f("reread_ms"));
    println!(
        "| baseline full re-read: values decoded | {:.0} |",
        f("reread_decodes")
    );
    println!(
        "| baseline full re-read: bytes decoded | {:.0} B |",
        f("reread_bytes")
    );
    println!(
        "| ratio full re-read / one update: values decoded | {:.0}x |",
        f("reread_decodes") / f("decodes_per_update").max(1e-9)
    );
    println!(
        "| ratio full re-read / one update: bytes decoded | {:.0}x |",
        f("reread_bytes") / f("bytes_per_update").max(1e-9)
    );
    println!(
        "| ratio full re-read time / update p50 | {:.0}x |",
        f("reread_ms") / f("p50_ms").max(1e-9)
    );
    println!(
        "| ratio full `/api/status` / first-page snapshot | {:.0}x |",
        f("full_bytes") / f("snapshot_bytes").max(1e-9)
    );
    println!(
        "| peak memory (VmHWM) of serve: started, one page open, {} updates | {:.1} MiB |",
        updates * 2 + 1,
        f("serve_hwm_kb") / 1024.0
    );
    println!(
        "| - after one full `/api/status` | {:.1} MiB |",
        f("full_hwm_kb") / 1024.0
    );
    println!(
        "| - after the baseline re-read (a second fleet in the same process) | {:.1} MiB |",
        f("vm_hwm_kb") / 1024.0
    );
    println!();
    drop(client);
    Ok(())
}

// ---------------------------------------------------------------------------
// The children: one measured thing each.

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// CPU time this process has used, in ms (all its threads).
fn own_cpu_ms() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the kernel to fill in.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1000.0 + t.tv_nsec as f64 / 1e6
}

/// CPU time the nats-server (its pid in [`SERVER_PID_ENV`]) has used, in
/// ms: the sum of its threads' run time from `/proc/PID/task/*/schedstat`
/// (nanoseconds, unlike the 10 ms ticks of `stat`). 0 when not known.
fn server_cpu_ms() -> f64 {
    let Ok(pid) = std::env::var(SERVER_PID_ENV) else {
        return 0.0;
    };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e6
}

/// Where the children find the nats-server's pid.
const SERVER_PID_ENV: &str = "HH_BENCH_SERVER_PID";

/// CPU used over a measured span: this process's and the server's.
struct CpuSpan {
    own: f64,
    server: f64,
}

impl CpuSpan {
    fn start() -> CpuSpan {
        CpuSpan {
            own: own_cpu_ms(),
            server: server_cpu_ms(),
        }
    }

    /// `{ "<name>_cpu_ms": .., "<name>_server_cpu_ms": .. }` since start.
    fn fields(&self, name: &str, out: &mut serde_json::Map<String, Value>) {
        out.insert(format!("{name}_cpu_ms"), json!(own_cpu_ms() - self.own));
        out.insert(
            format!("{name}_server_cpu_ms"),
            json!(server_cpu_ms() - self.server),
        );
    }
}

/// The config with its roster, loaded; the connection; the buckets, opened.
async fn connected(
    config_path: &Path,
) -> Res<(
    Config,
    swarm_queue_client::Connection,
    swarm_controller::nats::Buckets,
)> {
    let config = Config::load(config_path, None)?;
    let conn = swarm_controller::nats::connect(&config.nats, Duration::from_secs(10)).await?;
    let buckets = swarm_controller::nats::open_buckets(&conn, &config.nats).await?;
    Ok((config, conn, buckets))
}

/// `n` bytes to standard output, through the pipe widened as the binary
/// widens it and a 64 KiB buffer, as the binary writes its document.
fn write_bytes(n: usize) -> Res<()> {
    use std::io::Write;
    swarm_controller::cli::widen_stdout_pipe();
    let chunk = [b' '; 1 << 16];
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        out.write_all(&chunk[..k])?;
        left -= k;
    }
    out.flush()?;
    Ok(())
}

async fn child(mode: &str, config_path: &Path, extra: Option<String>) -> Res<Value> {
    let (config, conn, buckets) = connected(config_path).await?;
    match mode {
        "connect" => Ok(json!({ "vm_hwm_kb": vm_hwm_kb() })),
        "raw-watch" => {
            let start = Instant::now();
            let cpu = CpuSpan::start();
            let mut entries = 0u64;
            for store in [&buckets.status, &buckets.wanted] {
                let mut watch = store.watch_with_history(">").await?;
                while let Some(entry) = watch.next().await {
                    entries += 1;
                    if entry?.delta == 0 {
                        break;
                    }
                }
            }
            let mut out = serde_json::Map::new();
            out.insert("raw_ms".into(), json!(ms(start.elapsed())));
            out.insert("entries".into(), json!(entries));
            cpu.fields("raw", &mut out);
            Ok(Value::Object(out))
        }
        "decode" => {
            // The same bytes, read first, then decoded into the contract's
            // types (and validated) with nothing else: the decode floor.
            let mut values: [Vec<Bytes>; 2] = [Vec::new(), Vec::new()];
            for (i, store) in [&buckets.status, &buckets.wanted].into_iter().enumerate() {
                let mut watch = store.watch_with_history(">").await?;
                while let Some(entry) = watch.next().await {
                    let entry = entry?;
                    values[i].push(entry.value);
                    if entry.delta == 0 {
                        break;
                    }
                }
            }
            let start = Instant::now();
            let cpu = CpuSpan::start();
            let mut failed = 0usize;
            for v in &values[0] {
                failed += usize::from(swarm_queue_client::decode::<HiveStatus>(v).is_err());
            }
            for v in &values[1] {
                failed += usize::from(swarm_queue_client::decode::<Declaration>(v).is_err());
            }
            if failed > 0 {
                return Err(format!("{failed} values did not decode").into());
            }
            let mut out = serde_json::Map::new();
            out.insert("decode_ms".into(), json!(ms(start.elapsed())));
            cpu.fields("decode", &mut out);
            Ok(Value::Object(out))
        }
        "status" => {
            // The work of `status --json`: read the values (no rows yet),
            // then evaluate each row once as it is written out.
            let start = Instant::now();
            let read_cpu = CpuSpan::start();
            let fleet = RwLock::new(Fleet::for_one_look(config));
            swarm_controller::nats::read_values(&buckets, &fleet).await?;
            let loaded = start.elapsed();
            let mut cpu = serde_json::Map::new();
            read_cpu.fields("load", &mut cpu);
            let write_cpu = CpuSpan::start();
            let t = Instant::now();
            let mut out = Counted::default();
            let summary = {
                let f = fleet.read().map_err(|_| "poisoned")?;
                // On one line, as the binary writes it into a pipe.
                swarm_controller::render::write_fleet(
                    &f,
                    OffsetDateTime::now_utc(),
                    None,
                    false,
                    &mut out,
                )?
            };
            let written = t.elapsed();
            write_cpu.fields("write", &mut cpu);
            let mut result = json!({
                "total_ms": ms(loaded + written),
                "load_ms": ms(loaded),
                "write_ms": ms(written),
                "json_bytes": out.0,
                "summary": summary.line,
                "vm_hwm_kb": vm_hwm_kb(),
            });
            if let Value::Object(o) = &mut result {
                o.extend(cpu);
            }
            Ok(result)
        }
        "dashboard" => {
            dashboard(
                &config,
                &conn,
                &buckets,
                extra.and_then(|e| e.parse().ok()).unwrap_or(20),
            )
            .await
        }
        other => Err(format!("unknown child mode {other}").into()),
    }
}

/// A writer that only counts: where the document goes in the library run
/// (the binary's run writes it to a pipe).
#[derive(Default)]
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn dashboard(
    config: &Config,
    conn: &swarm_queue_client::Connection,
    buckets: &swarm_controller::nats::Buckets,
    updates: usize,
) -> Res<Value> {
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let t = Instant::now();
    let server = swarm_controller::serve::start(
        config,
        conn.client.clone(),
        buckets,
        "127.0.0.1:0".parse()?,
        stop,
    )
    .await?;
    let start_ms = ms(t.elapsed());
    let base = format!("http://{}", server.addr);
    let mut sse = EventStream::open(
        &format!("{base}/api/events?sort=attention&limit=100"),
        Duration::from_secs(30),
    )
    .await;
    let (name, snapshot) = sse.next().await;
    if name != "snapshot" {
        return Err(format!("first event was {name}").into());
    }
    let snapshot_bytes = snapshot.len();
    let shown: Vec<String> = serde_json::from_str::<Value>(&snapshot)?["hives"]
        .as_array()
        .ok_or("a snapshot without hives")?
        .iter()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();

    let hives: Vec<String> = config.hives.keys().map(|h| h.to_string()).collect();
    let index = |name: &str| hives.iter().position(|h| h == name).unwrap_or(0);
    let stats = || {
        server
            .shared
            .fleet
            .read()
            .map(|f| f.stats())
            .unwrap_or_default()
    };
    let pushed = || {
        server
            .shared
            .push_stats
            .push_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = stats();
    let pushed_before = pushed();
    let mut latencies = Vec::new();
    for u in 0..updates {
        let name = &shown[(u * 7) % shown.len()];
        let i = index(name);
        let rev = buckets
            .wanted
            .entry(name.as_str())
            .await?
            .map(|e| e.revision)
            .unwrap_or(1);
        let value = Bytes::from(encode_pretty(&status_for(i, rev, u as u64 + 1))?);
        let marker = format!("\"name\":\"{name}\"");
        let t = Instant::now();
        buckets.status.put(name.as_str(), value).await?;
        loop {
            let (event, data) = sse.next().await;
            if event == "row" && data.contains(&marker) {
                break;
            }
        }
        latencies.push(ms(t.elapsed()));
    }
    let after = stats();
    let pushed_after = pushed();
    let n = updates.max(1) as f64;

    // Hives the page does not show: put each, then one shown hive as a
    // sentinel; whatever arrives before the sentinel's row is what the
    // hidden updates cost the page.
    let hidden: Vec<usize> = (0..hives.len())
        .filter(|i| !shown.contains(&hives[*i]))
        .step_by(7)
        .take(updates)
        .collect();
    // The first half keep their class; the second half turn `published`
    // (a fleet count moves: the page gets a summary, still no row).
    for (u, &i) in hidden.iter().enumerate() {
        let rev = buckets
            .wanted
            .entry(hives[i].as_str())
            .await?
            .map(|e| e.revision)
            .unwrap_or(1);
        let mut status = status_for(i, rev, 1000 + u as u64);
        if u >= hidden.len() / 2 {
            status.seen_revision = Some(rev.saturating_sub(1));
            status.converged_revision = Some(rev.saturating_sub(1));
        }
        let value = Bytes::from(encode_pretty(&status)?);
        buckets.status.put(hives[i].as_str(), value).await?;
    }
    let sentinel = &shown[0];
    let i = index(sentinel);
    let rev = buckets
        .wanted
        .entry(sentinel.as_str())
        .await?
        .map(|e| e.revision)
        .unwrap_or(1);
    buckets
        .status
        .put(
            sentinel.as_str(),
            Bytes::from(encode_pretty(&status_for(i, rev, 5000))?),
        )
        .await?;
    let marker = format!("\"name\":\"{sentinel}\"");
    let (mut hidden_bytes, mut hidden_rows, mut hidden_summaries) = (0usize, 0usize, 0usize);
    loop {
        let (event, data) = sse.next().await;
        if event == "row" && data.contains(&marker) {
            break;
        }
        hidden_bytes += data.len();
        hidden_rows += usize::from(event == "row");
        hidden_summaries += usize::from(event == "summary");
    }

    // What serve itself holds: started, one page open, the updates applied.
    let serve_hwm_kb = vm_hwm_kb();
    let full_bytes = reqwest::get(format!("{base}/api/status"))
        .await?
        .bytes()
        .await?
        .len();
    let full_hwm_kb = vm_hwm_kb();

    // Baseline in the same run: what one update would cost as a re-read.
    let t = Instant::now();
    let fresh = RwLock::new(Fleet::new(
        config.hives.clone(),
        config.stale_after,
        OffsetDateTime::now_utc(),
    ));
    swarm_controller::nats::load(buckets, &fresh).await?;
    let reread_ms = ms(t.elapsed());
    let reread = fresh.read().map(|f| f.stats()).unwrap_or_default();

    latencies.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    Ok(json!({
        "start_ms": start_ms,
        "snapshot_bytes": snapshot_bytes,
        "full_bytes": full_bytes,
        "hidden_bytes_per_update": hidden_bytes as f64 / hidden.len().max(1) as f64,
        "hidden_rows": hidden_rows,
        "hidden_summaries": hidden_summaries,
        "p50_ms": pct(0.5),
        "p95_ms": pct(0.95),
        "max_ms": latencies.last().copied().unwrap_or(0.0),
        "decodes_per_update": (after.values_decoded - before.values_decoded) as f64 / n,
        "bytes_per_update": (after.bytes_decoded - before.bytes_decoded) as f64 / n,
        "push_bytes_per_update": (pushed_after - pushed_before) as f64 / n,
        "reread_ms": reread_ms,
        "reread_decodes": reread.values_decoded,
        "reread_bytes": reread.bytes_decoded,
        "serve_hwm_kb": serve_hwm_kb,
        "full_hwm_kb": full_hwm_kb,
        "vm_hwm_kb": vm_hwm_kb(),
    }))
}
