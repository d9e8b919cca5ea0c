//! The webhook's refusals of what its signature does not cover (a replayed
//! delivery, a missing event header or delivery id, a push without `ref`,
//! a commit already deployed), two controllers sharing what they acted on,
//! the webhook's own listener, and the cap on event streams.

use super::webhook::{
    declarations_loaded, declare_agents, delivery_id, deploy_recorder, deployed, gitea_delivery,
    gitea_push, gitea_signed, push_body, push_body_at, serve_with_declarations,
    server_has_our_subscriptions,
};
use super::*;

const COMMIT_B: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// Nothing was published on `hyperhive.>` since `sub` was made, up to now:
/// the next message it sees is a marker published after the refusals.
async fn nothing_published(env: &Env, sub: &mut async_nats::Subscriber, after: &str) {
    env.client
        .publish("hyperhive.test-marker", Bytes::new())
        .await
        .unwrap();
    let first = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
    assert_eq!(
        first.subject.as_str(),
        "hyperhive.test-marker",
        "{after} published {:?}",
        first.subject
    );
}

/// Three hives with the webhook secret configured (nothing declared yet).
async fn three_hives() -> Env {
    Env::new(
        &["alpha", "beta", "gamma"],
        "webhook_secret_file = \"hook.secret\"",
    )
    .await
}

async fn json_of(resp: reqwest::Response) -> (u16, serde_json::Value) {
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap())
}

