//! A leaf-node site that enforces the generated accounts, as a real site
//! would run: a hub server (JetStream domain `hub`) holds the buckets in
//! its buckets account; a site server (its own domain `site`) runs what
//! `swarm-controller nats-config --site edge` renders: each hive in an
//! account of its own, joined to the hub by its own leaf link, bound to
//! that account at the site and signing as the hive's link user
//! (`[leaf_sites.edge.links]` in the roster), which at the hub is the user
//! of the hive's account there: only its own imports. The hub runs what
//! `nats-config` renders for a roster whose hives say
//! `jetstream_domain = "hub"`, and `nats-server -t` accepts both configs.
//!
//! The site server is the one that checks a hive's permissions (the hive is
//! its client; the hub sees only the leaf connection). It applies its own
//! account mappings first, which cover only its own domain (`$JS.site.API`
//! to `$JS.API`), so it checks the hub's form as the hive sent it,
//! `$JS.hub.API.…`; the hub maps that to `$JS.API.…` / `$KV.…` in the
//! hive's account, which imports those. So:
//!
//! - a real `hive` at the site converges, answers a deploy request, gets a
//!   sealed credential and stays fresh through its link with only its
//!   generated grants; neither server logs a violation and the links hold;
//! - the same identity cannot read or write another hive's keys through the
//!   domain subjects, nor use the site's own JetStream, nor make a
//!   consumer: each refusal is read from the site server's
//!   permissions-violation log line naming the key and the exact subject;
//! - no answer it makes JetStream send, whatever its reply subject, changes
//!   the fleet on the hub or reaches the controller's inbox;
//! - nor does any a server of its own can make with a hive's link seed
//!   (stolen), with no permission of its own at that server.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::{
    ask_deploy, connect_as, render_roster_at_site, Identity, SecuredNats, Violation,
};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::reply_probes;
use hyperhive_tests::swarm::{free_port, hub_config, leaf_links, secured_site_config, HUB_DOMAIN};
use hyperhive_tests::{check_config, unique_name, wait_until, NatsServer};
use swarm_queue_client::credentials::{seal, XKey};
use swarm_queue_client::direct::{put_own_key, KeyReader, OwnKey};
use swarm_queue_client::permissions::{js_api, JsApi};
use swarm_queue_client::subjects::{
    credential_key, hive_connection_name, HiveSubjects, CONTROLLER_CONNECTION_NAME,
};
use swarm_queue_client::{
    encode, open_or_create, AccountName, AgentName, Bucket, BucketSettings, Connection,
    CredentialNotice, DeployReply, DeployRequest, HiveName,
};

const T: Duration = Duration::from_secs(60);
/// A refused JetStream request gets no answer; don't wait long for one (the
/// refusal itself is read from the site server's log).
const REFUSED_WAIT: Duration = Duration::from_millis(700);

/// The hub, and the site joined to it by one link per hive, both running
/// what is generated for `hives` (every one in the hub's domain, all at
/// leaf site `edge`, each link signing as its own nkey user).
struct Site {
    secured: SecuredNats,
    /// Holds the buckets, in its buckets account; each link lands in its
    /// hive's account there.
    hub: NatsServer,
    leaf_port: u16,
    /// Each hive's link identity, by hive name.
    links: BTreeMap<String, Identity>,
}

