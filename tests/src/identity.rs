//! NATS identities for tests of per-identity permissions: fresh nkey users
//! (`KeyPair::new_user()`) with their seeds in files, the way a real hive
//! gets its seed (a file passed by `LoadCredential`), and a server started
//! with the authorization generated for them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use swarm_controller::config::{LeafSiteEntry, LeafSites};
use swarm_queue_client::subjects::{hive_connection_name, CONTROLLER_CONNECTION_NAME};
use swarm_queue_client::{Connection, HiveName, LeafSiteName, NatsConfig};

use crate::NatsServer;

/// One nkey user: its public key and a file holding its seed (mode 0600).
pub struct Identity {
    pub public: String,
    pub seed_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Identity {
    pub fn new_user() -> Self {
        let kp = nkeys::KeyPair::new_user();
        let dir = tempfile::Builder::new()
            .prefix("hhtest-nkey-")
            .tempdir()
            .expect("temp dir for an nkey seed");
        let seed_file = dir.path().join("nats.seed");
        let seed = kp.seed().expect("a new user key pair has a seed");
        std::fs::write(&seed_file, format!("{seed}\n")).expect("write the seed");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&seed_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the seed");
        Identity {
            public: kp.public_key(),
            seed_file,
            _dir: dir,
        }
    }

    /// The `[nats]` settings that connect as this identity.
    pub fn nats_config(&self, url: &str) -> NatsConfig {
        NatsConfig {
            url: Some(url.to_string()),
            nkey_seed_file: Some(self.seed_file.clone()),
            ..Default::default()
        }
    }

    /// The seed (`SU…`), for a config that holds it inline (a leaf
    /// remote's `nkey`).
    pub fn seed(&self) -> String {
        std::fs::read_to_string(&self.seed_file)
            .expect("read the seed")
            .trim()
            .to_string()
    }

    /// The same as a `[nats]` TOML table, for a daemon's config file.
    pub fn nats_toml(&self, url: &str) -> String {
        format!(
            "[nats]\nurl = {url:?}\nnkey_seed_file = {:?}\n",
            self.seed_file.display().to_string()
        )
    }
}

/// A nats-server running with the authorization generated for a controller
/// and a roster of hives.
pub struct SecuredNats {
    pub server: NatsServer,
    pub controller: Identity,
    pub hives: BTreeMap<String, Identity>,
    /// The authorization text the server was started with.
    pub config_text: String,
}

impl SecuredNats {
    /// Generate identities for the controller and `hives`, render the
    /// authorization with `render` (the code under test), and start a server
    /// with it.
    pub fn start(hives: &[&str], render: impl FnOnce(&str, &[(String, String)]) -> String) -> Self {
        Self::start_with_args(hives, render, &[])
    }

    /// The same with extra nats-server arguments (for example `-V` to trace
    /// every message, payloads included, into the server log).
    pub fn start_with_args(
        hives: &[&str],
        render: impl FnOnce(&str, &[(String, String)]) -> String,
        args: &[&str],
    ) -> Self {
        let controller = Identity::new_user();
        let hives: BTreeMap<String, Identity> = hives
            .iter()
            .map(|h| (h.to_string(), Identity::new_user()))
            .collect();
        let roster: Vec<(String, String)> = hives
            .iter()
            .map(|(h, id)| (h.clone(), id.public.clone()))
            .collect();
        let config_text = render(&controller.public, &roster);
        let server = NatsServer::start_with(Some(&config_text), args);
        SecuredNats {
            server,
            controller,
            hives,
            config_text,
        }
    }

    /// Start a server with the authorization `swarm-controller nats-config`
    /// renders for `hives`.
    pub fn start_generated(hives: &[&str]) -> Self {
        Self::start(hives, render_roster)
    }

    /// Connect as the controller, the way the controller does, and wait
    /// until the connection is up.
    pub async fn controller_conn(&self) -> Connection {
        connect_as(
            &self.server.url(),
            &self.controller,
            CONTROLLER_CONNECTION_NAME,
        )
        .await
    }

    /// Connect as the controller and open (or make) every bucket with the
    /// project's settings, as the controller does at start.
    pub async fn controller_with_buckets(&self) -> (Connection, async_nats::jetstream::Context) {
        let ctl = self.controller_conn().await;
        let js = async_nats::jetstream::new(ctl.client.clone());
        for b in swarm_queue_client::Bucket::ALL {
            swarm_queue_client::open_or_create(
                &js,
                b,
                &swarm_queue_client::BucketSettings::default_for(b),
            )
            .await
            .expect("open or create a bucket as the controller");
        }
        (ctl, js)
    }

    /// Put `value` as hive `name`'s status, under its own identity.
    pub async fn put_status(&self, name: &str, value: &'static str) {
        let conn = self.hive_conn(name).await;
        swarm_queue_client::direct::put_own(
            &async_nats::jetstream::new(conn.client.clone()),
            swarm_queue_client::Bucket::Status,
            name,
            value.into(),
        )
        .await
        .expect("a hive puts its own status");
    }

    /// Connect as hive `name`, the way its daemon does.
    pub async fn hive_conn(&self, name: &str) -> Connection {
        let hive = HiveName::new(name).expect("a valid hive name");
        connect_as(
            &self.server.url(),
            self.hive(name),
            &hive_connection_name(&hive),
        )
        .await
    }

    pub fn hive(&self, name: &str) -> &Identity {
        self.hives
            .get(name)
            .unwrap_or_else(|| panic!("hive {name} is not on the test roster"))
    }

