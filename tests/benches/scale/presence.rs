//! The connection events at N = 10,000 (`-- --presence`): what the
//! controller (`swarm-controller serve`, its own process) pays to learn
//! who is connected and to show hives `offline` and back.
//!
//! Not 10,000 real connections in 10,000 accounts: the events are
//! published by this bench, on the same subjects and with the same
//! payloads as nats-server's, into the controller's account, and the bench
//! answers the connection-list request (`hyperhive.connz`) itself, page by
//! page, as every server does. What the controller does per event (decode,
//! presence set, row recompute, one broadcast) is the same; what is left
//! out is the server's own cost of 10,000 accounts, which is no cost of
//! the controller's. A server config of 10,000 accounts (each with its
//! identity and imports) is what a real fleet needs, and starting 10,000
//! clients of 10,000 accounts here would measure the server, not this.
//!
//! Measured: serve start (both buckets and the connection list), the time
//! and controller CPU for a burst of N disconnect events (every row
//! `offline`) and one of N connect events (every row `fresh` again, as
//! after a server restart), and the controller's CPU share at a steady
//! churn of 100 events a second (every hive reconnecting every 200 s).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hyperhive_tests::swarm::write_controller_config;
use hyperhive_tests::{wait_until, NatsServer};
use serde_json::{json, Value};
use swarm_queue_client::presence::CONNZ_REQUEST;
use swarm_queue_client::test_support::HiveStatusBuilder;
use swarm_queue_client::{encode, open_or_create, Bucket, BucketSettings, HiveState};

use crate::dashboard;
use crate::measure::{cpu_time, proc_kib};

const T: Duration = Duration::from_secs(300);
/// The churn: events a second, and for how long.
const CHURN_RATE: u64 = 100;
const CHURN_FOR: Duration = Duration::from_secs(10);
const SERVER_ID: &str = "NBENCHSERVER";

pub async fn bench(ns: &[usize]) {
    for &n in ns {
        run(n).await;
    }
}

async fn run(n: usize) {
    let nats = NatsServer::start();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    for b in Bucket::ALL {
        open_or_create(&js, b, &BucketSettings::default_for(b))
            .await
            .unwrap();
    }
    let names: Vec<String> = (0..n).map(|i| format!("sim{i:05}")).collect();
    put_statuses(&js, &names).await;
    eprintln!("presence n={n}: {n} status entries put");
    tokio::spawn(answer_connz(client.clone(), names.clone()));

    let dir = tempfile::Builder::new()
        .prefix("hhtest-scale-presence-")
        .tempdir()
        .unwrap();
    let config = write_controller_config(dir.path(), &names, 3600, &nats.url());
    let serve = dashboard::start(&config, &dir.path().join("serve.log")).await;
    let http = reqwest::Client::new();
    let counts = |state: &'static str| {
        let (http, base) = (http.clone(), serve.base.clone());
        async move { freshness_count(&http, &base, state).await }
    };
    wait_until(T, "every row fresh by the connection list", || async {
        (counts("fresh").await == n).then_some(())
    })
    .await;
    let rss_start = proc_kib(serve.pid, "VmRSS:");
    eprintln!("presence n={n}: serve up, every row fresh");

    let (down_s, down_cpu) = burst(&client, &names, false, serve.pid, || async {
        (counts("offline").await == n).then_some(())
    })
    .await;
    let (up_s, up_cpu) = burst(&client, &names, true, serve.pid, || async {
        (counts("fresh").await == n).then_some(())
    })
    .await;
    let churn_share = churn(&client, &names, serve.pid).await;
    let rss_end = proc_kib(serve.pid, "VmRSS:");
    let hwm = proc_kib(serve.pid, "VmHWM:");
    println!(
        "FIGURES: presence n={n} serve_start_ms={:.0} disconnect_burst_s={down_s:.2} \
         disconnect_burst_cpu_s={down_cpu:.2} connect_burst_s={up_s:.2} \
         connect_burst_cpu_s={up_cpu:.2} cpu_us_per_event={:.0} churn_{CHURN_RATE}_per_s_cpu_pct={:.1} \
         serve_rss_mib={:.1} serve_rss_after_mib={:.1} serve_peak_mib={:.1}",
        serve.start.as_secs_f64() * 1000.0,
        (down_cpu + up_cpu) * 1e6 / (2 * n) as f64,
        churn_share * 100.0,
        rss_start as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        hwm as f64 / 1024.0,
    );
}