impl Site {
    async fn start(name: &str, hives: &[&str]) -> Site {
        let leaf_port = free_port();
        let links: BTreeMap<String, Identity> = hives
            .iter()
            .map(|h| (h.to_string(), Identity::new_user()))
            .collect();
        let link_keys = links
            .iter()
            .map(|(h, id)| (h.clone(), id.public.clone()))
            .collect();
        let mut hub = None;
        let secured = SecuredNats::start_with_args(
            hives,
            |controller, roster| {
                let (hub_block, site_block) =
                    render_roster_at_site(controller, roster, HUB_DOMAIN, "edge", &link_keys);
                let hub_text = format!(
                    "server_name: {name}-hub\n{}{hub_block}",
                    hub_config(leaf_port)
                );
                check_config(&hub_text).expect("nats-server -t accepts the hub's config");
                assert!(
                    check_config(&site_block).is_err(),
                    "nats-server -t accepts the site's config with no hub URL or seed"
                );
                hub = Some(NatsServer::start_with(Some(&hub_text), &["-m", "-1"]));
                let seeds: Vec<(&str, String)> = links
                    .iter()
                    .map(|(h, id)| (h.as_str(), id.seed()))
                    .collect();
                let url = format!("\"nats-leaf://127.0.0.1:{leaf_port}\"");
                let site_text = secured_site_config(name, &url, &seeds, &site_block);
                check_config(&site_text).expect("nats-server -t accepts the site's config");
                site_text
            },
            &["-m", "-1"],
        );
        let hub = hub.expect("the hub started");
        wait_until(T, "every hive's link joined to the hub", || async {
            (leaf_links(&secured.server).await == hives.len()).then_some(())
        })
        .await;
        Site {
            secured,
            hub,
            leaf_port,
            links,
        }
    }

    /// The controller's side: connected to the hub as the controller, the
    /// every bucket (`Bucket::ALL`) made.
    async fn controller(&self) -> Swarm {
        let conn = connect_as(
            &self.hub.url(),
            &self.secured.controller,
            CONTROLLER_CONNECTION_NAME,
        )
        .await;
        let hub = Swarm {
            client: conn.client.clone(),
            js: jetstream::new(conn.client.clone()),
        };
        for b in Bucket::ALL {
            open_or_create(&hub.js, b, &BucketSettings::default_for(b))
                .await
                .unwrap_or_else(|e| panic!("create {} on the hub: {e}", b.name()));
        }
        hub
    }

