//! `hive logs` against `docker logs` on the same container, in the same
//! run: an agent writes N MB of lines (`--quick`: 2 MB; else 200 MB) and
//! stops writing; then the whole log is read, three times each, by
//! `docker logs` (the baseline: the Docker CLI over dockerd's API), by
//! `hive logs` (the hive's socket, Docker's stream re-framed as lines) and
//! by `hive logs --json`, by curl on the hive's socket (the daemon's
//! answer without the CLI), and by `swarm-controller logs` over NATS (a
//! nats-server with the generated accounts, the hive and the controller
//! under their own nkeys; every frame acknowledged, docs/protocol.md
//! "Logs"). The output goes to /dev/null; the time is the
//! reader process's wall time, best of three. Then a talker agent: the
//! latency from a line printed to its showing, in `docker logs --follow`
//! (the floor), `hive logs --follow` and `swarm-controller logs --follow`.
//! `--quick` runs the dev build (the hive then spends most of its time in unoptimised serde).
//!
//! `cargo bench -p hyperhive-tests --bench logs [-- --quick] [-- --mb N]`

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyperhive_tests::hive::LocalHive;
use hyperhive_tests::identity::SecuredNats;
use hyperhive_tests::process::{marker_latencies, TALKER};
use hyperhive_tests::{controller_bin, hive_bin, unique_name, wait_until};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--mb N` picks the size.
    let chosen = args
        .iter()
        .position(|a| a == "--mb")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--mb takes a number of MB"));
    let mb: u64 = chosen.unwrap_or(if quick { 2 } else { 200 });
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench(mb));
}

/// Best of three runs of `program args`, its stdout thrown away.
fn best_of_three(program: &str, args: &[&str]) -> Duration {
    (0..3)
        .map(|_| {
            let at = Instant::now();
            let status = Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run the reader");
            assert!(status.success(), "{program} {args:?} failed");
            at.elapsed()
        })
        .min()
        .unwrap_or_default()
}

async fn bench(mb: u64) {
    let name = unique_name("bench-logs");
    let nats = SecuredNats::start_generated(&[&name]);
    let _ = nats.controller_with_buckets().await;
    let url = nats.server.url();
    let extra = format!(
        "container_log_max_mb = {}\ncontainer_log_files = 1\n{}",
        mb * 3,
        nats.hive(&name).nats_toml(&url)
    );
    let s = LocalHive::start_named(name.clone(), "bench-logs", &extra).await;
    let config = s.hive.state_dir.join("../controller.toml");
    let text = format!("{}[hives.{name}]\n", nats.controller.nats_toml(&url));
    std::fs::write(&config, text).expect("write the controller's config");
    let script = format!(
        "i=0; while [ $i -lt {mb} ]; do \
         busybox yes 'a log line of the agent, sixty-four bytes long, or about that' \
         | busybox head -c 1000000; i=$((i+1)); done; touch /state/done; exec sleep 3600"
    );
    let spec = json!({ "image": s.image.reference, "command": ["sh", "-c", script] });
    let job = s.api.deploy("writer", spec).await;
    s.api.done(job, Duration::from_secs(60)).await;
    let done = s.hive.state_dir.join("agents/writer/done");
    wait_until(Duration::from_secs(600), "the agent wrote its log", || {
        let done = done.clone();
        async move { done.exists().then_some(()) }
    })
    .await;
    let container = s.container("writer");
    let socket = s.hive.socket().await.display().to_string();
    let docker = best_of_three("docker", &["logs", &container]);
    let hive = hive_bin().display().to_string();
    let plain = best_of_three(&hive, &["--api", &socket, "logs", "writer"]);
    let json = best_of_three(&hive, &["--api", &socket, "--json", "logs", "writer"]);
    // The daemon alone: its answer read by curl, no `hive` CLI.
    let url = "http://localhost/api/v1/agents/writer/logs";
    let curl = best_of_three("curl", &["-sf", "--unix-socket", &socket, url]);
    let cfg = config.display().to_string();
    let ctl = controller_bin().display().to_string();
    let over_nats = best_of_three(&ctl, &["--config", &cfg, "logs", &name, "writer"]);
    let rate = |d: Duration| mb as f64 / d.as_secs_f64();
    println!("logs: one agent's {mb} MB of output, read whole, best of 3");
    println!("| reader | s | MB/s | vs docker logs |");
    println!("|---|---:|---:|---:|");
    for (name, d) in [
        ("docker logs (baseline)", docker),
        ("hive logs", plain),
        ("hive logs --json", json),
        ("the API's NDJSON, read by curl", curl),
        ("swarm-controller logs, over NATS", over_nats),
    ] {
        println!(
            "| {name} | {:.2} | {:.0} | {:.2}x |",
            d.as_secs_f64(),
            rate(d),
            d.as_secs_f64() / docker.as_secs_f64()
        );
    }
    follow_latency(&s, &hive, &socket, &ctl, &cfg, &name).await;
    let ratio = |d: Duration| d.as_secs_f64() / docker.as_secs_f64();
    println!(
        "FIGURES: logs mb={mb} docker_s={:.2} hive_s={:.2} hive_json_s={:.2} api_curl_s={:.2} \
         nats_s={:.2} ratio={:.2} ratio_json={:.2} ratio_nats={:.2}",
        docker.as_secs_f64(),
        plain.as_secs_f64(),
        json.as_secs_f64(),
        curl.as_secs_f64(),
        over_nats.as_secs_f64(),
        ratio(plain),
        ratio(json),
        ratio(over_nats)
    );
}

/// How many lines each follower is timed on.
const MARKERS: usize = 20;

/// A line the agent prints, until each follower shows it: `docker logs
/// --follow` on the container (the floor: Docker's own stream), `hive logs
/// --follow` on the socket and `swarm-controller logs --follow` over NATS,
/// [`MARKERS`] lines each, one follower at a time.
async fn follow_latency(s: &LocalHive, hive: &str, socket: &str, ctl: &str, cfg: &str, name: &str) {
    let job = s
        .api
        .deploy(
            "talker",
            json!({
                "image": s.image.reference, "command": ["sh", "-c", TALKER]
            }),
        )
        .await;
    s.api.done(job, Duration::from_secs(60)).await;
    let container = s.container("talker");
    let dir = s.hive.state_dir.join("agents/talker");
    let followers: [(&str, &str, Vec<&str>); 3] = [
        (
            "docker logs --follow (floor)",
            "docker",
            vec!["logs", "--follow", &container],
        ),
        (
            "hive logs --follow",
            hive,
            vec!["--api", socket, "logs", "talker", "--follow"],
        ),
        (
            "swarm-controller logs --follow, over NATS",
            ctl,
            vec!["--config", cfg, "logs", name, "talker", "--follow"],
        ),
    ];
    println!();
    println!("follow: a printed line until the follower shows it, {MARKERS} lines each");
    println!("| follower | median ms | worst ms | within 1 s | median vs floor |");
    println!("|---|---:|---:|---:|---:|");
    let mut figures = Vec::new();
    let mut floor = Duration::ZERO;
    for (label, program, args) in followers {
        let mut child = tokio::process::Command::new(program)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the follower");
        let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        // Each starts from the whole log, earlier followers' markers in it:
        // read up to a line of its own first.
        let sync = unique_name("sync");
        std::fs::write(dir.join("say"), format!("{sync}\n")).expect("drop the sync line");
        let seen = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == sync {
                    return true;
                }
            }
            false
        });
        assert!(
            seen.await.unwrap_or(false),
            "{label}: the sync line never came"
        );
        wait_until(
            Duration::from_secs(30),
            "the talker took the sync line",
            || {
                let say = dir.join("say");
                async move { (!say.exists()).then_some(()) }
            },
        )
        .await;
        let mut took = marker_latencies(&mut lines, &dir, MARKERS, Duration::from_secs(30)).await;
        let _ = child.kill().await;
        took.sort();
        let median = took[took.len() / 2];
        let worst = took[took.len() - 1];
        let within = took
            .iter()
            .filter(|d| **d <= Duration::from_secs(1))
            .count();
        if floor.is_zero() {
            floor = median;
        }
        println!(
            "| {label} | {} | {} | {within}/{MARKERS} | {:.2}x |",
            median.as_millis(),
            worst.as_millis(),
            median.as_secs_f64() / floor.as_secs_f64()
        );
        figures.push((median, worst, within));
    }
    let [(d_med, d_worst, _), (h_med, h_worst, h_in), (n_med, n_worst, n_in)] = figures[..] else {
        unreachable!("three followers")
    };
    println!(
        "FIGURES: follow markers={MARKERS} docker_median_ms={} docker_worst_ms={} \
         hive_median_ms={} hive_worst_ms={} hive_within_1s={h_in} \
         nats_median_ms={} nats_worst_ms={} nats_within_1s={n_in}",
        d_med.as_millis(),
        d_worst.as_millis(),
        h_med.as_millis(),
        h_worst.as_millis(),
        n_med.as_millis(),
        n_worst.as_millis()
    );
}
