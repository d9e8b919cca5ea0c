//! A dead hive shown within seconds (issue 21, point 6): over a real
//! nats-server started with the config `swarm-controller nats-config`
//! renders, a real hive process and a real `status --json --watch`, a
//! SIGKILLed hive turns `offline` as soon as the server's disconnect event
//! arrives (on the dashboard's event stream too), and `fresh` again when
//! it is back; without the system-account
//! part of the config the KV-timestamp rule applies and the row says so;
//! and the controller's identity reaches nothing else of the system
//! account.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures_util::StreamExt;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::{render_roster, SecuredNats, Violation};
use hyperhive_tests::sse::EventStream;
use serde_json::Value;
use swarm_queue_client::permissions::{authorization, RosterHive};
use swarm_queue_client::presence::{CONNZ_EXPORT, CONNZ_REQUEST, SYSTEM_ACCOUNT};
use swarm_queue_client::{open_or_create, Bucket, BucketSettings, HiveName};
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdout};

const T: Duration = Duration::from_secs(30);
/// What the issue asks: a SIGKILLed hive shown `offline` within this.
const OFFLINE_WITHIN: Duration = Duration::from_secs(2);

/// `status --json --watch` as a child process, and its lines.
struct Watch {
    _child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    dir: tempfile::TempDir,
}

impl Watch {
    fn start(s: &SecuredNats, stale_after_secs: u64) -> Watch {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-offline-")
            .tempdir()
            .unwrap();
        let config = dir.path().join("controller.toml");
        let text = format!(
            "stale_after_secs = {stale_after_secs}\n{}[hives.alpha]\n",
            s.controller.nats_toml(&s.server.url())
        );
        std::fs::write(&config, text).unwrap();
        let (child, lines) = hyperhive_tests::process::status_watch(&config);
        Watch {
            _child: child,
            lines,
            dir,
        }
    }

    /// The first report, within `within`, whose row for alpha satisfies
    /// `pred`; that row.
    async fn until(
        &mut self,
        within: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        let mut last = Value::Null;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(other) => panic!("the watch ended ({other:?}) before {what}; last row {last:#}"),
                Err(_) => panic!("no report with {what} within {within:?}; last row {last:#}"),
            };
            let doc: Value = serde_json::from_str(&line).unwrap();
            let row = doc["hives"]
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["name"] == "alpha"))
                .cloned()
                .unwrap_or(Value::Null);
            if pred(&row) {
                return row;
            }
            last = row;
        }
    }
}

async fn create_buckets(s: &SecuredNats) {
    let ctl = s.controller_conn().await;
    let js = jetstream::new(ctl.client.clone());
    for b in Bucket::ALL {
        open_or_create(&js, b, &BucketSettings::default_for(b))
            .await
            .expect("the controller creates the bucket");
    }
}

fn start_hive(s: &SecuredNats) -> HiveProc {
    let nats = s.hive("alpha").nats_toml(&s.server.url());
    HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &nats,
        ..Default::default()
    })
}