    /// Wait until the server log shows a permissions violation for `user`
    /// (a public nkey) on exactly `subject`; returns the log line.
    pub async fn violation(&self, kind: Violation, user: &str, subject: &str) -> String {
        self.violation_where(kind, user, subject, |s| s == subject)
            .await
    }

    /// Wait until the server log shows a permissions violation for `user`
    /// on a subject that `matches`; `what` names it in a timeout message.
    pub async fn violation_where(
        &self,
        kind: Violation,
        user: &str,
        what: &str,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let log = self.server.log();
            if let Some(line) = log.lines().find(|l| {
                l.contains(kind.log_word())
                    && l.contains(user)
                    && violation_subject(l).is_some_and(&matches)
            }) {
                return line.to_string();
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for a {kind:?} violation by {user} on {what}; \
                     the server logged these violations:\n{}",
                    self.violations().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Every permissions violation the server logged so far.
    pub fn violations(&self) -> Vec<String> {
        self.server
            .log()
            .lines()
            .filter(|l| l.contains("Violation"))
            .map(str::to_string)
            .collect()
    }
}

/// The authorization text `swarm-controller nats-config` prints for this
/// roster.
pub fn render_roster(controller: &str, hives: &[(String, String)]) -> String {
    render_roster_in_domain(controller, hives, None)
}

/// The same, every hive with `[hives.<name>] jetstream_domain = domain`
/// when `domain` is given (hives on a leaf-node site).
pub fn render_roster_in_domain(
    controller: &str,
    hives: &[(String, String)],
    domain: Option<&str>,
) -> String {
    render_fleet(controller, hives, domain, &LeafSites::new())
}

/// What the hub and the site server run for hives that all sit on
/// leaf-node site `site` (domain `domain`), each hive's leaf link signing
/// with its own key in `links` (a public user nkey by hive name): the
/// hub's accounts (`nats-config`) and the site's (`nats-config --site`).
pub fn render_roster_at_site(
    controller: &str,
    hives: &[(String, String)],
    domain: &str,
    site: &str,
    links: &BTreeMap<String, String>,
) -> (String, String) {
    let entry = LeafSiteEntry {
        links: links
            .iter()
            .map(|(h, k)| {
                (
                    HiveName::new(h.clone()).expect("a valid hive name"),
                    k.clone(),
                )
            })
            .collect(),
    };
    let site = LeafSiteName::new(site).expect("a site name");
    let sites = LeafSites::from([(site.clone(), entry)]);
    let hub = render_fleet(controller, hives, Some(domain), &sites);
    let roster = roster_of(hives, Some(domain));
    let at_site = swarm_controller::nats_config::render_site(controller, &roster, &sites, &site)
        .expect("render the site");
    (hub, at_site)
}

fn render_fleet(
    controller: &str,
    hives: &[(String, String)],
    domain: Option<&str>,
    sites: &LeafSites,
) -> String {
    let roster = roster_of(hives, domain);
    swarm_controller::nats_config::render(controller, &roster, sites).expect("render the roster")
}

fn roster_of(hives: &[(String, String)], domain: Option<&str>) -> swarm_controller::config::Roster {
    hives
        .iter()
        .map(|(h, k)| {
            let entry = swarm_controller::config::RosterEntry {
                nkey: Some(k.clone()),
                jetstream_domain: domain.map(str::to_string),
                ..Default::default()
            };
            (HiveName::new(h.clone()).expect("a valid hive name"), entry)
        })
        .collect()
}

/// Connect through `swarm_queue_client::connect` (the daemons' code path)
/// and wait until the connection is up.
pub async fn connect_as(url: &str, id: &Identity, name: &str) -> Connection {
    let conn = swarm_queue_client::connect(&id.nats_config(url), name)
        .await
        .expect("connect");
    let client = conn.client.clone();
    crate::wait_until(Duration::from_secs(20), "the connection to be up", || {
        let ok = swarm_queue_client::ensure_connected(&client).is_ok();
        async move { ok.then_some(()) }
    })
    .await;
    conn
}

/// Which permission the server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    Publish,
    Subscribe,
}

impl Violation {
    fn log_word(self) -> &'static str {
        match self {
            Violation::Publish => "Publish Violation",
            Violation::Subscribe => "Subscription Violation",
        }
    }
}

/// The subject of a nats-server violation line:
/// `… - Publish Violation - Subject "<subject>"` or
/// `… - Subscription Violation - Subject "<subject>", SID 1`.
fn violation_subject(line: &str) -> Option<&str> {
    let start = line.rfind("Subject \"")? + "Subject \"".len();
    let rest = &line[start..];
    rest.find('"').map(|end| &rest[..end])
}

/// Send a deploy request to hive `hive` the way the controller does: on
/// its deploy subject, with a reply subject under the hive's own answer
/// prefix (the only subject a hive may answer on).
pub async fn ask_deploy(
    client: &async_nats::Client,
    hive: &str,
    payload: bytes::Bytes,
) -> Result<async_nats::Message, async_nats::RequestError> {
    let hive = HiveName::new(hive).expect("a valid hive name");
    let request = async_nats::Request::new().payload(payload).inbox(
        swarm_queue_client::subjects::fresh_deploy_answer(client, &hive),
    );
    client
        .send_request(
            swarm_queue_client::subjects::HiveSubjects::new(&hive).deploy,
            request,
        )
        .await
}
