//! Agents' logs over NATS (issue 22, point 1): a real nats-server started
//! with the accounts `swarm-controller nats-config` renders, a real `hive`
//! under its own nkey on the real dockerd, and `swarm-controller logs`
//! under the controller's.
//!
//! - `logs --follow` shows each line the agent prints (the latency
//!   printed; the logs bench measures it against `docker logs --follow`), and
//!   the hive lets the stream go within seconds of the reader leaving;
//!   `--previous` shows the crashed run's last line;
//! - a reader that acknowledges slowly holds the hive to one window of
//!   frames (counted, each frame's size checked) while the agent writes
//!   60 MB, and the hive's RSS stays flat; one that stops acknowledging is
//!   let go;
//! - nats-py (a client this project did not write) under the controller's
//!   nkey reads the log by the documented protocol; under another hive's
//!   nkey, or the hive's own, it gets no frame and the server refuses its
//!   publish; a container of the agent's name that the hive did not make
//!   is refused, its output never sent.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hyperhive_tests::identity::Violation;
use hyperhive_tests::process::{say_line, say_markers, TALKER};
use hyperhive_tests::secured::SecuredHive;
use hyperhive_tests::{unique_name, wait_until};
use serde_json::{json, Value};
use swarm_queue_client::payload::{LogFrame, LogsRequest, LOG_WINDOW, MAX_LOG_FRAME_BYTES};
use swarm_queue_client::subjects::{fresh_deploy_answer, logs_ack_subject, HiveSubjects};
use swarm_queue_client::{encode, AgentName, HiveName, LogsAck};
use tokio::io::{AsyncBufReadExt, BufReader};

const T: Duration = Duration::from_secs(60);
/// How long a printed line may take to reach `--follow` before it counts
/// as lost. Not the latency claim: the test prints the latency it saw, and
/// `cargo bench --bench logs` measures it against `docker logs --follow`.
const FOLLOW_WITHIN: Duration = Duration::from_secs(10);

/// A secured hive, and `swarm-controller logs` against it.
struct Setup(SecuredHive);

impl std::ops::Deref for Setup {
    type Target = SecuredHive;
    fn deref(&self) -> &SecuredHive {
        &self.0
    }
}

impl Setup {
    async fn start(test: &str, extra: &str) -> Setup {
        Setup(SecuredHive::start(test, extra, "").await)
    }

    /// `swarm-controller logs <hive> <args>`, to spawn.
    fn controller_for(&self, hive: &str, args: &[&str]) -> tokio::process::Command {
        let mut all = vec!["logs", hive];
        all.extend(args);
        self.0.controller(&all)
    }

    /// `swarm-controller logs HIVE <args>`: (exit code, stdout, stderr).
    async fn logs(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["logs", self.name.as_str()];
        all.extend(args);
        self.0.run(&all).await
    }

    /// `swarm-controller logs HIVE <args>`, to spawn.
    fn follow(&self, args: &[&str]) -> tokio::process::Command {
        self.controller_for(&self.name, args)
    }

    fn hive_name(&self) -> HiveName {
        HiveName::new(&self.name).unwrap()
    }

