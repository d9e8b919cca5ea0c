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

use crate::controller_support::*;
use futures_util::StreamExt;
use hyperhive_tests::browser::Page;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use serde_json::{json, Value};

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

/// Hives in the scale test: 2,000 in the suite (CI), 10,000 with
/// `HH_DASHBOARD_HIVES=10000` (what `scripts/bench` runs).
fn scale_hives() -> usize {
    std::env::var("HH_DASHBOARD_HIVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn scale_name(i: usize) -> String {
    format!("hive-{i:05}")
}

/// What hive `i` reports: every 20th failed, the next degraded, the next
/// never reported (unknown), the rest converged. `version` varies a value.
fn scale_status(i: usize, rev: u64, version: &str) -> Option<swarm_queue_client::HiveStatus> {
    use swarm_queue_client::{HiveState, Observed};
    let spec = image_spec(&format!("local/web:{}", i % 7));
    let mut r = match i % 20 {
        0 => hive_status(
            &scale_name(i),
            HiveState::Ok,
            Some(rev),
            None,
            vec![(
                "web",
                agent_status(
                    &spec,
                    Observed::Missing,
                    Some(("failed", Some("pull local/web: manifest unknown"))),
                ),
            )],
        ),
        1 => hive_status(
            &scale_name(i),
            HiveState::Degraded,
            Some(rev),
            Some(rev),
            vec![(
                "web",
                agent_status(&spec, Observed::Running, Some(("done", None))),
            )],
        ),
        2 => return None,
        _ => hive_status(
            &scale_name(i),
            HiveState::Ok,
            Some(rev),
            Some(rev),
            vec![(
                "web",
                agent_status(&spec, Observed::Running, Some(("done", None))),
            )],
        ),
    };
    r.version = version.to_string();
    Some(r)
}

/// Put every value, 256 at a time; the revisions by key.
async fn put_many(
    store: &async_nats::jetstream::kv::Store,
    values: Vec<(String, Vec<u8>)>,
) -> std::collections::BTreeMap<String, u64> {
    futures_util::stream::iter(values)
        .map(|(key, value)| {
            let store = store.clone();
            async move {
                let rev = store
                    .put(key.as_str(), bytes::Bytes::from(value))
                    .await
                    .unwrap();
                (key, rev)
            }
        })
        .buffer_unordered(256)
        .collect()
        .await
}

/// The first event of `/api/events?<query>`: its size in bytes.
async fn first_event_bytes(base: &str, query: &str) -> usize {
    let mut resp = reqwest::get(format!("{base}/api/events?{query}"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut buf = String::new();
    while !buf.contains("\n\n") {
        let chunk = tokio::time::timeout(T, resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
    let block = &buf[..buf.find("\n\n").unwrap()];
    assert!(
        block.starts_with("event: snapshot") || block.contains("event:snapshot"),
        "{block:.80}"
    );
    block.len()
}

/// The dashboard over a large fleet (2,000 hives here; 10,000 with
/// `HH_DASHBOARD_HIVES`), in headless Chromium. Asserts structure, not
/// time: the page shows at most one page of rows, the worst first; the
/// snapshot's size is bounded by the page, not the fleet; one KV update
/// repaints exactly one row (a MutationObserver and node identity); an
/// update of a hive the page does not show sends no row; a filter is a new
/// event stream in the same document. Prints the first-paint time, the
/// tab's heap and the byte counts (`docs/benchmarks-controller.md`).
#[tokio::test]
async fn dashboard_at_scale_shows_one_page_and_repaints_one_row() {
    let n = scale_hives();
    let env = Env::new(&[], "").await;
    let mut text = format!(
        "stale_after_secs = 3600\n[nats]\nurl = {:?}\n",
        env.nats.url()
    );
    for i in 0..n {
        text.push_str(&format!(
            "[hives.{}]\nlabels = {{ site = \"site-{}\" }}\n",
            scale_name(i),
            i % 10
        ));
    }
    let config = env.write("scale.toml", &text);
    let t = std::time::Instant::now();
    let declarations = (0..n)
        .map(|i| {
            let mut agents = std::collections::BTreeMap::new();
            agents.insert(agent("web"), image_spec(&format!("local/web:{}", i % 7)));
            let d = swarm_queue_client::Declaration::new(agents);
            (
                scale_name(i),
                swarm_queue_client::encode_pretty(&d).unwrap(),
            )
        })
        .collect();
    let revs = put_many(&env.wanted, declarations).await;
    let statuses = (0..n)
        .filter_map(|i| {
            let r = scale_status(i, revs[&scale_name(i)], "0.1.0")?;
            Some((
                scale_name(i),
                swarm_queue_client::encode_pretty(&r).unwrap(),
            ))
        })
        .collect();
    put_many(&env.status, statuses).await;
    println!("{n} hives put in {:.2} s", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    let (_serve, base) = serve_with(&config, &env.path("serve.log")).await;
    println!("serve listening after {:.2} s", t.elapsed().as_secs_f64());

    // The API's filters over the same fleet.
    let full = reqwest::get(format!("{base}/api/status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let failed: Value = reqwest::get(format!("{base}/api/status?convergence=failed&limit=5"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(failed["matched"], n.div_ceil(20));
    assert_eq!(
        failed["hives"].as_array().unwrap().len(),
        5.min(n.div_ceil(20))
    );
    let page_query = "sort=attention&offset=0&limit=100";
    let snapshot_bytes = first_event_bytes(&base, page_query).await;
    println!(
        "snapshot of the first page: {snapshot_bytes} B; full /api/status: {} B ({:.0}x)",
        full.len(),
        full.len() as f64 / snapshot_bytes as f64
    );
    // Bounded by the page (100 rows of at most 4 KiB), whatever the fleet.
    assert!(snapshot_bytes < 100 * 4096, "{snapshot_bytes}");

    let mut page = Page::launch(&env.path("chromium.log")).await;
    page.call("Performance.enable", json!({})).await;
    let nav = std::time::Instant::now();
    page.call("Page.navigate", json!({ "url": format!("{base}/") }))
        .await;
    let first_rows_ms = page
        .wait_for(
            "the first rows",
            "window.hyperhive && window.hyperhive.firstRowsMs",
        )
        .await;
    let wall_ms = nav.elapsed().as_secs_f64() * 1000.0;
    let frame_ms = page
        .wait_for(
            "the first frame with rows",
            "performance.getEntriesByName('hh-first-frame')[0]?.startTime",
        )
        .await;
    let fcp = page
        .eval("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null")
        .await;
    println!(
        "first useful paint: rows in the DOM {first_rows_ms:.0} ms, next frame {frame_ms:.0} ms \
         after navigation start (first contentful paint {fcp}; wall from Page.navigate {wall_ms:.0} ms)"
    );
    let shown = page
        .eval("document.querySelectorAll('#hives tr').length")
        .await;
    assert_eq!(shown, n.min(100), "one page of rows");
    let summary = page
        .eval("document.getElementById('summary').textContent")
        .await;
    assert!(
        summary.as_str().unwrap().starts_with(&format!("{n} hives")),
        "{summary}"
    );
    let first = page
        .eval("document.querySelector('#hives tr').dataset.convergence")
        .await;
    assert_eq!(first, "failed", "the worst first");
    let heap = heap_mb(&mut page).await;
    println!("tab JS heap after the first page: {heap:.1} MB");

    // One KV update of a shown hive: one row replaced, every other node kept.
    let origin = page
        .eval(
            "window.hhMarker = 1; window.hhRecords = []; \
             for (const tr of document.querySelectorAll('#hives tr')) tr.hhKept = true; \
             new MutationObserver((rs) => { for (const r of rs) window.hhRecords.push( \
               [r.addedNodes.length, r.removedNodes.length]); }) \
               .observe(document.getElementById('hives'), { childList: true }); \
             performance.timeOrigin",
        )
        .await;
    let stats = || async {
        reqwest::get(format!("{base}/api/stats"))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let before = stats().await;
    let target = scale_name(0);
    let status = scale_status(0, revs[&target], "0.1.1").unwrap();
    let rev = env.put_status(&status).await;
    page.wait_for(
        "the updated row",
        &format!("document.getElementById('hive-{target}')?.dataset.statusRevision === '{rev}'"),
    )
    .await;
    let records = page.eval("window.hhRecords").await;
    let renewed = page
        .eval("[...document.querySelectorAll('#hives tr')].filter((tr) => !tr.hhKept).map((tr) => tr.dataset.hive)")
        .await;
    println!("one update: mutation records {records}, new nodes {renewed}");
    assert_eq!(records, json!([[1, 1]]), "one row replaced, nothing else");
    assert_eq!(renewed, json!([target]));
    let after = stats().await;
    assert_eq!(
        after["values_decoded"].as_u64().unwrap() - before["values_decoded"].as_u64().unwrap(),
        1,
        "one value decoded for one update"
    );

    // An update of a hive the page does not show: no row, a summary only.
    let hidden = scale_name(n - 1);
    assert!((n - 1) % 20 > 2, "the last hive is a converged one");
    let counters = "JSON.stringify([window.hyperhive.rowEvents, window.hyperhive.summaryEvents, \
                    window.hyperhive.bytes])";
    let start: Vec<u64> =
        serde_json::from_str(page.eval(counters).await.as_str().unwrap()).unwrap();
    let mut published = scale_status(n - 1, revs[&hidden], "0.1.1").unwrap();
    published.seen_revision = Some(revs[&hidden] - 1);
    published.converged_revision = Some(revs[&hidden] - 1);
    env.put_status(&published).await;
    page.wait_for(
        "the summary to count the published hive",
        &format!("window.hyperhive.summaryEvents > {}", start[1]),
    )
    .await;
    let end: Vec<u64> = serde_json::from_str(page.eval(counters).await.as_str().unwrap()).unwrap();
    println!(
        "an update of a hive not shown: {} B sent to the page",
        end[2] - start[2]
    );
    assert_eq!(end[0], start[0], "no row event");
    assert!(
        end[2] - start[2] < 1024,
        "a summary, not a row: {}",
        end[2] - start[2]
    );
    let summary = page
        .eval("document.getElementById('summary').textContent")
        .await;
    assert!(
        summary.as_str().unwrap().contains("1 published"),
        "{summary}"
    );
    let found = page
        .eval(&format!("!!document.getElementById('hive-{hidden}')"))
        .await;
    assert_eq!(found, false);

    // A filter is a new event stream in the same document.
    page.eval(
        "const n = document.getElementById('name'); n.value = 'hive-0001'; \
               n.dispatchEvent(new Event('input'))",
    )
    .await;
    let names = page
        .wait_for(
            "the name filter",
            "(() => { const t = [...document.querySelectorAll('#hives tr')].map((tr) => tr.dataset.hive); \
              return t.length === 10 && t.every((h) => h.startsWith('hive-0001')) && t; })()",
        )
        .await;
    println!("filtered by name: {names}");
    assert_eq!(
        page.eval("performance.timeOrigin").await,
        origin,
        "a new document"
    );
    assert_eq!(
        page.eval("window.hhMarker").await,
        1,
        "the page was reloaded"
    );
    let heap = heap_mb(&mut page).await;
    println!("tab JS heap at the end: {heap:.1} MB");
}

/// The tab's used JavaScript heap, in MB (`Performance.getMetrics`).
async fn heap_mb(page: &mut Page) -> f64 {
    let metrics = page.call("Performance.getMetrics", json!({})).await;
    metrics["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "JSHeapUsedSize")
        .and_then(|m| m["value"].as_f64())
        .unwrap()
        / 1e6
}
