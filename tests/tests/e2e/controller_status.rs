//! `swarm-controller status` over a real nats-server: every freshness state
//! (with real `hive` processes where a hive can produce it), every
//! convergence state, `--watch`, and the config checks.

use std::time::Duration;

use crate::controller_support::*;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use swarm_queue_client::{AgentStatus, HiveState, Observed};

#[tokio::test]
async fn freshness_of_real_hives_fresh_stale_stopped_unknown_unrostered() {
    let env = Env::new(&["alpha", "beta", "ghost"], "stale_after_secs = 2").await;
    let url = env.nats.url();
    let mut alpha = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        nats_url: Some(&url),
        ..Default::default()
    });
    let mut beta = HiveProc::start(HiveSpec {
        name: Some("beta"),
        nats_url: Some(&url),
        ..Default::default()
    });
    let _stray = HiveProc::start(HiveSpec {
        name: Some("stray"),
        nats_url: Some(&url),
        ..Default::default()
    });

    let row = env
        .wait_row("alpha", "alpha fresh", |r| r["freshness"] == "fresh")
        .await;
    println!("alpha running: {row}");
    assert!(row["age_secs"].as_u64().unwrap() <= 2, "{row}");
    let stray = env
        .wait_row("stray", "stray shown", |r| r["freshness"] == "unrostered")
        .await;
    assert_eq!(stray["rostered"], false);
    let ghost = env.row("ghost").await;
    assert_eq!(ghost["freshness"], "unknown", "{ghost}");
    assert!(ghost["age_secs"].is_null());
    assert!(ghost["freshness_reason"]
        .as_str()
        .unwrap()
        .contains("never reported"));

    // A clean shutdown publishes `stopped`, shown at once.
    env.wait_row("beta", "beta fresh", |r| r["freshness"] == "fresh")
        .await;
    assert_eq!(beta.daemon.terminate(), Some(0));
    let row = env
        .wait_row("beta", "beta stopped", |r| r["freshness"] == "stopped")
        .await;
    assert!(row["freshness_reason"]
        .as_str()
        .unwrap()
        .contains("shut down cleanly"));

    // A killed hive says nothing more; it turns stale after stale_after.
    alpha.daemon.kill();
    let row = env
        .wait_row("alpha", "alpha stale", |r| r["freshness"] == "stale")
        .await;
    println!("alpha killed: {row}");
    assert!(row["age_secs"].as_u64().unwrap() >= 2, "{row}");
    assert!(row["freshness_reason"]
        .as_str()
        .unwrap()
        .contains("over stale_after"));

    let report = env.status().await;
    println!("summary: {}", report["summary"]["line"]);
    assert_eq!(report["summary"]["freshness"]["unrostered"], 1);
    assert_eq!(report["summary"]["hives"], 4);
}