fn is(freshness: &'static str, rule: &'static str) -> impl Fn(&Value) -> bool {
    move |row| row["freshness"] == freshness && row["freshness_rule"] == rule
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_hive_is_offline_within_two_seconds_and_fresh_when_back() {
    let s = SecuredNats::start_generated(&["alpha"]);
    create_buckets(&s).await;
    let mut hive = start_hive(&s);
    // stale_after is long: only the connection rule can show the kill soon.
    let mut watch = Watch::start(&s, 120);
    watch
        .until(
            T,
            "alpha fresh by the connection rule",
            is("fresh", "connection"),
        )
        .await;

    // The dashboard's stream, on the same config, sees it too.
    let config = watch.dir.path().join("controller.toml");
    let (_serve, base) =
        hyperhive_tests::process::serve_controller(&config, &watch.dir.path().join("serve.log"))
            .await;
    let mut events = EventStream::open(&format!("{base}/api/events"), T).await;
    let (name, _) = events.next().await;
    assert_eq!(name, "snapshot");

    // From the signal on: the wait for the process to end is part of it.
    let killed = Instant::now();
    hive.daemon.kill();
    let row = watch
        .until(OFFLINE_WITHIN, "alpha offline", is("offline", "connection"))
        .await;
    let ms = killed.elapsed().as_millis();
    println!("FIGURES offline_after_sigkill_ms={ms}");
    let why = row["freshness_reason"].as_str().unwrap();
    assert!(why.contains("NATS connection closed"), "{row:#}");
    assert_eq!(row["convergence"], "unknown", "{row:#}");
    let push = tokio::time::timeout(OFFLINE_WITHIN.saturating_sub(killed.elapsed()), async {
        loop {
            let (name, data) = events.next().await;
            let push: Value = serde_json::from_str(&data).unwrap();
            if name == "row" && is("offline", "connection")(&push["row"]) {
                return push;
            }
        }
    })
    .await
    .expect("the dashboard's stream pushes alpha offline within 2 s of the kill");
    println!(
        "FIGURES offline_on_dashboard_ms={}",
        killed.elapsed().as_millis()
    );
    assert_eq!(push["summary"]["freshness"]["offline"], 1, "{push}");
    assert!(
        push["summary"]["line"]
            .as_str()
            .unwrap()
            .contains("1 offline"),
        "{push}"
    );

    hive.kill_and_restart(&[]);
    watch
        .until(T, "alpha fresh again", is("fresh", "connection"))
        .await;
}

/// The generated config less its system-account part (the `$SYS` account
/// and the buckets' account's imports of it): what a server without the
/// events looks like to the controller.
fn render_without_events(controller: &str, hives: &[(String, String)]) -> String {
    let roster: Vec<RosterHive> = hives
        .iter()
        .map(|(h, k)| RosterHive {
            hive: HiveName::new(h.clone()).unwrap(),
            nkey: k.clone(),
            jetstream_domain: None,
        })
        .collect();
    let mut auth = authorization(controller, &roster, &[]).unwrap();
    auth.accounts.retain(|a| a.name != SYSTEM_ACCOUNT);
    for a in &mut auth.accounts {
        a.imports.retain(|i| i.account != SYSTEM_ACCOUNT);
    }
    auth.to_server_config()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_events_the_kv_timestamp_rule_applies_and_the_row_says_so() {
    let s = SecuredNats::start(&["alpha"], render_without_events);
    let system = format!("{:?}", SYSTEM_ACCOUNT);
    assert!(!s.config_text.contains(&system), "{}", s.config_text);
    create_buckets(&s).await;
    let mut hive = start_hive(&s);
    let mut watch = Watch::start(&s, 3);
    watch
        .until(
            T,
            "alpha fresh by the KV timestamp",
            is("fresh", "kv-timestamp"),
        )
        .await;
    hive.daemon.kill();
    // Never offline: only the entry's age turns it stale, after stale_after.
    let row = watch
        .until(T, "alpha stale", |r| r["freshness"] != "fresh")
        .await;
    assert_eq!(row["freshness"], "stale", "{row:#}");
    assert_eq!(row["freshness_rule"], "kv-timestamp", "{row:#}");
}

/// A plain client with the controller's key (not the controller's code)
/// gets the connect and disconnect events and the connection list, and
/// nothing else of the system account: every other system subject is a
/// permissions violation. A hive's identity gets none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_identity_reaches_only_the_connection_events_of_the_system_account() {
    let s = SecuredNats::start(&["alpha"], render_roster);
    let me = s.controller.public.clone();
    let key = std::fs::read_to_string(&s.controller.seed_file).unwrap();
    let raw = async_nats::ConnectOptions::with_nkey(key.trim().to_string())
        .custom_inbox_prefix(swarm_queue_client::subjects::controller_inbox_prefix())
        .connect(s.server.url())
        .await
        .unwrap();
    let mut connects = raw.subscribe("$SYS.ACCOUNT.*.CONNECT").await.unwrap();
    raw.flush().await.unwrap();
    let _alpha = s.hive_conn("alpha").await;
    let alpha_connected = async {
        while let Some(event) = connects.next().await {
            if event.subject.as_str() == "$SYS.ACCOUNT.alpha.CONNECT" {
                return;
            }
        }
    };
    tokio::time::timeout(T, alpha_connected)
        .await
        .expect("alpha's connect event");
    // Every account's connections, the hive's included.
    let list = raw
        .request(CONNZ_REQUEST, r#"{"auth": true}"#.into())
        .await
        .unwrap();
    let list = String::from_utf8_lossy(&list.payload).into_owned();
    assert!(list.contains(r#""account":"alpha""#), "{list}");

    for subject in [
        "$SYS.>",
        "$SYS.SERVER.*.STATSZ",
        "$SYS.ACCOUNT.alpha.LEAFNODE.CONNECT",
        "$SYS.ACCOUNT.*.SERVER.CONNS",
    ] {
        let _sub = raw.subscribe(subject).await.unwrap();
        raw.flush().await.unwrap();
        s.violation(Violation::Subscribe, &me, subject).await;
    }
    for subject in [
        "$SYS.REQ.SERVER.PING.VARZ",
        "$SYS.REQ.SERVER.PING.STATZ",
        "$SYS.REQ.ACCOUNT.alpha.CONNZ",
        "$SYS.REQ.SERVER.PING.KICK",
        "$SYS.REQ.USER.INFO",
        CONNZ_EXPORT,
    ] {
        raw.publish(subject, "{}".into()).await.unwrap();
        raw.flush().await.unwrap();
        s.violation(Violation::Publish, &me, subject).await;
    }

    let hive = s.hive("alpha").public.clone();
    let alpha = s.hive_conn("alpha").await;
    let _sub = alpha
        .client
        .subscribe("$SYS.ACCOUNT.*.CONNECT")
        .await
        .unwrap();
    alpha.client.flush().await.unwrap();
    s.violation(Violation::Subscribe, &hive, "$SYS.ACCOUNT.*.CONNECT")
        .await;
    for subject in [CONNZ_REQUEST, CONNZ_EXPORT] {
        alpha.client.publish(subject, "{}".into()).await.unwrap();
        alpha.client.flush().await.unwrap();
        s.violation(Violation::Publish, &hive, subject).await;
    }
}