    /// How many streams the hive's log says it ended so far.
    fn ended(&self, how: &str) -> usize {
        let log = self.local.hive.daemon.log();
        log.lines()
            .filter(|l| l.contains("log stream ended") && l.contains(how))
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_over_nats_shows_each_printed_line_and_previous_the_crash() {
    let _alone = crate::alone().await;
    let s = Setup::start("lognats-follow", "").await;
    s.deploy("talker", TALKER).await;
    let mut child = s
        .follow(&["talker", "--follow"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("swarm-controller logs --follow");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(T, lines.next_line()).await;
    assert_eq!(first.unwrap().unwrap().as_deref(), Some("ready"));
    let worst = say_markers(
        &mut lines,
        &s.local.hive.state_dir.join("agents/talker"),
        FOLLOW_WITHIN,
    )
    .await;
    // The reader goes away (`logs --follow | head -5`): the follow ends at
    // the next line, quietly and with success (it printed into nothing
    // for ever before), and says no goodbye: the hive lets go of the
    // stream within seconds.
    let gone = s.ended("reader gone");
    drop(lines);
    say_line(
        &s.local.hive.state_dir.join("agents/talker"),
        "after the reader left",
    );
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .expect("logs --follow still runs with its reader gone")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let left = Instant::now();
    wait_until(T, "the hive to end the stream of a reader gone", || async {
        (s.ended("reader gone") > gone).then_some(())
    })
    .await;
    println!(
        "FIGURES logs_nats_follow_line_ms_worst_of_5={} reader_gone_let_go_ms={}",
        worst.as_millis(),
        left.elapsed().as_millis()
    );
    let (code, out, err) = s.logs(&["talker", "--tail", "2", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows[0]["line"].as_str().unwrap().starts_with("marker 4"));
    assert_eq!(rows[1]["line"], "after the reader left", "{out}");
    let (code, _, err) = s.logs(&["nobody"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("agent nobody has no container"), "{err}");

    let script = "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; \
                  echo \"run $n starting\"; \
                  if [ $n -eq 1 ]; then sleep 0.2; echo 'run 1 last words' >&2; sleep 1; exit 3; fi; \
                  exec sleep 3600";
    s.deploy("crasher", script).await;
    wait_until(T, "run 2 started", || async {
        let (_, out, _) = s.logs(&["crasher"]).await;
        out.contains("run 2 starting").then_some(())
    })
    .await;
    let (code, out, err) = s.logs(&["crasher", "--previous"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "run 1 starting", "stdout of run 1 only: {out}");
    assert_eq!(err.trim(), "run 1 last words", "its last line, on stderr");
}

/// The hive's resident memory, from `/proc`.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_holds_the_hive_to_one_window_and_a_silent_one_is_let_go() {
    let _alone = crate::alone().await;
    let s = Setup::start(
        "lognats-slow",
        "container_log_max_mb = 200\ncontainer_log_files = 1",
    )
    .await;
    s.deploy(
        "firehose",
        "i=0; while :; do busybox yes 0123456789abcdef0123456789abcdef | busybox head -c 1000000; \
         i=$((i+1)); echo $i > /state/mb; done",
    )
    .await;
    let pid = s.local.hive.daemon.pid().expect("the hive runs");
    let rss_before = rss_kib(pid);
    // The controller's own identity, by hand: this test decides when to ack.
    let ctl = s.s.controller_conn().await;
    let hive = s.hive_name();
    let reply = fresh_deploy_answer(&ctl.client, &hive);
    let token = reply.rsplit('.').next().unwrap().to_string();
    let mut frames = ctl.client.subscribe(reply.clone()).await.unwrap();
    let mut request = LogsRequest::new(AgentName::new("firehose").unwrap());
    request.follow = true;
    request.tail = Some(0);
    ctl.client
        .publish_with_reply(
            HiveSubjects::new(&hive).logs_request,
            reply,
            encode(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let mb = s.local.hive.state_dir.join("agents/firehose/mb");
    let count = || {
        std::fs::read_to_string(&mb)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let start = count();
    let (mut received, mut acked, mut largest) = (0u64, 0u64, 0usize);
    let acks = logs_ack_subject(&hive, &token);
    // Everything received acknowledged once a second, while the agent
    // writes 60 MB: at most a window a second.
    let mut wrote = 0;
    while wrote < 60 {
        // (A read while the agent rewrites the file gives 0.)
        wrote = wrote.max(count().saturating_sub(start));
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        while let Ok(Some(msg)) = tokio::time::timeout_at(until, frames.next()).await {
            let frame = LogFrame::decode(&msg.payload).unwrap();
            assert!(!frame.end, "the stream ended: {frame:?}");
            received += 1;
            assert_eq!(frame.seq, received, "frames in order, none lost");
            largest = largest.max(msg.payload.len());
            assert!(
                received <= acked + LOG_WINDOW,
                "frame {received} with only {acked} acknowledged"
            );
        }
        if acked < received {
            acked = received;
            let ack = LogsAck { seq: acked }.encode();
            ctl.client.publish(acks.clone(), ack.into()).await.unwrap();
        }
    }
    assert_eq!(
        s.ended("reader gone"),
        0,
        "a reader acking each second is kept"
    );
    let rss_after = rss_kib(pid);
    println!(
        "FIGURES logs_nats_slow_reader frames={received} acked={acked} largest_frame_bytes={largest} \
         rss_before_kib={rss_before} rss_after_kib={rss_after} agent_wrote_mb={}",
        wrote
    );
    assert!(largest <= MAX_LOG_FRAME_BYTES, "{largest}");
    assert!(received >= LOG_WINDOW, "the window was used: {received}");
    assert!(
        rss_after < rss_before + 16 * 1024,
        "the hive grew from {rss_before} to {rss_after} KiB behind a slow reader"
    );
    // Silence: the hive ends the stream, and sends nothing more.
    let silent = Instant::now();
    wait_until(T, "the hive to let a silent reader go", || async {
        (s.ended("reader gone") > 0).then_some(())
    })
    .await;
    let let_go_ms = silent.elapsed().as_millis();
    let mut more = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), frames.next()).await {
        more += 1;
    }
    println!("FIGURES logs_nats_silent_reader_let_go_ms={let_go_ms} frames_after={more}");
    assert!(
        received + more <= acked + LOG_WINDOW,
        "{received} + {more} frames with {acked} acknowledged"
    );
}

/// `logs_probe.py` (nats-py) as `seed`, with `inbox` its reply prefix.
fn probe(s: &Setup, seed: &std::path::Path, inbox: &str, agent: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/logs_probe.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg("--nkey")
        .arg(seed)
        .args(["--inbox-prefix", inbox, "--wait", "3"])
        .args([&s.s.server.url(), &s.name, agent])
        .output()
        .expect("python3 with nats-py and nkeys");
    assert!(
        out.status.success(),
        "logs_probe.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_controller_may_ask_and_a_hive_answers_for_its_own_agents_only() {
    let _alone = crate::alone().await;
    let s = Setup::start("lognats-who", "").await;
    let marker = unique_name("said");
    s.deploy("talker", &format!("echo {marker}; exec sleep 3600"))
        .await;
    let ctl = probe(
        &s,
        &s.s.controller.seed_file,
        "_INBOX_swarm-controller",
        "talker",
    );
    assert_eq!(ctl["end"], true, "{ctl}");
    assert_eq!(ctl["error"], Value::Null, "{ctl}");
    assert_eq!(ctl["lines"], json!([marker]), "{ctl}");
    assert_eq!(ctl["refusals"], json!([]), "{ctl}");
    let request = HiveSubjects::new(&s.hive_name()).logs_request;
    let answers = format!("hyperhive.hive.{}.answer.", s.name);
    for (who, inbox) in [
        ("beta", "_INBOX_hive-beta".to_string()),
        (s.name.as_str(), format!("_INBOX_hive-{}", s.name)),
    ] {
        let id = s.s.hive(who);
        let got = probe(&s, &id.seed_file, &inbox, "talker");
        assert_eq!(got["frames"], 0, "{who}: {got}");
        assert!(!got.to_string().contains(&marker), "{who}: {got}");
        s.s.violation(Violation::Publish, &id.public, &request)
            .await;
        s.s.violation_where(
            Violation::Subscribe,
            &id.public,
            "the hive's answers",
            |subject| subject.starts_with(&answers),
        )
        .await;
    }
    // Beta is on the roster but not connected: offline, said at once.
    let asked = Instant::now();
    let out = s
        .controller_for("beta", &["talker"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("hive beta is offline"), "{err}");
    println!(
        "FIGURES logs_nats_offline_hive_answered_ms={}",
        asked.elapsed().as_millis()
    );
    // A container with the agent's name that this hive did not make.
    let secret = unique_name("not-yours");
    let name = s.local.container("intruder");
    hyperhive_tests::docker::docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--label",
        "hhtest=1",
        &s.local.image.reference,
        "sh",
        "-c",
        &format!("echo {secret}; exec sleep 3600"),
    ]);
    let _gone = RemoveOnDrop(name.clone());
    let (code, out, err) = s.logs(&["intruder"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        !out.contains(&secret) && !err.contains(&secret),
        "{out}{err}"
    );
    assert!(
        err.contains(&name),
        "the refusal names the container: {err}"
    );
}

/// `docker rm -f` of a container the test made by hand.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = hyperhive_tests::docker_cli::run(&["rm", "-f", &self.0]);
    }
}
