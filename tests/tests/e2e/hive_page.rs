//! A page per hive in the dashboard (issue 22, point 5): `GET /hive/{name}`
//! in a real headless Chromium, over a real nats-server with the accounts
//! `swarm-controller nats-config` renders, a real `hive` under its own
//! nkey on the real dockerd running a talker agent, and the controller's
//! `serve` under the controller's nkey.
//!
//! - The dashboard's hive name is a link to the page; the page shows the
//!   agent, its last job, the status-age chart (one SVG bar a minute), and
//!   the hive's last events from `hyperhive-events`.
//! - Chosen in the page, the agent's log tail shows its last lines, then a
//!   marker line the agent prints afterwards **without a reload** (a mark
//!   in the page's heap and `performance.timeOrigin` survive).
//! - Planted markup stays text: a log line `<img … onerror>` and a
//!   `<script>`, and a `job_failed` event whose message is markup, show as
//!   text, no element is made of them and no script runs.
//! - `/api/hive/{name}/events` is bounded: of 250 of the hive's events
//!   among another hive's, `limit=200` gives the last 200, oldest first.
//! - At most `log_tails_max` tails (1 here): the page holds it, one more
//!   gets 503; when the page goes away the place is given back.
//!
//! And over a plain nats-server with no hive: an unknown hive is a 404
//! naming it, a bad hive or agent name a 400 naming it, a bad `limit` a
//! 400, and every new route refuses a foreign `Host` (421).
//!
//! Needs `chromium` (apt-get install -y chromium); fails loudly without it.

use std::time::Duration;

use crate::controller_support::Env;
use hyperhive_tests::browser::Page;
use hyperhive_tests::process::{serve_controller, TALKER};
use hyperhive_tests::secured::SecuredHive;
use hyperhive_tests::wait_until;
use serde_json::{json, Value};
use swarm_queue_client::event_stream::{hive_event_subject, Event, EventsSettings};
use swarm_queue_client::{AgentName, HiveName};

const T: Duration = Duration::from_secs(60);

/// A log line that would make an element, and run, if parsed as markup.
const LOG_IMG: &str = "<img src=x onerror=window.hhPwned=1>";
const LOG_SCRIPT: &str = "<script>window.hhPwned=2</script>";
/// The message of a planted `job_failed` event.
const EVENT_MARKUP: &str = "pull failed <img src=y onerror=window.hhPwned=3><b>bold</b>";