#[tokio::test]
async fn age_is_the_kv_entry_timestamp_and_bad_values_are_shown() {
    let env = Env::new(&["alpha", "gamma", "delta", "omega"], "").await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let entry = env.status.entry("alpha").await.unwrap().unwrap();
    let row = env.row("alpha").await;
    let entry_ms = (entry.created.unix_timestamp_nanos() / 1_000_000) as i64;
    assert_eq!(row["status_time_ms"].as_i64(), Some(entry_ms), "{row}");
    assert_eq!(row["status_revision"], entry.revision);
    assert_eq!(row["freshness"], "fresh");

    // Not JSON at all: shown with its decode error, never fresh.
    env.put_raw_status("gamma", b"{this is not json").await;
    let row = env.row("gamma").await;
    println!("undecodable: {row}");
    assert_eq!(row["freshness"], "unknown");
    assert_eq!(row["convergence"], "unknown");
    assert!(
        row["freshness_reason"]
            .as_str()
            .unwrap()
            .contains("does not decode"),
        "{row}"
    );
    assert!(
        row["problems"][0]
            .as_str()
            .unwrap()
            .contains("hive status is not valid"),
        "{row}"
    );

    // A valid status under another hive's key is no evidence about it.
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let alpha_bytes = env.status.get("alpha").await.unwrap().unwrap();
    env.put_raw_status("delta", &alpha_bytes).await;
    let row = env.row("delta").await;
    assert_eq!(row["freshness"], "unknown");
    assert!(
        row["freshness_reason"]
            .as_str()
            .unwrap()
            .contains("says it is hive \"alpha\""),
        "{row}"
    );

    // A deleted key is "never reported", not a crash and not fresh.
    env.put_status(&hive_status("omega", HiveState::Ok, None, None, vec![]))
        .await;
    assert_eq!(env.row("omega").await["freshness"], "fresh");
    env.status.delete("omega").await.unwrap();
    assert_eq!(env.row("omega").await["freshness"], "unknown");

    // A key that is not even a hive name is shown too.
    env.put_raw_status("Not_A_Name", b"{}").await;
    let row = env.row("Not_A_Name").await;
    assert_eq!(row["freshness"], "unrostered");

    // The table shows the same, with the summary line at the end.
    let table = env.run(&["status"]).await;
    assert_eq!(table.code, 0);
    println!("{}", table.stdout);
    assert!(table.stdout.starts_with("HIVE"));
    assert!(table.stdout.contains("gamma") && table.stdout.contains("does not decode"));
    assert!(table
        .stdout
        .trim_end()
        .lines()
        .last()
        .unwrap()
        .starts_with("5 hives: "));
}

/// Check alpha's convergence and that its reason says `reason`.
async fn expect_convergence(env: &Env, want: &str, reason: &str) -> serde_json::Value {
    let row = env.row("alpha").await;
    assert_eq!(row["convergence"], want, "{row}");
    assert!(
        row["reason"].as_str().unwrap().contains(reason),
        "{want}: reason {:?} lacks {reason:?}",
        row["reason"]
    );
    println!("{want:>11}: {}", row["reason"]);
    row
}

