//! `swarm-controller rollback` over a real hive, nats-server and dockerd:
//! an earlier declaration comes back as a new revision with `declare`'s
//! diff, the hive converges on it and its containers are the earlier
//! revision's again; a dry run publishes nothing; a revision the bucket no
//! longer keeps is a clear error.

use crate::controller_support::*;
use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, containers_of};
use hyperhive_tests::unique_name;

fn swarm_file(hive: &str, image: &str, generation: u32, extra_agent: bool) -> String {
    let mut text = format!(
        "[hives.{hive}.agents.web]\nimage = \"{image}\"\ncommand = [\"/bin/sleep\", \"3600\"]\n\
         env = {{ GENERATION = \"{generation}\" }}\n"
    );
    if extra_agent {
        text.push_str(&format!(
            "\n[hives.{hive}.agents.extra]\nimage = \"{image}\"\ncommand = [\"/bin/sleep\", \"3600\"]\n"
        ));
    }
    text
}

async fn declare(env: &Env, name: &str, text: &str) -> u64 {
    let path = env.write(name, text);
    let r = env.run(&["declare", path.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout
        .split("published revision ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no revision in: {}", r.stdout))
}

async fn converged_on(env: &Env, hive: &str, revision: u64) {
    env.wait_row(hive, &format!("converged on {revision}"), |r| {
        r["convergence"] == "converged" && r["declared_revision"] == revision
    })
    .await;
}

fn generation(hive: &str) -> String {
    docker(&[
        "inspect",
        "--format",
        "{{range .Config.Env}}{{println .}}{{end}}",
        &format!("hyperhive.{hive}.web"),
    ])
    .lines()
    .find_map(|l| l.strip_prefix("GENERATION=").map(str::to_string))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_restores_the_earlier_revisions_containers() {
    let hive = unique_name("rollback");
    let env = Env::new(&[&hive], "").await;
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("rollback");
    let url = env.nats.url();
    let _h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        ..Default::default()
    });

    let v1 = declare(
        &env,
        "v1.toml",
        &swarm_file(&hive, &image.reference, 1, false),
    )
    .await;
    converged_on(&env, &hive, v1).await;
    let v2 = declare(
        &env,
        "v2.toml",
        &swarm_file(&hive, &image.reference, 2, true),
    )
    .await;
    converged_on(&env, &hive, v2).await;
    assert_eq!(generation(&hive), "2");
    assert!(container(&hive, "extra").is_some());

    // A dry run shows the diff and publishes nothing.
    let r = env.run(&["rollback", &hive, "--dry-run"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    println!("rollback --dry-run:\n{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("back to the declaration of revision {v1}")),
        "{r:?}"
    );
    assert!(r.stdout.contains("would publish"), "{r:?}");
    assert!(r.stdout.contains("- extra (will be retired)"), "{r:?}");
    assert!(r.stdout.contains("~ web: env"), "{r:?}");
    assert_eq!(env.row(&hive).await["declared_revision"], v2);

    // The rollback: a new revision holding v1's declaration.
    let r = env.run(&["rollback", &hive]).await;
    assert_eq!(r.code, 0, "{r:?}");
    println!("rollback:\n{}", r.stdout);
    let v3: u64 = r
        .stdout
        .split("published revision ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no new revision in: {}", r.stdout));
    assert!(v3 > v2);
    converged_on(&env, &hive, v3).await;
    assert_eq!(
        generation(&hive),
        "1",
        "web runs revision {v1}'s spec again"
    );
    assert_eq!(
        containers_of(&hive),
        vec![format!("hyperhive.{hive}.web")],
        "extra is retired"
    );

    // --to a revision that was never kept.
    let r = env.run(&["rollback", &hive, "--to", "999"]).await;
    assert_ne!(r.code, 0, "{r:?}");
    println!("rollback --to 999: {}", r.stderr.trim());
    assert!(
        r.stderr.contains(&format!(
            "revision 999 of hive {hive} is no longer in the history of hyperhive-wanted"
        )) && r.stderr.contains(&format!("kept: {v1}, {v2}, {v3}")),
        "{r:?}"
    );
    // --to an explicit kept revision works too: back to v2.
    let r = env.run(&["rollback", &hive, "--to", &v2.to_string()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("+ extra"), "{r:?}");
}
