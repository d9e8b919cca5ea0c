//! The harness itself, over the real components.

use std::time::Duration;

use hyperhive_tests::docker::{docker, TestImage};
use hyperhive_tests::{wait_until, NatsServer};

#[tokio::test]
async fn nats_server_restarts_on_the_same_port_and_keeps_its_store() {
    let mut s = NatsServer::start();
    let url = s.url();
    let client = async_nats::connect(&url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "harness".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("k", "v1".into()).await.unwrap();
    let pid = s.pid();
    s.restart();
    assert_eq!(s.url(), url);
    assert_ne!(s.pid(), pid);
    let client = async_nats::connect(&url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let v = wait_until(
        Duration::from_secs(10),
        "the KV value after restart",
        || {
            let js = js.clone();
            async move {
                let kv = js.get_key_value("harness").await.ok()?;
                kv.get("k").await.ok().flatten()
            }
        },
    )
    .await;
    assert_eq!(&v[..], b"v1");
}

#[test]
fn busybox_image_runs_and_is_removed_on_drop() {
    let reference = {
        let img = TestImage::busybox("harness");
        let out = docker(&[
            "run",
            "--rm",
            "--network",
            "none",
            &img.reference,
            "/bin/echo",
            "hi",
        ]);
        assert_eq!(out, "hi");
        img.reference.clone()
    };
    let left = docker(&["images", "-q", &reference]);
    assert!(left.is_empty(), "image {reference} left behind");
}

/// A page that reloads itself as fast as it can for ten seconds (by its
/// own clock, so a slower machine makes fewer loads, not a longer wait):
/// evaluations the wait sends meet documents being left. The wait must ask
/// again in the next document rather than fail (a link clicked on the
/// dashboard does the same, once).
#[tokio::test]
async fn the_browser_wait_carries_on_across_a_page_that_navigates() {
    use hyperhive_tests::browser::Page;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const RELOAD_MS: u32 = 10_000;
    let page_text = format!(
        "<!doctype html><title>reloading</title><script>\
         const now = Date.now(); const start = Number(sessionStorage.start || now); \
         sessionStorage.start = start; sessionStorage.n = Number(sessionStorage.n || 0) + 1; \
         if (now - start < {RELOAD_MS}) location.reload(); else document.title = 'done';</script>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let body = page_text.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncache-control: no-store\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body.as_bytes()).await;
            });
        }
    });
    let dir = tempfile::Builder::new()
        .prefix("hhtest-browser-")
        .tempdir()
        .unwrap();
    let mut page = Page::launch(&dir.path().join("chromium.log")).await;
    page.call(
        "Page.navigate",
        serde_json::json!({ "url": format!("http://127.0.0.1:{port}/") }),
    )
    .await;
    let loads = page
        .wait_for(
            "the page's last load",
            "document.title === 'done' && sessionStorage.n",
        )
        .await;
    // Evidence that the wait ran across many navigations: 370 and 386 loads
    // here in the ten seconds.
    let loads: u32 = loads.as_str().unwrap().parse().unwrap();
    assert!(loads >= 50, "only {loads} loads");
    println!("{loads} loads under the wait");
    server.abort();
}

/// Set in the child [`without_docker_a_failing_test_still_cleans_up`]
/// runs: where that child writes the path of the directory it made.
const NO_DOCKER_REPORT: &str = "HH_TEST_NO_DOCKER_REPORT";

/// With no Docker daemon, a failing test must fail as a test (exit 101) and
/// unwind, so that every guard cleans up: a guard that panicked again while
/// unwinding made the whole test binary abort, and every other test's
/// servers, browsers and directories were left behind. The test runs
/// itself again in a process of its own whose `docker` reaches no daemon;
/// there (told by [`NO_DOCKER_REPORT`]) it makes a directory and a
/// container guard, then fails for want of Docker, as any Docker test
/// fails when dockerd is down.
#[test]
fn without_docker_a_failing_test_still_cleans_up() {
    if let Ok(report) = std::env::var(NO_DOCKER_REPORT) {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-nodocker-")
            .tempdir()
            .unwrap();
        std::fs::write(report, dir.path().as_os_str().as_encoded_bytes()).unwrap();
        let _containers = hyperhive_tests::docker::ContainerGuard::new("hhtest-nodocker");
        hyperhive_tests::docker::require_docker();
        unreachable!("a Docker daemon answered at DOCKER_HOST=unix:///nonexistent");
    }
    let scratch = tempfile::Builder::new()
        .prefix("hhtest-nodocker-report-")
        .tempdir()
        .unwrap();
    let report = scratch.path().join("made");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "harness::without_docker_a_failing_test_still_cleans_up",
        ])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env(NO_DOCKER_REPORT, &report)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(101), "{:?}: {said}", out.status);
    assert!(said.contains("no Docker daemon answers"), "{said}");
    let made = std::fs::read_to_string(&report).unwrap();
    assert!(
        !std::path::Path::new(&made).exists(),
        "{made} was left behind"
    );
}
