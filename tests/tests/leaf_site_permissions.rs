//! A leaf-node site that enforces the generated per-hive permissions, as a
//! real site would run: a hub server (JetStream domain `hub`) holds the
//! buckets; a site server (its own domain `site`) joins it as a leaf node
//! and runs the authorization `swarm-controller nats-config` renders for a
//! roster whose hives say `jetstream_domain = "hub"`. Each hive connects to
//! the site only, with its own nkey.
//!
//! The site server is the one that checks a hive's permissions (the hive is
//! its client; the hub sees only the leaf connection). It applies its own
//! account mappings first, which cover only its own domain (`$JS.site.API`
//! to `$JS.API`), so it checks the hub's form as the hive sent it,
//! `$JS.hub.API.…`; the hub maps that to `$JS.API.…` / `$KV.…`. So:
//!
//! - a real `hive` at the site converges, answers a deploy request, gets a
//!   sealed credential and stays fresh through the leaf with only its
//!   generated grants, and the site logs no violation of its key;
//! - the same identity cannot read or write another hive's keys through the
//!   domain subjects, nor use the site's own JetStream, nor make a
//!   consumer: each refusal is read from the site server's
//!   permissions-violation log line naming the key and the exact subject.

use std::time::Duration;

use async_nats::jetstream;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::{render_roster_in_domain, SecuredNats, Violation};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::swarm::{free_port, hub_config, leaf_links, site_config, HUB_DOMAIN};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use swarm_queue_client::credentials::{seal, XKey};
use swarm_queue_client::direct::{put_own_key, KeyReader, OwnKey};
use swarm_queue_client::permissions::{js_api, JsApi};
use swarm_queue_client::subjects::{credential_key, hive_connection_name, HiveSubjects};
use swarm_queue_client::{
    encode, open_or_create, AccountName, AgentName, Bucket, BucketSettings, Connection,
    CredentialNotice, DeployReply, DeployRequest, HiveName,
};

const T: Duration = Duration::from_secs(60);
/// A refused JetStream request gets no answer; don't wait long for one (the
/// refusal itself is read from the site server's log).
const REFUSED_WAIT: Duration = Duration::from_millis(700);

/// The hub, and the site joined to it with the generated authorization for
/// `hives` (every one in the hub's domain).
struct Site {
    secured: SecuredNats,
    /// Holds the buckets; no authorization (the site is what is tested).
    hub: NatsServer,
}

impl Site {
    async fn start(name: &str, hives: &[&str]) -> Site {
        let leaf_port = free_port();
        let hub = NatsServer::start_with(
            Some(&format!(
                "server_name: {name}-hub\n{}",
                hub_config(leaf_port)
            )),
            &["-m", "-1"],
        );
        let site = site_config(name, &[format!("\"nats-leaf://127.0.0.1:{leaf_port}\"")]);
        let secured = SecuredNats::start_with_args(
            hives,
            |controller, roster| {
                format!(
                    "{site}{}",
                    render_roster_in_domain(controller, roster, Some(HUB_DOMAIN))
                )
            },
            &["-m", "-1"],
        );
        wait_until(T, "the site joined to the hub", || async {
            (leaf_links(&secured.server).await == 1).then_some(())
        })
        .await;
        Site { secured, hub }
    }

    /// The controller's side, on the hub: the three buckets made, a plain
    /// client on them.
    async fn controller(&self) -> Swarm {
        let hub = Swarm::connect(&self.hub.url()).await;
        for b in Bucket::HIVE {
            open_or_create(&hub.js, b, &BucketSettings::default_for(b))
                .await
                .unwrap_or_else(|e| panic!("create {} on the hub: {e}", b.name()));
        }
        hub
    }

    /// Hive `name`'s `[nats]` table: the site, its nkey, the hub's domain.
    fn hive_nats(&self, name: &str) -> String {
        format!(
            "{}jetstream_domain = {HUB_DOMAIN:?}\n",
            self.secured
                .hive(name)
                .nats_toml(&self.secured.server.url())
        )
    }

