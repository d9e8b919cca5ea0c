//! The controller's verbs over a real nats-server: `declare` (diff,
//! dry run, compare-and-set, refusals with the line), `deploy` (queued,
//! refused, no responders, unknown on timeout), `credential put` (sealed to
//! a real hive's xkey; the secret is nowhere in the bucket) and
//! `knowledge-changed`; and `--log-json` on both command lines.

use crate::controller_support::*;
use bytes::Bytes;
use futures_util::StreamExt;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use swarm_queue_client::credentials::{open, CredentialEnvelope, XKey};
use swarm_queue_client::subjects::{HiveSubjects, KNOWLEDGE};
use swarm_queue_client::{
    decode, CredentialNotice, Declaration, DeployReply, DeployRequest, HiveName, HiveState,
};

const SWARM_V1: &str = "\
[hives.alpha.agents.bot]
image = \"local/bot:1\"

[hives.alpha.agents.mail]
image = \"local/mail:1\"
credentials = [\"smtp\"]

[hives.beta]
agents = {}
";

const SWARM_V2: &str = "\
[hives.alpha.agents.bot]
image = \"local/bot:2\"
env = { LOG = \"debug\" }

[hives.alpha.agents.new-one]
image = \"local/new:1\"
";

async fn wanted_revision(env: &Env, hive: &str) -> Option<u64> {
    env.wanted.entry(hive).await.unwrap().map(|e| e.revision)
}

#[tokio::test]
async fn declare_shows_the_diff_publishes_changes_only_and_is_idempotent() {
    let env = Env::new(&["alpha", "beta", "gamma"], "").await;
    let v1 = env.write("v1.toml", SWARM_V1);
    let v1 = v1.to_str().unwrap();

    let dry = env.run(&["declare", v1, "--dry-run"]).await;
    assert_eq!(dry.code, 0, "{dry:?}");
    println!("{}", dry.stdout);
    assert!(
        dry.stdout.contains("alpha: would publish (nothing stored)"),
        "{}",
        dry.stdout
    );
    assert!(dry.stdout.contains("    + bot") && dry.stdout.contains("    + mail"));
    assert!(
        dry.stdout.contains("left as they are: gamma"),
        "{}",
        dry.stdout
    );
    assert_eq!(
        wanted_revision(&env, "alpha").await,
        None,
        "dry run published"
    );

    let first = env.run(&["declare", v1]).await;
    assert_eq!(first.code, 0, "{first:?}");
    println!("{}", first.stdout);
    let alpha_rev = wanted_revision(&env, "alpha")
        .await
        .expect("alpha declared");
    let beta_rev = wanted_revision(&env, "beta")
        .await
        .expect("beta declared (explicitly empty)");
    assert!(first
        .stdout
        .contains(&format!("alpha: published revision {alpha_rev}")));
    assert_eq!(
        wanted_revision(&env, "gamma").await,
        None,
        "gamma is not in the file"
    );

    // The stored value is the contract's pretty JSON, readable with `nats kv get`.
    let stored = env.wanted.get("alpha").await.unwrap().unwrap();
    let text = std::str::from_utf8(&stored).unwrap();
    assert!(text.contains("\n  \"agents\""), "{text}");
    let d = decode::<Declaration>(&stored).unwrap().value;
    assert_eq!(d.agents.len(), 2);
    let beta = decode::<Declaration>(&env.wanted.get("beta").await.unwrap().unwrap()).unwrap();
    assert!(beta.value.agents.is_empty());

    // The same file again changes nothing: no new revision.
    let again = env.run(&["declare", v1, "--json"]).await;
    assert_eq!(again.code, 0, "{again:?}");
    let doc = again.json();
    assert!(
        doc["hives"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["outcome"] == "unchanged"),
        "{doc}"
    );
    assert_eq!(wanted_revision(&env, "alpha").await, Some(alpha_rev));
    assert_eq!(wanted_revision(&env, "beta").await, Some(beta_rev));

    // A changed file: per-agent diff; only alpha (in the file, changed) is written.
    let v2 = env.write("v2.toml", SWARM_V2);
    let second = env.run(&["declare", v2.to_str().unwrap()]).await;
    assert_eq!(second.code, 0, "{second:?}");
    println!("{}", second.stdout);
    for line in ["~ bot: env, image", "+ new-one", "- mail (will be retired)"] {
        assert!(
            second.stdout.contains(line),
            "{line} missing:\n{}",
            second.stdout
        );
    }
    assert!(wanted_revision(&env, "alpha").await > Some(alpha_rev));
    assert_eq!(
        wanted_revision(&env, "beta").await,
        Some(beta_rev),
        "beta not in v2: untouched"
    );
}

/// A hive built before `agent_spec` (alpha, whose status does not say
/// it) is taken to know the first spec's fields only; beta says it knows
/// this build's; gamma never reported. `min_running_secs` for all three:
/// refused for alpha by name, nothing written anywhere; `--force` writes it.
#[tokio::test]
async fn declare_refuses_a_field_a_hive_does_not_know_unless_forced() {
    let env = Env::new(&["alpha", "beta", "gamma"], "").await;
    env.put_status(&hive_status("alpha", HiveState::Ok, None, None, vec![]))
        .await;
    let mut beta = hive_status("beta", HiveState::Ok, None, None, vec![]);
    beta.agent_spec = Some(swarm_queue_client::AGENT_SPEC);
    env.put_status(&beta).await;
    let file = env.write(
        "soak.toml",
        "[hives.alpha.agents.bot]\nimage = \"local/bot:1\"\nmin_running_secs = 30\n\n\
         [hives.beta.agents.bot]\nimage = \"local/bot:1\"\nmin_running_secs = 30\n\n\
         [hives.gamma.agents.bot]\nimage = \"local/bot:1\"\nmin_running_secs = 30\n",
    );
    let file = file.to_str().unwrap();
    let refused = env.run(&["declare", file]).await;
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(
            "hive alpha (version 0.1.0) does not know the agent field min_running_secs of bot"
        ),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("hive beta ("),
        "{}",
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains("hive gamma has not reported: its agent fields were not checked"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("nothing published"),
        "{}",
        refused.stderr
    );
    for h in ["alpha", "beta", "gamma"] {
        assert_eq!(wanted_revision(&env, h).await, None, "{h} written");
    }
    // A dry run shows the same, and exits 0.
    let dry = env.run(&["declare", file, "--dry-run"]).await;
    assert_eq!(dry.code, 0, "{dry:?}");
    assert!(
        dry.stderr.contains("hive alpha (version 0.1.0)"),
        "{}",
        dry.stderr
    );
    let forced = env.run(&["declare", file, "--force"]).await;
    assert_eq!(forced.code, 0, "{forced:?}");
    assert!(
        forced.stderr.contains("hive alpha (version 0.1.0)"),
        "{}",
        forced.stderr
    );
    for h in ["alpha", "beta", "gamma"] {
        let d = env.wanted.get(h).await.unwrap().expect("written");
        let d = decode::<Declaration>(&d).unwrap().value;
        assert_eq!(d.agents.values().next().unwrap().min_running_secs, Some(30));
    }
}

#[tokio::test]
async fn declare_refuses_bad_files_with_the_line() {
    let env = Env::new(&["alpha"], "").await;
    let cases = [
        (
            "typo.toml",
            "[hives.alpha.agents.bot]\nimgae = \"x\"\n",
            "line 1: hives.alpha.agents.bot: unknown key `imgae`",
        ),
        (
            "badname.toml",
            "\n[hives.alpha.agents.Bot]\nimage = \"x\"\n",
            "line 2: hives.alpha.agents.Bot: invalid agent name \"Bot\"",
        ),
        (
            "syntax.toml",
            "[hives.alpha.agents.bot]\nimage = \"x\n",
            "line 2",
        ),
        (
            "bounds.toml",
            "[hives.alpha.agents.bot]\nimage = \"x\"\ncpus = 0.0\n",
            "agents.bot.cpus is 0",
        ),
        ("noagents.toml", "[hives.alpha]\n", "agents = {}"),
        (
            "offroster.toml",
            "[hives.alpha]\nagents = {}\n\n[hives.zeta]\nagents = {}\n",
            "line 4: hive zeta is not on the roster",
        ),
    ];
    for (name, text, needle) in cases {
        let path = env.write(name, text);
        let r = env.run(&["declare", path.to_str().unwrap()]).await;
        assert_eq!(r.code, 1, "{name}: {r:?}");
        assert!(
            r.stderr.contains(needle),
            "{name}: {needle:?} missing from:\n{}",
            r.stderr
        );
        println!("{name}: {}", r.stderr.trim());
    }
    // Nothing was published by any of them.
    assert!(env.wanted.entry("alpha").await.unwrap().is_none());
    let r = env.run(&["declare"]).await;
    assert_eq!(r.code, 2, "no file and no swarm_file: usage");
}

/// A stand-in for a hive's deploy listener that answers every request with
/// `reply`, or never (`None`): the one way to make "no reply in time"
/// happen on purpose. The real hive's answers are tested in
/// `controller_converge.rs`.
async fn responder(
    env: &Env,
    hive: &str,
    reply: Option<DeployReply>,
) -> tokio::task::JoinHandle<Vec<DeployRequest>> {
    let subject = HiveSubjects::new(&HiveName::new(hive).unwrap()).deploy;
    let mut sub = env.client.subscribe(subject).await.unwrap();
    env.client.flush().await.unwrap();
    let client = env.client.clone();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        if let Some(msg) = sub.next().await {
            seen.push(decode::<DeployRequest>(&msg.payload).unwrap().value);
            if let (Some(reply), Some(to)) = (&reply, msg.reply) {
                client
                    .publish(to, Bytes::from(reply.encode()))
                    .await
                    .unwrap();
                client.flush().await.unwrap();
            }
        }
        seen
    })
}