/// A status entry for every hive, as a hive that just reported.
async fn put_statuses(js: &async_nats::jetstream::Context, names: &[String]) {
    // In chunks: the JetStream context holds a bounded number of acks in
    // flight, and a publish past it waits for one to be taken.
    for chunk in names.chunks(500) {
        let mut acks = Vec::new();
        for name in chunk {
            let value = encode(&HiveStatusBuilder::new(name, HiveState::Ok).build()).unwrap();
            let ack = js
                .publish(Bucket::Status.key_subject(name), value.into())
                .await
                .unwrap();
            acks.push(ack);
        }
        for ack in acks {
            ack.await.unwrap();
        }
    }
}

/// Answer the connection list as one server holding one connection per
/// hive (client id = index + 1), page by page.
async fn answer_connz(client: async_nats::Client, names: Vec<String>) {
    let mut requests = client.subscribe(CONNZ_REQUEST).await.unwrap();
    while let Some(req) = requests.next().await {
        let ask: Value = serde_json::from_slice(&req.payload).unwrap_or(Value::Null);
        let offset = ask["offset"].as_u64().unwrap_or(0) as usize;
        let limit = ask["limit"].as_u64().unwrap_or(1024) as usize;
        let conns: Vec<Value> = names
            .iter()
            .enumerate()
            .skip(offset)
            .take(limit)
            .map(|(i, name)| json!({ "cid": i + 1, "account": name, "name": format!("hive-{name}") }))
            .collect();
        let body = json!({
            "server": { "id": SERVER_ID, "name": "bench" },
            "data": { "offset": offset, "limit": limit, "total": names.len(), "connections": conns },
        });
        if let Some(reply) = req.reply {
            let _ = client.publish(reply, body.to_string().into()).await;
        }
    }
}

/// One event as nats-server sends it, for hive `name`'s connection `cid`.
fn event(name: &str, cid: usize, up: bool) -> (String, Vec<u8>) {
    let kind = if up { "CONNECT" } else { "DISCONNECT" };
    let body = json!({
        "type": format!("io.nats.server.advisory.v1.client_{}", kind.to_lowercase()),
        "server": { "name": "bench", "id": SERVER_ID },
        "client": { "id": cid, "acc": name, "name": format!("hive-{name}"), "kind": "Client" },
        "reason": if up { "" } else { "Client Closed" },
    });
    (
        format!("$SYS.ACCOUNT.{name}.{kind}"),
        body.to_string().into_bytes(),
    )
}

/// Publish one event per hive (connects with fresh client ids) and wait
/// until `done`; the wall time and the controller's CPU seconds.
async fn burst<F, Fut>(
    client: &async_nats::Client,
    names: &[String],
    up: bool,
    pid: u32,
    done: F,
) -> (f64, f64)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let cpu0 = cpu_time(pid);
    let t0 = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let cid = if up { names.len() + i + 1 } else { i + 1 };
        let (subject, body) = event(name, cid, up);
        client.publish(subject, body.into()).await.unwrap();
    }
    client.flush().await.unwrap();
    wait_until(T, "the burst shown", &done).await;
    (
        t0.elapsed().as_secs_f64(),
        (cpu_time(pid) - cpu0).as_secs_f64(),
    )
}

/// CHURN_RATE events a second for CHURN_FOR (a hive's disconnect then
/// its reconnect, round the fleet); the controller's share of one core.
async fn churn(client: &async_nats::Client, names: &[String], pid: u32) -> f64 {
    // After the connect burst, hive i holds connection n + i + 1.
    let mut current: Vec<usize> = (0..names.len()).map(|i| names.len() + i + 1).collect();
    let mut next_cid = 2 * names.len() + 1;
    let cpu0 = cpu_time(pid);
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / CHURN_RATE));
    let mut sent = 0usize;
    while t0.elapsed() < CHURN_FOR {
        tick.tick().await;
        let i = (sent / 2) % names.len();
        let up = sent % 2 == 1;
        if up {
            current[i] = next_cid;
            next_cid += 1;
        }
        let (subject, body) = event(&names[i], current[i], up);
        client.publish(subject, body.into()).await.unwrap();
        sent += 1;
    }
    client.flush().await.unwrap();
    (cpu_time(pid) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64()
}

async fn freshness_count(http: &reqwest::Client, base: &str, state: &str) -> usize {
    let url = format!("{base}/api/status?limit=1");
    let Ok(resp) = http.get(&url).send().await else {
        return 0;
    };
    let doc: Value = resp.json().await.unwrap_or(Value::Null);
    doc["summary"]["freshness"][state].as_u64().unwrap_or(0) as usize
}