    /// Connect to the site as hive `name`, the way its daemon does, with
    /// the hub's domain.
    async fn hive_conn(&self, name: &str) -> Connection {
        let hive = HiveName::new(name).expect("a valid hive name");
        let id = self.secured.hive(name);
        let mut config = id.nats_config(&self.secured.server.url());
        config.jetstream_domain = Some(HUB_DOMAIN.to_string());
        let conn = swarm_queue_client::connect(&config, &hive_connection_name(&hive))
            .await
            .expect("connect to the site");
        let client = conn.client.clone();
        wait_until(T, "the connection to the site up", || {
            let ok = swarm_queue_client::ensure_connected(&client).is_ok();
            async move { ok.then_some(()) }
        })
        .await;
        conn
    }

    fn violations_by(&self, name: &str) -> Vec<String> {
        let key = &self.secured.hive(name).public;
        self.secured
            .violations()
            .into_iter()
            .filter(|l| l.contains(key.as_str()))
            .collect()
    }
}

fn agent() -> AgentName {
    AgentName::new("web").unwrap()
}

fn account() -> AccountName {
    AccountName::new("smtp").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_hive_converges_and_stays_fresh_with_only_its_generated_grants() {
    let name = unique_name("lsp");
    let site = Site::start(&name, &[&name, "beta"]).await;
    let _guard = ContainerGuard::new(&name);
    let img = TestImage::busybox("lsp");
    let hub = site.controller().await;
    let controller_xkey = XKey::new();
    let extra = format!(
        "trusted_controller_xkeys = [{:?}]\n{}",
        controller_xkey.public_key(),
        site.hive_nats(&name)
    );
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: &extra,
        ..Default::default()
    });
    let _logs = LogsOnPanic(&site, &hive);

    // Converges on a declaration put on the hub.
    let declaration = serde_json::json!({
        "schema": 1,
        "agents": { "web": {
            "image": img.reference,
            "command": ["/bin/sleep", "3600"],
            "credentials": ["smtp"],
        } },
    });
    let rev = hub.declare(&name, &declaration.to_string()).await;
    let status = hub.converged(&name, rev, T).await;
    assert_eq!(status["agents"]["web"]["observed"], "running", "{status}");
    assert!(
        site.secured
            .server
            .client_names()
            .await
            .contains(&format!("hive-{name}")),
        "the hive is the site's client"
    );

    // Answers a deploy request sent on the hub (it crosses the leaf both ways).
    let hive_name = HiveName::new(name.clone()).unwrap();
    let subjects = HiveSubjects::new(&hive_name);
    let request = encode(&DeployRequest::new(agent())).unwrap();
    let answer = hub
        .client
        .request(subjects.deploy.clone(), request.into())
        .await
        .expect("a deploy reply through the leaf");
    assert!(matches!(
        DeployReply::decode(&answer.payload).unwrap(),
        DeployReply::Queued { .. }
    ));

    // Gets a credential sealed to it: a notice on the hub, then a direct get
    // of its own key through the domain.
    let xkey = status["xkey"]
        .as_str()
        .expect("the hive's xkey")
        .to_string();
    let envelope = seal(b"smtp-password", &controller_xkey, &xkey).unwrap();
    let creds = hub
        .js
        .get_key_value(Bucket::Credentials.name())
        .await
        .unwrap();
    creds
        .put(
            credential_key(&hive_name, &agent(), &account()),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();
    let notice = encode(&CredentialNotice::new(agent(), account())).unwrap();
    hub.client
        .publish(subjects.credential.clone(), notice.into())
        .await
        .unwrap();
    let path =
        hive::credentials::credential_path(&hive.state_dir.join("agents"), &agent(), &account());
    wait_until(T, "the credential in the agent's state dir", || {
        let got = std::fs::read(&path).ok();
        async move { (got.as_deref() == Some(&b"smtp-password"[..])).then_some(()) }
    })
    .await;

    // Stays fresh: it keeps putting its status through the leaf.
    let (first, _) = hub.status(&name).await.expect("a status");
    wait_until(T, "two more status puts through the leaf", || async {
        let (now, s) = hub.status(&name).await?;
        (now >= first + 2 && s["converged_revision"].as_u64() >= Some(rev)).then_some(())
    })
    .await;
    assert!(
        site.violations_by(&name).is_empty(),
        "the hive was refused something it needs: {:#?}",
        site.secured.violations()
    );
}