#[tokio::test]
async fn deploy_queued_refused_no_responders_and_unknown() {
    let env = Env::new(&["alpha", "offline"], "").await;

    let r = env.run(&["deploy", "offline", "bot"]).await;
    println!("offline: {}", r.stdout.trim());
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("no responders"), "{r:?}");

    let listener = responder(&env, "alpha", Some(DeployReply::Queued { job: 42 })).await;
    let r = env.run(&["deploy", "alpha", "bot"]).await;
    println!("queued: {}", r.stdout.trim());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("queued job 42"), "{r:?}");
    let got = listener.await.unwrap();
    assert_eq!(got[0].agent.as_str(), "bot");

    let listener = responder(
        &env,
        "alpha",
        Some(DeployReply::Refused {
            error: "agent bot is not declared".into(),
        }),
    )
    .await;
    let r = env.run(&["deploy", "alpha", "bot", "--json"]).await;
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["outcome"], "refused");
    assert_eq!(r.json()["error"], "agent bot is not declared");
    listener.await.unwrap();

    // Someone listens but never answers: unknown, not failed.
    let listener = responder(&env, "alpha", None).await;
    let r = env
        .run(&["deploy", "alpha", "bot", "--timeout-secs", "1"])
        .await;
    println!("silent: {}", r.stdout.trim());
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.contains("unknown, the hive may still act on it"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("failed"), "{r:?}");
    listener.await.unwrap();

    let r = env.run(&["deploy", "nobody", "bot"]).await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not on the roster"), "{r:?}");
}

