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
