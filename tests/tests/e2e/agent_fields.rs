//! The agent fields of spec 3 that shape a container, over a real
//! nats-server and the real dockerd: `user` (seen by `id` inside),
//! `stop_grace_secs` (a SIGTERM handler longer than Docker's 10 s finishes
//! on a retire), `ports` (a request reaches the agent through the host
//! port), `network = "none"` (no interface but loopback, no route), and a
//! port on an address the hive config does not allow (refused, named).

use std::io::{Read, Write};
use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::swarm::free_port;
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

fn decl(agents: serde_json::Value) -> String {
    json!({ "schema": 1, "agents": agents }).to_string()
}

fn exec(container: &str, args: &[&str]) -> String {
    let mut all = vec!["exec", container];
    all.extend_from_slice(args);
    docker(&all)
}

/// The agent's state dir on the host, as the hive makes it.
fn state_of(h: &HiveProc, agent: &str) -> std::path::PathBuf {
    h.state_dir.join("agents").join(agent)
}

#[tokio::test]
async fn user_grace_ports_and_network_none_shape_the_container() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("af");
    let img = TestImage::busybox("af");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: "port_addresses = [\"127.0.0.1\"]\n",
        ..Default::default()
    });
    let port = free_port();
    // The handler takes 12 s, past Docker's default grace of 10 s: only a
    // grace of 30 s lets it write its file and exit 0.
    let slow_term = "trap 'busybox sleep 12; echo done > /state/term; exit 0' TERM; \
                     while true; do busybox sleep 1; done";
    let agents = json!({
        "runner": { "image": img.reference, "command": ["/bin/sleep", "3600"],
                    "user": "1000:1000" },
        "slow": { "image": img.reference, "command": ["/bin/sh", "-c", slow_term],
                  "stop_grace_secs": 30 },
        "web": { "image": img.reference,
                 "command": ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/state"],
                 "ports": [format!("{port}:8080/tcp")] },
        "iso": { "image": img.reference, "command": ["/bin/sleep", "3600"],
                 "network": "none" },
    });
    let r1 = swarm.declare(&hive, &decl(agents.clone())).await;
    swarm.converged(&hive, r1, T).await;
    let name = |a: &str| format!("hyperhive.{hive}.{a}");

    // user: the process runs as 1000:1000, not root.
    assert_eq!(
        exec(&name("runner"), &["/bin/busybox", "id", "-u"]).trim(),
        "1000"
    );
    assert_eq!(
        exec(&name("runner"), &["/bin/busybox", "id", "-g"]).trim(),
        "1000"
    );

    // ports: a GET through the host port reaches busybox httpd, which
    // serves the agent's state dir.
    std::fs::write(state_of(&h, "web").join("index.html"), "hello from web\n").unwrap();
    let body = wait_until(T, "the published port to answer", || async {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.contains("hello from web").then_some(out)
    })
    .await;
    println!("port {port} answered: {:?}", body.lines().next());
    let bound = docker(&["port", &name("web")]);
    assert!(bound.contains(&format!("127.0.0.1:{port}")), "{bound}");

    // network none: loopback only, no route anywhere.
    let links = exec(&name("iso"), &["/bin/busybox", "ip", "-o", "link"]);
    assert_eq!(links.lines().count(), 1, "{links}");
    assert!(links.contains("lo"), "{links}");
    let routes = exec(&name("iso"), &["/bin/busybox", "ip", "route"]);
    assert!(routes.trim().is_empty(), "a route out: {routes}");
    let mode = docker(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &name("iso")]);
    assert_eq!(mode.trim(), "none");

    // stop grace: on the container, and honoured by a retire.
    let grace = docker(&["inspect", "-f", "{{.Config.StopTimeout}}", &name("slow")]);
    assert_eq!(grace.trim(), "30");
    assert!(container(&hive, "slow").is_some_and(|c| c.1), "slow runs");
    let mut without_slow = agents.clone();
    without_slow.as_object_mut().unwrap().remove("slow");
    let started = std::time::Instant::now();
    let r2 = swarm.declare(&hive, &decl(without_slow)).await;
    swarm.converged(&hive, r2, T).await;
    let took = started.elapsed();
    let said = std::fs::read_to_string(state_of(&h, "slow").join("term")).unwrap_or_default();
    println!(
        "retire of slow took {:.1} s; its handler wrote {said:?}",
        took.as_secs_f64()
    );
    assert_eq!(
        said.trim(),
        "done",
        "the handler was killed before it finished"
    );
    assert!(container(&hive, "slow").is_none(), "slow was not retired");
}