/// `credential put <hive> mail smtp --from-file <file>`.
async fn put_credential(env: &Env, hive: &str, file: &str) -> Run {
    env.run(&[
        "credential",
        "put",
        hive,
        "mail",
        "smtp",
        "--from-file",
        file,
    ])
    .await
}

#[tokio::test]
async fn credential_put_seals_to_the_real_hive_and_never_stores_the_secret() {
    let env = Env::new(&["alpha", "quiet"], "xkey_seed_file = \"controller.xkey\"").await;
    let url = env.nats.url();
    let hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        nats_url: Some(&url),
        ..Default::default()
    });
    let row = env
        .wait_row("alpha", "alpha reports", |r| r["freshness"] == "fresh")
        .await;
    println!("alpha: {}", row["freshness_reason"]);

    let subject = HiveSubjects::new(&HiveName::new("alpha").unwrap()).credential;
    let mut notices = env.client.subscribe(subject).await.unwrap();
    env.client.flush().await.unwrap();

    let secret = "correct horse battery staple 7f3a";
    let secret_file = env.write("smtp.pw", secret);
    let r = put_credential(&env, "alpha", secret_file.to_str().unwrap()).await;
    println!("{}", r.stdout.trim());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("stored alpha.mail.smtp"), "{r:?}");
    assert!(!r.stdout.contains(secret) && !r.stderr.contains(secret));

    // The controller's seed was created with mode 0600.
    use std::os::unix::fs::PermissionsExt;
    let seed_path = env.path("controller.xkey");
    let mode = std::fs::metadata(&seed_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // The raw value holds neither the secret nor its hex.
    let raw = env
        .credentials
        .get("alpha.mail.smtp")
        .await
        .unwrap()
        .expect("stored");
    let raw_text = String::from_utf8_lossy(&raw);
    assert!(!raw_text.contains(secret), "{raw_text}");
    assert!(
        !raw_text.contains(
            &secret
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
        "{raw_text}"
    );

    // It opens with the hive's own key, from the controller's key only.
    let envelope = decode::<CredentialEnvelope>(&raw).unwrap().value;
    let controller = XKey::from_seed(std::fs::read_to_string(&seed_path).unwrap().trim()).unwrap();
    assert_eq!(envelope.sender, controller.public_key());
    let hive_key = XKey::from_seed(
        std::fs::read_to_string(hive.state_dir.join("xkey.seed"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    let opened = open(&envelope, &hive_key, &[controller.public_key()]).unwrap();
    assert_eq!(opened, secret.as_bytes());

    // The notice carries names only.
    let msg = tokio::time::timeout(T, notices.next())
        .await
        .unwrap()
        .unwrap();
    assert!(!String::from_utf8_lossy(&msg.payload).contains(secret));
    let notice = decode::<CredentialNotice>(&msg.payload).unwrap().value;
    assert_eq!(
        (notice.agent.as_str(), notice.account.as_str()),
        ("mail", "smtp")
    );

    // A hive that never reported has no known key: refused, nothing stored.
    let r = put_credential(&env, "quiet", secret_file.to_str().unwrap()).await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("has never reported"), "{r:?}");
    assert!(env
        .credentials
        .get("quiet.mail.smtp")
        .await
        .unwrap()
        .is_none());
    // A status without an xkey: refused.
    env.put_status(&hive_status(
        "quiet",
        swarm_queue_client::HiveState::Ok,
        None,
        None,
        vec![],
    ))
    .await;
    let r = put_credential(&env, "quiet", secret_file.to_str().unwrap()).await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("has not published an xkey"), "{r:?}");
    // A missing secret file names the file.
    let r = put_credential(&env, "alpha", "/nonexistent/pw").await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("/nonexistent/pw"), "{r:?}");
    drop(hive);
}

#[tokio::test]
async fn knowledge_changed_publishes_the_empty_event() {
    let env = Env::new(&["alpha"], "").await;
    let mut sub = env.client.subscribe(KNOWLEDGE).await.unwrap();
    env.client.flush().await.unwrap();
    let r = env.run(&["knowledge-changed"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let msg = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
    assert!(msg.payload.is_empty());
}

#[tokio::test]
async fn nats_config_renders_the_roster_without_nats() {
    let dir = tempfile::tempdir().unwrap();
    let key = || nkeys::KeyPair::new_user().public_key();
    let (controller, alpha, beta) = (key(), key(), key());
    // The roster-only file the NixOS module writes: no [nats], no secrets.
    let roster = dir.path().join("roster.toml");
    std::fs::write(
        &roster,
        format!(
            "stale_after_secs = 120\n[controller]\nnkey = \"{controller}\"\n\
             [hives.alpha]\nnkey = \"{alpha}\"\n[hives.beta]\nnkey = \"{beta}\"\n"
        ),
    )
    .unwrap();
    let r = run_controller(Some(&roster), &["nats-config"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("accounts {"), "{}", r.stdout);
    assert!(r.stdout.contains("\"HYPERHIVE\": {"), "{}", r.stdout);
    for k in [&controller, &alpha, &beta] {
        assert!(r.stdout.contains(k.as_str()), "{k} missing");
    }
    // nats-server itself accepts what was printed.
    let conf = dir.path().join("auth.conf");
    std::fs::write(&conf, &r.stdout).unwrap();
    let check = std::process::Command::new("nats-server")
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let r = run_controller(Some(&roster), &["nats-config", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    r.json();

    // A verb that needs NATS refuses the roster-only file: 64, saying why.
    let r = run_controller(Some(&roster), &["status"]).await;
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.stderr.contains("no NATS server"), "{r:?}");
    let r = run_controller(None, &["--check-config", roster.to_str().unwrap()]).await;
    assert_eq!(r.code, 64, "{r:?}");

    // A hive without a key, or no controller key: 64, named.
    std::fs::write(
        &roster,
        format!("[controller]\nnkey = \"{controller}\"\n[hives.alpha]\n"),
    )
    .unwrap();
    let r = run_controller(Some(&roster), &["nats-config"]).await;
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.stderr.contains("hive alpha has no nkey"), "{r:?}");
    std::fs::write(&roster, format!("[hives.alpha]\nnkey = \"{alpha}\"\n")).unwrap();
    let r = run_controller(Some(&roster), &["nats-config"]).await;
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.stderr.contains("no [controller] nkey"), "{r:?}");
}

/// Each line of `text` that is a JSON object (a `--log-json` event).
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// Both command lines log the same way (the contract's `cli`): with
/// `--log-json` every event is a JSON line with its level and message;
/// without it, text. The controller's warning here is the one about a seed
/// file others can read; the hive's lines are its start-up info.
#[tokio::test]
async fn both_command_lines_log_json_lines_with_log_json() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("controller.xkey");
    std::fs::write(&seed, format!("{}\n", XKey::new().seed().unwrap())).unwrap();
    std::fs::set_permissions(&seed, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let config = dir.path().join("controller.toml");
    std::fs::write(
        &config,
        format!("xkey_seed_file = {:?}\n", seed.display().to_string()),
    )
    .unwrap();

    let text = run_controller(Some(&config), &["credential", "xkey"]).await;
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stderr.contains("readable by others"), "{text:?}");
    assert!(
        json_lines(&text.stderr).is_empty(),
        "text by default: {text:?}"
    );

    let json = run_controller(Some(&config), &["--log-json", "credential", "xkey"]).await;
    assert_eq!(json.code, 0, "{json:?}");
    assert_eq!(
        json.stdout, text.stdout,
        "the answer itself does not change"
    );
    let events = json_lines(&json.stderr);
    let warning = events
        .iter()
        .find(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("readable by others"))
        })
        .unwrap_or_else(|| panic!("no JSON warning in {:?}", json.stderr));
    assert_eq!(warning["level"], "WARN", "{warning}");
    assert_eq!(
        warning["fields"]["path"],
        seed.display().to_string(),
        "{warning}"
    );
    // Also after the verb (clap's global flag).
    let after = run_controller(Some(&config), &["credential", "xkey", "--log-json"]).await;
    assert_eq!(after.code, 0, "{after:?}");
    assert!(!json_lines(&after.stderr).is_empty(), "{after:?}");

    // The hive: `hive run --log-json`, no name and no NATS, logs its start
    // as JSON lines from the first one on.
    let state = dir.path().join("hive-state");
    let hive_config = dir.path().join("hive.toml");
    std::fs::write(
        &hive_config,
        format!(
            "state_dir = {:?}\nhttp_listen = \"127.0.0.1:0\"\n",
            state.display().to_string()
        ),
    )
    .unwrap();
    let log = dir.path().join("hive.log");
    let cfg = hive_config.display().to_string();
    let mut hive = hyperhive_tests::process::Daemon::spawn(
        &hyperhive_tests::process::hive_bin(),
        &["run", "--log-json", "--config", &cfg],
        &[("RUST_LOG", "info")],
        &log,
    );
    let listening = hyperhive_tests::wait_until(T, "the hive's HTTP listener logged", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        json_lines(&text).into_iter().find(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("HTTP listening"))
        })
    })
    .await;
    assert_eq!(listening["level"], "INFO", "{listening}");
    let text = std::fs::read_to_string(&log).unwrap();
    let first = text.lines().next().unwrap_or_default();
    assert!(
        serde_json::from_str::<serde_json::Value>(first).is_ok_and(|v| v.is_object()),
        "every line is JSON, from the first: {first:?}"
    );
    hive.kill();
}
