//! `hive logs` against `docker logs` on the same container, in the same
//! run: an agent writes N MB of lines (`--quick`: 20 MB; else 200 MB) and
//! stops writing; then the whole log is read, three times each, by
//! `docker logs` (the baseline: the Docker CLI over dockerd's API), by
//! `hive logs` (the hive's socket, Docker's stream re-framed as lines) and
//! by `hive logs --json`, by curl on the hive's socket (the daemon's
//! answer without the CLI), and by `swarm-controller logs` over NATS (a
//! nats-server with the generated accounts, the hive and the controller
//! under their own nkeys; every frame acknowledged, docs/protocol.md
//! "Logs"). The output goes to /dev/null; the time is the
//! reader process's wall time, best of three. `--quick` runs the dev
//! build (the hive then spends most of its time in unoptimised serde).
//!
//! `cargo bench -p hyperhive-tests --bench logs [-- --quick] [-- --mb N]`

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyperhive_tests::hive::LocalHive;
use hyperhive_tests::identity::SecuredNats;
use hyperhive_tests::{controller_bin, hive_bin, unique_name, wait_until};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--mb N` picks the size.
    let chosen = args
        .iter()
        .position(|a| a == "--mb")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--mb takes a number of MB"));
    let mb: u64 = chosen.unwrap_or(if quick { 20 } else { 200 });
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
