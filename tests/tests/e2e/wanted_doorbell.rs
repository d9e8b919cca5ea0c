//! The doorbell of a declaration the stream refused: the hive reads its
//! key, finds nothing new, reads it again on `RECHECK_AFTER`'s steps (in
//! case the core message came before the stream stored the value), and
//! changes nothing. The first re-reads come at once, each after the last
//! one's answer, not on the timer's millisecond ticks, and a refused put
//! costs one read and one per step.
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

const T: Duration = Duration::from_secs(60);

/// When the next of the hive's reads of its key comes, within `T`.
async fn next_read(reads: &mut async_nats::Subscriber, what: &str) -> Instant {
    tokio::time::timeout(T, reads.next())
        .await
        .unwrap_or_else(|_| panic!("no read of the key in {T:?}: {what}"))
        .expect("the subscription to the hive's reads ended");
    Instant::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_puts_doorbell_is_read_again_at_once_then_on_each_step_and_changes_nothing() {
    let nats = NatsServer::start();
    let url = nats.url();
    let swarm = Swarm::connect(&url).await;
    let name = unique_name("doorbell");
    // No agent: nothing for Docker to make.
    let empty = json!({ "schema": 1, "agents": {} }).to_string();
    let r1 = swarm.declare(&name, &empty).await;

    let mut reads = swarm
        .client
        .subscribe(format!(
            "$JS.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.{name}"
        ))
        .await
        .unwrap();
    swarm.client.flush().await.unwrap();
    let _hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        nats_url: Some(&url),
        ..Default::default()
    });
    // The read at start and the one a second into the session: after
    // them, only a doorbell (or the minute's pull) makes the hive read.
    next_read(&mut reads, "at start").await;
    next_read(&mut reads, "a second into the session").await;
    swarm
        .status_until(&name, "the hive saw revision 1", T, |s| {
            s["seen_revision"].as_u64() == Some(r1)
        })
        .await;

    // A put the stream refuses (the key's last sequence is not 999): its
    // message still reaches the hive, as a doorbell.
    let refused = swarm
        .js
        .send_publish(
            format!("$KV.hyperhive-wanted.{name}"),
            jetstream::message::PublishMessage::build()
                .payload(empty.clone().into())
                .expected_last_subject_sequence(999),
        )
        .await
        .unwrap()
        .await;
    assert!(refused.is_err(), "the stream stored it: {refused:?}");

    let mut at = vec![next_read(&mut reads, "the doorbell's read").await];
    for step in &RECHECK_AFTER {
        at.push(next_read(&mut reads, &format!("the re-read after {step:?}")).await);
    }
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // The zero steps are read at once, one after another's answer: not
    // through the timer, whose ticks made each take 1.2 to 4 ms.
    let zeros = RECHECK_AFTER.iter().take_while(|s| s.is_zero()).count();
    assert!(zeros > 0, "no step reads at once: {RECHECK_AFTER:?}");
    let at_once = at[zeros] - at[0];
    assert!(
        at_once < Duration::from_millis(zeros as u64),
        "the {zeros} re-reads due at once took {at_once:?} (gaps between reads: {gaps:?})"
    );
    // Each step is waited after the read before it: the reads span the
    // steps' sum (half of it, against the delivery of their copies).
    let ladder: Duration = RECHECK_AFTER.iter().sum();
    let span = at[RECHECK_AFTER.len()] - at[0];
    assert!(
        span >= ladder / 2,
        "the re-reads ended {span:?} after the first, before the steps' {ladder:?}"
    );

    // Nothing changed: the hive still has revision 1, and no warning
    // about its declaration.
    let (_, s) = swarm.status(&name).await.expect("the hive's status");
    assert_eq!(s["seen_revision"].as_u64(), Some(r1), "{s}");
    let warnings = s["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        !warnings.iter().any(|w| w["key"] == "wanted_declaration"),
        "{s}"
    );
}
