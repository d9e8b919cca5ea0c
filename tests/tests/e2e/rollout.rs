//! Groups and staged rollouts over six real hives, one nats-server and the
//! machine's dockerd (one tiny busybox image shared by all hives):
//!
//! - a group declaration reaches the hives it selects and no other, `declare
//!   --dry-run` names each agent's source, `roster` each hive's groups;
//! - a group change rolls out in three waves, each written only after the one
//!   before converged, every hive written once;
//! - a bad image halts after the first wave with the other hives untouched,
//!   `status` shows the halt; `abort` restores the previous container; after
//!   the fix, `resume` completes the rollout;
//! - a controller SIGKILLed mid-wave leaves the rollout to others: two
//!   controllers race a `resume`, exactly one advances it, and no hive's
//!   declaration is written twice (KV history per key);
//! - a version whose agent exits 20 s after it starts halts the rollout in
//!   its first wave, at the shipped `min_converged_secs`, naming the hive,
//!   the agent and the exit code; the other hives are never written;
//! - a hive put in maintenance shows `maintenance` (not `stale`) once it
//!   stops publishing, needing no attention; a rollout skips it (`skipped`,
//!   never failed) and completes the rest; `rollout resume` writes it after
//!   `maintenance off`, and another after its 3 s hold expired by itself.

