//! The dashboard in a real headless Chromium (Debian's `chromium`): a hive
//! turns stale on the page **without a reload**.
//!
//! How "without a reload" is proven: the test drives Chromium through the
//! Chrome DevTools Protocol (a websocket to `--remote-debugging-port`) and
//! reads the live DOM with `Runtime.evaluate`. Once the page shows the hive
//! fresh, the test plants a marker in the page's JavaScript heap
//! (`window.hhMarker`) and notes `performance.timeOrigin`. Then it kills
//! the hive and waits for the page to show it stale. A reload (or a
//! navigation) would start a new document: the marker would be gone and
//! `timeOrigin` would change. The page also counts its snapshots, so a
//! re-read through the event stream would show too. No KV update happens
//! after the kill: the row turns stale because the server re-evaluates
//! freshness on its timer and pushes the row over server-sent events.
//!
//! Needs `chromium` (apt-get install -y chromium); fails loudly without it.

mod controller_support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use controller_support::*;
use futures_util::{SinkExt, StreamExt};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::{wait_until, Daemon};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const CHROMIUM: &str = "/usr/bin/chromium";

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A headless Chromium page driven over CDP.
struct Page {
    _browser: Daemon,
    _profile: tempfile::TempDir,
    socket: Socket,
    next_id: AtomicU64,
}

impl Page {
    async fn launch(log: &Path) -> Page {
        assert!(
            Path::new(CHROMIUM).is_file(),
            "{CHROMIUM} is missing: apt-get install -y chromium"
        );
        let profile = tempfile::Builder::new()
            .prefix("hhtest-chromium-")
            .tempdir()
            .unwrap();
        let user_data = format!("--user-data-dir={}", profile.path().display());
        let browser = Daemon::spawn(
            Path::new(CHROMIUM),
            &[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                &user_data,
                "about:blank",
            ],
            &[],
            log,
        );
        // Chromium writes the port it chose into the profile directory.
        let port_file = profile.path().join("DevToolsActivePort");
        let port = wait_until(T, "Chromium's DevTools port", || async {
            let text = std::fs::read_to_string(&port_file).ok()?;
            text.lines().next()?.trim().parse::<u16>().ok()
        })
        .await;
        let targets: Value = wait_until(T, "Chromium's page target", || async {
            let list: Value = reqwest::get(format!("http://127.0.0.1:{port}/json/list"))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            list.as_array()?
                .iter()
                .any(|t| t["type"] == "page")
                .then_some(list)
        })
        .await;
        let ws = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target with a websocket")
            .to_string();
        let (socket, _) = tokio_tungstenite::connect_async(ws.as_str()).await.unwrap();
        Page {
            _browser: browser,
            _profile: profile,
            socket,
            next_id: AtomicU64::new(1),
        }
    }

    /// Send one CDP command and return its result.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({ "id": id, "method": method, "params": params }).to_string();
        self.socket.send(Message::text(msg)).await.unwrap();
        loop {
            let frame = tokio::time::timeout(T, self.socket.next())
                .await
                .expect("a CDP reply in time")
                .expect("the CDP socket is open")
                .unwrap();
            let Message::Text(text) = frame else { continue };
            let reply: Value = serde_json::from_str(text.as_str()).unwrap();
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// Evaluate a JavaScript expression in the page; its value as JSON.
    async fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true }),
            )
            .await;
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Evaluate until the expression is truthy.
    async fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        let deadline = std::time::Instant::now() + T;
        loop {
            let v = self.eval(expression).await;
            if !(v.is_null() || v == false || v == "") {
                return v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn a_hive_turns_stale_on_the_page_without_a_reload() {
    let env = Env::new(&["alpha", "ghost"], "stale_after_secs = 3").await;
    let url = env.nats.url();
    let mut hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        nats_url: Some(&url),
        ..Default::default()
    });
    env.wait_row("alpha", "alpha fresh", |r| r["freshness"] == "fresh")
        .await;
    let (_serve, base) = env.serve("serve.log").await;

    let mut page = Page::launch(&env.path("chromium.log")).await;
    page.call("Page.navigate", json!({ "url": format!("{base}/") }))
        .await;
    page.wait_for(
        "alpha fresh on the page",
        "document.querySelector('#hive-alpha')?.dataset.freshness === 'fresh'",
    )
    .await;
    let ghost = page
        .eval("document.querySelector('#hive-ghost td.freshness').textContent")
        .await;
    assert_eq!(ghost, "unknown");
    let summary = page
        .wait_for(
            "the summary to count alpha fresh",
            "document.getElementById('summary').textContent.includes('1 fresh') \
             && document.getElementById('summary').textContent",
        )
        .await;
    println!("page summary while alpha runs: {summary}");

    // Mark this document; a reload would lose the mark.
    let origin = page
        .eval("window.hhMarker = 'same document'; performance.timeOrigin")
        .await;
    let snapshots = page.eval("window.hyperhive.snapshots").await;
    let age_before = page
        .eval("document.querySelector('#hive-alpha td.age').textContent")
        .await;

    // The hive dies: no more KV updates for alpha.
    hive.daemon.kill();
    let shown = page
        .wait_for(
            "alpha stale on the page",
            "document.querySelector('#hive-alpha')?.dataset.freshness === 'stale' \
             && document.querySelector('#hive-alpha td.freshness').textContent",
        )
        .await;
    assert_eq!(shown, "stale");
    assert_eq!(
        page.eval("window.hhMarker").await,
        "same document",
        "the page was reloaded"
    );
    assert_eq!(
        page.eval("performance.timeOrigin").await,
        origin,
        "a new document"
    );
    assert_eq!(
        page.eval("window.hyperhive.snapshots").await,
        snapshots,
        "re-read the snapshot"
    );
    let age_after = page
        .eval("document.querySelector('#hive-alpha td.age').textContent")
        .await;
    println!("alpha age on the page: {age_before} -> {age_after}");
    assert_ne!(age_before, age_after, "the age ticks");
    let convergence = page
        .eval("document.querySelector('#hive-alpha')?.dataset.convergence")
        .await;
    assert_eq!(convergence, "unknown");
    let summary = page
        .eval("document.getElementById('summary').textContent")
        .await;
    println!("page summary after the kill: {summary}");
    assert!(summary.as_str().unwrap().contains("1 stale"), "{summary}");

    // Screenshot for people reading the test log (not asserted on).
    let shot = page
        .call("Page.captureScreenshot", json!({ "format": "png" }))
        .await;
    assert!(shot["data"].as_str().is_some_and(|d| d.len() > 100));
}