#[tokio::test]
async fn a_replayed_delivery_is_refused_and_deploys_nothing() {
    let env = three_hives().await;
    let (_serve, base) = serve_with_declarations(&env).await;
    let deploys = deploy_recorder(&env).await;
    let http = reqwest::Client::new();
    let hook = format!("{base}/hooks/forge");
    let body = push_body("org/bot");

    let id = delivery_id();
    let first = gitea_delivery(&http, &hook, &body, &id)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(deploys.lock().unwrap().len(), 2, "alpha and beta build it");

    // The same delivery again, signature and id and all: 409, no request.
    let mut everything = env.client.subscribe("hyperhive.>").await.unwrap();
    server_has_our_subscriptions(&env.client).await;
    let (code, doc) = json_of(
        gitea_delivery(&http, &hook, &body, &id)
            .send()
            .await
            .unwrap(),
    )
    .await;
    println!("replay: {code} {doc}");
    assert_eq!(code, 409, "{doc}");
    assert_eq!(doc["duplicate"], format!("delivery.{id}"), "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("was acted on before"),
        "{doc}"
    );
    nothing_published(&env, &mut everything, "the replay").await;
    assert_eq!(deploys.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_second_push_of_a_deployed_commit_queues_nothing() {
    let env = three_hives().await;
    let (_serve, base) = serve_with_declarations(&env).await;
    let http = reqwest::Client::new();
    let hook = format!("{base}/hooks/forge");
    let body = push_body("org/bot");
    // No hive listens yet: nothing is queued, so the commit is not taken
    // as deployed, and the next push of it deploys.
    let (code, doc) = json_of(gitea_push(&http, &hook, &body).send().await.unwrap()).await;
    assert_eq!(code, 200, "{doc}");
    let outcomes: Vec<&serde_json::Value> = doc["deploys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["result"]["outcome"])
        .collect();
    assert_eq!(outcomes, ["no_responders", "no_responders"], "{doc}");

    let deploys = deploy_recorder(&env).await;
    let first = gitea_push(&http, &hook, &body).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(deployed(&deploys), ["alpha/bot", "beta/bot"]);

    let mut everything = env.client.subscribe("hyperhive.>").await.unwrap();
    server_has_our_subscriptions(&env.client).await;
    // The same commit under a new delivery id (a replay with the unsigned
    // id header changed, or the forge's push sent twice): nothing queued.
    let (code, doc) = json_of(gitea_push(&http, &hook, &body).send().await.unwrap()).await;
    println!("same commit again: {code} {doc}");
    assert_eq!(code, 200, "{doc}");
    assert_eq!(doc["deploys"], serde_json::json!([]), "{doc}");
    let skipped = doc["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{doc}");
    assert!(skipped.iter().all(|s| s["skipped"] == "already_deployed"));
    nothing_published(&env, &mut everything, "a push of a deployed commit").await;
    assert_eq!(deploys.lock().unwrap().len(), 2);

    // A new commit deploys again.
    let newer = push_body_at("org/bot", COMMIT_B);
    let resp = gitea_push(&http, &hook, &newer).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(deploys.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn a_delivery_without_event_delivery_id_or_ref_is_refused_by_name() {
    let env = three_hives().await;
    let (_serve, base) = serve_with_declarations(&env).await;
    let _deploys = deploy_recorder(&env).await;
    let mut everything = env.client.subscribe("hyperhive.>").await.unwrap();
    server_has_our_subscriptions(&env.client).await;
    let http = reqwest::Client::new();
    let hook = format!("{base}/hooks/forge");
    let body = push_body("org/bot");
    let no_ref = body.replace(r#""ref":"refs/heads/main","#, "");
    let cases = [
        (
            "no event header",
            gitea_signed(&http, &hook, &body).header("X-Gitea-Delivery", delivery_id()),
            "no event header (X-GitHub-Event, X-Gitea-Event, X-Forgejo-Event, X-Gogs-Event)",
        ),
        (
            "no delivery id",
            gitea_signed(&http, &hook, &body).header("X-Gitea-Event", "push"),
            "no delivery id header (X-GitHub-Delivery, X-Gitea-Delivery",
        ),
        (
            "a delivery id that is no key",
            gitea_delivery(&http, &hook, &body, "a.b"),
            "delivery id \"a.b\" must be 1 to 100 of A-Za-z0-9",
        ),
        (
            "a push without ref",
            gitea_push(&http, &hook, &no_ref),
            "not a push payload: missing field `ref`",
        ),
    ];
    // Every case is tried, and every wrong answer listed.
    let mut wrong = Vec::new();
    for (what, request, error) in cases {
        let (code, doc) = json_of(request.send().await.unwrap()).await;
        println!("{what}: {code} {doc}");
        if code != 400 || !doc["error"].as_str().unwrap_or_default().contains(error) {
            wrong.push(format!("{what}: {code} {doc}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not refused by name:\n{}",
        wrong.join("\n")
    );
    nothing_published(&env, &mut everything, "the refused deliveries").await;
}

#[tokio::test]
async fn two_controllers_sharing_the_bucket_act_on_one_delivery_once() {
    let env = three_hives().await;
    let (_a, base_a) = serve_with_declarations(&env).await;
    let (_b, base_b) = env.serve("serve-b.log").await;
    declarations_loaded(&base_b).await;
    let deploys = deploy_recorder(&env).await;
    let http = reqwest::Client::new();
    let body = push_body("org/bot");
    let id = delivery_id();
    // The same delivery reaches both at the same moment.
    let send =
        |base: &str| gitea_delivery(&http, &format!("{base}/hooks/forge"), &body, &id).send();
    let (a, b) = tokio::join!(send(&base_a), send(&base_b));
    let (a, b) = (json_of(a.unwrap()).await, json_of(b.unwrap()).await);
    println!("controller a: {a:?}\ncontroller b: {b:?}");
    let mut codes = [a.0, b.0];
    codes.sort();
    assert_eq!(codes, [200, 409]);
    assert_eq!(
        deployed(&deploys),
        ["alpha/bot", "beta/bot"],
        "one deploy per hive, from one controller"
    );
}

#[tokio::test]
async fn the_webhook_listener_serves_only_the_webhook_and_the_dashboard_no_longer_does() {
    let env = three_hives().await;
    declare_agents(&env).await;
    let log = env.path("serve.log");
    let cfg = env.config.display().to_string();
    let _serve = hyperhive_tests::Daemon::spawn(
        &hyperhive_tests::controller_bin(),
        &[
            "--config",
            &cfg,
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--webhook-listen",
            "127.0.0.1:0",
        ],
        &[],
        &log,
    );
    let (base, hook_base) = wait_until(T, "both listeners", || async {
        let text = std::fs::read_to_string(&log).ok()?;
        let url = |prefix: &str, suffix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .map(|u| u.trim_end_matches(suffix).to_string())
        };
        Some((
            url("listening on ", "/")?,
            url("webhook listening on ", "/hooks/forge")?,
        ))
    })
    .await;
    declarations_loaded(&base).await;
    let deploys = deploy_recorder(&env).await;
    let http = reqwest::Client::new();

    for path in [
        "/",
        "/api/status",
        "/api/events",
        "/api/stats",
        "/health/live",
    ] {
        let resp = http.get(format!("{hook_base}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 404, "GET {path} on the webhook listener");
    }
    let body = push_body("org/bot");
    let on_dashboard = gitea_push(&http, &format!("{base}/hooks/forge"), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        on_dashboard.status(),
        404,
        "the dashboard answers the webhook"
    );
    assert!(deploys.lock().unwrap().is_empty());
    assert_eq!(
        http.get(format!("{base}/api/status"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // The webhook answers any Host name, as on the dashboard's listener.
    let (code, doc) = json_of(
        gitea_push(&http, &format!("{hook_base}/hooks/forge"), &body)
            .header("Host", "hooks.forge-proxy.example")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 200, "{doc}");
    assert_eq!(deploys.lock().unwrap().len(), 2, "{doc}");
}

#[tokio::test]
async fn event_streams_past_sse_max_clients_get_503_until_one_closes() {
    let env = Env::new(&["alpha"], "sse_max_clients = 2").await;
    let (_serve, base) = env.serve("serve.log").await;
    let mut first = Events::open(&base).await;
    let mut second = Events::open(&base).await;
    assert_eq!(first.next().await.0, "snapshot");
    assert_eq!(second.next().await.0, "snapshot");

    let resp = reqwest::get(format!("{base}/api/events")).await.unwrap();
    let (code, doc) = json_of(resp).await;
    println!("third stream: {code} {doc}");
    assert_eq!(code, 503);
    assert_eq!(
        doc["error"],
        "2 event streams are open, the most this server holds (sse_max_clients); \
         close a dashboard page or try again later"
    );
    // The cap counts open streams: once one closes, a new one opens.
    drop(first);
    let mut third = wait_until(T, "a stream once one closed", || async {
        let resp = reqwest::get(format!("{base}/api/events")).await.ok()?;
        (resp.status() == 200).then_some(resp)
    })
    .await;
    let chunk = tokio::time::timeout(T, third.chunk())
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&chunk.unwrap()).contains("snapshot"));
}