use crate::controller_support::six::{version, Six, T, WAVES};
use crate::controller_support::{run_controller_unread, Run};
use hyperhive_tests::docker::{docker, ImageGuard};
use hyperhive_tests::kv::container;
use hyperhive_tests::{unique_name, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_reaches_only_its_hives_and_a_change_rolls_out_in_three_waves() {
    // Hives 0..4 are web, hive 5 is db.
    let six = Six::start("ro-groups", |i| i < 5).await;
    let names = six.swarm.names.clone();
    let image = six.swarm.image.reference.clone();
    let v1 = six.file("v1.toml", &image, "1", WAVES);

    let r = six.run(&["declare", &v1, "--dry-run"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    println!("declare --dry-run:\n{}", r.stdout);
    assert!(
        r.stdout.contains(&format!(
            "{}: agents from\n    a: group web (line 4)",
            names[0]
        )),
        "{r:?}"
    );
    assert!(!r.stdout.contains(&format!("{}:", names[5])), "{r:?}");
    let r = six.run(&["roster", "--swarm-file", &v1]).await;
    assert_eq!(r.code, 0, "{r:?}");
    println!("roster:\n{}", r.stdout);
    let line = |n: &str| {
        r.stdout
            .lines()
            .find(|l| l.starts_with(n))
            .unwrap()
            .to_string()
    };
    assert!(line(&names[0]).ends_with("groups: web"), "{}", r.stdout);
    assert!(!line(&names[5]).contains("\tgroups:"), "{}", r.stdout);

    six.declare_converged(&v1, &[0, 1, 2, 3, 4]).await;
    for n in &names[..5] {
        assert_eq!(version(n), "1", "{n}");
    }
    assert_eq!(
        six.wanted_revision(&names[5]).await,
        None,
        "db is not selected"
    );
    assert!(container(&names[5], "a").is_none());

    // The change, in waves of 1, 2 and 2 hives.
    let v2 = six.file("v2.toml", &image, "2", WAVES);
    let r = six.run(&["declare", &v2, "--rollout"]).await;
    println!("declare --rollout:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    for k in 1..=3 {
        assert!(
            r.stdout
                .contains(&format!("wave {k} of 3: every hive converged")),
            "{r:?}"
        );
    }
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "completed", "{state:#}");
    let waves: Vec<Vec<String>> = serde_json::from_value(state["waves"].clone()).unwrap();
    assert_eq!(
        waves.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![1, 2, 2]
    );
    // Each wave was written after the one before: its revisions are higher.
    let mut last = 0;
    for wave in &waves {
        let revs: Vec<u64> = wave
            .iter()
            .map(|h| state["hives"][h]["written_revision"].as_u64().unwrap())
            .collect();
        assert!(revs.iter().all(|r| *r > last), "{waves:?} {state:#}");
        last = *revs.iter().max().unwrap();
    }
    for n in &names[..5] {
        assert_eq!(version(n), "2", "{n}");
        assert_eq!(six.writes(n).await, 2, "{n}: v1 and v2, each written once");
    }
    assert_eq!(six.wanted_revision(&names[5]).await, None);

    // `declare --rollout | head -1` once `head` quit: the plan is printed
    // before the first wave, and a reader gone stops nothing; the waves
    // go out as before and the exit code is the rollout's.
    let v3 = six.file("v3.toml", &image, "3", WAVES);
    let r =
        run_controller_unread(&six.swarm.controller_config, &["declare", &v3, "--rollout"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(six.rollout().await["outcome"], "completed");
    for n in &names[..5] {
        assert_eq!(version(n), "3", "{n}");
        assert_eq!(
            six.writes(n).await,
            3,
            "{n}: v1, v2 and v3, each written once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_image_halts_after_wave_one_abort_restores_and_resume_completes() {
    let six = Six::start("ro-halt", |_| true).await;
    let names = six.swarm.names.clone();
    let image = six.swarm.image.reference.clone();
    let all: Vec<usize> = (0..6).collect();
    six.declare_converged(&six.file("v1.toml", &image, "1", WAVES), &all)
        .await;
    let before: Vec<Option<u64>> = {
        let mut v = Vec::new();
        for n in &names {
            v.push(six.wanted_revision(n).await);
        }
        v
    };
    // Nothing listens on port 1: the pull is refused at once.
    let bad = format!("127.0.0.1:1/{}:1", unique_name("hhtest-missing"));
    let v2 = six.file("v2.toml", &bad, "2", WAVES);

    let r = six.run(&["declare", &v2, "--rollout"]).await;
    println!("declare --rollout (bad image):\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 1, "{r:?}");
    let state = six.rollout().await;
    let first = state["waves"][0][0].as_str().unwrap().to_string();
    assert_eq!(state["outcome"], "halted", "{state:#}");
    assert_eq!(state["hive"], first.as_str(), "{state:#}");
    assert!(
        r.stdout
            .contains(&format!("rollout halted: hive {first} failed")),
        "{r:?}"
    );
    for (n, rev) in names.iter().zip(&before) {
        if *n != first {
            assert_eq!(&six.wanted_revision(n).await, rev, "{n} is untouched");
            assert_eq!(version(n), "1", "{n}");
        }
    }
    // `status` shows the halt and its reason.
    let s = six.run(&["status"]).await;
    println!("status:\n{}", s.stdout);
    assert!(
        s.stdout.contains("halted at wave 1 of 3") && s.stdout.contains(&first),
        "{s:?}"
    );
    let s = six.run(&["status", "--json"]).await;
    assert_eq!(s.json()["rollout"]["outcome"], "halted", "{s:?}");
    // And the dashboard's API (the page shows its `line`).
    let (_serve, url) = crate::controller_support::serve_with(
        &six.swarm.controller_config,
        &six.dir.path().join("serve.log"),
    )
    .await;
    let api = get_json(&format!("{url}/api/rollout")).await;
    assert_eq!(api["outcome"], "halted", "{api:#}");
    assert_eq!(api["counts"]["failed"], 1, "{api:#}");
    assert!(
        api["line"]
            .as_str()
            .unwrap()
            .contains("halted at wave 1 of 3"),
        "{api:#}"
    );
    let page = reqwest::get(&url).await.unwrap().text().await.unwrap();
    assert!(page.contains("id=\"rollout\"") && page.contains("api/rollout"));
    // And the controller's /metrics: the outcome and the steps, counted.
    let metrics = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "hyperhive_controller_rollout{outcome=\"halted\"} 1",
        "hyperhive_controller_rollout_wave 1",
        "hyperhive_controller_rollout_hives{step=\"failed\"} 1",
        "hyperhive_controller_rollout_hives{step=\"waiting\"} 5",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }

    // Abort: the written hive gets its previous declaration again.
    let r = six.run(&["rollout", "abort"]).await;
    println!("rollout abort:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!("{first}: declared revision")),
        "{r:?}"
    );
    let restored = six.wanted_revision(&first).await.unwrap();
    six.kv.converged(&first, restored, T).await;
    assert_eq!(version(&first), "1");
    assert_eq!(six.rollout().await["outcome"], "aborted");

    // Again, then fix the cause (the image is there now) and resume.
    let r = six.run(&["declare", &v2, "--rollout"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "halted", "{state:#}");
    docker(&["tag", &image, &bad]);
    let _bad_tag = ImageGuard {
        reference: bad.clone(),
    };
    let r = six.run(&["rollout", "resume"]).await;
    println!("rollout resume:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("wave 3 of 3: every hive converged"),
        "{r:?}"
    );
    assert_eq!(six.rollout().await["outcome"], "completed");
    for n in &names {
        assert_eq!(version(n), "2", "{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_controller_is_resumed_by_exactly_one_of_two_without_writing_twice() {
    let six = Six::start("ro-kill", |_| true).await;
    let names = six.swarm.names.clone();
    let image = six.swarm.image.reference.clone();
    let all: Vec<usize> = (0..6).collect();
    six.declare_converged(&six.file("v1.toml", &image, "1", WAVES), &all)
        .await;
    let v2 = six.file(
        "v2.toml",
        &image,
        "2",
        "[rollout]\nwaves = [\"1\", \"50%\", \"100%\"]\nwait_converged_secs = 120\nlease_secs = 2\nmin_converged_secs = 2\n",
    );

    // The first controller, killed as soon as it has written wave 2.
    let mut first = six.spawn_rollout(&v2, "first.log");
    wait_until(T, "the first controller to write wave 2", || async {
        let s = six.rollout().await;
        let second = s["waves"][1][0].as_str()?.to_string();
        s["hives"][&second]["written_revision"].as_u64().map(|_| ())
    })
    .await;
    first.kill();
    let killed = six.rollout().await;
    println!("killed mid-rollout: {}", killed["line"]);
    assert_eq!(killed["outcome"], "running", "{killed:#}");

    // Two controllers race to resume once the lease ran out.
    let (a, b) = wait_until(T, "a resume past the lease", || async {
        let (a, b) = tokio::join!(
            six.run(&["rollout", "resume"]),
            six.run(&["rollout", "resume"])
        );
        let refused = |r: &Run| r.stderr.contains("is driven by controller");
        (!(refused(&a) && refused(&b))).then_some((a, b))
    })
    .await;
    println!("resume A ({}):\n{}{}", a.code, a.stdout, a.stderr);
    println!("resume B ({}):\n{}{}", b.code, b.stdout, b.stderr);
    let advanced: Vec<&Run> = [&a, &b].into_iter().filter(|r| r.code == 0).collect();
    assert_eq!(advanced.len(), 1, "exactly one advances");
    let loser = if a.code == 0 { &b } else { &a };
    assert!(
        loser
            .stderr
            .contains("another controller changed the rollout first")
            || loser.stderr.contains("is driven by controller"),
        "{loser:?}"
    );
    assert!(
        advanced[0].stdout.contains("taking over from controller"),
        "{a:?}"
    );
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "completed", "{state:#}");
    for n in &names {
        assert_eq!(six.writes(n).await, 2, "{n}: v1 and v2, each written once");
        assert_eq!(version(n), "2", "{n}");
    }
}

/// Issue 21: three hives in one group, waves `["1", "100%"]`, and a new
/// version whose agent runs 20 s and exits 3. Converged after the hive's
/// `min_running_secs` (2 s on test hives), it must hold that for
/// `min_converged_secs` (30 s by default, not set here), and exits within
/// it: the rollout halts in wave 1, and the other two hives keep the
/// version they ran. Without the soak, wave 1 was done once the hive said
/// converged, and wave 2 written before the first exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_dies_20s_after_it_starts_halts_the_rollout() {
    let six = Six::start_n("ro-soak", 3, |_| true).await;
    let names = six.swarm.names.clone();
    let image = six.swarm.image.reference.clone();
    let waves = "[rollout]\nwaves = [\"1\", \"100%\"]\nwait_converged_secs = 120\n";
    six.declare_converged(&six.file("v1.toml", &image, "1", waves), &[0, 1, 2])
        .await;
    let mut before = Vec::new();
    for n in &names {
        before.push(six.wanted_revision(n).await);
    }
    let dies = ["/bin/sh", "-c", "sleep 20; exit 3"];
    let v2 = six.file_running("v2.toml", &image, "2", &dies, waves);
    let r = six.run(&["declare", &v2, "--rollout"]).await;
    println!(
        "declare --rollout (dies after 20 s):\n{}{}",
        r.stdout, r.stderr
    );
    assert_eq!(r.code, 1, "the rollout must halt: {r:?}");
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "halted", "{state:#}");
    let first = state["waves"][0][0].as_str().unwrap().to_string();
    assert_eq!(state["hive"], first.as_str(), "{state:#}");
    // The hive's row turns degraded at the first exit ("a stopped (wanted
    // up), exited 3 (1 time in 0s), starting again"): a failure of a hive
    // the rollout wrote, within its soak. Its reason names the agent (`a`)
    // and the exit code.
    let reason = state["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("a stopped (wanted up)") && reason.contains("exited 3"),
        "{state:#}"
    );
    assert!(
        r.stdout.contains(&format!("rollout halted: hive {first}"))
            && r.stdout.contains("exited 3"),
        "{r:?}"
    );
    assert!(
        !r.stdout.contains("wave 1 of 2: every hive converged"),
        "{r:?}"
    );
    for (n, rev) in names.iter().zip(&before) {
        if *n != first {
            assert_eq!(&six.wanted_revision(n).await, rev, "{n} is untouched");
            assert_eq!(version(n), "1", "{n}");
        }
    }
}

async fn get_json(url: &str) -> serde_json::Value {
    let resp = reqwest::get(url).await.unwrap();
    resp.json().await.unwrap()
}

/// `status --json`'s row of `hive`, which must never show it stale or
/// offline while it is held.
async fn held_row(six: &Six, hive: &str) -> serde_json::Value {
    let r = six.run(&["status", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let row = hyperhive_tests::swarm::TestSwarm::row(&r.json(), hive).clone();
    assert!(
        !["stale", "offline"].contains(&row["freshness"].as_str().unwrap_or_default()),
        "{hive} in maintenance shows {row:#}"
    );
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hive_in_maintenance_is_skipped_and_resume_writes_it_after_off_and_after_expiry() {
    let mut six = Six::start_n("ro-maint", 3, |_| true).await;
    // Stale after 3 s (the hives publish every second), not the six's 10 s.
    let cfg = std::fs::read_to_string(&six.swarm.controller_config).unwrap();
    let cfg = cfg.replace("stale_after_secs = 10", "stale_after_secs = 3");
    std::fs::write(&six.swarm.controller_config, cfg).unwrap();
    let names = six.swarm.names.clone();
    let (plain, held, brief) = (&names[0], &names[1], &names[2]);

    for (hive, ttl, reason) in [(held, "2h", "kernel update"), (brief, "1h", "disk swap")] {
        let r = six
            .run(&["maintenance", "on", hive, "--ttl", ttl, "--reason", reason])
            .await;
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.stdout.contains(&format!("{hive}: in maintenance until ")),
            "{r:?}"
        );
    }
    let r = six.run(&["maintenance", "on", held, "--ttl", "8d"]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("\"8d\" is out of bounds"), "{r:?}");

    // It stops publishing: past stale_after it shows maintenance, with the
    // hold, and needs no attention. (It has reported first: a hive killed
    // before its first put, as a slow start under load allowed, would have
    // no status to grow old.)
    wait_until(T, "the held hive's first status", || async {
        held_row(&six, held).await["status_revision"].as_u64()
    })
    .await;
    six.swarm.hives[1].daemon.kill();
    let row = wait_until(
        T,
        "the stopped hive's status is older than stale_after",
        || async {
            let row = held_row(&six, held).await;
            (row["age_secs"].as_u64()? > 4).then_some(row)
        },
    )
    .await;
    println!("stopped hive in maintenance: {row:#}");
    assert_eq!(row["freshness"], "maintenance", "{row:#}");
    assert!(row["attention"].is_null(), "{row:#}");
    assert_eq!(row["maintenance"]["reason"], "kernel update", "{row:#}");
    assert_ne!(row["convergence"], "converged", "{row:#}");
    let (_serve, url) = crate::controller_support::serve_with(
        &six.swarm.controller_config,
        &six.dir.path().join("serve.log"),
    )
    .await;
    let api = get_json(&format!("{url}/api/status?freshness=maintenance")).await;
    let listed: Vec<&str> = api["hives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [held.as_str(), brief.as_str()], "{api:#}");
    let text = six.run(&["status"]).await.stdout;
    assert!(text.contains("in maintenance until"), "{text}");
    six.swarm.hives[1].kill_and_restart(&[]);

    // The rollout writes only the hive not in maintenance, and completes.
    let image = six.swarm.image.reference.clone();
    let v1 = six.file("v1.toml", &image, "1", WAVES);
    let r = six.run(&["declare", &v1, "--rollout"]).await;
    println!("declare --rollout:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains(&format!("skipped {held}: in maintenance until")),
        "{r:?}"
    );
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "completed", "{state:#}");
    assert_eq!(state["counts"]["skipped"], 2, "{state:#}");
    assert_eq!(state["hives"][plain]["step"], "done", "{state:#}");
    for hive in [held, brief] {
        assert_eq!(state["hives"][hive]["step"], "skipped", "{state:#}");
        assert_eq!(six.wanted_revision(hive).await, None, "{hive} was written");
    }
    let text = six.run(&["rollout", "status"]).await.stdout;
    assert!(
        text.contains(&format!("{held} skipped: in maintenance until")),
        "{text}"
    );

    // Maintenance off: resume writes that hive; the other is still held.
    let r = six.run(&["maintenance", "off", held]).await;
    assert!(
        r.stdout.contains(&format!("{held}: maintenance ended")),
        "{r:?}"
    );
    let r = six.run(&["rollout", "resume"]).await;
    println!("rollout resume:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    let state = six.rollout().await;
    assert_eq!(state["hives"][held]["step"], "done", "{state:#}");
    assert_eq!(state["hives"][brief]["step"], "skipped", "{state:#}");
    assert_eq!(version(held), "1");

    // A 3 s hold ends by itself: listed expired, and resume writes it.
    // The `serve` running here removes an expired hold and says so in
    // the event stream: either may be what `list` sees first.
    let r = six.run(&["maintenance", "on", brief, "--ttl", "3s"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let listed = wait_until(T, "the 3 s hold listed expired, or ended", || async {
        let text = six.run(&["maintenance", "list"]).await.stdout;
        let expired = text.contains(&format!("{brief}  expired  expired at "));
        let ended = text.contains("no hive is in maintenance");
        (expired || ended).then_some(text)
    })
    .await;
    println!("maintenance list after the 3 s hold: {listed}");
    wait_until(T, "serve to record the hold's end", || async {
        let r = six.run(&["events", "--hive", brief, "--json"]).await;
        r.stdout.contains("\"maintenance_expired\"").then_some(())
    })
    .await;
    let r = six.run(&["rollout", "resume"]).await;
    println!("rollout resume after the expiry:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "completed", "{state:#}");
    assert_eq!(state["counts"]["done"], 3, "{state:#}");
    assert_eq!(version(brief), "1");
    // Every hive written once.
    for hive in &names {
        assert_eq!(six.writes(hive).await, 1, "{hive}");
    }
}
