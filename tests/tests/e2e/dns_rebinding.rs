//! DNS rebinding: a page whose own name an attacker's DNS points at this
//! machine is, to the browser, same-origin with whatever listens there, so
//! it could read the hive's status and metrics and the controller's
//! whole fleet view. Both listeners answer only a `Host` that names this
//! machine (an IP literal, `localhost`, its own host name, or a name the
//! operator listed); any other gets 421 and reaches no route. Over a real
//! `hive` process, a real `swarm-controller serve`, and headless Chromium
//! resolving the attacker's name to 127.0.0.1.

use crate::controller_support::*;
use hyperhive_tests::browser::Page;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::unique_name;
use serde_json::json;

const EVIL: &str = "rebind.evil.example";

/// GET `base` + `path` with `host` as the `Host` header: status and body.
async fn get_as(base: &str, path: &str, host: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("Host", host)
        .send()
        .await
        .expect("the listener answers");
    let code = resp.status().as_u16();
    (code, resp.text().await.unwrap_or_default())
}

/// The `host:port` of an `http://host:port` base URL.
fn authority(base: &str) -> &str {
    base.trim_start_matches("http://").trim_end_matches('/')
}

fn port(base: &str) -> u16 {
    authority(base).rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hive_answers_only_a_host_that_names_this_machine() {
    let name = unique_name("rebind-hive");
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: "http_allowed_hosts = [\"metrics.internal\"]\n",
        ..Default::default()
    });
    let base = hive.api().await;
    let p = port(&base);
    for path in ["/health/ready", "/health/live", "/metrics"] {
        for host in [
            authority(&base).to_string(),
            format!("localhost:{p}"),
            format!("metrics.internal:{p}"),
        ] {
            let (code, body) = get_as(&base, path, &host).await;
            assert!(
                matches!(code, 200 | 503),
                "GET {path} as {host}: {code} {body}"
            );
        }
        let evil = format!("{EVIL}:{p}");
        let (code, body) = get_as(&base, path, &evil).await;
        assert_eq!(code, 421, "GET {path} as {evil}: {body}");
        assert!(body.contains(&format!("{evil:?}")), "{body}");
        assert!(!body.contains(&name), "the refusal leaks the hive: {body}");
    }
}

#[tokio::test]
async fn the_dashboard_answers_only_a_host_that_names_this_machine() {
    let env = Env::new(&["alpha"], "").await;
    let (_serve, base) = env.serve("serve.log").await;
    let p = port(&base);
    let evil = format!("{EVIL}:{p}");
    for path in ["/", "/api/status", "/api/stats"] {
        let (code, body) = get_as(&base, path, authority(&base)).await;
        assert_eq!(code, 200, "GET {path}: {body}");
        let (code, body) = get_as(&base, path, &format!("localhost:{p}")).await;
        assert_eq!(code, 200, "GET {path} as localhost: {body}");
        let (code, body) = get_as(&base, path, &evil).await;
        assert_eq!(code, 421, "GET {path} as {evil}: {body}");
        assert!(
            !body.contains("alpha"),
            "the refusal leaks the fleet: {body}"
        );
    }
    // The event stream is refused before it starts.
    let (code, _) = get_as(&base, "/api/events", &evil).await;
    assert_eq!(code, 421);
    // A liveness probe says nothing and answers any name.
    let (code, _) = get_as(&base, "/health/live", &evil).await;
    assert_eq!(code, 200);
}

/// The attack itself: Chromium resolves the attacker's name to 127.0.0.1
/// and opens the hive's and the dashboard's ports under it. The pages it
/// gets hold the refusal, never the status or the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_in_chromium_reads_nothing() {
    let name = unique_name("rebind-cr");
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        ..Default::default()
    });
    let hive_base = hive.api().await;
    let env = Env::new(&["alpha"], "").await;
    let (_serve, dash_base) = env.serve("serve.log").await;

    let dir = tempfile::Builder::new()
        .prefix("hhtest-rebind-")
        .tempdir()
        .unwrap();
    let rule = format!("--host-resolver-rules=MAP {EVIL} 127.0.0.1");
    let mut page = Page::launch_with(&dir.path().join("chromium.log"), &[&rule]).await;
    for (base, path, secret) in [
        (&hive_base, "/health/ready", name.as_str()),
        (&hive_base, "/metrics", name.as_str()),
        (&dash_base, "/api/status", "alpha"),
        (&dash_base, "/", "hyperhive"),
    ] {
        let url = format!("http://{EVIL}:{}{path}", port(base));
        page.call("Page.navigate", json!({ "url": url })).await;
        let text = page
            .wait_for(
                "the rebound page to load",
                &format!(
                    "location.href === '{url}' && document.readyState === 'complete' \
                     && document.body && document.body.innerText"
                ),
            )
            .await;
        let text = text.as_str().unwrap_or_default().to_string();
        println!("{url}: {text}");
        assert!(
            text.contains("does not name this machine"),
            "{url} was read: {text}"
        );
        assert!(!text.contains(secret), "{url} leaked {secret:?}: {text}");
        // And from a script on that page, as an attacker would read it.
        page.eval(&format!(
            "window.hhRead = null; fetch('{path}').then(r => r.text()).then(t => window.hhRead = t, \
             e => window.hhRead = 'error:' + e); true"
        ))
        .await;
        let read = page.wait_for("the page's fetch", "window.hhRead").await;
        let read = read.as_str().unwrap_or_default();
        assert!(
            !read.contains(secret),
            "{url} leaked {secret:?} to fetch: {read}"
        );
    }
}
