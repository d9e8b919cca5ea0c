//! Volumes and named networks over the real dockerd: a named volume made
//! by the hive with its labels, shared by two agents, outliving a rebuild
//! and a retire and removed only by the purge of its last agent; host
//! paths under `volume_roots` read-only unless `rw = true`, and one
//! outside them (or a symlink leaving them) refused naming the path, the
//! agent and the rule, with no container made and no revision claimed
//! converged; a named network made with the hive's labels, the agents on
//! it, removed after its last agent is retired; a volume or network of
//! that name that is not the hive's refused and never touched.
//! (`network = "none"` is tested in `agent_fields.rs`.)

use std::time::Duration;

use hyperhive_tests::docker::{docker, ObjectGuard};
use hyperhive_tests::hive::{HiveProc, HiveSpec, LocalHive};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(90);

fn exec(container: &str, script: &str) -> std::process::Output {
    hyperhive_tests::docker_cli::run(&["exec", container, "/bin/sh", "-c", script])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn exec_ok(container: &str, script: &str) -> String {
    let out = exec(container, script);
    assert!(
        out.status.success(),
        "{script} in {container}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The labels Docker shows on a volume or network.
fn labels(kind: &str, name: &str) -> Value {
    serde_json::from_str(&docker(&[kind, "inspect", "-f", "{{json .Labels}}", name])).unwrap()
}

fn assert_ours(kind: &str, name: &str, hive: &str, declared: &str) {
    let l = labels(kind, name);
    assert_eq!(l["org.hyperhive.managed"], "true", "{l}");
    assert_eq!(l["org.hyperhive.hive"], hive, "{l}");
    assert_eq!(l[format!("org.hyperhive.{kind}")], declared, "{l}");
}

/// A volume or network the test makes without the hive's labels.
struct Planted(&'static str, String);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = hyperhive_tests::docker_cli::run(&[self.0, "rm", &self.1]);
    }
}

#[tokio::test]
async fn a_named_volume_is_shared_outlives_a_rebuild_and_a_retire_and_goes_with_the_last_purge() {
    let name = unique_name("vol");
    let objects = ObjectGuard::new(&name);
    let h = LocalHive::start_named(name.clone(), "vol", "").await;
    let spec = |mark: &str| {
        json!({ "image": h.image.reference, "command": ["/bin/sleep", "3600"],
                "env": { "MARK": mark },
                "volumes": [{ "name": "data", "target": "/data" }] })
    };
    for a in ["a", "b"] {
        let job = h.api.deploy(a, spec("1")).await;
        h.api.done(job, T).await;
    }
    let volume = format!("hyperhive.{name}.data");
    assert_ours("volume", &volume, &name, "data");
    exec_ok(&h.container("a"), "echo kept > /data/f");
    assert_eq!(
        exec_ok(&h.container("b"), "cat /data/f"),
        "kept",
        "not shared"
    );

    // A rebuild (a changed spec) is a new container on the same volume.
    let before = h.inspect("a", "{{.Id}}");
    let job = h.api.deploy("a", spec("2")).await;
    h.api.done(job, T).await;
    assert_ne!(h.inspect("a", "{{.Id}}"), before, "a was not rebuilt");
    assert_eq!(exec_ok(&h.container("a"), "cat /data/f"), "kept");

    // A retire keeps it; the agent deployed again finds its file.
    let job = h.api.queue("a", "retire", json!({})).await;
    h.api.done(job, T).await;
    assert_eq!(objects.names("volume"), vec![volume.clone()]);
    let job = h.api.deploy("a", spec("2")).await;
    h.api.done(job, T).await;
    assert_eq!(exec_ok(&h.container("a"), "cat /data/f"), "kept");

    // Only the purge of the last agent that used it removes it.
    for a in ["a", "b"] {
        let job = h.api.queue(a, "retire", json!({})).await;
        h.api.done(job, T).await;
    }
    assert_eq!(objects.names("volume"), vec![volume.clone()]);
    let job = h.api.queue("a", "purge", json!({ "confirm": true })).await;
    h.api.done(job, T).await;
    assert_eq!(
        objects.names("volume"),
        vec![volume.clone()],
        "b still uses it"
    );
    let job = h.api.queue("b", "purge", json!({ "confirm": true })).await;
    let done = h.api.done(job, T).await;
    let detail = hyperhive_tests::jobs::node(&done, "purge_data")["detail"].to_string();
    println!("purge of b: {detail}");
    assert!(
        detail.contains(&format!("removed volume {volume}")),
        "{detail}"
    );
    assert!(
        objects.names("volume").is_empty(),
        "the volume outlived its last purge"
    );
}

#[tokio::test]
async fn host_paths_are_read_only_unless_rw_and_never_outside_volume_roots() {
    let tmp = tempfile::Builder::new()
        .prefix("hhtest-vol-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let (root, secret) = (dir.join("root"), dir.join("secret"));
    for d in [root.join("ro"), root.join("rw"), secret.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(root.join("ro/given"), "from the host\n").unwrap();
    std::fs::write(secret.join("token"), "s3cr3t\n").unwrap();
    std::os::unix::fs::symlink(&secret, root.join("escape")).unwrap();
    // Docker's containers run as root: let them write to the rw dir.
    let name = unique_name("vol-host");
    let _objects = ObjectGuard::new(&name);
    let extra = format!("volume_roots = [{:?}]\n", root.display().to_string());
    let h = LocalHive::start_named(name.clone(), "vol-host", &extra).await;
    let path = |p: &std::path::Path| p.display().to_string();
    let job = h
        .api
        .deploy(
            "m",
            json!({ "image": h.image.reference, "command": ["/bin/sleep", "3600"],
                    "volumes": [{ "host": path(&root.join("ro")), "target": "/ro" },
                                { "host": path(&root.join("rw")), "target": "/rw", "rw": true }] }),
        )
        .await;
    h.api.done(job, T).await;
    let m = h.container("m");
    assert_eq!(exec_ok(&m, "cat /ro/given"), "from the host");
    let refused = exec(&m, "echo x > /ro/new");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    println!("write to /ro: {}", stderr.trim());
    assert!(!refused.status.success(), "a write to /ro went through");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    exec_ok(&m, "echo y > /rw/new");
    assert_eq!(std::fs::read_to_string(root.join("rw/new")).unwrap(), "y\n");

    let cases = [
        (path(&secret), "outside every root"),
        (
            path(&root.join("escape")),
            "a symlink must not leave its root",
        ),
        (path(&h.hive.state_dir), "the hive's state dir"),
        (path(&root.join("missing")), "cannot resolve it"),
    ];
    for (i, (host, rule)) in cases.iter().enumerate() {
        let agent = format!("x{i}");
        let spec = json!({ "image": h.image.reference, "command": ["/bin/sleep", "3600"],
                           "volumes": [{ "host": host, "target": "/mnt" }] });
        let job = h.api.deploy(&agent, spec).await;
        let job = h.api.finished(job, T).await;
        let error = job["error"].as_str().unwrap_or_default().to_string();
        println!("{host}: {error}");
        assert_eq!(job["state"], "failed", "{job:#}");
        for want in [host.as_str(), &format!("agent {agent}"), "rule", rule] {
            assert!(
                error.contains(want),
                "{host}: {error:?} does not say {want:?}"
            );
        }
        assert!(
            !h.containers().contains(&h.container(&agent)),
            "{agent} was created"
        );
    }
}

#[tokio::test]
async fn a_named_network_is_the_hives_and_goes_after_its_last_agent_is_retired() {
    let name = unique_name("net");
    let objects = ObjectGuard::new(&name);
    let extra = "reconcile_interval_secs = 1\norphan_grace_secs = 2\n";
    let h = LocalHive::start_named(name.clone(), "net", extra).await;
    let spec = json!({ "image": h.image.reference, "command": ["/bin/sleep", "3600"],
                       "network": "back" });
    for a in ["a", "b"] {
        let job = h.api.deploy(a, spec.clone()).await;
        h.api.done(job, T).await;
    }
    let network = format!("hyperhive.{name}.back");
    assert_ours("network", &network, &name, "back");
    for a in ["a", "b"] {
        assert_eq!(h.inspect(a, "{{.HostConfig.NetworkMode}}"), network);
    }
    // On one network, a reaches b by its container name.
    let b = h.container("b");
    wait_until(T, "a to reach b on their network", || async {
        exec(&h.container("a"), &format!("ping -c 1 -W 2 {b}"))
            .status
            .success()
            .then_some(())
    })
    .await;

    // Removed behind the hive's back (both agents stopped): a start says
    // so, and a rebuild makes the network and the container again.
    for a in ["a", "b"] {
        let job = h.api.queue(a, "stop", json!({})).await;
        h.api.done(job, T).await;
    }
    docker(&["network", "rm", &network]);
    let job = h.api.queue("b", "start", json!({})).await;
    let failed = h.api.finished(job, T).await;
    let error = failed["error"].as_str().unwrap_or_default();
    println!("start without its network: {error}");
    assert!(error.contains("its network is gone"), "{failed:#}");
    let job = h.api.queue("b", "rebuild", json!({})).await;
    h.api.done(job, T).await;
    assert!(h.running("b"), "b did not run after its rebuild");
    assert_ours("network", &network, &name, "back");

    let job = h.api.queue("a", "retire", json!({})).await;
    h.api.done(job, T).await;
    assert_eq!(
        objects.names("network"),
        vec![network.clone()],
        "b is on it"
    );
    let job = h.api.queue("b", "retire", json!({})).await;
    h.api.done(job, T).await;
    wait_until(T, "the unused network to be removed", || async {
        objects.names("network").is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_volume_or_network_of_that_name_that_is_not_the_hives_is_refused_and_kept() {
    let name = unique_name("vol-foreign");
    let _objects = ObjectGuard::new(&name);
    let h = LocalHive::start_named(name.clone(), "vol-foreign", "").await;
    let theirs = format!("hyperhive.{name}.theirs");
    let _volume = Planted("volume", theirs.clone());
    let _network = Planted("network", theirs.clone());
    docker(&["volume", "create", &theirs]);
    docker(&["network", "create", &theirs]);
    let specs = [
        json!({ "volumes": [{ "name": "theirs", "target": "/data" }] }),
        json!({ "network": "theirs" }),
    ];
    for (i, extra) in specs.into_iter().enumerate() {
        let mut spec = json!({ "image": h.image.reference, "command": ["/bin/sleep", "3600"] });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let agent = format!("f{i}");
        let job = h.api.deploy(&agent, spec).await;
        let job = h.api.finished(job, T).await;
        let error = job["error"].as_str().unwrap_or_default().to_string();
        println!("{agent}: {error}");
        assert_eq!(job["state"], "failed", "{job:#}");
        assert!(error.contains(&theirs), "{error}");
        assert!(error.contains("has no org.hyperhive.hive label"), "{error}");
        assert!(!h.containers().contains(&h.container(&agent)));
        // Purged: the record goes, the operator's objects stay.
        let job = h
            .api
            .queue(&agent, "purge", json!({ "confirm": true }))
            .await;
        h.api.done(job, T).await;
    }
    docker(&["volume", "inspect", &theirs]);
    docker(&["network", "inspect", &theirs]);
}

#[tokio::test]
async fn a_refused_host_path_is_reported_and_never_claimed_converged() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("vol-decl");
    let _objects = ObjectGuard::new(&hive);
    let img = hyperhive_tests::docker::TestImage::busybox("vol-decl");
    let swarm = Swarm::connect(&url).await;
    let _h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: "volume_roots = [\"/srv/hhtest-none\"]\n",
        ..Default::default()
    });
    let decl = json!({ "schema": 1, "agents": {
        "ok": { "image": img.reference, "command": ["/bin/sleep", "3600"] },
        "out": { "image": img.reference, "command": ["/bin/sleep", "3600"],
                 "volumes": [{ "host": "/etc", "target": "/host-etc" }] },
    }});
    let r1 = swarm.declare(&hive, &decl.to_string()).await;
    let s = swarm
        .status_until(&hive, "the hive to say why out is not created", T, |s| {
            s["seen_revision"].as_u64() >= Some(r1)
                && s.to_string().contains("volume host path /etc")
        })
        .await;
    let said = s.to_string();
    println!("status: {said}");
    assert!(said.contains("agent out"), "{said}");
    assert!(said.contains("volume_roots (/srv/hhtest-none)"), "{said}");
    assert!(s["converged_revision"].as_u64() < Some(r1), "claimed: {s}");
    assert!(container(&hive, "out").is_none(), "out was created");
    wait_until(T, "ok to run", || async {
        container(&hive, "ok").filter(|c| c.1).map(|_| ())
    })
    .await;
}
