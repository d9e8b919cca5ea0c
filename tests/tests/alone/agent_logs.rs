//! `hive logs` over a real hive process and the real dockerd (issue 22,
//! point 1 on the hive's socket): a line the agent prints reaches
//! `--follow` (its latency printed; the logs bench holds it to `docker
//! logs --follow`); `--previous` shows the crashed run's last
//! line, and after a rebuild what the hive kept of the removed container;
//! a reader that stops reading does not grow the hive's memory, and a
//! reader that goes away releases the hive's Docker stream within seconds.

use std::time::{Duration, Instant};

use hyperhive_tests::hive::LocalHive as Setup;
use hyperhive_tests::process::{say_line, say_markers, TALKER};
use hyperhive_tests::{hive_bin, wait_until};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const T: Duration = Duration::from_secs(60);
/// How long a printed line may take to reach `--follow` before it counts
/// as lost. Not the latency claim: the test prints the latency it saw, and
/// `cargo bench --bench logs` measures it against `docker logs --follow`.
const FOLLOW_WITHIN: Duration = Duration::from_secs(10);

async fn setup(test: &str, extra: &str) -> Setup {
    Setup::start(test, extra).await
}

/// Deploy `agent` running `sh -c script`, until its job is done.
async fn deploy(s: &Setup, agent: &str, script: &str) {
    let spec = json!({ "image": s.image.reference, "command": ["sh", "-c", script] });
    let job = s.api.deploy(agent, spec).await;
    s.api.done(job, T).await;
}

