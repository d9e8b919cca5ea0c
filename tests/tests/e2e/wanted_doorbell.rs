//! The doorbell of a declaration the stream refused: the hive reads its
//! key, finds nothing new, reads it again on `RECHECK_AFTER`'s steps (in
//! case the core message came before the stream stored the value), and
//! changes nothing: a refused put costs one read and one per step. The
//! credential doorbell at boot re-reads on the same steps.
//!
//! A real hive process, nats-server and dockerd. The hive's direct gets
//! are seen by a plain subscription to their request subject, beside the
//! stream's own queue subscription that answers them.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures_util::StreamExt;
use hive::bus::wanted::RECHECK_AFTER;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, NatsServer};
use serde_json::json;
use swarm_queue_client::Bucket;

const T: Duration = Duration::from_secs(60);

/// When the next of the hive's reads of its key comes, within `T`.
async fn next_read(reads: &mut async_nats::Subscriber, what: &str) -> Instant {
    tokio::time::timeout(T, reads.next())
        .await
        .unwrap_or_else(|_| panic!("no read of the key in {T:?}: {what}"))
        .expect("the subscription to the hive's reads ended");
    Instant::now()
}

/// Every direct get of `key` in `bucket`, seen by a plain subscription to
/// the request subject beside the stream's own that answers them.
async fn direct_gets(swarm: &Swarm, bucket: Bucket, key: &str) -> async_nats::Subscriber {
    let subject = format!(
        "$JS.API.DIRECT.GET.KV_{}.{}",
        bucket.name(),
        bucket.key_subject(key)
    );
    let reads = swarm.client.subscribe(subject).await.unwrap();
    swarm.client.flush().await.unwrap();
    reads
}

/// A put on `subject` that the stream refuses (the key's last sequence is
/// not 999): its message still reaches the hive, as a doorbell.
async fn refused_put(swarm: &Swarm, subject: String, payload: String) {
    let refused = swarm
        .js
        .send_publish(
            subject,
            jetstream::message::PublishMessage::build()
                .payload(payload.into())
                .expected_last_subject_sequence(999),
        )
        .await
        .unwrap()
        .await;
    assert!(refused.is_err(), "the stream stored it: {refused:?}");
}

/// The hive's next reads are a doorbell's read and one re-read per step of
/// `RECHECK_AFTER`, which span the steps. (That the zero steps come at
/// once, each right after the last one's answer, is a matter of time, not
/// of count: the converge bench shows it, in the reads and the time of
/// each declaration read before the stream stored it.)
async fn read_on_each_step(reads: &mut async_nats::Subscriber) {
    let mut at = vec![next_read(reads, "the doorbell's read").await];
    for step in &RECHECK_AFTER {
        at.push(next_read(reads, &format!("the re-read after {step:?}")).await);
    }
    // Each step is waited after the read before it: the reads span the
    // steps' sum (half of it, against the delivery of their copies).
    let ladder: Duration = RECHECK_AFTER.iter().sum();
    let span = at[RECHECK_AFTER.len()] - at[0];
    assert!(
        span >= ladder / 2,
        "the re-reads ended {span:?} after the first, before the steps' {ladder:?}"
    );
}

/// A real hive with an empty declaration (no agent: nothing for Docker to
/// make, no credential due), the hive's direct gets of `key` in `bucket`
/// watched from before it starts, and the hive past the read of its
/// declaration (its sessions are up).
struct Rig {
    _nats: NatsServer,
    swarm: Swarm,
    name: String,
    /// The empty declaration, and its revision.
    empty: String,
    r1: u64,
    reads: async_nats::Subscriber,
    _hive: HiveProc,
}

impl Rig {
    async fn start(prefix: &str, bucket: Bucket, key_of: impl Fn(&str) -> String) -> Rig {
        let nats = NatsServer::start();
        let url = nats.url();
        let swarm = Swarm::connect(&url).await;
        swarm.bucket(bucket.name()).await;
        let name = unique_name(prefix);
        let empty = json!({ "schema": 1, "agents": {} }).to_string();
        let r1 = swarm.declare(&name, &empty).await;
        let reads = direct_gets(&swarm, bucket, &key_of(&name)).await;
        let hive = HiveProc::start(HiveSpec {
            name: Some(&name),
            nats_url: Some(&url),
            ..Default::default()
        });
        swarm
            .status_until(&name, "the hive saw revision 1", T, |s| {
                s["seen_revision"].as_u64() == Some(r1)
            })
            .await;
        Rig {
            _nats: nats,
            swarm,
            name,
            empty,
            r1,
            reads,
            _hive: hive,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_puts_doorbell_is_read_again_on_each_step_and_changes_nothing() {
    let mut rig = Rig::start("doorbell", Bucket::Wanted, str::to_string).await;
    let (swarm, name) = (&rig.swarm, &rig.name);
    // The read at start and the one a second into the session: after
    // them, only a doorbell (or the minute's pull) makes the hive read.
    next_read(&mut rig.reads, "at start").await;
    next_read(&mut rig.reads, "a second into the session").await;

    refused_put(swarm, Bucket::Wanted.key_subject(name), rig.empty.clone()).await;
    read_on_each_step(&mut rig.reads).await;

    // Nothing changed: the hive still has revision 1, and no warning
    // about its declaration.
    let (_, s) = swarm.status(name).await.expect("the hive's status");
    assert_eq!(s["seen_revision"].as_u64(), Some(rig.r1), "{s}");
    let warnings = s["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        !warnings.iter().any(|w| w["key"] == "wanted_declaration"),
        "{s}"
    );
}

/// The credential doorbell at boot re-reads on the same steps: a refused
/// put under one of this hive's credential keys rings it, the key holds
/// nothing, and the hive reads it once and once per step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_credentials_doorbell_is_read_again_on_each_step() {
    let key_of = |name: &str| format!("{name}.web.smtp");
    let mut rig = Rig::start("credbell", Bucket::Credentials, key_of).await;
    let subject = Bucket::Credentials.key_subject(&key_of(&rig.name));
    refused_put(&rig.swarm, subject, "never stored".to_string()).await;
    read_on_each_step(&mut rig.reads).await;
}
