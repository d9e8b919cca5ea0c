//! The rollout state in `hyperhive-rollouts` over a real nats-server: a
//! head naming parts, committed by one compare-and-set.
//!
//! - a rollout of 10,000 hives (several times one KV value) is written and
//!   read back whole, and the bucket holds no value over the limit;
//! - a controller that loses the head's compare-and-set after writing its
//!   parts leaves them unread (they are its own keys, so even a bucket that
//!   keeps one value per key loses nothing the winner named): the next read
//!   is exactly the winner's state, and a new rollout removes them;
//! - a change of one hive writes one part and the head, not the whole state;
//! - a part the head names that is gone is an error that names it, never a
//!   silently smaller rollout;
//! - a head of schema 1 (the whole state in `current`, as earlier
//!   controllers wrote it) is still read.

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use hyperhive_tests::NatsServer;
use swarm_controller::rollout::settings::{RolloutSettings, WaveSize};
use swarm_controller::rollout::state::{Change, Rollout, Step};
use swarm_controller::rollout::store::{self, Parts, StoreError};
use swarm_queue_client::{open_or_create, AgentName, AgentSpec, Bucket, BucketSettings};
use swarm_queue_client::{Declaration, HiveName};

async fn bucket(nats: &NatsServer) -> kv::Store {
    bucket_with(nats, BucketSettings::default_for(Bucket::Rollouts).history).await
}

async fn bucket_with(nats: &NatsServer, history: i64) -> kv::Store {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let settings = BucketSettings {
        history,
        ..BucketSettings::default_for(Bucket::Rollouts)
    };
    open_or_create(&js, Bucket::Rollouts, &settings)
        .await
        .unwrap()
}

/// `n` hives in waves 1, 1%, 10%, 100%, each with its own declaration.
fn rollout(n: usize, driver: &str) -> Rollout {
    let settings = RolloutSettings {
        waves: vec![
            WaveSize::Count(1),
            WaveSize::Percent(1),
            WaveSize::Percent(10),
            WaveSize::Percent(100),
        ],
        ..Default::default()
    };
    let changes = (0..n)
        .map(|i| Change {
            hive: HiveName::new(format!("sim{i:05}")).unwrap(),
            expected_revision: Some(i as u64 + 1),
            had_declaration: true,
            declaration: Declaration::new(
                [(
                    AgentName::new("api").unwrap(),
                    AgentSpec {
                        image: Some(format!("registry.example/api:{i}")),
                        command: Some(vec!["/bin/api".into(), format!("--shard={i}")]),
                        ..Default::default()
                    },
                )]
                .into(),
            ),
        })
        .collect();
    Rollout::plan(
        "r1".into(),
        "fleet.toml".into(),
        settings,
        driver.into(),
        changes,
    )
}

/// Every value in the bucket now: key -> (revision, bytes).
async fn values(store: &kv::Store) -> Vec<(String, u64, usize)> {
    let mut keys: Vec<String> = store
        .keys()
        .await
        .unwrap()
        .map(|k| k.unwrap())
        .collect()
        .await;
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        if let Some(e) = store.entry(k.as_str()).await.unwrap() {
            out.push((k, e.revision, e.value.len()));
        }
    }
    out
}

#[tokio::test]
async fn ten_thousand_hives_round_trip_and_one_change_writes_one_part() {
    let nats = NatsServer::start();
    let store = bucket(&nats).await;
    let r = rollout(10_000, "c1");
    let whole = serde_json::to_vec(&r).unwrap().len();
    let (revision, parts) = store::write(&store, &r, None, &Parts::default())
        .await
        .unwrap();
    let stored = store::read(&store).await.unwrap().unwrap();
    assert_eq!(stored.rollout, r);
    assert_eq!((stored.revision, &stored.parts), (revision, &parts));
    let all = values(&store).await;
    let max = swarm_queue_client::limits::MAX_VALUE_BYTES;
    println!(
        "FIGURES: rollout_state hives=10000 whole_bytes={whole} values={} largest_bytes={}",
        all.len(),
        all.iter().map(|v| v.2).max().unwrap()
    );
    assert!(
        whole > 4 * max,
        "the state should be several values: {whole}"
    );
    assert!(all.iter().all(|v| v.2 <= max), "{all:?}");
    assert_eq!(all.len(), 1 + parts.hives.len() + parts.declarations.len());

    // One hive done: one hive part and the head change, nothing else.
    let mut s = stored;
    let last = s.rollout.waves[3].last().unwrap().clone();
    s.rollout.hives.get_mut(&last).unwrap().step = Step::Done;
    let before = values(&store).await;
    store::update(&store, &mut s).await.unwrap();
    let after = values(&store).await;
    let moved: Vec<&str> = after
        .iter()
        .filter(|a| !before.contains(a))
        .map(|a| a.0.as_str())
        .collect();
    let last_part = s.parts.hives.last().unwrap().key.as_str();
    assert_eq!(moved, vec!["current", last_part]);
    assert_eq!(
        store::read(&store).await.unwrap().unwrap().rollout,
        s.rollout
    );
}

