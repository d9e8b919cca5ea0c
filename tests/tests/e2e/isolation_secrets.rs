//! Secrets: a credential goes through the real flow (the controller reads
//! the hive's xkey from its published status, seals the secret to it,
//! stores the envelope, publishes a notice; the `hive` process, connected
//! with its own nkey, delivers it; the boot delivery runs too), then
//! everything the run produced is scanned for the secret in plain text, hex
//! and base64:
//!
//! - every KV bucket, every key, every revision (through the API) and the
//!   server's JetStream store files on disk;
//! - the nats-server log, with protocol tracing on, so every message that
//!   crossed the server is in it with its payload;
//! - the hive process's log at trace level, and the log of the hive code
//!   run in-process.
//!
//! The scanner is shown to work: it finds the secret in the delivered file.
//! And a hive with the wrong xkey cannot open another hive's credential.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv};
use base64::Engine;
use futures_util::StreamExt;
use hive::bus::credentials::{credential_path, DeliverError, Deliverer, DelivererParts};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::{render_roster, SecuredNats};
use hyperhive_tests::trace_log::in_process_log;
use hyperhive_tests::wait_until;
use swarm_queue_client::credentials::{self, seal, CredentialEnvelope, CredentialError, XKey};
use swarm_queue_client::subjects::{credential_key, HiveSubjects};
use swarm_queue_client::{
    decode, encode, open_or_create, AccountName, AgentName, Bucket, BucketSettings,
    CredentialNotice, HiveName, HiveStatus,
};

const T: Duration = Duration::from_secs(30);

/// The forms a secret could leak in: as is, hex (both cases), and base64
/// (standard and URL alphabets) at each of the three byte alignments it can
/// have inside a longer encoded value.
fn leak_forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![
        secret.to_vec(),
        hex::encode(secret).into_bytes(),
        hex::encode_upper(secret).into_bytes(),
    ];
    for engine in [
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for shift in 0..3usize {
            let mut shifted = vec![0u8; shift];
            shifted.extend_from_slice(secret);
            let encoded = engine.encode(&shifted);
            // Drop the characters that mix in the padding bytes before it and
            // the last, partial group after it.
            let start = if shift == 0 {
                0
            } else {
                (shift * 8).div_ceil(6)
            };
            let end = encoded.len().saturating_sub(2);
            forms.push(encoded.as_bytes()[start..end].to_vec());
        }
    }
    forms
}