/// `hive logs <args>`: (exit code, stdout, stderr).
async fn logs(s: &Setup, args: &[&str]) -> (i32, String, String) {
    let socket = s.hive.socket().await.display().to_string();
    let out = tokio::process::Command::new(hive_bin())
        .args(["--api", &socket, "logs"])
        .args(args)
        .output()
        .await
        .expect("run hive logs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_shows_each_printed_line_as_it_comes() {
    let _alone = crate::alone().await;
    let s = setup("logs-follow", "").await;
    // The agent prints what the test drops into its state dir.
    deploy(&s, "talker", TALKER).await;
    let socket = s.hive.socket().await.display().to_string();
    let mut child = tokio::process::Command::new(hive_bin())
        .args(["--api", &socket, "logs", "talker", "--follow"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("hive logs --follow");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(T, lines.next_line()).await;
    assert_eq!(first.unwrap().unwrap().as_deref(), Some("ready"));
    let worst = say_markers(
        &mut lines,
        &s.hive.state_dir.join("agents/talker"),
        FOLLOW_WITHIN,
    )
    .await;
    println!(
        "FIGURES logs_follow_line_ms_worst_of_5={}",
        worst.as_millis()
    );
    // The reader goes away (`hive logs --follow | head -5`): the follow
    // ends at the next line the agent prints, quietly and with success.
    // It printed into nothing for ever before.
    drop(lines);
    say_line(
        &s.hive.state_dir.join("agents/talker"),
        "after the reader left",
    );
    let code = tokio::time::timeout(T, child.wait())
        .await
        .expect("hive logs --follow still runs with its reader gone")
        .unwrap();
    assert_eq!(code.code(), Some(0));
    // `--tail` and `--json` on the same log.
    let (code, out, err) = logs(&s, &["talker", "--tail", "2", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows[0]["line"].as_str().unwrap().starts_with("marker 4"),
        "{out}"
    );
    assert_eq!(rows[1]["line"], "after the reader left", "{out}");
    assert_eq!(rows[1]["source"], "stdout");
    // No such agent: named, exit 1.
    let (code, _, err) = logs(&s, &["nobody"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("agent nobody has no container"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_shows_the_crashed_run_and_then_the_replaced_container() {
    let _alone = crate::alone().await;
    let s = setup("logs-prev", "").await;
    let script = "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; \
                  echo \"run $n starting\"; \
                  if [ $n -eq 1 ]; then sleep 0.2; echo 'run 1 last words' >&2; sleep 1; exit 3; fi; \
                  exec sleep 3600";
    deploy(&s, "crasher", script).await;
    // (Stdout and stderr are two pipes: lines on both within a moment may
    // reach Docker in either order, hence the agent's pause.) The first exit
    // is restarted at once: wait for run 2.
    wait_until(T, "run 2 started", || async {
        let (_, out, _) = logs(&s, &["crasher"]).await;
        out.contains("run 2 starting").then_some(())
    })
    .await;
    let (code, out, err) = logs(&s, &["crasher", "--previous"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "run 1 starting", "stdout of run 1 only: {out}");
    assert_eq!(err.trim(), "run 1 last words", "its last line, on stderr");

    // A new spec replaces the container: the removed one's lines are kept.
    let spec = json!({
        "image": s.image.reference,
        "command": ["sh", "-c", "echo fresh container; exec sleep 3600"],
    });
    let job = s.api.deploy("crasher", spec).await;
    s.api.done(job, T).await;
    let (code, out, err) = logs(&s, &["crasher", "--previous", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let kept: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["line"].to_string())
        .collect();
    assert_eq!(
        kept,
        [
            "\"run 1 starting\"",
            "\"run 1 last words\"",
            "\"run 2 starting\""
        ],
        "{out}"
    );
    let kept_file = s.hive.state_dir.join("previous-logs/crasher.ndjson");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&kept_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let (_, out, _) = logs(&s, &["crasher"]).await;
    assert_eq!(out.trim(), "fresh container");
}

/// The hive's resident memory, from `/proc`.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_costs_the_hive_no_memory_and_one_that_leaves_is_let_go() {
    let _alone = crate::alone().await;
    let s = setup(
        "logs-slow",
        "container_log_max_mb = 200\ncontainer_log_files = 1",
    )
    .await;
    deploy(
        &s,
        "firehose",
        "i=0; while :; do busybox yes 0123456789abcdef0123456789abcdef | busybox head -c 1000000; \
         i=$((i+1)); echo $i > /state/mb; done",
    )
    .await;
    let pid = s.hive.daemon.pid().expect("the hive runs");
    let fds_before = open_fds(pid);
    let rss_before = rss_kib(pid);
    // A follow that reads the answer's head, then nothing.
    let mut reader = open_follow(&s, "firehose").await;
    let mut head = [0u8; 12];
    reader.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let mb = s.hive.state_dir.join("agents/firehose/mb");
    let count = || {
        std::fs::read_to_string(&mb)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let start = count();
    wait_until(
        T,
        "the agent wrote 60 MB more while the reader stood still",
        || async { (count() >= start + 60).then_some(()) },
    )
    .await;
    let rss_after = rss_kib(pid);
    println!(
        "FIGURES logs_stalled_reader rss_before_kib={rss_before} rss_after_kib={rss_after} \
         agent_wrote_mb={}",
        count().saturating_sub(start)
    );
    assert!(
        rss_after < rss_before + 16 * 1024,
        "the hive grew from {rss_before} to {rss_after} KiB behind a reader that reads nothing"
    );
    // The reader goes away: the hive drops the Docker stream behind it.
    assert_eq!(ended(&s, "firehose"), 0, "the follow is open");
    drop(reader);
    let ms = released_ms(&s, "firehose", fds_before).await;
    println!("FIGURES logs_reader_gone_released_ms={ms}");
}

/// A `--follow` request of `agent`'s log on the hive's socket, written by
/// hand so that the test decides what of the answer it reads.
async fn open_follow(s: &Setup, agent: &str) -> tokio::net::UnixStream {
    let socket = s.hive.socket().await;
    let mut reader = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let request =
        format!("GET /api/v1/agents/{agent}/logs?follow=true HTTP/1.1\r\nHost: localhost\r\n\r\n");
    reader.write_all(request.as_bytes()).await.unwrap();
    reader
}

/// How many of `agent`'s log streams on the socket the hive says ended.
fn ended(s: &Setup, agent: &str) -> usize {
    let log = s.hive.daemon.log();
    log.lines()
        .filter(|l| l.contains("log stream ended") && l.contains(&format!("agent={agent} ")))
        .count()
}

/// Milliseconds until the hive says `agent`'s follow ended and holds no
/// more descriptors than `before` (its Docker stream let go).
async fn released_ms(s: &Setup, agent: &str, before: usize) -> u128 {
    let pid = s.hive.daemon.pid().expect("the hive runs");
    let gone = Instant::now();
    wait_until(
        T,
        "the hive to end the follow and its descriptors back to what they were",
        || async { (ended(s, agent) == 1 && open_fds(pid) <= before).then_some(()) },
    )
    .await;
    gone.elapsed().as_millis()
}

/// A quiet agent: a `--follow` reader that leaves is noticed without the
/// agent's next line (the server sees the socket close; the keep-alive
/// every 2 s is there for a close it does not see).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_of_a_quiet_agent_is_let_go_within_seconds_of_its_reader_leaving() {
    let _alone = crate::alone().await;
    let s = setup("logs-quiet", "").await;
    deploy(&s, "quiet", "echo one line; exec sleep 3600").await;
    let pid = s.hive.daemon.pid().expect("the hive runs");
    let fds_before = open_fds(pid);
    let mut reader = open_follow(&s, "quiet").await;
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("one line") {
        let mut buf = [0u8; 512];
        let n = reader.read(&mut buf).await.unwrap();
        assert!(n > 0, "the answer ended: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(ended(&s, "quiet"), 0, "the follow is open");
    drop(reader);
    let ms = released_ms(&s, "quiet", fds_before).await;
    println!("FIGURES logs_quiet_reader_gone_released_ms={ms}");
    assert!(ms < 10_000, "let go after {ms} ms");
}
