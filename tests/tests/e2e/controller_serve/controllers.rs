//! Two controllers at once, and one following across a nats-server
//! restart.

use super::*;

#[tokio::test]
async fn two_controllers_at_once_agree_and_declare_once() {
    let env = Env::new(&["alpha", "beta"], "").await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    env.put_status(&hive_status("stray", HiveState::Ok, None, None, vec![]))
        .await;
    let (_a, base_a) = env.serve("serve-a.log").await;
    let (_b, base_b) = env.serve("serve-b.log").await;

    let swarm = env.write(
        "swarm.toml",
        "[hives.alpha.agents.bot]\nimage = \"local/bot:1\"\n",
    );
    let swarm = swarm.to_str().unwrap();
    // Both controllers' operators declare the same file at the same moment.
    let args = ["declare", swarm];
    let (r1, r2) = tokio::join!(env.run(&args), env.run(&args));
    assert_eq!((r1.code, r2.code), (0, 0), "{r1:?} {r2:?}");
    println!("first: {}second: {}", r1.stdout, r2.stdout);
    let mut history = env.wanted.history("alpha").await.unwrap();
    let mut revisions = Vec::new();
    while let Some(entry) = history.next().await {
        revisions.push(entry.unwrap().revision);
    }
    assert_eq!(
        revisions.len(),
        1,
        "one declaration, not two: {revisions:?}"
    );
    let outcomes = format!("{}{}", r1.stdout, r2.stdout);
    assert!(outcomes.contains("published revision"), "{outcomes}");
    assert!(outcomes.contains("unchanged"), "{outcomes}");

    // The race made certain: both read before either writes. The second
    // compare-and-set is refused, it reads again and finds its own content.
    let file = swarm_controller::swarm_file::SwarmFile::parse(
        std::path::Path::new("swarm2.toml"),
        "[hives.alpha.agents.bot]\nimage = \"local/bot:2\"\n",
    )
    .unwrap();
    let roster: swarm_controller::config::Roster = [(
        swarm_queue_client::HiveName::new("alpha").unwrap(),
        Default::default(),
    )]
    .into();
    let file = swarm_controller::groups::resolve(&file, &roster).unwrap();
    let mut first = swarm_controller::declare::plan(&env.client, &env.wanted, &file)
        .await
        .unwrap();
    let mut second = swarm_controller::declare::plan(&env.client, &env.wanted, &file)
        .await
        .unwrap();
    swarm_controller::declare::publish(&env.client, &env.wanted, &mut first)
        .await
        .unwrap();
    swarm_controller::declare::publish(&env.client, &env.wanted, &mut second)
        .await
        .unwrap();
    println!(
        "{}{}",
        swarm_controller::declare::describe(&first),
        swarm_controller::declare::describe(&second)
    );
    assert!(
        first[0].outcome.starts_with("published revision"),
        "{:?}",
        first[0].outcome
    );
    assert!(
        second[0]
            .outcome
            .contains("already published by another writer"),
        "{:?}",
        second[0].outcome
    );
    let mut history = env.wanted.history("alpha").await.unwrap();
    let mut count = 0;
    while let Some(entry) = history.next().await {
        entry.unwrap();
        count += 1;
    }
    assert_eq!(count, 2, "v1 once and v2 once");

    // Both servers show the same fleet, declaration included.
    let key = |doc: &serde_json::Value| -> Vec<String> {
        doc["hives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} {} {}",
                    r["name"],
                    r["freshness"],
                    r["convergence"],
                    r["status_revision"],
                    r["declared_revision"]
                )
            })
            .collect()
    };
    let view = wait_until(T, "both controllers to see the declaration", || async {
        let a = get_json(&format!("{base_a}/api/status")).await;
        let b = get_json(&format!("{base_b}/api/status")).await;
        (key(&a) == key(&b) && !hive_row(&a, "alpha")?["declared_revision"].is_null())
            .then_some(key(&a))
    })
    .await;
    println!("both see: {view:?}");
    assert_eq!(view.len(), 3, "alpha, beta and the unrostered stray");
}

#[tokio::test]
async fn serve_keeps_following_across_a_nats_server_restart() {
    let mut env = Env::new(&["alpha"], "").await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let (_serve, base) = env.serve("serve.log").await;
    let mut events = Events::open(&base).await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    let before = hive_row(&snapshot, "alpha").unwrap()["status_revision"]
        .as_u64()
        .unwrap();

    env.nats.restart();
    // The test's own client reconnects too; put once it can.
    let revision = wait_until(T, "a put after the restart", || async {
        let bytes = swarm_queue_client::encode_pretty(&hive_status(
            "alpha",
            HiveState::Degraded,
            None,
            None,
            vec![],
        ))
        .unwrap();
        env.status.put("alpha", Bytes::from(bytes)).await.ok()
    })
    .await;
    assert!(revision > before);
    loop {
        let (name, push) = events.next().await;
        if name == "row" && push["row"]["status_revision"] == revision {
            assert_eq!(push["row"]["state"], "degraded");
            break;
        }
    }
    let api = get_json(&format!("{base}/api/status")).await;
    assert_eq!(
        hive_row(&api, "alpha").unwrap()["status_revision"],
        revision
    );
}
