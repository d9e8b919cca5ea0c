//! `swarm-controller serve` over a real nats-server: the JSON API, the
//! server-sent events (one row per KV update, never a re-read), the forge
//! webhook (good and bad signatures), and two controllers at once.

mod controller_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use controller_support::*;
use futures_util::StreamExt;
use hyperhive_tests::sse::EventStream;
use hyperhive_tests::wait_until;
use swarm_controller::webhook::sign;
use swarm_queue_client::subjects::all_deploy_subjects;
use swarm_queue_client::{decode, DeployReply, DeployRequest, HiveState};

/// The controller's event stream, each event's data parsed.
struct Events(EventStream);

impl Events {
    async fn open(base: &str) -> Events {
        Events::open_query(base, "").await
    }

    async fn open_query(base: &str, query: &str) -> Events {
        Events(EventStream::open(&format!("{base}/api/events?{query}"), T).await)
    }

    /// The next event: (name, parsed data).
    async fn next(&mut self) -> (String, serde_json::Value) {
        let (name, data) = self.0.next().await;
        (name, serde_json::from_str(&data).unwrap())
    }
}

async fn get_json(url: &str) -> serde_json::Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn api_and_events_push_one_row_per_update() {
    let env = Env::new(&["alpha", "beta"], "stale_after_secs = 2").await;
    env.put_status(&readiness("beta", HiveState::Ok, None, None, vec![]))
        .await;
    let (_serve, base) = env.serve("serve.log").await;

    // /api/status has the shape of status --json.
    let api = get_json(&format!("{base}/api/status")).await;
    let cli = env.status().await;
    let names = |doc: &serde_json::Value| -> Vec<String> {
        doc["hives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&api), names(&cli));
    assert_eq!(api["summary"]["line"], cli["summary"]["line"]);
    for key in ["name", "freshness", "age_secs", "convergence", "reason"] {
        assert!(api["hives"][0].get(key).is_some(), "{key} missing: {api}");
    }

    let mut events = Events::open(&base).await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    assert_eq!(names(&snapshot), ["alpha", "beta"]);

    let before = get_json(&format!("{base}/api/stats")).await;
    env.put_status(&readiness("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let (name, push) = events.next().await;
    assert_eq!(name, "row");
    assert_eq!(push["row"]["name"], "alpha");
    assert_eq!(push["row"]["freshness"], "fresh");
    assert_eq!(push["summary"]["hives"], 2, "{push}");
    assert!(
        push["summary"]["freshness"]["fresh"].as_u64().unwrap() >= 1,
        "{push}"
    );
    // One update decoded exactly one value: no re-read of the bucket.
    let after = get_json(&format!("{base}/api/stats")).await;
    assert_eq!(
        after["values_decoded"].as_u64().unwrap() - before["values_decoded"].as_u64().unwrap(),
        1,
        "{before} -> {after}"
    );

    // With no KV update at all, beta and then alpha are pushed as stale.
    let mut stale = BTreeSet::new();
    while stale.len() < 2 {
        let (name, push) = events.next().await;
        assert_eq!(name, "row");
        if push["row"]["freshness"] == "stale" {
            stale.insert(push["row"]["name"].as_str().unwrap().to_string());
        }
    }
    let last = get_json(&format!("{base}/api/stats")).await;
    assert_eq!(
        last["values_decoded"], after["values_decoded"],
        "expiry decodes nothing"
    );

    // A removed unrostered key is pushed as a removal.
    env.put_status(&readiness("stray", HiveState::Ok, None, None, vec![]))
        .await;
    loop {
        let (name, push) = events.next().await;
        if name == "row" && push["row"]["name"] == "stray" {
            assert_eq!(push["row"]["freshness"], "unrostered");
            break;
        }
    }
    // A delete, not a purge: the status bucket refuses rollup headers (a
    // purge is one), so that no hive can wipe another's status with one.
    env.status.delete("stray").await.unwrap();
    loop {
        let (name, push) = events.next().await;
        if name == "remove" {
            assert_eq!(push["name"], "stray");
            break;
        }
    }
    let page = reqwest::get(format!("{base}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("EventSource"), "dashboard page served");
}

/// Wait until the server has processed every SUB this client sent. A flush
/// only writes them out, and the controller publishes on a connection of
/// its own, which the server may serve first; a request answered on this
/// connection comes after them.
async fn server_has_our_subscriptions(client: &async_nats::Client) {
    tokio::time::timeout(T, client.request("$JS.API.INFO", Bytes::new()))
        .await
        .expect("the server answers within T")
        .expect("a round trip to the server");
}

/// Records every deploy request on any hive and answers it.
async fn deploy_recorder(env: &Env) -> Arc<Mutex<Vec<(String, String)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut sub = env.client.subscribe(all_deploy_subjects()).await.unwrap();
    server_has_our_subscriptions(&env.client).await;
    let client = env.client.clone();
    let record = seen.clone();
    tokio::spawn(async move {
        let mut job = 100;
        while let Some(msg) = sub.next().await {
            let req = decode::<DeployRequest>(&msg.payload).unwrap().value;
            let hive = msg.subject.split('.').nth(2).unwrap().to_string();
            record.lock().unwrap().push((hive, req.agent.to_string()));
            job += 1;
            if let Some(to) = msg.reply {
                client
                    .publish(to, Bytes::from(DeployReply::Queued { job }.encode()))
                    .await
                    .unwrap();
            }
        }
    });
    seen
}

#[tokio::test]
async fn webhook_verifies_signatures_and_publishes_knowledge_or_deploys() {
    let env = Env::new(
        &["alpha", "beta", "gamma"],
        "webhook_secret_file = \"hook.secret\"\nknowledge_repo = \"org/knowledge\"",
    )
    .await;
    env.write("hook.secret", "s3cret-hook\n");
    let swarm = env.write(
        "swarm.toml",
        "[hives.alpha.agents.bot.build]\ncontext = \"https://forge.example/org/bot.git\"\n\n\
         [hives.beta.agents.bot.build]\ncontext = \"org/bot\"\n\n\
         [hives.gamma.agents.bot]\nimage = \"org/bot:1\"\n",
    );
    assert_eq!(env.run(&["declare", swarm.to_str().unwrap()]).await.code, 0);
    let (_serve, base) = env.serve("serve.log").await;
    // The server learns declarations from its watch; wait until it has them.
    wait_until(T, "declarations loaded", || async {
        let api = get_json(&format!("{base}/api/status")).await;
        api["hives"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| !r["declared_revision"].is_null())
            .then_some(())
    })
    .await;

    let mut everything = env.client.subscribe("hyperhive.>").await.unwrap();
    env.client.flush().await.unwrap();
    let deploys = deploy_recorder(&env).await;
    let http = reqwest::Client::new();
    let hook = format!("{base}/hooks/forge");
    let push_body = |repo: &str| {
        format!(
            r#"{{"ref":"refs/heads/main","repository":{{"full_name":"{repo}","clone_url":"https://forge.example/{repo}.git","default_branch":"main"}}}}"#
        )
    };

    // Bad signatures: 401, and nothing at all is published.
    let body = push_body("org/knowledge");
    let bad = [
        vec![],
        vec![(
            "X-Hub-Signature-256",
            format!("sha256={}", sign(body.as_bytes(), b"wrong")),
        )],
        vec![("X-Gitea-Signature", sign(b"another body", b"s3cret-hook"))],
        vec![("X-Forgejo-Signature", "not hex".to_string())],
    ];
    for headers in bad {
        let mut req = http
            .post(&hook)
            .header("X-GitHub-Event", "push")
            .body(body.clone());
        for (k, v) in &headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{headers:?}");
        println!("refused {headers:?}: {}", resp.text().await.unwrap());
    }
    // Prove the silence: the next message anyone sees is our own marker.
    env.client
        .publish("hyperhive.test-marker", Bytes::new())
        .await
        .unwrap();
    let first = tokio::time::timeout(T, everything.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.subject.as_str(), "hyperhive.test-marker");

    // Good signatures from each forge: a push to the knowledge repo.
    let mut knowledge = env.client.subscribe("hyperhive.knowledge").await.unwrap();
    server_has_our_subscriptions(&env.client).await;
    let sig = sign(body.as_bytes(), b"s3cret-hook");
    for (header, value, event) in [
        (
            "X-Hub-Signature-256",
            format!("sha256={sig}"),
            "X-GitHub-Event",
        ),
        ("X-Gitea-Signature", sig.clone(), "X-Gitea-Event"),
        ("X-Forgejo-Signature", sig.clone(), "X-Forgejo-Event"),
    ] {
        let resp = http
            .post(&hook)
            .header(header, value)
            .header(event, "push")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let doc: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(doc["knowledge"], "published", "{doc}");
        let msg = tokio::time::timeout(T, knowledge.next())
            .await
            .unwrap()
            .unwrap();
        assert!(msg.payload.is_empty());
    }

    // A push to the agent's repository: a deploy on every hive that builds it.
    let body = push_body("org/bot");
    let resp = http
        .post(&hook)
        .header("X-Gitea-Signature", sign(body.as_bytes(), b"s3cret-hook"))
        .header("X-Gitea-Event", "push")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let doc: serde_json::Value = resp.json().await.unwrap();
    println!("agent push: {doc}");
    let mut got = deploys.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            ("alpha".to_string(), "bot".to_string()),
            ("beta".to_string(), "bot".to_string())
        ]
    );
    assert!(
        doc["deploys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["result"]["outcome"] == "queued"),
        "{doc}"
    );

    // A push to another branch deploys nothing; a ping is answered.
    let body = push_body("org/bot").replace("refs/heads/main", "refs/heads/topic");
    let resp = http
        .post(&hook)
        .header(
            "X-Hub-Signature-256",
            format!("sha256={}", sign(body.as_bytes(), b"s3cret-hook")),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(deploys.lock().unwrap().len(), 2);
    let ping = "{}";
    let resp = http
        .post(&hook)
        .header("X-GitHub-Event", "ping")
        .header(
            "X-Hub-Signature-256",
            format!("sha256={}", sign(ping.as_bytes(), b"s3cret-hook")),
        )
        .body(ping)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A signed body that is not a push payload: 400, named.
    let junk = "[1,2]";
    let resp = http
        .post(&hook)
        .header("X-Gitea-Signature", sign(junk.as_bytes(), b"s3cret-hook"))
        .body(junk)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn two_controllers_at_once_agree_and_declare_once() {
    let env = Env::new(&["alpha", "beta"], "").await;
    env.put_status(&readiness("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    env.put_status(&readiness("stray", HiveState::Ok, None, None, vec![]))
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
    env.put_status(&readiness("alpha", HiveState::Ok, None, None, vec![]))
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
        let bytes = swarm_queue_client::encode_pretty(&readiness(
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

/// What a web page in any browser can send without a CORS preflight: a
/// cross-origin `text/plain` POST to every route. None of them changes
/// anything (no core message, no KV write), the webhook still wants its
/// signature, and no answer carries CORS headers that would let the page
/// read it.
#[tokio::test]
async fn a_cross_origin_post_to_any_route_changes_nothing() {
    let env = Env::new(
        &["alpha"],
        "webhook_secret_file = \"hook.secret\"\nknowledge_repo = \"org/knowledge\"",
    )
    .await;
    env.write("hook.secret", "s3cret-hook\n");
    let (_serve, base) = env.serve("serve.log").await;
    let mut events = env.client.subscribe("hyperhive.>").await.unwrap();
    let mut kv = env.client.subscribe("$KV.>").await.unwrap();
    env.client.flush().await.unwrap();

    let http = reqwest::Client::new();
    let body = r#"{"ref":"refs/heads/main","repository":{"full_name":"org/knowledge","clone_url":"x","default_branch":"main"}}"#;
    for route in [
        "/",
        "/api/status",
        "/api/events",
        "/api/stats",
        "/hooks/forge",
        "/health/live",
        "/no/such/route",
    ] {
        let resp = http
            .post(format!("{base}{route}"))
            .header("Content-Type", "text/plain;charset=UTF-8")
            .header("Origin", "https://evil.example")
            .header("X-GitHub-Event", "push")
            .body(body)
            .send()
            .await
            .unwrap();
        let code = resp.status().as_u16();
        assert!(matches!(code, 401 | 404 | 405), "POST {route}: {code}");
        assert!(
            resp.headers().get("access-control-allow-origin").is_none(),
            "POST {route} allows a cross-origin read"
        );
    }
    let resp = http
        .get(format!("{base}/api/status"))
        .header("Origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("access-control-allow-origin").is_none());

    // Prove the silence: the first message anyone sees is our own marker.
    for (sub, marker) in [
        (&mut events, "hyperhive.test-marker"),
        (&mut kv, "$KV.test-marker"),
    ] {
        env.client.publish(marker, Bytes::new()).await.unwrap();
        let first = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
        assert_eq!(first.subject.as_str(), marker);
    }
}

#[tokio::test]
async fn api_status_and_events_filter_and_page_and_bad_values_get_400() {
    let env = Env::new(&["alpha", "beta", "gamma", "delta"], "").await;
    for hive in ["alpha", "beta"] {
        env.put_status(&readiness(hive, HiveState::Ok, None, None, vec![]))
            .await;
    }
    let (_serve, base) = env.serve("serve.log").await;
    let names = |doc: &serde_json::Value| -> Vec<String> {
        doc["hives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    let api = |q: &str| {
        let url = format!("{base}/api/status?{q}");
        async move { get_json(&url).await }
    };
    // gamma and delta never reported: unknown, so they need attention.
    let doc = api("freshness=unknown").await;
    assert_eq!(
        (names(&doc), doc["matched"].clone()),
        (vec!["delta".to_string(), "gamma".into()], 2.into())
    );
    assert_eq!(names(&api("attention=true").await), ["delta", "gamma"]);
    assert_eq!(
        names(&api("sort=attention").await),
        ["delta", "gamma", "alpha", "beta"]
    );
    assert_eq!(
        api("sort=attention").await["hives"][0]["attention"]["kind"],
        "unknown"
    );
    assert_eq!(names(&api("label=test=yes&name=al").await), ["alpha"]);
    assert_eq!(names(&api("label=test=no").await), Vec::<String>::new());
    assert_eq!(
        names(&api("convergence=unknown&freshness=fresh").await),
        ["alpha", "beta"]
    );
    let doc = api("offset=1&limit=2").await;
    assert_eq!(names(&doc), ["beta", "delta"]);
    assert_eq!(
        (
            doc["matched"].clone(),
            doc["offset"].clone(),
            doc["limit"].clone()
        ),
        (4.into(), 1.into(), 2.into())
    );
    assert_eq!(
        doc["summary"]["hives"], 4,
        "the summary is the whole fleet's"
    );
    assert_eq!(doc["summary"]["attention"], 2);

    for (path, q, named) in [
        ("api/status", "freshness=stal", "freshness=\"stal\""),
        ("api/status", "convergence=ok", "convergence=\"ok\""),
        ("api/status", "limit=0", "limit=\"0\""),
        ("api/status", "sort=age", "sort=\"age\""),
        ("api/status", "label=nokey", "label=\"nokey\""),
        ("api/status", "bogus=1", "\"bogus\""),
        ("api/events", "attention=maybe", "attention=\"maybe\""),
    ] {
        let resp = reqwest::get(format!("{base}/{path}?{q}")).await.unwrap();
        assert_eq!(resp.status(), 400, "{path}?{q}");
        let body: serde_json::Value = resp.json().await.unwrap();
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(named), "{path}?{q}: {error}");
    }

    // A page of one unknown hive: the snapshot holds it alone.
    let mut events = Events::open_query(&base, "freshness=unknown&limit=1").await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    assert_eq!(names(&snapshot), ["delta"]);
    assert_eq!(snapshot["matched"], 2);
    // alpha is neither shown nor matching: nothing at all is sent for it,
    // so the next event is gamma's, which left the filter: counts only.
    env.put_status(&readiness("alpha", HiveState::Degraded, None, None, vec![]))
        .await;
    env.put_status(&readiness("gamma", HiveState::Ok, None, None, vec![]))
        .await;
    let (name, push) = events.next().await;
    assert_eq!(name, "summary", "{push}");
    assert_eq!(push["view"]["matched"], 1);
    assert!(push.get("row").is_none());
    // delta, the shown hive, leaves the filter: removed from the page.
    env.put_status(&readiness("delta", HiveState::Ok, None, None, vec![]))
        .await;
    let (name, push) = events.next().await;
    assert_eq!(
        (name.as_str(), push["name"].as_str()),
        ("remove", Some("delta"))
    );
    assert_eq!(push["view"]["matched"], 0);
}

#[tokio::test]
async fn a_declaration_progressing_too_long_enters_the_attention_page_with_no_kv_update() {
    let env = Env::new(&["alpha"], "attention_progressing_secs = 2").await;
    let mut agents = std::collections::BTreeMap::new();
    agents.insert(agent("bot"), image_spec("local/bot:1"));
    let declaration =
        swarm_queue_client::encode_pretty(&swarm_queue_client::Declaration::new(agents)).unwrap();
    let rev = env
        .wanted
        .put("alpha", Bytes::from(declaration))
        .await
        .unwrap();
    // The hive read the revision and works on it: progressing.
    env.put_status(&readiness("alpha", HiveState::Ok, Some(rev), None, vec![]))
        .await;
    let (_serve, base) = env.serve("serve.log").await;
    let mut events = Events::open_query(&base, "attention=true").await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    let decoded = get_json(&format!("{base}/api/stats")).await["values_decoded"].clone();
    let row = match snapshot["hives"].as_array().unwrap().first() {
        // A slow machine: it was already over the threshold at the snapshot.
        Some(row) => {
            println!("already in the snapshot");
            row.clone()
        }
        None => loop {
            let (name, push) = events.next().await;
            if name == "row" {
                break push["row"].clone();
            }
        },
    };
    assert_eq!(row["name"], "alpha");
    assert_eq!(row["convergence"], "progressing");
    assert_eq!(row["attention"]["kind"], "slow_progress", "{row}");
    println!("{}", row["attention"]["why"]);
    let after = get_json(&format!("{base}/api/stats")).await["values_decoded"].clone();
    assert_eq!(decoded, after, "no KV value read: time alone moved it");
    let doc = get_json(&format!("{base}/api/status?attention=true")).await;
    assert_eq!(doc["summary"]["attention"], 1);
}