#[tokio::test]
async fn parts_written_by_the_loser_of_the_head_are_never_read() {
    // History 1 as well as the default 10: a loser never overwrites a part
    // the winning head names, however little history the bucket keeps.
    for history in [10, 1] {
        let nats = NatsServer::start();
        let store = bucket_with(&nats, history).await;
        let r = rollout(3_000, "c1");
        store::write(&store, &r, None, &Parts::default())
            .await
            .unwrap();
        // Two controllers read the same head and each change every hive.
        let mut a = store::read(&store).await.unwrap().unwrap();
        let mut b = a.clone();
        for t in a.rollout.hives.values_mut() {
            t.step = Step::Done;
        }
        a.rollout.driver = "a".into();
        for t in b.rollout.hives.values_mut() {
            t.step = Step::Failed;
            t.reason = Some("b's judgement".into());
        }
        b.rollout.driver = "b".into();
        store::update(&store, &mut a).await.unwrap();
        // b writes all its parts, then loses the head.
        let lost = store::update(&store, &mut b).await.unwrap_err();
        assert!(matches!(lost, StoreError::Conflict { .. }), "{lost}");
        let read = store::read(&store).await.unwrap().unwrap();
        assert_eq!(read.rollout, a.rollout, "history {history}");
        assert_eq!(read.rollout.counts().done, 3_000);
        // c1's parts went when a's head named its own; b's are there, unread.
        let keys: Vec<String> = values(&store).await.into_iter().map(|v| v.0).collect();
        let named: Vec<&str> = read.parts.keys().collect();
        assert!(
            named.iter().all(|k| k.starts_with("current.a.")),
            "{named:?}"
        );
        assert!(
            !keys.iter().any(|k| k.starts_with("current.c1.")),
            "{keys:?}"
        );
        let strays = keys.iter().filter(|k| k.starts_with("current.b.")).count();
        assert_eq!(strays, named.len(), "{keys:?}");
        // The next rollout's start removes them.
        store::remove_strays(&store, &read.parts).await;
        let left: Vec<String> = values(&store).await.into_iter().map(|v| v.0).collect();
        let mut expected: Vec<String> = named.iter().map(|k| k.to_string()).collect();
        expected.push("current".into());
        expected.sort();
        assert_eq!(left, expected, "history {history}");
        assert_eq!(
            store::read(&store).await.unwrap().unwrap().rollout,
            a.rollout
        );
    }
}

#[tokio::test]
async fn a_missing_part_is_an_error_that_names_it() {
    let nats = NatsServer::start();
    let store = bucket(&nats).await;
    let (_, parts) = store::write(&store, &rollout(3_000, "c1"), None, &Parts::default())
        .await
        .unwrap();
    let gone = &parts.hives[1];
    store::remove_part(&store, &gone.key).await.unwrap();
    let err = store::read(&store).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::PartGone { .. }), "{text}");
    assert!(
        text.contains(&gone.key) && text.contains(&gone.revision.to_string()),
        "{text}"
    );
}

#[tokio::test]
async fn a_schema_one_head_is_still_read() {
    let nats = NatsServer::start();
    let store = bucket(&nats).await;
    let mut r = rollout(6, "c1");
    r.schema = 1;
    let mut v = serde_json::to_value(&r).unwrap();
    v["schema"] = 1.into();
    store
        .create("current", serde_json::to_vec(&v).unwrap().into())
        .await
        .unwrap();
    let mut read = store::read(&store).await.unwrap().unwrap();
    assert_eq!(read.rollout, r);
    assert_eq!(read.parts, Parts::default());
    // Written again, it becomes a head with parts.
    store::update(&store, &mut read).await.unwrap();
    assert_eq!(read.parts.hives.len(), 1);
    let again = store::read(&store).await.unwrap().unwrap();
    assert_eq!(again.rollout.hives, r.hives);
    assert_eq!(again.rollout.waves, r.waves);
}
