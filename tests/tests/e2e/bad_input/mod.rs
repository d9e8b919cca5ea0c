//! Bad input at every boundary, as tables of cases. Each case gets a clear
//! error or warning that names the bad value, and nothing is lost: the
//! next good input still goes through and what was valid before stays.
//!
//! Boundaries:
//! - the payload decoders (every payload the wire carries);
//! - the hive's config file, through the real `hive --check-config`;
//! - build contexts (`..`, a symlink out of its root, the state dir, a
//!   directory outside every root in every spelling of a local path, one
//!   over the size cap) and operator API
//!   requests (wrong method, content type or origin), through a running
//!   `hive` over the real dockerd;
//! - the nats-server (oversized values and messages);
//! - a swarm file's per-hive values (a missing value, a malformed
//!   placeholder), through the real `swarm-controller`;
//! - volumes and networks: a bad one in a declaration, and host paths
//!   outside `volume_roots`, through a running `hive`;
//! - credential rotation: a bad `on_credential_change` in a declaration
//!   and a swarm file, bad names given to `credential delete`;
//! - the hive's deploy and credential subjects and its wanted key, through
//!   the hive's own event listener and wanted task, connected as the hive
//!   to a server with the generated per-hive permissions.
//!
//! The subjects and the key are tried twice: through a running `hive`
//! process (the real deploy function, so a deploy for an undeclared agent
//! is refused by the daemon itself; status warnings read from
//! `/health/ready`), and through the hive's tasks run in-process, where the
//! warnings and logs can be read one case at a time.
//!
//! A module per boundary: `decoders`, `configs`,
//! `credential_verbs`, `in_process` (the server's limits and the hive's
//! tasks run in-process),
//! `running_hive`, `hostile_builds`, `local_contexts` and
//! `secrets_in_errors` (a real `hive` process), and `swarm_values`.

mod configs;
mod container_fields;
mod credential_verbs;
mod decoders;
mod hostile_builds;
mod in_process;
mod local_contexts;
mod running_hive;
mod secrets_in_errors;
mod swarm_values;
mod volumes;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use hive::agents::declared::WantedRx;
use hive::bus::credentials::{credential_path, Credentials, Deliverer, DelivererParts};
use hive::bus::deploy::Deployer;
use hive::bus::events::EventDeps;
use hive::bus::wanted::WantedDeps;
use hive::status::{keys, StatusBoard};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::SecuredNats;
use hyperhive_tests::trace_log::{in_process_log, in_process_log_text};
use hyperhive_tests::{hive_bin, wait_until};
use swarm_queue_client::credentials::{seal, CredentialEnvelope, XKey};
use swarm_queue_client::limits::{MAX_VALUE_BYTES, SERVER_MAX_PAYLOAD};
use swarm_queue_client::subjects::{credential_key, HiveSubjects};
use swarm_queue_client::{
    decode, encode, encode_pretty, open_or_create, AccountName, AgentName, AgentSpec, Bucket,
    BucketSettings, Connection, CredentialNotice, Declaration, DecodeError, DeployReply,
    DeployRequest, HiveName, HiveStatus, Payload,
};

const T: Duration = Duration::from_secs(30);

/// The bad names every boundary that takes a name is tried with.
const BAD_NAMES: &[(&str, &str)] = &[
    ("mail.bot", "'.'"),
    ("mail*", "wildcard"),
    ("mail>", "wildcard"),
    ("mail bot", "white space"),
    ("zürich", "non-ASCII"),
];

fn oversized_json(schema: u32) -> Vec<u8> {
    let pad = "x".repeat(MAX_VALUE_BYTES);
    format!(r#"{{"schema":{schema},"agent":"a","account":"b","agents":{{}},"pad":"{pad}"}}"#)
        .into_bytes()
}

fn valid_declaration(image: &str) -> Vec<u8> {
    let mut agents = BTreeMap::new();
    agents.insert(
        AgentName::new("mail-bot").unwrap(),
        AgentSpec {
            image: Some(image.to_string()),
            ..Default::default()
        },
    );
    encode_pretty(&Declaration::new(agents)).unwrap()
}

/// All a process printed, stdout then stderr.
fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A controller config whose server does not exist, with hive alpha on the
/// roster: every refusal tested with it comes before any connect.
fn offline_controller_config(dir: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("controller.toml");
    std::fs::write(
        &config,
        "[nats]\nurl = \"nats://127.0.0.1:1\"\n\n[hives.alpha]\n",
    )
    .unwrap();
    config
}

/// The controller's run of `args` with `config`: (exit code, all it said).
fn controller(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(hyperhive_tests::controller_bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("HYPERHIVE_NATS_URL")
        .env_remove("HYPERHIVE_CONTROLLER_CONFIG")
        .output()
        .unwrap();
    (out.status.code(), said(&out))
}

fn decode_err<T: Payload + std::fmt::Debug>(bytes: &[u8]) -> String {
    match decode::<T>(bytes) {
        Ok(v) => panic!("{} accepted bad input: {v:?}", T::WHAT),
        Err(e) => e.to_string(),
    }
}

/// The controller's connection, the hive's, and the three buckets.
struct Fixture {
    s: SecuredNats,
    ctl: Connection,
    hive: Connection,
    wanted: kv::Store,
    creds: kv::Store,
}

async fn fixture() -> Fixture {
    let s = SecuredNats::start_generated(&["alpha"]);
    let ctl = s.controller_conn().await;
    let js = jetstream::new(ctl.client.clone());
    let mut stores = Vec::new();
    for b in Bucket::ALL {
        stores.push(
            open_or_create(&js, b, &BucketSettings::default_for(b))
                .await
                .unwrap(),
        );
    }
    let hive = s.hive_conn("alpha").await;
    Fixture {
        ctl,
        hive,
        wanted: stores[1].clone(),
        creds: stores[2].clone(),
        s,
    }
}

/// The status bucket, as the controller opens it.
async fn status_bucket(ctl: &Connection) -> kv::Store {
    let js = jetstream::new(ctl.client.clone());
    open_or_create(&js, Bucket::Status, &BucketSettings::default())
        .await
        .unwrap()
}

fn warning(board: &StatusBoard, key: &str) -> Option<String> {
    board
        .snapshot()
        .status
        .warnings
        .iter()
        .find(|w| w.key == key)
        .map(|w| w.message.clone())
}

/// A deploy request to `hive` as the controller sends it, retried until
/// the hive's subscription is live.
async fn deploy_reply(ctl: &Connection, hive: &str, payload: Vec<u8>) -> DeployReply {
    let answer = wait_until(T, "a deploy reply", || {
        let (client, payload) = (ctl.client.clone(), payload.clone());
        async move {
            match hyperhive_tests::identity::ask_deploy(&client, hive, payload.into()).await {
                Ok(m) => Some(m),
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => None,
                Err(e) => panic!("deploy request: {e}"),
            }
        }
    })
    .await;
    DeployReply::decode(&answer.payload).unwrap()
}
