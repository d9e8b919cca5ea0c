//! A daemon connects to a nats-server whose users are nkeys (the
//! authorization `swarm-controller nats-config` writes and the NixOS module
//! installs) with a plain nkey seed file as `nats.credentials_file`.

use std::time::Duration;

use hyperhive_tests::{wait_until, NatsServer};
use swarm_queue_client::{connect, ensure_connected, NatsConfig};

fn server_with_user(public_nkey: &str) -> NatsServer {
    NatsServer::start_with(
        Some(&format!(
            "authorization {{\n  users = [\n    {{ nkey: \"{public_nkey}\" }}\n  ]\n}}\n"
        )),
        &[],
    )
}

fn seed_file(dir: &tempfile::TempDir, name: &str, contents: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, contents).expect("write seed file");
    path
}

#[tokio::test]
async fn a_plain_nkey_seed_file_authenticates() {
    let user = nkeys::KeyPair::new_user();
    let server = server_with_user(&user.public_key());
    let dir = tempfile::tempdir().unwrap();
    // As `nk -gen user -pubout` writes it: the seed, then the public key.
    let seed = user.seed().unwrap();
    let path = seed_file(&dir, "hive.nk", &format!("{seed}\n{}\n", user.public_key()));
    let config = NatsConfig {
        url: Some(server.url()),
        credentials_file: Some(path),
        ..Default::default()
    };
    let conn = connect(&config, "hhtest-nkey").await.expect("connect");
    wait_until(Duration::from_secs(10), "the nkey user to connect", || {
        let client = conn.client.clone();
        async move { ensure_connected(&client).ok() }
    })
    .await;
    conn.client
        .publish("hhtest.nkey", "ok".into())
        .await
        .expect("publish as the nkey user");
    conn.client.flush().await.expect("flush");
}

#[tokio::test]
async fn a_seed_the_server_does_not_know_is_refused() {
    let known = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let server = server_with_user(&known.public_key());
    let dir = tempfile::tempdir().unwrap();
    let path = seed_file(&dir, "stranger.nk", &stranger.seed().unwrap());
    let config = NatsConfig {
        url: Some(server.url()),
        credentials_file: Some(path),
        ..Default::default()
    };
    // The initial connect is retried in the background, so connect() itself
    // succeeds; the server's log shows the refusal.
    let conn = connect(&config, "hhtest-nkey-stranger")
        .await
        .expect("connect");
    wait_until(
        Duration::from_secs(10),
        "the server to refuse the stranger",
        || {
            let log = server.log();
            async move { log.contains("authentication error").then_some(()) }
        },
    )
    .await;
    assert!(ensure_connected(&conn.client).is_err());
}
