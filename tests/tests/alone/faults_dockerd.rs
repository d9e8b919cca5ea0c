//! dockerd stopped and started on a hive: the hive reports not ready with
//! the reason (warning `docker`, level error), then recovers and
//! re-converges by itself, including on a declaration put while Docker was
//! down, and follows the new dockerd's events again (a container killed
//! after the restart is recorded and started again).
//!
//! The machine's dockerd is never stopped: the hive runs against a private
//! dockerd ([`PrivateDockerd`], own socket, data, exec root and bridge) that
//! the test SIGKILLs by its pid and starts again.
//!
//! A dockerd that stops answering (SIGSTOP) holds the harness's own
//! `docker` calls only up to their limit, once: the cleanup guards then
//! skip it instead of hanging the run (`docker_cli`).

use std::time::{Duration, Instant};

use hyperhive_tests::docker::{PrivateDockerd, TestImage};
use hyperhive_tests::docker_cli::{self as cli, CliError};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(45);

fn docker_warning(r: &Value) -> Option<Value> {
    r["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["key"] == "docker")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_killed_then_back_is_reported_and_recovered() {
    let _slot = crate::one_slot().await;
    let nats = NatsServer::start();
    let image = TestImage::busybox("f-dockerd");
    let mut dockerd = PrivateDockerd::start();
    dockerd.load_image(&image.reference);
    let hive_name = unique_name("f-dockerd");
    let extra = format!(
        "docker_host = {:?}\nreconcile_interval_secs = 1",
        dockerd.host()
    );
    let hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        nats_url: Some(&nats.url()),
        extra: &extra,
        ..Default::default()
    });
    let kv = Swarm::connect(&nats.url()).await;
    let decl = |v: &str| {
        json!({ "schema": 1, "agents": { "a": {
            "image": image.reference, "command": ["/bin/sleep", "3600"], "env": { "V": v },
        }}})
        .to_string()
    };
    let container = format!("hyperhive.{hive_name}.a");
    let running = |d: &PrivateDockerd| {
        d.cli(&["inspect", "--format", "{{.State.Running}}", &container])
            .map(|s| s == "true")
            .unwrap_or(false)
    };
    let r1 = kv.declare(&hive_name, &decl("1")).await;
    kv.converged(&hive_name, r1, T).await;
    assert!(running(&dockerd), "{}", dockerd.log());

    dockerd.kill();
    let killed = Instant::now();
    let warning = wait_until(T, "not ready with the docker warning", || async {
        let (code, r) = hive.ready().await;
        (code != 200 && r["ready"] == false)
            .then(|| docker_warning(&r))
            .flatten()
    })
    .await;
    let reported = killed.elapsed();
    assert_eq!(warning["level"], "error", "{warning}");
    assert!(
        warning["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&dockerd.host()),
        "the reason names the Docker socket: {warning}"
    );
    // A declaration while Docker is away is not claimed converged.
    let r2 = kv.declare(&hive_name, &decl("2")).await;
    let (_, s) = kv
        .status(&hive_name)
        .await
        .expect("status while docker is down");
    assert!(s["converged_revision"].as_u64() < Some(r2), "{s}");

    dockerd.restart();
    let back = Instant::now();
    wait_until(T, "ready again", || async {
        let (code, r) = hive.ready().await;
        (code == 200 && docker_warning(&r).is_none()).then_some(())
    })
    .await;
    let ready_again = back.elapsed();
    let s = kv.converged(&hive_name, r2, T).await;
    let reconverged = back.elapsed();
    assert_eq!(s["agents"]["a"]["observed"], "running", "{s}");
    assert!(running(&dockerd), "the agent runs again");
    assert!(
        dockerd
            .cli(&[
                "inspect",
                "--format",
                "{{range .Config.Env}}{{.}} {{end}}",
                &container
            ])
            .unwrap_or_default()
            .contains("V=2"),
        "the declaration put while Docker was down is applied"
    );
    // The hive follows the new dockerd's events: a container killed now
    // is recorded (exit 137) and running again at once.
    dockerd.cli(&["kill", &container]).expect("docker kill");
    let killed = Instant::now();
    let s = kv
        .status_until(&hive_name, "the kill recorded", T, |s| {
            let a = &s["agents"]["a"];
            a["exits"]["code"] == 137 && a["observed"] == "running"
        })
        .await;
    println!(
        "after the dockerd restart: docker kill -> recorded and running again in {} ms: {}",
        killed.elapsed().as_millis(),
        s["agents"]["a"]
    );
    println!(
        "FIGURES: faults_dockerd kill_to_not_ready_ms={} restart_to_ready_ms={} restart_to_converged_ms={} revisions={r1}->{r2}",
        reported.as_millis(),
        ready_again.as_millis(),
        reconverged.as_millis()
    );
}

#[test]
fn a_dockerd_that_stops_answering_holds_one_call_to_its_limit_and_no_more() {
    let dockerd = PrivateDockerd::start();
    let host = dockerd.host();
    let ps = ["ps", "-aq"];
    let answered = cli::run_at(Some(&host), &ps, cli::LIMIT).expect("the private dockerd answers");
    assert!(answered.status.success(), "{answered:?}");

    dockerd.signal("STOP");
    let limit = Duration::from_secs(3);
    let hung = cli::run_at(Some(&host), &ps, limit);
    dockerd.signal("CONT");
    assert_eq!(
        hung,
        Err(CliError::Hung {
            call: format!("docker -H {host} ps -aq"),
            limit
        })
    );
    assert!(cli::is_hung(Some(&host)));
    // Answering again or not, it is not asked again by this binary: a
    // guard's call returns at once, unrun, and says so.
    let skipped = cli::run_at(Some(&host), &["rm", "-f", "x"], cli::LIMIT);
    assert_eq!(
        skipped,
        Err(CliError::Skipped {
            call: format!("docker -H {host} rm -f x")
        })
    );
    assert!(
        skipped.unwrap_err().to_string().contains("not run"),
        "the skip names itself"
    );
    assert!(
        !cli::is_hung(None),
        "the machine's dockerd is another daemon"
    );
    assert!(
        cli::run(&["version", "--format", "{{.Server.Version}}"]).is_ok_and(|o| o.status.success()),
        "and is still asked"
    );
}
