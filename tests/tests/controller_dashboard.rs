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

use controller_support::*;
use hyperhive_tests::browser::Page;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use serde_json::json;

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