    /// Ready for the reply-subject probes: the controller on the hub with
    /// the probes' keys written, beta's status put through its link (so the
    /// status stream's first sequence is not alpha's, whose own puts the
    /// probes may make), and a spy on the controller's inbox.
    async fn ready_for_probes(&self) -> Probing {
        let hub = self.controller().await;
        reply_probes::seed_keys(&hub.js).await;
        let beta = self.hive_conn("beta").await;
        put_own_key(&beta.jetstream(), beta_status(), "beta-up".into())
            .await
            .expect("beta's status put through its link");
        let spy = connect_as(
            &self.hub.url(),
            &self.secured.controller,
            CONTROLLER_CONNECTION_NAME,
        )
        .await;
        Probing { hub, beta, spy }
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

    /// Every violation the hub logged (a refused link message or
    /// subscription: the hub then closes the link).
    fn hub_violations(&self) -> Vec<String> {
        self.hub
            .log()
            .lines()
            .filter(|l| l.contains("Violation"))
            .map(str::to_string)
            .collect()
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

/// What [`Site::ready_for_probes`] gives.
struct Probing {
    hub: Swarm,
    beta: Connection,
    spy: Connection,
}

fn beta_status() -> OwnKey<'static> {
    OwnKey {
        bucket: Bucket::Status,
        key: "beta",
        domain: Some(HUB_DOMAIN),
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
    assert_eq!(
        site.secured
            .server
            .client_account(&format!("hive-{name}"))
            .await
            .as_deref(),
        Some(name.as_str()),
        "the hive is the site's client, in its own account"
    );

    // Answers a deploy request sent on the hub (it crosses the leaf both ways).
    let hive_name = HiveName::new(name.clone()).unwrap();
    let subjects = HiveSubjects::new(&hive_name);
    let request = encode(&DeployRequest::new(agent())).unwrap();
    let answer = ask_deploy(&hub.client, hive_name.as_str(), request.into())
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
    let path = hive::bus::credentials::credential_path(
        &hive.state_dir.join("agents"),
        &agent(),
        &account(),
    );
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
    assert!(
        site.hub_violations().is_empty(),
        "the hub refused the link something its hive needs: {:#?}",
        site.hub_violations()
    );
    assert_eq!(leaf_links(&site.secured.server).await, 2, "the links held");
}

/// The reply-subject probes of `isolation_replies`, sent by hive alpha at
/// the site through the hub's domain, with the controller on the hub: its
/// answers cross alpha's own account at the site, then the link, and land
/// back in alpha's account, so nothing of the fleet changes and nothing
/// reaches the controller's inbox. With the site's hives in one account
/// at the site, the same probes deleted the buckets on the hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_hives_answers_reach_only_its_own_account() {
    let name = unique_name("lsp-r");
    let site = Site::start(&name, &["alpha", "beta"]).await;
    let Probing { hub, beta, spy } = site.ready_for_probes().await;
    let hub_api = JsApi::domain(HUB_DOMAIN).unwrap();
    let alpha = site.hive_conn("alpha").await;
    let outcome = reply_probes::run(&alpha, &spy, &hub.js, "alpha", &hub_api, &["beta"]).await;
    outcome.assert_contained("leaf-site");

    // The links still carry both hives' requests.
    put_own_key(&beta.jetstream(), beta_status(), "beta-again".into())
        .await
        .expect("beta's put after the probes");
    let own = KeyReader::new(&alpha.jetstream(), Bucket::Wanted)
        .last("alpha")
        .await
        .expect("alpha's read after the probes")
        .expect("a value");
    assert_eq!(&own.value[..], b"alpha-declaration");
    assert_eq!(leaf_links(&site.secured.server).await, 2, "the links held");
    assert!(
        site.hub_violations().is_empty(),
        "{:#?}",
        site.hub_violations()
    );
}

/// The same probes sent by a server of its own that holds alpha's link
/// seed (a stolen seed, or a site server taken over), through a user with
/// no permission at all at that server: what the link carries lands in
/// alpha's account at the hub, so nothing of the fleet changes and nothing
/// reaches the controller's inbox. With one link per site in the buckets'
/// account (before), the same probes through the site's link seed changed
/// the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_link_seed_reaches_only_its_hives_account() {
    let name = unique_name("lsp-s");
    let site = Site::start(&name, &["alpha", "beta"]).await;
    let Probing { hub, spy, .. } = site.ready_for_probes().await;
    let anyone = Identity::new_user();
    let rogue = NatsServer::start_with(
        Some(&format!(
            "server_name: {name}-rogue\njetstream {{ domain: rogue }}\n\
             accounts {{ alpha: {{ users: [ {{ nkey: {:?} }} ] }} }}\n\
             leafnodes {{ remotes: [ {{ urls: [\"nats-leaf://127.0.0.1:{}\"], \
             account: \"alpha\", nkey: {:?} }} ] }}\n",
            anyone.public,
            site.leaf_port,
            site.links["alpha"].seed()
        )),
        &["-m", "-1"],
    );
    wait_until(T, "the rogue server joined to the hub", || async {
        (leaf_links(&rogue).await == 1).then_some(())
    })
    .await;
    let alpha = HiveName::new("alpha").unwrap();
    let conn = connect_as(&rogue.url(), &anyone, &hive_connection_name(&alpha)).await;
    // The rogue link carries alpha's own requests.
    let js = jetstream::with_domain(conn.client.clone(), HUB_DOMAIN);
    let own_status = OwnKey {
        bucket: Bucket::Status,
        key: "alpha",
        domain: Some(HUB_DOMAIN),
    };
    put_own_key(&js, own_status, "rogue-up".into())
        .await
        .expect("alpha's status put through the rogue link");
    let hub_api = JsApi::domain(HUB_DOMAIN).unwrap();
    let outcome = reply_probes::run(&conn, &spy, &hub.js, "alpha", &hub_api, &["beta"]).await;
    outcome.assert_contained("stolen-link");
    let own = KeyReader::new(&js, Bucket::Wanted)
        .last("alpha")
        .await
        .expect("alpha's read through the rogue link")
        .expect("a value");
    assert_eq!(&own.value[..], b"alpha-declaration");
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
