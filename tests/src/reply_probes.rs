//! Reply-subject probes: a hive aims every answer it can make the server
//! publish at everything it must not reach.
//!
//! nats-server checks a publish's subject against the publisher's
//! permissions, never its reply subject, and JetStream publishes its answer
//! (a put's ack, a direct get's message, 404 or 408, an error reply) to that
//! reply subject with no permissions of its own. So a probe is one publish
//! that the hive is allowed to make, with its reply set to a target:
//!
//! - **sources**: every subject the hive may publish, each with the
//!   payloads and headers that make each kind of answer ([`sources`]);
//! - **targets**: other hives' keys and a key of no hive in every bucket,
//!   their event subjects and the audit's, the JetStream API of every
//!   bucket and of the event stream (purge, delete, message delete,
//!   update, in the local and the hub's domain form), and the controller's
//!   reply inbox ([`targets`]).
//!
//! [`FleetState`] is everything the probes could have changed, read as the
//! controller before and after: every stream's existence, settings and
//! counts, and every key's revision and value. [`run`] sends the probes
//! and returns what changed, and what reached the controller's inbox.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::{jetstream, HeaderMap};
use futures_util::StreamExt;
use swarm_queue_client::event_stream::{audit_subject, hive_event_subject, EVENTS_STREAM};
use swarm_queue_client::permissions::JsApi;
use swarm_queue_client::subjects::{controller_inbox_prefix, credential_key};
use swarm_queue_client::{AccountName, AgentName, Bucket, Connection, HiveName};

/// Where the probes' answers are aimed under the controller's inbox: a
/// spy subscribed there must hear nothing.
pub fn controller_probe_prefix() -> String {
    format!("{}.probe", controller_inbox_prefix())
}

/// A credential key of `hive` (agent `mail-bot`, account `smtp`).
pub fn cred_key(hive: &str) -> String {
    credential_key(
        &HiveName::new(hive).expect("a hive name"),
        &AgentName::new("mail-bot").expect("an agent name"),
        &AccountName::new("smtp").expect("an account name"),
    )
}

/// An event subject of `hive`'s agent `mail-bot`.
pub fn event_subject(hive: &str) -> String {
    hive_event_subject(
        &HiveName::new(hive).expect("a hive name"),
        Some(&AgentName::new("mail-bot").expect("an agent name")),
        "exited",
    )
}

