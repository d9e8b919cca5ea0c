//! The forge webhook (good and bad signatures, knowledge and deploys),
//! and what a cross-origin page can send to any route.

use super::*;

/// Wait until the server has processed every SUB this client sent. A flush
/// only writes them out, and the controller publishes on a connection of
/// its own, which the server may serve first; a request answered on this
/// connection comes after them.
pub(super) async fn server_has_our_subscriptions(client: &async_nats::Client) {
    tokio::time::timeout(T, client.request("$JS.API.INFO", Bytes::new()))
        .await
        .expect("the server answers within T")
        .expect("a round trip to the server");
}

/// Records every deploy request on any hive and answers it.
pub(super) async fn deploy_recorder(env: &Env) -> Arc<Mutex<Vec<(String, String)>>> {
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
    let (_serve, base) = serve_with_declarations(&env).await;

    let mut everything = env.client.subscribe("hyperhive.>").await.unwrap();
    env.client.flush().await.unwrap();
    let deploys = deploy_recorder(&env).await;
    let http = reqwest::Client::new();
    let hook = format!("{base}/hooks/forge");

    let body = push_body("org/knowledge");
    bad_signatures_get_401_and_publish_nothing(&env, &http, &hook, &body, &mut everything).await;

    each_forge_signature_publishes_knowledge(&env, &http, &hook, &body).await;

    // A push to the agent's repository: a deploy on every hive that builds it.
    let body = push_body("org/bot");
    let resp = gitea_push(&http, &hook, &body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let doc: serde_json::Value = resp.json().await.unwrap();
    println!("agent push: {doc}");
    assert_eq!(deployed(&deploys), ["alpha/bot", "beta/bot"]);
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
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", delivery_id())
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
    let resp = gitea_push(&http, &hook, "[1,2]").send().await.unwrap();
    assert_eq!(resp.status(), 400);
}

/// The deploy requests recorded so far, as sorted `hive/agent`.
pub(super) fn deployed(deploys: &Mutex<Vec<(String, String)>>) -> Vec<String> {
    let mut got: Vec<String> = deploys
        .lock()
        .unwrap()
        .iter()
        .map(|(hive, agent)| format!("{hive}/{agent}"))
        .collect();
    got.sort();
    got
}

/// A unique delivery id, as a forge sends in `X-*-Delivery`.
pub(super) fn delivery_id() -> String {
    hyperhive_tests::unique_name("delivery")
}

/// A Gitea push delivery of `body`: signed, with its event and a new
/// delivery id.
pub(super) fn gitea_push(
    http: &reqwest::Client,
    hook: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    gitea_delivery(http, hook, body, &delivery_id())
}

/// A Gitea push delivery of `body` with the delivery id `id`.
pub(super) fn gitea_delivery(
    http: &reqwest::Client,
    hook: &str,
    body: &str,
    id: &str,
) -> reqwest::RequestBuilder {
    gitea_signed(http, hook, body)
        .header("X-Gitea-Event", "push")
        .header("X-Gitea-Delivery", id)
}

/// `body` signed the way Gitea signs it, and no other header.
pub(super) fn gitea_signed(
    http: &reqwest::Client,
    hook: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    http.post(hook)
        .header("X-Gitea-Signature", sign(body.as_bytes(), b"s3cret-hook"))
        .body(body.to_string())
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

/// The commit the pushes of [`push_body`] are of.
pub(super) const COMMIT_A: &str = "0123456789abcdef0123456789abcdef01234567";

/// A GitHub/Gitea/Forgejo push payload for `repo` on `main`, of [`COMMIT_A`].
pub(super) fn push_body(repo: &str) -> String {
    push_body_at(repo, COMMIT_A)
}

/// A push payload for `repo` on `main` whose `after` is `commit`.
pub(super) fn push_body_at(repo: &str, commit: &str) -> String {
    format!(
        r#"{{"ref":"refs/heads/main","after":"{commit}","repository":{{"full_name":"{repo}","clone_url":"https://forge.example/{repo}.git","default_branch":"main"}}}}"#
    )
}

/// `serve` with the webhook secret and three hives declared (two build
/// the agent from its repository, one runs an image), once its watch has
/// loaded the declarations.
pub(super) async fn serve_with_declarations(env: &Env) -> (hyperhive_tests::Daemon, String) {
    declare_agents(env).await;
    let (serve, base) = env.serve("serve.log").await;
    declarations_loaded(&base).await;
    (serve, base)
}

/// The webhook secret, and the three hives' declarations of
/// [`serve_with_declarations`].
pub(super) async fn declare_agents(env: &Env) {
    env.write("hook.secret", "s3cret-hook\n");
    let swarm = env.write(
        "swarm.toml",
        "[hives.alpha.agents.bot.build]\ncontext = \"https://forge.example/org/bot.git\"\n\n\
         [hives.beta.agents.bot.build]\ncontext = \"org/bot\"\n\n\
         [hives.gamma.agents.bot]\nimage = \"org/bot:1\"\n",
    );
    assert_eq!(env.run(&["declare", swarm.to_str().unwrap()]).await.code, 0);
}

/// The server learns declarations from its watch; wait until it has them.
pub(super) async fn declarations_loaded(base: &str) {
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
}

/// Bad signatures: 401, and nothing at all is published (the next message
/// `everything` sees is a marker published after them).
async fn bad_signatures_get_401_and_publish_nothing(
    env: &Env,
    http: &reqwest::Client,
    hook: &str,
    body: &str,
    everything: &mut async_nats::Subscriber,
) {
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
            .post(hook)
            .header("X-GitHub-Event", "push")
            .body(body.to_string());
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
}

/// Good signatures from each forge on a push to the knowledge repo: each
/// publishes one empty knowledge event.
async fn each_forge_signature_publishes_knowledge(
    env: &Env,
    http: &reqwest::Client,
    hook: &str,
    body: &str,
) {
    let mut knowledge = env.client.subscribe("hyperhive.knowledge").await.unwrap();
    server_has_our_subscriptions(&env.client).await;
    let sig = sign(body.as_bytes(), b"s3cret-hook");
    for (header, value, event, delivery) in [
        (
            "X-Hub-Signature-256",
            format!("sha256={sig}"),
            "X-GitHub-Event",
            "X-GitHub-Delivery",
        ),
        (
            "X-Gitea-Signature",
            sig.clone(),
            "X-Gitea-Event",
            "X-Gitea-Delivery",
        ),
        (
            "X-Forgejo-Signature",
            sig.clone(),
            "X-Forgejo-Event",
            "X-Forgejo-Delivery",
        ),
    ] {
        let resp = http
            .post(hook)
            .header(header, value)
            .header(event, "push")
            .header(delivery, delivery_id())
            .body(body.to_string())
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
}
