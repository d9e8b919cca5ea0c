//! The server holds no JetStream consumer per hive: with 1 and then 4 real
//! `hive` processes, each converged on two declarations (the second heard
//! by its doorbell) and publishing its status, the consumers on the three
//! buckets' streams are counted from the server (`$JS.API.CONSUMER.LIST`
//! through `Stream::info`). They do not grow with the number of hives.

use std::time::Duration;

use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, NatsServer};
use swarm_queue_client::Bucket;

const T: Duration = Duration::from_secs(60);
const EMPTY: &str = r#"{"schema":1,"agents":{}}"#;

/// Consumers on the three buckets' streams, as the server counts them.
async fn consumers(swarm: &Swarm) -> usize {
    let mut n = 0;
    for b in Bucket::ALL {
        if let Ok(mut stream) = swarm.js.get_stream(b.stream_name()).await {
            n += stream.info().await.unwrap().state.consumer_count;
        }
    }
    n
}

/// Start hives until there are `n`, then declare twice for each and wait
/// until every one converged on its second declaration.
async fn grow(swarm: &Swarm, url: &str, hives: &mut Vec<(String, HiveProc)>, n: usize) {
    while hives.len() < n {
        let name = unique_name(&format!("cs{}", hives.len()));
        swarm.declare(&name, EMPTY).await;
        let h = HiveProc::start(HiveSpec {
            name: Some(&name),
            nats_url: Some(url),
            ..Default::default()
        });
        hives.push((name, h));
    }
    for (name, _) in hives.iter() {
        let first = swarm.declare(name, EMPTY).await;
        swarm.converged(name, first, T).await;
        let second = swarm.declare(name, EMPTY).await;
        swarm.converged(name, second, T).await;
    }
}

#[tokio::test]
async fn jetstream_consumers_do_not_grow_with_the_number_of_hives() {
    let nats = NatsServer::start();
    let url = nats.url();
    let swarm = Swarm::connect(&url).await;
    swarm.bucket(Bucket::Credentials.name()).await;
    let mut hives = Vec::new();
    grow(&swarm, &url, &mut hives, 1).await;
    let with_one = consumers(&swarm).await;
    grow(&swarm, &url, &mut hives, 4).await;
    let with_four = consumers(&swarm).await;
    eprintln!("JetStream consumers: {with_one} with 1 hive, {with_four} with 4 hives");
    assert_eq!(
        (with_one, with_four),
        (0, 0),
        "hives must hold no JetStream consumer"
    );
}