#[tokio::test]
async fn every_convergence_state_from_a_real_declaration() {
    // Long enough that a slow machine reads each state before it is stale.
    let env = Env::new(&["alpha", "beta"], "stale_after_secs = 5").await;
    let swarm = env.write(
        "swarm.toml",
        "[hives.alpha.agents.bot]\nimage = \"local/bot:1\"\nenv = { LOG = \"info\" }\n",
    );
    let r = env.run(&["declare", swarm.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let declared = env.wanted.entry("alpha").await.unwrap().unwrap().revision;
    let mut spec = image_spec("local/bot:1");
    spec.env.insert("LOG".into(), "info".into());

    expect_convergence(&env, "unknown", "no status").await;
    let d = Some(declared);
    let running = |job| agent_status(&spec, Observed::Running, job);
    let failed_job = ("failed", Some("image local/bot:1 not found"));
    // (hive state, seen, converged, agents reported) -> (convergence, reason)
    type Step<'a> = (
        HiveState,
        Option<u64>,
        Option<u64>,
        Vec<(&'a str, AgentStatus)>,
        &'a str,
        &'a str,
    );
    let steps: Vec<Step> = vec![
        (
            HiveState::Ok,
            None,
            None,
            vec![],
            "published",
            "not read any declaration",
        ),
        (
            HiveState::Ok,
            d,
            None,
            vec![(
                "bot",
                agent_status(&spec, Observed::Missing, Some(("running", None))),
            )],
            "progressing",
            "job 42 (first_deploy) running",
        ),
        (
            HiveState::Degraded,
            d,
            None,
            vec![(
                "bot",
                agent_status(&spec, Observed::Missing, Some(failed_job)),
            )],
            "failed",
            "image local/bot:1 not found",
        ),
        (
            HiveState::Ok,
            d,
            d,
            vec![("bot", running(Some(("done", None))))],
            "converged",
            "1 agent as declared",
        ),
        // Converged, but reporting nothing about a declared agent is no evidence.
        (
            HiveState::Ok,
            d,
            d,
            vec![],
            "unknown",
            "reports nothing about bot",
        ),
        (
            HiveState::Ok,
            d,
            d,
            vec![("bot", agent_status(&spec, Observed::Stopped, None))],
            "degraded",
            "bot stopped (wanted up)",
        ),
        // The spec hash is checked: without the declared env it is another spec.
        (
            HiveState::Ok,
            d,
            d,
            vec![(
                "bot",
                agent_status(&image_spec("local/bot:1"), Observed::Running, None),
            )],
            "degraded",
            "runs spec",
        ),
        (
            HiveState::Ok,
            d,
            d,
            vec![("bot", running(None))],
            "converged",
            "as declared",
        ),
    ];
    for (state, seen, converged, agents, want, reason) in steps {
        env.put_status(&hive_status("alpha", state, seen, converged, agents))
            .await;
        let row = expect_convergence(&env, want, reason).await;
        if want == "converged" {
            assert_eq!(row["agents"][0]["spec_matches"], true, "{row}");
        }
    }

    // Converged, then silent: stale is no evidence.
    env.wait_row("alpha", "alpha stale", |r| r["freshness"] == "stale")
        .await;
    expect_convergence(&env, "unknown", "stale").await;

    // A newer declaration is `published` until the hive reads it.
    let swarm2 = env.write(
        "swarm2.toml",
        "[hives.alpha.agents.bot]\nimage = \"local/bot:2\"\n",
    );
    assert_eq!(
        env.run(&["declare", swarm2.to_str().unwrap()]).await.code,
        0
    );
    env.put_status(&hive_status(
        "alpha",
        HiveState::Ok,
        Some(declared),
        Some(declared),
        vec![("bot", agent_status(&spec, Observed::Running, None))],
    ))
    .await;
    expect_convergence(
        &env,
        "published",
        &format!("only up to revision {declared}"),
    )
    .await;

    // beta reports but nothing is declared for it.
    env.put_status(&hive_status("beta", HiveState::Ok, None, None, vec![]))
        .await;
    let beta = env.row("beta").await;
    assert_eq!(beta["convergence"], "unknown");
    assert!(beta["reason"]
        .as_str()
        .unwrap()
        .contains("nothing is declared"));

    // An undecodable declaration is shown with its error.
    env.wanted
        .put("beta", bytes::Bytes::from_static(b"{\"schema\":1}"))
        .await
        .unwrap();
    let beta = env.row("beta").await;
    assert_eq!(beta["convergence"], "unknown");
    assert!(
        beta["reason"]
            .as_str()
            .unwrap()
            .contains("missing field `agents`"),
        "{beta}"
    );
}

async fn next_doc(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> serde_json::Value {
    let line = tokio::time::timeout(T, lines.next_line())
        .await
        .expect("a status line in time")
        .unwrap()
        .expect("the watch is still running");
    serde_json::from_str(&line).unwrap()
}

#[tokio::test]
async fn status_watch_prints_on_every_change_and_when_a_hive_turns_stale() {
    let env = Env::new(&["alpha"], "stale_after_secs = 2").await;
    let (mut child, mut lines) = hyperhive_tests::process::status_watch(&env.config);
    let first = next_doc(&mut lines).await;
    assert_eq!(hive_row(&first, "alpha").unwrap()["freshness"], "unknown");

    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let doc = next_doc(&mut lines).await;
    assert_eq!(
        hive_row(&doc, "alpha").unwrap()["freshness"],
        "fresh",
        "{doc}"
    );

    // No KV update from here on: the watch still prints when alpha turns stale.
    let doc = next_doc(&mut lines).await;
    let row = hive_row(&doc, "alpha").unwrap();
    assert_eq!(row["freshness"], "stale", "{doc}");
    assert!(row["age_secs"].as_u64().unwrap() >= 2);
    child.kill().await.unwrap();
}

/// `status` into a reader that has gone (`status --json | head -c 300`, a
/// `--watch` piped into a tool that quit) ends quietly with 0: no error, no
/// panic. The pipe's reading end is closed before the command starts, so
/// its first write fails every time.
#[tokio::test]
async fn a_reader_that_left_ends_each_verb_quietly() {
    let env = Env::new(&["alpha"], "").await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let r = run_controller(
        Some(&env.config),
        &["maintenance", "on", "alpha", "--reason", "disk swap"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    for args in [
        &["status", "--json"][..],
        &["status"],
        &["status", "--watch", "--json"],
        &["status", "--watch"],
        // Verbs that printed with Rust's `print!`, which panicked on a
        // reader gone ("failed printing to stdout: Broken pipe", exit 101).
        &["roster"],
        &["roster", "--json"],
        &["maintenance", "list"],
        &["maintenance", "list", "--json"],
    ] {
        let r = run_controller_unread(&env.config, args).await;
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(r.stderr.is_empty(), "{args:?} wrote: {}", r.stderr);
    }
    // A verb that acts still acts: the hold ends with nobody reading.
    let r = run_controller_unread(&env.config, &["maintenance", "off", "alpha"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let r = run_controller(Some(&env.config), &["maintenance", "list", "--json"]).await;
    let holds: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(holds["holds"], serde_json::json!([]), "{r:?}");
    // Any other failed write is said, in the same words by every verb,
    // and is no success: the output is not whole.
    for args in [
        &["roster"][..],
        &["status", "--json"],
        &["status"],
        &["status", "--watch", "--json"],
        &["maintenance", "list", "--json"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = tokio::process::Command::new(hyperhive_tests::controller_bin())
            .arg("--config")
            .arg(&env.config)
            .args(args)
            .stdout(full)
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
            .wait_with_output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write to standard output: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test]
async fn check_config_and_bad_input_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "stale_after_secs = 30\n[nats]\nurl = \"nats://127.0.0.1:1\"\n[hives.alpha]\n",
    )
    .unwrap();
    let r = run_controller(None, &["--check-config", good.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("ok (1 rostered hive)"), "{r:?}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "stale_after_secs = 0\nhttp_listen = \"nowhere\"\n[nats]\nurl = \"nats://127.0.0.1:1\"\n\
         [hives.Alpha]\n[hives.beta]\nlabel = {}\n",
    )
    .unwrap();
    let r = run_controller(None, &["--check-config", bad.to_str().unwrap()]).await;
    assert_eq!(r.code, 64, "{r:?}");
    println!("{}", r.stderr);
    for needle in [
        "stale_after_secs",
        "\"nowhere\"",
        "invalid hive name \"Alpha\"",
        "unknown field `label`",
    ] {
        assert!(
            r.stderr.contains(needle),
            "{needle} missing from:\n{}",
            r.stderr
        );
    }
    let r = run_controller(
        None,
        &[
            "--check-config",
            dir.path().join("missing.toml").to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("missing.toml"));

    // An invalid config refuses every verb with 64, and says why (not
    // that NATS, which `status` began to read while it read the config,
    // does not answer).
    let r = run_controller(Some(&bad), &["status"]).await;
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.stderr.contains("invalid hive name \"Alpha\""), "{r:?}");
    assert!(!r.stderr.contains("did not answer"), "{r:?}");

    // Usage errors: 2.
    assert_eq!(run_controller(None, &["status"]).await.code, 2);
    assert_eq!(run_controller(Some(&good), &["frobnicate"]).await.code, 2);
    let r = run_controller(Some(&good), &["deploy", "Bad.Hive", "bot"]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("invalid hive name \"Bad.Hive\""), "{r:?}");
    let r = run_controller(None, &["--help"]).await;
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("Exit codes"));

    // NATS unreachable: a runtime failure (1) that says so, not a hang.
    let start = std::time::Instant::now();
    let r = run_controller(Some(&good), &["status"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("did not answer"), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
}

/// A roster of over 1 MiB is read by two threads, each taking the pieces of
/// one half; when no thread can be had (its user at the process limit),
/// the second half is read on the calling thread. `--check-config` runs as a
/// user of its own whose `RLIMIT_NPROC` is 1 (`setpriv` and `prlimit`, from
/// util-linux), and must answer as it does without the limit: the same
/// count of hives, and each bad table named by its line in the whole file
/// whichever half it is in. A shell under the same limit shows that the
/// limit stops a fork there.
#[tokio::test]
async fn a_large_roster_is_read_when_no_thread_can_be_had() {
    use std::os::unix::fs::PermissionsExt;

    // A user no process of this machine runs as: the limit counts them all.
    const UID: &str = "2147000123";
    let under_limit = |program: &std::path::Path| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid", UID, "--regid", UID, "--clear-groups"])
            .args(["prlimit", "--nproc=1", "--"])
            .arg(program);
        cmd
    };
    let fork_check = "true & wait $! && echo forked";
    let sh = std::path::Path::new("/bin/sh");
    let free = std::process::Command::new(sh)
        .args(["-c", fork_check])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "forked");
    let limited = under_limit(sh).args(["-c", fork_check]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&limited.stdout).contains("forked"),
        "the limit did not stop a fork: {limited:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nkey = nkeys::KeyPair::new_user().public_key();
    let mut text = String::from("[nats]\nurl = \"nats://127.0.0.1:1\"\n");
    let mut hives = 0;
    while text.len() < 3 << 19 {
        text.push_str(&format!(
            "[hives.h{hives:05}]\nnkey = \"{nkey}\"\n[hives.h{hives:05}.labels]\nsite = \"s{}\"\n",
            hives % 7
        ));
        hives += 1;
    }
    let (early, late) = (format!("h{:05}", 3), format!("h{:05}", hives - 3));
    let mut bad = text.clone();
    for name in [&early, &late] {
        bad = bad.replacen(
            &format!("[hives.{name}]\nnkey = \"{nkey}\""),
            &format!("[hives.{name}]\nnkey = \"Unot-a-key\""),
            1,
        );
    }
    let line_of = |name: &str| {
        let header = format!("[hives.{name}]");
        1 + bad[..bad.find(&header).unwrap()].matches('\n').count()
    };
    let (good_file, bad_file) = (dir.path().join("good.toml"), dir.path().join("bad.toml"));
    for (file, text) in [(&good_file, &text), (&bad_file, &bad)] {
        std::fs::write(file, text).unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    // A copy the other user can run, wherever the build put the binary.
    let bin = dir.path().join("swarm-controller");
    std::fs::copy(hyperhive_tests::process::controller_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let check = |file: &std::path::Path, limit: bool| {
        let mut cmd = if limit {
            under_limit(&bin)
        } else {
            std::process::Command::new(&bin)
        };
        let out = cmd.arg("--check-config").arg(file).output().unwrap();
        let said = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), said(&out.stdout), said(&out.stderr))
    };
    let good = check(&good_file, true);
    assert_eq!(good.0, Some(0), "{good:?}");
    assert!(
        good.1.contains(&format!("ok ({hives} rostered hives)")),
        "{good:?}"
    );
    assert_eq!(good, check(&good_file, false));
    let refused = check(&bad_file, true);
    assert_eq!(refused.0, Some(64), "{refused:?}");
    for name in [&early, &late] {
        let want = format!("line {}: hives.{name}.nkey", line_of(name));
        assert!(refused.2.contains(&want), "{want}: {refused:?}");
    }
    assert_eq!(refused, check(&bad_file, false));
}

/// A one-look `status` starts reading the buckets while it reads its
/// config (`nats::read_values_before_layout`): the read cannot end before
/// the fleet it reads into is laid out, even once the server has delivered
/// every value; what it decoded meanwhile is stored when the fleet comes,
/// and the fleet is then the one a read into a laid-out fleet gives, byte
/// for byte. Without a fleet it fails, saying so.
#[tokio::test]
async fn a_read_begun_before_the_fleet_is_laid_out_waits_for_it_and_loses_nothing() {
    use std::sync::{Arc, RwLock};
    use swarm_controller::fleet::Fleet;
    use swarm_controller::nats::{read_values, read_values_before_layout, NatsError};

    // What the read holds until the fleet comes: a fleet of no hive.
    let not_laid_out = || Fleet::new(Default::default(), T, time::OffsetDateTime::now_utc());
    let env = Env::new(&["alpha", "beta", "ghost"], "stale_after_secs = 3600").await;
    for hive in ["alpha", "beta", "stray"] {
        env.put_status(&hive_status(hive, HiveState::Ok, None, None, vec![]))
            .await;
    }
    env.put_raw_status("beta", b"{not json").await;
    let declaration =
        swarm_queue_client::Declaration::new([(agent("web"), image_spec("local/web:1"))].into());
    env.wanted
        .put(
            "alpha",
            swarm_queue_client::encode_pretty(&declaration)
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    let config = swarm_controller::config::Config::load(&env.config, None).unwrap();
    let conn = swarm_controller::nats::connect(&config.nats, T)
        .await
        .unwrap();
    let buckets = Arc::new(
        swarm_controller::nats::open_buckets(&conn, &config.nats)
            .await
            .unwrap(),
    );

    let (layout, laid_out) = tokio::sync::oneshot::channel();
    let early = tokio::spawn({
        let buckets = buckets.clone();
        async move {
            let fleet = RwLock::new(not_laid_out());
            let read = read_values_before_layout(&buckets, &fleet, laid_out).await;
            (read.map(|_| ()), fleet.into_inner().unwrap())
        }
    });
    // The server has sent the status and wanted buckets' every value to
    // the read's watches.
    let js = async_nats::jetstream::new(env.client.clone());
    for bucket in [
        swarm_queue_client::buckets::STATUS_BUCKET,
        swarm_queue_client::buckets::WANTED_BUCKET,
    ] {
        hyperhive_tests::wait_until(T, "every value delivered", || async {
            let mut stream = js.get_stream(format!("KV_{bucket}")).await.ok()?;
            let last = stream.info().await.ok()?.state.last_sequence;
            let mut consumers = stream.consumers();
            while let Some(info) = futures_util::StreamExt::next(&mut consumers).await {
                let info = info.ok()?;
                if info.delivered.stream_sequence >= last && info.num_pending == 0 {
                    return Some(());
                }
            }
            None
        })
        .await;
    }
    assert!(!early.is_finished(), "the read ended without its fleet");
    layout
        .send(Fleet::for_one_look(config.clone()))
        .ok()
        .unwrap();
    let (read, early) = tokio::time::timeout(T, early).await.unwrap().unwrap();
    read.unwrap();

    let laid_out_first = RwLock::new(Fleet::for_one_look(config.clone()));
    read_values(&buckets, &laid_out_first).await.unwrap();
    let laid_out_first = laid_out_first.into_inner().unwrap();
    let now = time::OffsetDateTime::now_utc();
    let document = |fleet: &Fleet| {
        let mut out = Vec::new();
        swarm_controller::render::write_fleet(fleet, now, None, false, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let (early_doc, first_doc) = (document(&early), document(&laid_out_first));
    println!("{early_doc}");
    assert_eq!(early_doc, first_doc);
    let report: serde_json::Value = serde_json::from_str(&early_doc).unwrap();
    assert_eq!(report["summary"]["hives"], 4, "{report}");
    assert_eq!(
        hive_row(&report, "stray").unwrap()["freshness"],
        "unrostered"
    );
    assert_eq!(hive_row(&report, "beta").unwrap()["freshness"], "unknown");
    assert!(
        hive_row(&report, "alpha").unwrap()["declared_revision"].is_u64(),
        "{report}"
    );

    // The fleet never comes (its config failed): the read fails.
    let (layout, laid_out) = tokio::sync::oneshot::channel::<Fleet>();
    drop(layout);
    let fleet = RwLock::new(not_laid_out());
    let err = read_values_before_layout(&buckets, &fleet, laid_out)
        .await
        .err()
        .expect("a read without a fleet fails");
    assert!(matches!(err, NatsError::NotLaidOut), "{err}");
}

/// `status` reads the buckets while its config is read only when the
/// config's `[nats]` tables can be told apart (debug log says which way it
/// went); a config with a multi-line string is read first, and both ways
/// print the same document. A config that fails is reported as before
/// (exit 64, its problem named), whatever the read begun for it met.
#[tokio::test]
async fn status_reads_early_only_from_a_config_whose_nats_tables_stand_apart() {
    let env = Env::new(&["alpha", "beta"], "stale_after_secs = 3600").await;
    for hive in ["alpha", "stray"] {
        env.put_status(&hive_status(hive, HiveState::Ok, None, None, vec![]))
            .await;
    }
    let text = std::fs::read_to_string(&env.config).unwrap();
    let quoted = env.write(
        "quoted.toml",
        &format!("knowledge_repo = \"\"\"org/knowledge\"\"\"\n{text}"),
    );
    let run = |config: std::path::PathBuf| async move {
        let out = tokio::process::Command::new(hyperhive_tests::controller_bin())
            .arg("--config")
            .arg(&config)
            .args(["status", "--json"])
            .env_remove("HYPERHIVE_NATS_URL")
            .env("RUST_LOG", "swarm_controller=debug")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let mut doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // What moves between two runs: the ages.
        for row in doc["hives"].as_array_mut().unwrap() {
            row.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.contains("age"));
        }
        (doc, stderr)
    };
    const EARLY: &str = "reading the buckets while the config is read";
    let (early, early_log) = run(env.config.clone()).await;
    assert!(early_log.contains(EARLY), "{early_log}");
    let (first, first_log) = run(quoted).await;
    assert!(!first_log.contains(EARLY), "{first_log}");
    assert_eq!(early["hives"], first["hives"]);
    assert_eq!(early["summary"], first["summary"]);
    assert_eq!(early["summary"]["hives"], 3, "{early}");

    // A bad roster with the server up: the config's problem, nothing read.
    let bad = env.write("bad.toml", &format!("{text}\n[hives.Bad]\n"));
    let r = run_controller(Some(&bad), &["status", "--json"]).await;
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.stderr.contains("invalid hive name \"Bad\""), "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
}

/// A config that fails its checks changes nothing on the server, though a
/// one-look `status` starts reading while it checks: the read opens the
/// buckets that are there and makes a missing one only once the config
/// has passed. On a server with no bucket, a roster whose last table is
/// bad (20,000 hives before it, so that the check ends well after the
/// connection is up) is exit 64 and leaves no stream; the same roster
/// without that table makes the buckets and reads them.
#[tokio::test]
async fn a_config_that_fails_makes_no_bucket_though_the_read_began() {
    use futures_util::StreamExt;
    let nats = hyperhive_tests::NatsServer::start();
    let dir = tempfile::Builder::new()
        .prefix("hhtest-controller-")
        .tempdir()
        .unwrap();
    let mut good = format!("[nats]\nurl = {:?}\n", nats.url());
    for i in 0..20_000 {
        good.push_str(&format!("[hives.h{i:05}]\n"));
    }
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, format!("{good}[hives.Bad]\n")).unwrap();
    let r = run_controller(Some(&bad), &["status", "--json"]).await;
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.stderr.contains("invalid hive name \"Bad\""), "{r:?}");
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let streams = |js: async_nats::jetstream::Context| async move {
        let names: Vec<String> = js.stream_names().map(|n| n.unwrap()).collect().await;
        names
    };
    assert_eq!(streams(js.clone()).await, Vec::<String>::new());

    let good_path = dir.path().join("good.toml");
    std::fs::write(&good_path, good).unwrap();
    let r = run_controller(Some(&good_path), &["status", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["summary"]["hives"], 20_000);
    let made = streams(js).await;
    assert!(
        made.contains(&"KV_hyperhive-status".to_string()),
        "{made:?}"
    );
    assert_eq!(made.len(), 6, "{made:?}");
}