#[tokio::test]
async fn a_site_hive_cannot_reach_another_hives_keys_through_the_domain() {
    let name = unique_name("lsp-x");
    let site = Site::start(&name, &["alpha", "beta"]).await;
    let hub = site.controller().await;
    let beta_cred = credential_key(&HiveName::new("beta").unwrap(), &agent(), &account());
    for h in ["alpha", "beta"] {
        hub.declare(h, &format!("{h}-declaration")).await;
    }
    let creds = hub
        .js
        .get_key_value(Bucket::Credentials.name())
        .await
        .unwrap();
    creds.put(&beta_cred, "beta-sealed".into()).await.unwrap();

    let a = site.hive_conn("alpha").await;
    let mut ajs = a.jetstream();
    ajs.set_timeout(REFUSED_WAIT);
    let me = site.secured.hive("alpha").public.clone();
    let hub_api = JsApi::domain(HUB_DOMAIN).unwrap();
    let refused = |kind, subject: String| {
        let s = &site.secured;
        let me = me.clone();
        async move { s.violation(kind, &me, &subject).await }
    };

    // The allowed path works, so the refusals below are the grants'.
    let own = KeyReader::new(&ajs, Bucket::Wanted)
        .last("alpha")
        .await
        .expect("its own key through the domain")
        .expect("a value");
    assert_eq!(&own.value[..], b"alpha-declaration");

    // Read beta's declaration and credential through the domain.
    assert!(KeyReader::new(&ajs, Bucket::Wanted)
        .last("beta")
        .await
        .is_err());
    refused(
        Violation::Publish,
        hub_api.direct_get(Bucket::Wanted, "beta"),
    )
    .await;
    assert!(KeyReader::new(&ajs, Bucket::Credentials)
        .last(&beta_cred)
        .await
        .is_err());
    refused(
        Violation::Publish,
        hub_api.direct_get(Bucket::Credentials, &beta_cred),
    )
    .await;

    // Write beta's status, or any declaration, through the domain.
    for (bucket, key) in [
        (Bucket::Status, "beta"),
        (Bucket::Wanted, "beta"),
        (Bucket::Wanted, "alpha"),
    ] {
        let put = OwnKey {
            bucket,
            key,
            domain: Some(HUB_DOMAIN),
        };
        assert!(put_own_key(&ajs, put, "forged".into()).await.is_err());
        refused(Violation::Publish, hub_api.put(bucket, key)).await;
    }

    // Its own key through the site's own JetStream (`$JS.API`, domain
    // `site`), or named as that domain: not granted, only the hub's form
    // is. The site maps its own `$JS.site.API.>` to `$JS.API.>` before it
    // checks permissions, so both are refused as `$JS.API.…`.
    let mut local = jetstream::new(a.client.clone());
    local.set_timeout(REFUSED_WAIT);
    assert!(KeyReader::new(&local, Bucket::Wanted)
        .last("alpha")
        .await
        .is_err());
    let _ = a
        .client
        .request(
            JsApi::domain("site")
                .unwrap()
                .direct_get(Bucket::Wanted, "alpha"),
            "".into(),
        )
        .await;
    let local_get = js_api::direct_get(Bucket::Wanted, "alpha");
    wait_until(T, "both local-domain reads refused", || async {
        let lines = site
            .violations_by("alpha")
            .into_iter()
            .filter(|l| l.ends_with(&format!("Subject \"{local_get}\"")))
            .count();
        (lines == 2).then_some(())
    })
    .await;

    // No stream info (it lists every key) and no consumer, through the domain.
    for subject in [
        hub_api.stream_info(Bucket::Wanted),
        hub_api.consumer_create(Bucket::Wanted, "mine", "alpha"),
    ] {
        let _ = a.client.request(subject.clone(), "{}".into()).await;
        refused(Violation::Publish, subject).await;
    }

    // Nothing of beta's changed on the hub.
    let wanted = hub.js.get_key_value(Bucket::Wanted.name()).await.unwrap();
    assert_eq!(
        &wanted.get("beta").await.unwrap().unwrap()[..],
        b"beta-declaration"
    );
    assert_eq!(
        &wanted.get("alpha").await.unwrap().unwrap()[..],
        b"alpha-declaration"
    );
    assert!(hub.status("beta").await.is_none());
    assert!(site.violations_by("beta").is_empty());
}

/// On a failure, the hive's and the site server's logs go to stderr.
struct LogsOnPanic<'a>(&'a Site, &'a HiveProc);

impl Drop for LogsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- hive log ---\n{}", self.1.daemon.log());
            eprintln!("--- site server log ---\n{}", self.0.secured.server.log());
        }
    }
}