#[tokio::test]
async fn a_port_on_an_address_the_hive_does_not_allow_is_refused_and_named() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("af-port");
    let img = TestImage::busybox("af-port");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let _h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        ..Default::default()
    });
    let port = free_port();
    let agents = json!({
        "open": { "image": img.reference, "command": ["/bin/sleep", "3600"],
                  "ports": [format!("0.0.0.0:{port}:80")] },
    });
    let r1 = swarm.declare(&hive, &decl(agents)).await;
    let s = swarm
        .status_until(&hive, "the hive to say why open is not created", T, |s| {
            s["seen_revision"].as_u64() >= Some(r1)
                && s.to_string().contains("port_addresses (127.0.0.1)")
        })
        .await;
    let said = s.to_string();
    assert!(said.contains("0.0.0.0"), "{said}");
    assert!(said.contains("agent open"), "{said}");
    assert!(s["converged_revision"].as_u64() < Some(r1), "claimed: {s}");
    assert!(container(&hive, "open").is_none(), "open was created");
}

fn started_at(container: &str) -> String {
    docker(&["inspect", "-f", "{{.State.StartedAt}}", container])
        .trim()
        .to_string()
}

#[tokio::test]
async fn restart_on_unhealthy_restarts_through_the_backoff_and_only_those_that_ask() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("af-sick");
    let img = TestImage::busybox("af-sick");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    // A crash-loop delay long enough to see: the second restart waits it.
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: "crash_backoff_first_secs = 20\nmin_running_secs = 1\n",
        ..Default::default()
    });
    let health = json!({ "command": ["/bin/sh", "-c", "test ! -e /state/sick"],
                         "interval_secs": 1, "retries": 1 });
    let agents = json!({
        "mender": { "image": img.reference, "command": ["/bin/sleep", "3600"],
                    "health": health, "restart_on_unhealthy": 2 },
        "plain": { "image": img.reference, "command": ["/bin/sleep", "3600"],
                   "health": health },
    });
    let r1 = swarm.declare(&hive, &decl(agents)).await;
    swarm.converged(&hive, r1, T).await;
    let name = |a: &str| format!("hyperhive.{hive}.{a}");
    let (mender0, plain0) = (started_at(&name("mender")), started_at(&name("plain")));

    for a in ["mender", "plain"] {
        std::fs::write(state_of(&h, a).join("sick"), "").unwrap();
    }
    let t0 = std::time::Instant::now();
    let mender1 = wait_until(T, "mender to be restarted", || async {
        let now = started_at(&name("mender"));
        (now != mender0).then_some(now)
    })
    .await;
    let first = t0.elapsed();
    // Still sick: the next restart waits out the crash-loop delay (20 s
    // after the stop), so it comes no sooner than that.
    let mender2 = wait_until(T, "mender to be restarted again", || async {
        let now = started_at(&name("mender"));
        (now != mender1).then_some(now)
    })
    .await;
    let second = t0.elapsed();
    println!(
        "mender restarted {:.1} s and {:.1} s after it turned sick (crash delay 20 s)",
        first.as_secs_f64(),
        second.as_secs_f64()
    );
    assert!(
        second - first >= Duration::from_secs(15),
        "no backoff between restarts"
    );
    // The one that does not ask is shown unhealthy and never touched.
    let s = swarm
        .status_until(&hive, "plain to be shown unhealthy", T, |s| {
            s["agents"]["plain"]["health"] == "unhealthy"
        })
        .await;
    assert_eq!(
        started_at(&name("plain")),
        plain0,
        "plain was restarted: {s}"
    );

    // Well again: mender stays up and the revision is converged.
    std::fs::remove_file(state_of(&h, "mender").join("sick")).unwrap();
    std::fs::remove_file(state_of(&h, "plain").join("sick")).unwrap();
    swarm
        .status_until(&hive, "both healthy again", T, |s| {
            s["agents"]["mender"]["health"] == "healthy"
                && s["agents"]["plain"]["health"] == "healthy"
        })
        .await;
    swarm.converged(&hive, r1, T).await;
    let _ = mender2;
}
