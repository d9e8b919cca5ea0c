//! Volumes and networks: a bad volume or network in a declaration is
//! refused on decode naming the field; a host path the hive does not allow
//! (outside `volume_roots`, a symlink leaving it, the state dir) fails the
//! deploy naming the path, the agent and the rule, and no container is
//! made; the next good deploy still goes through.

use super::*;
use hyperhive_tests::docker::{ObjectGuard, TestImage};

fn declaration_with(agent: serde_json::Value) -> Vec<u8> {
    serde_json::json!({ "schema": 1, "agents": { "a": agent } })
        .to_string()
        .into_bytes()
}

#[test]
fn bad_volumes_and_networks_are_refused_on_decode_by_field() {
    let vol = |v: serde_json::Value| serde_json::json!({ "image": "x", "volumes": [v] });
    let cases = [
        (
            "both name and host",
            vol(serde_json::json!({ "name": "c", "host": "/srv", "target": "/c" })),
            vec!["agents.a.volumes[0]", "exactly one of name"],
        ),
        (
            "neither name nor host",
            vol(serde_json::json!({ "target": "/c" })),
            vec!["agents.a.volumes[0]", "exactly one of name"],
        ),
        (
            "a relative target",
            vol(serde_json::json!({ "name": "c", "target": "data" })),
            vec!["agents.a.volumes[0].target", "\"data\"", "an absolute path"],
        ),
        (
            "the /state target",
            vol(serde_json::json!({ "name": "c", "target": "/state" })),
            vec![
                "agents.a.volumes[0].target",
                "/state",
                "which the hive mounts",
            ],
        ),
        (
            "a target under /knowledge",
            vol(serde_json::json!({ "name": "c", "target": "/knowledge/x" })),
            vec!["agents.a.volumes[0].target", "/knowledge/x"],
        ),
        (
            "a relative host path",
            vol(serde_json::json!({ "host": "srv/data", "target": "/d" })),
            vec![
                "agents.a.volumes[0].host",
                "\"srv/data\"",
                "an absolute path",
            ],
        ),
        (
            "a host path with ..",
            vol(serde_json::json!({ "host": "/srv/../etc", "target": "/d" })),
            vec!["agents.a.volumes[0].host", "without '..'"],
        ),
        (
            "an unknown volume field",
            vol(serde_json::json!({ "name": "c", "target": "/c", "mode": "z" })),
            vec!["unknown field `mode`"],
        ),
        (
            "a volume name that is not a DNS label",
            vol(serde_json::json!({ "name": "my.vol", "target": "/c" })),
            vec!["volume or network name", "'.'"],
        ),
        (
            "network host",
            serde_json::json!({ "image": "x", "network": "host" }),
            vec!["agents.a.network", "\"host\"", "never \"host\""],
        ),
    ];
    let mut failures = Vec::new();
    for (case, agent, wants) in cases {
        let error = decode_err::<Declaration>(&declaration_with(agent));
        println!("{case}: {error}");
        for want in wants {
            if !error.contains(want) {
                failures.push(format!("{case}: {error:?} does not say {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_paths_the_hive_does_not_allow_fail_the_deploy_naming_path_agent_and_rule() {
    let name = hyperhive_tests::unique_name("bad-vol");
    let image = TestImage::busybox("bad-vol");
    let _objects = ObjectGuard::new(&name);
    let tmp = tempfile::Builder::new()
        .prefix("hhtest-bad-vol-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let (root, outside) = (dir.join("root"), dir.join("outside"));
    std::fs::create_dir_all(root.join("ok")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link-out")).unwrap();
    let extra = format!("volume_roots = [{:?}]\n", root.display().to_string());
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: &extra,
        ..Default::default()
    });
    let api = hive.job_api().await;
    let shown = |p: &std::path::Path| p.display().to_string();
    let cases = [
        (shown(&outside), "outside every root"),
        ("/etc".to_string(), "outside every root"),
        (
            shown(&root.join("link-out")),
            "a symlink must not leave its root",
        ),
        (
            shown(&hive.state_dir.join("agents")),
            "the hive's state dir",
        ),
    ];
    let spec = |host: &str| {
        serde_json::json!({ "image": image.reference, "command": ["/bin/sleep", "3600"],
                            "volumes": [{ "host": host, "target": "/mnt" }] })
    };
    let mut failures = Vec::new();
    for (i, (host, rule)) in cases.iter().enumerate() {
        let agent = format!("v{i}");
        let job = api.deploy(&agent, spec(host)).await;
        let job = api.finished(job, T).await;
        let error = job["error"].as_str().unwrap_or_default().to_string();
        println!("{host}: {error}");
        if job["state"] != "failed" {
            failures.push(format!("{host}: the deploy did not fail: {job}"));
        }
        for want in [host.as_str(), &format!("agent {agent}"), "rule:", rule] {
            if !error.contains(want) {
                failures.push(format!("{host}: {error:?} does not say {want:?}"));
            }
        }
        let made = hyperhive_tests::kv::container(&name, &agent);
        if made.is_some() {
            failures.push(format!("{host}: container of {agent} was made"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // The next good deploy still goes through.
    let job = api.deploy("good", spec(&shown(&root.join("ok")))).await;
    api.done(job, T).await;
}