/// GET `base` + `path`: status and JSON body (`null` when not JSON).
async fn get(base: &str, path: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{base}{path}")).await.unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// Publish `count` events of `hive` (agent `talker`) as that hive.
async fn publish_events(client: &async_nats::Client, hive: &str, kind: &str, count: usize) {
    let h = HiveName::new(hive).unwrap();
    let a = AgentName::new("talker").unwrap();
    for i in 0..count {
        let mut e = Event::new(kind).said(format!("{kind} {i}"));
        e.hive = Some(h.clone());
        e.agent = Some(a.clone());
        client
            .publish(hive_event_subject(&h, Some(&a), kind), e.encode().into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
}

/// Write `line` into the talker's `say` file (it prints and removes it).
fn say(s: &SecuredHive, line: &str) {
    let say = s.local.hive.state_dir.join("agents/talker/say");
    let tmp = say.with_extension("tmp");
    std::fs::write(&tmp, format!("{line}\n")).unwrap();
    std::fs::rename(&tmp, &say).unwrap();
}

/// The talker has printed its last `say` (so the next will not overwrite it).
async fn said(s: &SecuredHive) {
    let say = s.local.hive.state_dir.join("agents/talker/say");
    wait_until(T, "the talker to print its line", || async {
        (!say.exists()).then_some(())
    })
    .await;
}

/// No element, image or script came of planted markup, and none ran.
async fn assert_inert(page: &mut Page) {
    let dom = page
        .eval(
            "JSON.stringify([document.querySelectorAll('#log img, #log script, #log b').length, \
             document.querySelectorAll('#events img, #events b, #jobs img, #jobs b').length, \
             document.images.length, document.scripts.length, typeof window.hhPwned])",
        )
        .await;
    // Its two scripts: the shared page.js and its own.
    assert_eq!(dom, json!("[0,0,0,2,\"undefined\"]"), "markup became DOM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hive_page_shows_a_live_log_line_without_a_reload_and_markup_stays_inert() {
    let s = SecuredHive::start("hivepage", "", "").await;
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(&s.config, format!("log_tails_max = 1\n{text}")).unwrap();
    let ctl = s.s.controller_conn().await;
    let js = async_nats::jetstream::new(ctl.client.clone());
    swarm_controller::audit::open(&js, &EventsSettings::default())
        .await
        .expect("make the event stream");
    s.deploy("talker", TALKER).await;

    // 250 events of this hive among 250 of beta's, then the planted one.
    let own = s.s.hive_conn(&s.name).await;
    let beta = s.s.hive_conn("beta").await;
    for _ in 0..5 {
        publish_events(&own.client, &s.name, "started", 50).await;
        publish_events(&beta.client, "beta", "started", 50).await;
    }
    let mut planted = Event::new("job_failed").said(EVENT_MARKUP);
    planted.hive = Some(HiveName::new(&s.name).unwrap());
    planted.agent = Some(AgentName::new("talker").unwrap());
    let subject = hive_event_subject(
        planted.hive.as_ref().unwrap(),
        planted.agent.as_ref(),
        "job_failed",
    );
    own.client
        .publish(subject, planted.encode().into())
        .await
        .unwrap();
    own.client.flush().await.unwrap();

    let log = s.dir.path().join("serve.log");
    let (_serve, base) = serve_controller(&s.config, &log).await;
    let api = format!("/api/hive/{}", s.name);
    let body = wait_until(T, "the hive's row with its talker", || async {
        let (code, body) = get(&base, &api).await;
        (code == 200 && body["row"]["agents"][0]["observed"] == "running").then_some(body)
    })
    .await;
    let minutes = body["status_age"]["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 60, "{body}");
    assert!(minutes[59]["updates"].as_u64().unwrap() >= 1, "{body}");
    assert!(minutes[59]["worst_age_secs"].is_u64(), "{body}");

    // The events read is bounded and gives the last ones, oldest first.
    let (code, recent) = wait_until(T, "all 251 events stored", || async {
        let (code, b) = get(&base, &format!("{api}/events?limit=200")).await;
        (b["matched"].as_u64()? >= 251).then_some((code, b))
    })
    .await;
    assert_eq!(code, 200, "{recent}");
    let events = recent["events"].as_array().unwrap();
    assert_eq!(events.len(), 200);
    assert!(events.iter().all(|e| e["event"]["hive"] == s.name.as_str()));
    assert_eq!(events[199]["event"]["message"], EVENT_MARKUP);
    assert_eq!(events[198]["event"]["message"], "started 49");
    // The 250 are five rounds of "started 0" to "started 49": the last
    // 199 of them begin with the second round's second.
    assert_eq!(events[0]["event"]["message"], "started 1");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "oldest first");
    let (code, _) = get(&base, &format!("{api}/events?limit=201")).await;
    assert_eq!(code, 400);

    // From the dashboard, the hive's name is a link to its page.
    let mut page = Page::launch(&s.dir.path().join("chromium.log")).await;
    page.call("Page.navigate", json!({ "url": format!("{base}/") }))
        .await;
    let link = format!("#hive-{} a.hive-link", s.name);
    page.wait_for(
        "the hive's link",
        &format!("document.querySelector({link:?})"),
    )
    .await;
    page.eval(&format!("document.querySelector({link:?}).click()"))
        .await;
    let expr = format!(
        "location.pathname === '/hive/{}' && document.getElementById('name')?.textContent",
        s.name
    );
    assert_eq!(
        page.wait_for("the hive's page", &expr).await,
        s.name.as_str()
    );
    page.wait_for(
        "the agent, its chart and the planted event",
        "document.querySelectorAll('#agents tr').length === 1 \
         && document.querySelectorAll('#chart rect').length === 60 \
         && document.getElementById('events')?.textContent.includes('onerror=window.hhPwned=3') \
         && document.getElementById('jobs')?.textContent.includes('onerror=window.hhPwned=3')",
    )
    .await;
    assert_inert(&mut page).await;

    // Mark this document; a reload would lose the mark.
    let origin = page
        .eval("window.hhMarker = 'same document'; performance.timeOrigin")
        .await;
    page.eval(
        "const s = document.getElementById('tail-agent'); s.value = 'talker'; \
         s.dispatchEvent(new Event('change'))",
    )
    .await;
    page.wait_for(
        "the tail's last lines",
        "[...document.querySelectorAll('#log div')].some((d) => d.textContent === 'ready')",
    )
    .await;
    let marker = hyperhive_tests::unique_name("live-line");
    say(&s, &marker);
    page.wait_for(
        "the marker line on the page",
        &format!(
            "[...document.querySelectorAll('#log div')].some((d) => d.textContent === {marker:?})"
        ),
    )
    .await;
    for line in [LOG_IMG, LOG_SCRIPT] {
        said(&s).await;
        say(&s, line);
        page.wait_for(
            "the markup line as text",
            &format!(
                "[...document.querySelectorAll('#log div')].some((d) => d.textContent === {line:?})"
            ),
        )
        .await;
    }
    assert_inert(&mut page).await;
    assert_eq!(
        page.eval("window.hhMarker").await,
        "same document",
        "the page was reloaded"
    );
    assert_eq!(page.eval("performance.timeOrigin").await, origin);
    assert_eq!(page.eval("window.hyperhive.tails").await, 1);

    // The page holds the one tail there is: one more is refused.
    let tail = format!("{base}{api}/agents/talker/logs");
    let resp = reqwest::get(&tail).await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("log_tails_max"),
        "{body}"
    );
    // The page goes away: its tail ends and its place is given back.
    page.call("Page.navigate", json!({ "url": "about:blank" }))
        .await;
    let resp = wait_until(T, "the tail's place given back", || async {
        let resp = reqwest::get(&tail).await.ok()?;
        (resp.status().as_u16() == 200).then_some(resp)
    })
    .await;
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    // The page's request was dropped: the hive, no longer acknowledged,
    // let its stream go.
    wait_until(T, "the hive to end the page's log stream", || async {
        let log = s.local.hive.daemon.log();
        log.lines()
            .any(|l| l.contains("log stream ended") && l.contains("reader gone"))
            .then_some(())
    })
    .await;
}

/// GET `base` + `path` with `host` as the `Host` header: the status.
async fn get_as(base: &str, path: &str, host: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("Host", host)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn the_hive_routes_name_what_is_wrong_and_keep_the_host_check() {
    let env = Env::new(&["alpha"], "").await;
    let (_serve, base) = env.serve("serve.log").await;
    let (code, body) = get(&base, "/api/hive/nowhere").await;
    assert_eq!(code, 404, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("nowhere"),
        "{body}"
    );
    for path in [
        "/api/hive/nowhere/events",
        "/api/hive/nowhere/agents/talker/logs",
    ] {
        let (code, body) = get(&base, path).await;
        assert_eq!(code, 404, "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("nowhere"),
            "{body}"
        );
    }
    for (path, bad) in [
        ("/api/hive/Bad_Name", "Bad_Name"),
        ("/api/hive/Bad_Name/events", "Bad_Name"),
        ("/api/hive/alpha/agents/No_Such!/logs", "No_Such!"),
    ] {
        let (code, body) = get(&base, path).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(bad),
            "{path}: {body}"
        );
    }
    let (code, body) = get(&base, "/api/hive/alpha/events?limit=0").await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("limit=\"0\""),
        "{body}"
    );
    // No event stream yet: no events, and the page is told why.
    let (code, body) = get(&base, "/api/hive/alpha/events").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["events"], json!([]), "{body}");
    let (code, body) = get(&base, "/api/hive/alpha").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["row"]["name"], "alpha");
    let page = reqwest::get(format!("{base}/hive/alpha")).await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("createElementNS"));

    let port = base.rsplit(':').next().unwrap();
    let evil = format!("rebind.evil.example:{port}");
    for path in [
        "/hive/alpha",
        "/api/hive/alpha",
        "/api/hive/alpha/events",
        "/api/hive/alpha/agents/talker/logs",
    ] {
        assert_eq!(
            get_as(&base, path, &evil).await,
            421,
            "GET {path} as {evil}"
        );
        let here = format!("localhost:{port}");
        assert_eq!(
            get_as(&base, path, &here).await,
            200,
            "GET {path} as {here}"
        );
    }
}
