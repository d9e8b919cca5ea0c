//! Defense in depth on the buckets, over a real nats-server with the
//! generated authorization and one more user with no permissions block
//! (an operator's admin identity, or a leaked one), which may send anything:
//!
//! - buckets made without `deny_purge` and `deny_delete` (hyperhive made
//!   them without `deny_purge` before; `deny_delete` is taken off here too)
//!   are named, each setting and bucket, by `nats-config --check` and by the
//!   warning `serve` logs at start; on them the admin's purge and message
//!   delete are carried out;
//! - `nats-config --check --fix`, run as the controller's generated
//!   identity, turns both on (read back with stream info), and the check
//!   passes; a second run changes nothing;
//! - afterwards the server refuses the admin's `$JS.API.STREAM.PURGE.KV_…`
//!   and `$JS.API.STREAM.MSG.DELETE.KV_…` on every bucket, and a KV purge
//!   (a roll-up), with the error code in its answer; a delete marker still
//!   lands and every value is still there.

use async_nats::jetstream::{self, kv};
use hyperhive_tests::controller_bin;
use hyperhive_tests::identity::{connect_as, render_roster, Identity, SecuredNats};
use hyperhive_tests::process::serve_controller;
use serde_json::{json, Value};
use swarm_queue_client::buckets::{check_buckets, stream_config};
use swarm_queue_client::{Bucket, BucketSettings};

/// nats-server's `err_code` for a refused stream purge.
const PURGE_NOT_PERMITTED: u64 = 10110;
/// For a refused message delete.
const MSG_DELETE_NOT_PERMITTED: u64 = 10057;
/// For a put with `Nats-Rollup` (a KV purge) on a stream without roll-ups.
const ROLLUP_NOT_PERMITTED: &str = "10111";

/// The generated accounts with `admin` added to the buckets' account (the
/// first one) as a user with no permissions block: nats-server lets it
/// publish and subscribe anywhere in that account.
fn with_admin(controller: &str, hives: &[(String, String)], admin: &str) -> String {
    let text = render_roster(controller, hives);
    assert!(text.contains("users: ["), "{text}");
    text.replacen(
        "users: [",
        &format!("users: [\n      # test only: an unrestricted admin\n      {{ nkey: {admin:?} }}"),
        1,
    )
}

/// Each bucket as hyperhive made it before `deny_purge` (roll-ups on all but
/// the status bucket), here without `deny_delete` too.
async fn make_weak_buckets(js: &jetstream::Context) {
    for b in Bucket::ALL {
        let config = jetstream::stream::Config {
            deny_delete: false,
            deny_purge: false,
            allow_rollup: b != Bucket::Status,
            ..stream_config(b, &BucketSettings::default_for(b))
        };
        js.create_stream(config).await.unwrap();
    }
}