/// One publish the hive may make, and the answer it causes.
pub struct Source {
    pub what: String,
    pub subject: String,
    pub headers: Vec<(&'static str, String)>,
    pub payload: Vec<u8>,
    /// Whether JetStream answers it (the probes then wait for its answer).
    pub answered: bool,
}

impl Source {
    /// Its headers as the client sends them.
    fn header_map(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in &self.headers {
            headers.insert(*k, v.as_str());
        }
        headers
    }
}

fn source(what: &str, subject: String, headers: &[(&'static str, &str)], payload: &[u8]) -> Source {
    Source {
        what: what.to_string(),
        subject,
        headers: headers.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        payload: payload.to_vec(),
        answered: true,
    }
}

/// Every subject `hive` may publish (through `api`), each with the
/// payloads and headers that make every kind of answer JetStream gives.
pub fn sources(hive: &str, api: &JsApi) -> Vec<Source> {
    let status = api.put(Bucket::Status, hive);
    let wanted = api.direct_get(Bucket::Wanted, hive);
    let own_cred = api.direct_get(Bucket::Credentials, &cred_key(hive));
    let missing_cred = api.direct_get(
        Bucket::Credentials,
        &format!("{hive}.no-such-agent.no-such-account"),
    );
    let own_event = event_subject(hive);
    vec![
        source("status put: PubAck", status.clone(), &[], b"probe"),
        source(
            "status put: wrong last sequence (error reply)",
            status.clone(),
            &[("Nats-Expected-Last-Sequence", "999999")],
            b"probe",
        ),
        source(
            "status put: wrong stream (error reply)",
            status,
            &[("Nats-Expected-Stream", "KV_not-this-one")],
            b"probe",
        ),
        source("wanted direct get: its value", wanted.clone(), &[], b""),
        source("wanted direct get: 408", wanted, &[], br#"{"seq":1}"#),
        source(
            "credential direct get: its value",
            own_cred.clone(),
            &[],
            b"",
        ),
        source("credential direct get: 408", own_cred, &[], br#"{"seq":1}"#),
        source("credential direct get: 404", missing_cred, &[], b""),
        source("event publish: PubAck", own_event.clone(), &[], b"probe"),
        source(
            "event publish: wrong last sequence (error reply)",
            own_event.clone(),
            &[("Nats-Expected-Last-Sequence", "999999")],
            b"probe",
        ),
        source(
            "event publish: wrong stream (error reply)",
            own_event,
            &[("Nats-Expected-Stream", "not-this-one")],
            b"probe",
        ),
        // No JetStream answer, but a subject it may publish: its answer to
        // a deploy request, seen by the controller with the reply on it.
        Source {
            answered: false,
            ..source(
                "deploy answer",
                swarm_queue_client::subjects::deploy_answer_subject(
                    &HiveName::new(hive).expect("a hive name"),
                    "probe",
                ),
                &[],
                b"probe",
            )
        },
    ]
}

/// Everything `hive` must not reach with an answer: `others`' keys and a
/// key of no hive in every bucket, their event subjects and the audit's,
/// every bucket's and the event stream's JetStream API in the local and
/// the `hub` domain's form, and the controller's inbox.
pub fn targets(others: &[&str], hub: &str) -> Vec<String> {
    let mut out = Vec::new();
    for other in others.iter().copied().chain(["ghost"]) {
        out.push(Bucket::Wanted.key_subject(other));
        out.push(Bucket::Status.key_subject(other));
        out.push(Bucket::Credentials.key_subject(&cred_key(other)));
        out.push(Bucket::Maintenance.key_subject(other));
        out.push(event_subject(other));
    }
    out.push(Bucket::Rollouts.key_subject("current"));
    out.push(audit_subject("declare"));
    let streams = Bucket::ALL.iter().map(|b| b.stream_name());
    for stream in streams.chain([EVENTS_STREAM.to_string()]) {
        for prefix in ["$JS.API".to_string(), format!("$JS.{hub}.API")] {
            for op in [
                "STREAM.PURGE",
                "STREAM.DELETE",
                "STREAM.MSG.DELETE",
                "STREAM.UPDATE",
            ] {
                out.push(format!("{prefix}.{op}.{stream}"));
            }
        }
    }
    out.push(format!("{}.answer", controller_probe_prefix()));
    out
}

/// Every subject of the event stream, counted.
const EVENTS_SUBJECT_FILTER: &str = "hyperhive.events.>";

/// One stream as the probes could change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    pub messages: u64,
    pub first_sequence: u64,
    pub last_sequence: u64,
    pub deny_delete: bool,
    pub deny_purge: bool,
    pub max_messages_per_subject: i64,
}

impl StreamState {
    fn of(info: &jetstream::stream::Info) -> StreamState {
        StreamState {
            messages: info.state.messages,
            first_sequence: info.state.first_sequence,
            last_sequence: info.state.last_sequence,
            deny_delete: info.config.deny_delete,
            deny_purge: info.config.deny_purge,
            max_messages_per_subject: info.config.max_messages_per_subject,
        }
    }
}

/// Every stream and every key of every bucket, and the event stream's
/// count of each subject, read as the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetState {
    /// `None`: the stream is gone.
    pub streams: BTreeMap<String, Option<StreamState>>,
    pub keys: BTreeMap<String, (u64, Vec<u8>)>,
}

impl FleetState {
    pub async fn read(js: &jetstream::Context) -> FleetState {
        let mut streams = BTreeMap::new();
        let mut keys = BTreeMap::new();
        for b in Bucket::ALL {
            let state = match js.get_stream(b.stream_name()).await {
                Ok(mut s) => {
                    let info = s.info().await.expect("stream info as the controller");
                    Some(StreamState::of(info))
                }
                Err(_) => None,
            };
            if state.is_some() {
                let store = js.get_key_value(b.name()).await.expect("open the bucket");
                let names: Vec<String> = match store.keys().await {
                    Ok(k) => k.filter_map(|k| async move { k.ok() }).collect().await,
                    Err(_) => Vec::new(),
                };
                for k in names {
                    if let Ok(Some(e)) = store.entry(&k).await {
                        keys.insert(format!("{}/{k}", b.name()), (e.revision, e.value.to_vec()));
                    }
                }
            }
            streams.insert(b.stream_name(), state);
        }
        let events = match js.get_stream(EVENTS_STREAM).await {
            Ok(s) => {
                let mut subjects = s
                    .info_with_subjects(EVENTS_SUBJECT_FILTER)
                    .await
                    .expect("the event stream's info as the controller");
                let state = StreamState::of(&subjects.info);
                while let Some(Ok((subject, n))) = subjects.next().await {
                    keys.insert(format!("{EVENTS_STREAM}/{subject}"), (n as u64, Vec::new()));
                }
                Some(state)
            }
            Err(_) => None,
        };
        streams.insert(EVENTS_STREAM.to_string(), events);
        FleetState { streams, keys }
    }

    /// Each difference from `before`, in words, leaving out what the hive
    /// may change: its own status key and events, and the counts of the
    /// status and event streams.
    pub fn changes_since(&self, before: &FleetState, hive: &str) -> Vec<String> {
        let own = format!("{}/{hive}", Bucket::Status.name());
        let own_events = format!("{EVENTS_STREAM}/hyperhive.events.hive.{hive}.");
        let own = |key: &str| key == own || key.starts_with(&own_events);
        let status = Bucket::Status.stream_name();
        let mut out = Vec::new();
        for (name, was) in &before.streams {
            let now = self.streams.get(name).cloned().flatten();
            // The hive's own puts add to the status stream's counts, its
            // events to the event stream's; their settings and first
            // sequence must not move.
            let same = |w: &StreamState, n: &StreamState| {
                if name == &status || name == EVENTS_STREAM {
                    (
                        w.deny_delete,
                        w.deny_purge,
                        w.max_messages_per_subject,
                        w.first_sequence,
                    ) == (
                        n.deny_delete,
                        n.deny_purge,
                        n.max_messages_per_subject,
                        n.first_sequence,
                    )
                } else {
                    w == n
                }
            };
            match (was, now) {
                (Some(_), None) => out.push(format!("stream {name} is gone")),
                (Some(w), Some(n)) if !same(w, &n) => {
                    out.push(format!("stream {name}: {w:?} -> {n:?}"))
                }
                _ => {}
            }
        }
        for (key, was) in &before.keys {
            if own(key) {
                continue;
            }
            match self.keys.get(key) {
                None => out.push(format!("key {key} is gone")),
                Some(now) if now != was => out.push(format!(
                    "key {key}: revision {} -> {}, value {:?}",
                    was.0,
                    now.0,
                    String::from_utf8_lossy(&now.1)
                )),
                _ => {}
            }
        }
        for key in self
            .keys
            .keys()
            .filter(|k| !before.keys.contains_key(*k) && !own(k))
        {
            out.push(format!("new key {key}"));
        }
        out
    }
}

/// What a probe run found.
pub struct Outcome {
    pub probes: usize,
    /// Each change to the fleet the probes made (empty: none).
    pub changes: Vec<String>,
    /// Each message that reached the controller's inbox from a probe.
    pub at_controller: Vec<String>,
}

impl Outcome {
    /// Print the figures (`FIGURES: reply_probes where=<place> …`) and
    /// fail unless at least 300 probes changed nothing and reached nothing
    /// in the controller's inbox.
    pub fn assert_contained(&self, place: &str) {
        println!(
            "FIGURES: reply_probes where={place} probes={} changes={} at_controller={}",
            self.probes,
            self.changes.len(),
            self.at_controller.len()
        );
        assert!(self.probes >= 300, "{} probes", self.probes);
        assert!(
            self.changes.is_empty(),
            "the hive's answers changed the fleet:\n{}",
            self.changes.join("\n")
        );
        assert!(
            self.at_controller.is_empty(),
            "the hive's answers reached the controller's inbox:\n{}",
            self.at_controller.join("\n")
        );
    }
}

/// What the probes could change, written as the controller (the buckets
/// already made): alpha's and beta's declaration and credential, a
/// rollout head, and the event stream with an audit event
/// ([`seed_events`]).
pub async fn seed_keys(js: &jetstream::Context) {
    let open = |b: Bucket| async move {
        js.get_key_value(b.name())
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", b.name()))
    };
    let (wanted, creds) = (open(Bucket::Wanted).await, open(Bucket::Credentials).await);
    for h in ["alpha", "beta"] {
        wanted
            .put(h, format!("{h}-declaration").into())
            .await
            .expect("put a declaration");
        creds
            .put(cred_key(h), "sealed".into())
            .await
            .expect("put a credential");
    }
    open(Bucket::Rollouts)
        .await
        .put("current", "head".into())
        .await
        .expect("put the rollout head");
    seed_events(js).await;
}

/// Make the event stream (as the controller does) and put an audit event
/// in it (the controller may publish no hive's events; one of beta's that
/// a probe made would show as a new subject).
pub async fn seed_events(js: &jetstream::Context) {
    seed_events_with(js, 1).await
}

/// [`seed_events`] with the stream in `replicas` copies.
pub async fn seed_events_with(js: &jetstream::Context, replicas: usize) {
    let settings = swarm_queue_client::event_stream::EventsSettings {
        replicas,
        ..Default::default()
    };
    swarm_controller::audit::open(js, &settings)
        .await
        .expect("make the event stream");
    // A stream just made in a cluster may not take a message yet.
    crate::wait_until(
        Duration::from_secs(30),
        "a seeded audit event stored",
        || async {
            let ack = js
                .publish(audit_subject("declare"), "seeded".into())
                .await
                .ok()?;
            ack.await.ok().map(|_| ())
        },
    )
    .await;
}

/// Send every source with every target as its reply subject, as `hive` on
/// `conn`, then wait until the server has answered them all (a request of
/// each source kind, sent after them on the same connection, is answered)
/// and read what changed. `spy` is a controller connection: what reaches
/// [`controller_probe_prefix`] on it is reported.
pub async fn run(
    conn: &Connection,
    spy: &Connection,
    ctl_js: &jetstream::Context,
    hive: &str,
    api: &JsApi,
    others: &[&str],
) -> Outcome {
    let mut spied = spy
        .client
        .subscribe(format!("{}.>", controller_probe_prefix()))
        .await
        .expect("the controller subscribes to its own inbox");
    spy.client.flush().await.expect("flush the spy");
    let before = FleetState::read(ctl_js).await;
    let hub = api.domain_name().unwrap_or("hub");
    let (sources, targets) = (sources(hive, api), targets(others, hub));
    for s in &sources {
        for t in &targets {
            conn.client
                .publish_with_reply_and_headers(
                    s.subject.clone(),
                    t.clone(),
                    s.header_map(),
                    s.payload.clone().into(),
                )
                .await
                .expect("publish a probe");
        }
    }
    settle(conn, &sources).await;
    // A purge or delete an answer asked for is one more API request; the
    // controller's own API requests queue behind it.
    let _ = ctl_js.query_account().await;
    let after = FleetState::read(ctl_js).await;
    spy.client.flush().await.expect("flush the spy");
    let mut at_controller = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::ZERO, spied.next()).await {
        at_controller.push(format!(
            "{}: {}",
            m.subject,
            String::from_utf8_lossy(&m.payload)
        ));
    }
    Outcome {
        probes: sources.len() * targets.len(),
        changes: after.changes_since(&before, hive),
        at_controller,
    }
}

/// Every source once more as a plain request: its answer comes after the
/// answers to every probe sent before it on this connection.
async fn settle(conn: &Connection, sources: &[Source]) {
    for s in sources.iter().filter(|s| s.answered) {
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            conn.client.request_with_headers(
                s.subject.clone(),
                s.header_map(),
                s.payload.clone().into(),
            ),
        )
        .await;
    }
}