/// Which of `forms` occur in `haystack`, by form index.
fn leaks(haystack: &[u8], forms: &[Vec<u8>]) -> Vec<usize> {
    forms
        .iter()
        .enumerate()
        .filter(|(_, f)| haystack.windows(f.len()).any(|w| w == f.as_slice()))
        .map(|(i, _)| i)
        .collect()
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Every message ever stored in `store` (all keys, all revisions still
/// kept), as (subject, headers, payload) bytes.
async fn every_revision(client: &async_nats::Client, store: &kv::Store) -> Vec<Vec<u8>> {
    let consumer = store
        .stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("a consumer on the whole bucket");
    let mut pending = consumer.cached_info().num_pending;
    let mut out = Vec::new();
    let mut messages = consumer.messages().await.unwrap();
    while pending > 0 {
        let m = tokio::time::timeout(T, messages.next())
            .await
            .expect("the next stored message")
            .expect("stream open")
            .expect("a message");
        pending = m.info().unwrap().pending;
        let mut bytes = m.subject.as_bytes().to_vec();
        if let Some(h) = &m.headers {
            for (name, values) in h.iter() {
                bytes.extend_from_slice(name.to_string().as_bytes());
                for v in values {
                    bytes.extend_from_slice(v.as_str().as_bytes());
                }
            }
        }
        bytes.extend_from_slice(&m.payload);
        out.push(bytes);
    }
    out
}

#[tokio::test]
async fn no_secret_in_plain_text_anywhere_the_run_wrote() {
    let log_file = in_process_log();
    // -V traces every protocol message with its payload into the log.
    let s = SecuredNats::start_with_args(&["alpha", "beta"], render_roster, &["-V"]);
    let url = s.server.url();
    let ctl = s.controller_conn().await;
    let cjs = jetstream::new(ctl.client.clone());
    let mut stores = Vec::new();
    for b in Bucket::ALL {
        stores.push(
            open_or_create(&cjs, b, &BucketSettings::default_for(b))
                .await
                .unwrap(),
        );
    }
    let (status, creds) = (stores[0].clone(), stores[2].clone());

    // A real hive, trusting the controller's xkey, publishes its status,
    // its own xkey included.
    let controller_xkey = XKey::new();
    let extra = format!(
        "trusted_controller_xkeys = [{:?}]\n{}",
        controller_xkey.public_key(),
        s.hive("alpha").nats_toml(&url)
    );
    // Everything it can log, at trace level, goes into the scanned log.
    let hive_proc = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &extra,
        envs: &[("RUST_LOG", "trace")],
        ..Default::default()
    });
    let hive_status = wait_until(T, "alpha's status", || {
        let status = status.clone();
        async move {
            let e = status.entry("alpha").await.ok().flatten()?;
            decode::<HiveStatus>(&e.value).ok().map(|d| d.value)
        }
    })
    .await;
    let hive_xkey_public = hive_status.xkey.expect("the hive publishes its xkey");

    // The controller seals a secret to that key, stores it, sends a notice;
    // the hive process delivers it into the agent's state dir.
    let secret = format!("hh-secret-{}", &XKey::new().public_key()[1..33]).into_bytes();
    let alpha = HiveName::new("alpha").unwrap();
    let agent = AgentName::new("mail-bot").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let envelope = seal(&secret, &controller_xkey, &hive_xkey_public).unwrap();
    creds
        .put(
            credential_key(&alpha, &agent, &account),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();
    let notice = encode(&CredentialNotice::new(agent.clone(), account.clone())).unwrap();
    let path = credential_path(&hive_proc.state_dir.join("agents"), &agent, &account);
    wait_until(T, "the credential delivered by the hive", || {
        let (client, subject, notice) = (
            ctl.client.clone(),
            HiveSubjects::new(&alpha).credential,
            notice.clone(),
        );
        let delivered = std::fs::read(&path).ok();
        async move {
            if delivered.is_some() {
                return delivered;
            }
            // Repeat the notice until the hive's subscription is live.
            client.publish(subject, notice.into()).await.ok()?;
            None
        }
    })
    .await;
    assert_eq!(std::fs::read(&path).unwrap(), secret);

    // The boot path too, run in-process (so its logs land in the
    // in-process log), with the hive's own private xkey.
    let hive_xkey =
        hive::bus::xkey::load_or_create(&hive_proc.state_dir.join("xkey.seed")).unwrap();
    assert_eq!(hive_xkey.public_key(), hive_xkey_public);
    let conn = s.hive_conn("alpha").await;
    let deliverer = Deliverer::new(DelivererParts {
        client: conn.client.clone(),
        hive: alpha.clone(),
        xkey: Arc::new(hive_xkey),
        trusted: Arc::new(vec![controller_xkey.public_key()]),
        agents_dir: hive_proc.state_dir.join("in-process-agents"),
    });
    let (written, failures) = deliverer
        .deliver_declared(&declaring(&agent, &account))
        .await
        .unwrap();
    assert_eq!((written.len(), failures.len()), (1, 0));

    // The credentials bucket holds only sealed envelopes.
    for record in every_revision(&ctl.client, &creds).await {
        let payload_start = record
            .iter()
            .position(|&b| b == b'{')
            .expect("a JSON value");
        decode::<CredentialEnvelope>(&record[payload_start..]).expect("only envelopes");
    }

    // The scan.
    let forms = leak_forms(&secret);
    assert_eq!(
        leaks(&std::fs::read(&path).unwrap(), &forms),
        vec![0],
        "the scanner finds the secret where it must be"
    );
    let mut sources: Vec<(String, Vec<u8>)> = Vec::new();
    for store in &stores {
        for (i, record) in every_revision(&ctl.client, store)
            .await
            .into_iter()
            .enumerate()
        {
            sources.push((format!("{} message {i}", store.name), record));
        }
    }
    let mut files = Vec::new();
    files_under(&s.server.store_dir(), &mut files);
    assert!(!files.is_empty(), "the JetStream store has files");
    for f in files {
        sources.push((
            f.display().to_string(),
            std::fs::read(&f).unwrap_or_default(),
        ));
    }
    let server_log = s.server.log();
    assert!(
        server_log.contains("MSG_PAYLOAD") && server_log.contains(&envelope.sealed[..32]),
        "the traced server log carries the payloads it scans"
    );
    sources.push(("nats-server log".into(), server_log.into_bytes()));
    let hive_log = hive_proc.daemon.log();
    assert!(
        hive_log.contains("credential delivered") && hive_log.contains("TRACE"),
        "the hive's log is at trace level and shows the delivery"
    );
    sources.push((
        "hive process log".into(),
        hive_proc.daemon.log().into_bytes(),
    ));
    let in_process = std::fs::read(log_file).unwrap();
    assert!(
        String::from_utf8_lossy(&in_process).contains("credential delivery pass done"),
        "the in-process log captured the hive's delivery"
    );
    sources.push(("in-process hive log".into(), in_process));
    let found: Vec<String> = sources
        .iter()
        .filter_map(|(name, bytes)| {
            let hits = leaks(bytes, &forms);
            (!hits.is_empty()).then(|| format!("{name}: forms {hits:?}"))
        })
        .collect();
    assert!(found.is_empty(), "the secret leaked: {found:#?}");
    let _ = std::fs::remove_file(log_file);
}

#[tokio::test]
async fn the_wrong_xkey_cannot_open_another_hives_credential() {
    let _ = in_process_log();
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let (_ctl, cjs) = s.controller_with_buckets().await;
    let creds = cjs.get_key_value(Bucket::Credentials.name()).await.unwrap();
    let controller = XKey::new();
    let (alpha_x, beta_x) = (XKey::new(), XKey::new());
    let agent = AgentName::new("mail-bot").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let secret = b"alpha-only-secret";
    let for_alpha = seal(secret, &controller, &alpha_x.public_key()).unwrap();
    let trusted = vec![controller.public_key()];

    // Beta's key does not open alpha's envelope, whoever hands it over.
    let err = credentials::open(&for_alpha, &beta_x, &trusted).unwrap_err();
    assert!(matches!(err, CredentialError::Open), "{err}");
    assert_eq!(
        credentials::open(&for_alpha, &alpha_x, &trusted).unwrap(),
        secret
    );

    // Even stored under beta's own key (a controller mistake), beta's hive
    // refuses it with an error that names the key and holds no secret, and
    // writes nothing.
    let beta = HiveName::new("beta").unwrap();
    creds
        .put(
            credential_key(&beta, &agent, &account),
            encode(&for_alpha).unwrap().into(),
        )
        .await
        .unwrap();
    let conn = s.hive_conn("beta").await;
    let dir = tempfile::tempdir().unwrap();
    let deliverer = Deliverer::new(DelivererParts {
        client: conn.client.clone(),
        hive: beta.clone(),
        xkey: Arc::new(beta_x),
        trusted: Arc::new(trusted),
        agents_dir: dir.path().to_path_buf(),
    });
    let err = deliverer.deliver(&agent, &account).await.unwrap_err();
    assert!(matches!(err, DeliverError::Open { .. }), "{err}");
    let msg = hive::error_chain(&err);
    assert!(msg.contains("beta.mail-bot.smtp"), "{msg}");
    assert!(
        leaks(msg.as_bytes(), &leak_forms(secret)).is_empty(),
        "{msg}"
    );
    assert!(!credential_path(dir.path(), &agent, &account).exists());

    // A notice for a key that is not there is a clear error, not a crash.
    let missing = deliverer
        .deliver(&agent, &AccountName::new("imap").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(missing, DeliverError::Missing { .. }), "{missing}");
    assert!(
        missing.to_string().contains("beta.mail-bot.imap"),
        "{missing}"
    );
}

/// A declaration that names `agent`'s credential `account`: what tells a
/// hive which of its keys to read at boot.
fn declaring(agent: &AgentName, account: &AccountName) -> swarm_queue_client::Declaration {
    let text = serde_json::json!({
        "schema": 1,
        "agents": { agent.as_str(): { "image": "local/x:1", "credentials": [account.as_str()] } }
    })
    .to_string();
    decode::<swarm_queue_client::Declaration>(text.as_bytes())
        .unwrap()
        .value
}