/// The JSON answer of a JetStream API request.
async fn ask(client: &async_nats::Client, subject: String, body: Value) -> Value {
    let answer = client
        .request(subject.clone(), body.to_string().into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    serde_json::from_slice(&answer.payload).unwrap()
}

async fn store(js: &jetstream::Context, b: Bucket) -> kv::Store {
    js.get_key_value(b.name()).await.unwrap()
}

/// `swarm-controller --config CONFIG nats-config <args>`: exit code, stdout,
/// stderr.
fn nats_config(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(controller_bin())
        .args(["--config", config.to_str().unwrap(), "nats-config"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether one line of `text` names both `bucket` and `setting`.
fn names(text: &str, bucket: Bucket, setting: &str) -> bool {
    text.lines()
        .any(|l| l.contains(&format!("KV bucket {} ", bucket.name())) && l.contains(setting))
}

#[tokio::test]
async fn buckets_without_deny_purge_are_named_and_fixed_and_then_refuse_purges() {
    let admin = Identity::new_user();
    let s = SecuredNats::start(&["alpha"], |c, h| with_admin(c, h, &admin.public));
    let root = connect_as(&s.server.url(), &admin, "test-admin").await;
    let js = jetstream::new(root.client.clone());
    make_weak_buckets(&js).await;
    // One value in each bucket; on the wanted bucket, the hole: the admin
    // erases a value by sequence and purges a key, and the server obeys.
    let mut seqs = Vec::new();
    for b in Bucket::ALL {
        seqs.push(store(&js, b).await.put("alpha", "v1".into()).await.unwrap());
    }
    let wanted = store(&js, Bucket::Wanted).await;
    let stream = Bucket::Wanted.stream_name();
    let doomed = wanted.put("doomed", "d".into()).await.unwrap();
    let erased = ask(
        &root.client,
        format!("$JS.API.STREAM.MSG.DELETE.{stream}"),
        json!({ "seq": doomed }),
    )
    .await;
    assert_eq!(erased["success"], true, "{erased}");
    wanted.put("doomed", "d".into()).await.unwrap();
    let purged = ask(
        &root.client,
        format!("$JS.API.STREAM.PURGE.{stream}"),
        json!({ "filter": Bucket::Wanted.key_subject("doomed") }),
    )
    .await;
    assert_eq!(purged["success"], true, "{purged}");

    // Named by the check, by `nats-config --check` and by serve's warning.
    let ctl = s.controller_conn().await;
    let found = check_buckets(&ctl.jetstream()).await.unwrap();
    for b in Bucket::ALL {
        for setting in ["deny_purge", "deny_delete"] {
            assert!(
                found
                    .iter()
                    .any(|f| f.bucket == b.name() && f.setting == setting),
                "{b:?} {setting}: {found:?}"
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("controller.toml");
    std::fs::write(&config, s.controller.nats_toml(&s.server.url())).unwrap();
    let (code, _, stderr) = nats_config(&config, &["--check"]);
    assert_eq!(code, Some(1), "{stderr}");
    let log = dir.path().join("serve.log");
    let (mut serve, _) = serve_controller(&config, &log).await;
    serve.terminate();
    let log = std::fs::read_to_string(&log).unwrap();
    for b in Bucket::ALL {
        for setting in ["deny_purge = false", "deny_delete = false"] {
            assert!(names(&stderr, b, setting), "{b:?} {setting}:\n{stderr}");
            assert!(names(&log, b, setting), "{b:?} {setting}:\n{log}");
        }
    }
    assert!(log.contains("nats-config --check --fix"), "{log}");

    // Fixed, as the controller's own identity, and read back.
    let (code, stdout, stderr) = nats_config(&config, &["--check", "--fix"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for b in Bucket::ALL {
        for change in ["deny_purge false -> true", "deny_delete false -> true"] {
            assert!(names(&stdout, b, change), "{b:?} {change}:\n{stdout}");
        }
        let mut stream = js.get_stream(b.stream_name()).await.unwrap();
        let config = &stream.info().await.unwrap().config;
        assert!(config.deny_purge && config.deny_delete, "{b:?}: {config:?}");
        assert!(!config.allow_rollup, "{b:?}: {config:?}");
    }
    assert!(stdout.contains("buckets: ok"), "{stdout}");
    assert!(check_buckets(&js).await.unwrap().is_empty());
    let (code, again, stderr) = nats_config(&config, &["--check", "--fix"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !again.contains("fixed:"),
        "a second fix changed something: {again}"
    );

    // Now even the admin can erase nothing.
    for (b, seq) in Bucket::ALL.into_iter().zip(seqs) {
        let stream = b.stream_name();
        let purge = ask(
            &root.client,
            format!("$JS.API.STREAM.PURGE.{stream}"),
            json!({}),
        )
        .await;
        assert_eq!(
            purge["error"]["err_code"], PURGE_NOT_PERMITTED,
            "{b:?}: {purge}"
        );
        let delete = ask(
            &root.client,
            format!("$JS.API.STREAM.MSG.DELETE.{stream}"),
            json!({ "seq": seq }),
        )
        .await;
        assert_eq!(
            delete["error"]["err_code"], MSG_DELETE_NOT_PERMITTED,
            "{b:?}: {delete}"
        );
        let kv = store(&js, b).await;
        let rollup = kv.purge("alpha").await.unwrap_err().to_string();
        assert!(rollup.contains(ROLLUP_NOT_PERMITTED), "{b:?}: {rollup}");
        let entry = kv.entry("alpha").await.unwrap().unwrap();
        assert_eq!((entry.revision, &entry.value[..]), (seq, &b"v1"[..]));
        // A key is still removed with a delete marker.
        kv.delete("alpha").await.unwrap();
        assert_eq!(
            kv.entry("alpha").await.unwrap().unwrap().operation,
            kv::Operation::Delete
        );
    }
}
