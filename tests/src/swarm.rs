//! A whole swarm on one machine, for the fault tests: one or three
//! `nats-server`s, three (or [`SwarmSpec::hives`]) real `hive` processes (own name and state dir each,
//! sharing the machine's dockerd) and the controller's `status` verb.
//!
//! Every part is a real process a test can SIGKILL, SIGSTOP/SIGCONT or
//! restart ([`TestSwarm::hives`] are [`HiveProc`]s, [`TestSwarm::nats`] are
//! [`NatsServer`]s). Everything is cleaned up on drop, in order: the hives
//! are killed first, then their containers are removed, then the test image,
//! then the servers.
//!
//! With three servers, they form a JetStream cluster on loopback (one
//! `cluster {}` block each, routes to the other two) and the swarm's buckets
//! are created with 3 replicas, both by the hives' config and by
//! [`TestSwarm::connect`] before a test declares anything.
//!
//! [`HivesOn`] says which server the hives are given: every server (the
//! client picks one at random), only the first (it learns the others from
//! the cluster's INFO, so a test knows which server to kill), or a *leaf
//! site*: the servers above become a hub with JetStream domain `hub` and a
//! leafnode listener each, a site server (its own domain `site`) joins them
//! as a leaf node through a [`TcpLink`] per hub server, and the hives connect
//! only to the site, reaching the buckets with `jetstream_domain = "hub"`.
//! The controller and [`TestSwarm::connect`] always use the hub.

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::kv;
use serde_json::{json, Value};

use crate::docker::{ContainerGuard, TestImage};
use crate::hive::{HiveProc, HiveSpec};
use crate::kv::Swarm;
use crate::link::TcpLink;
use crate::{controller_bin, unique_name, wait_until, NatsServer};

/// The JetStream domain of the hub in a leaf-site swarm.
pub const HUB_DOMAIN: &str = "hub";

/// Which server(s) the hives are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HivesOn {
    /// Every server's URL; the client picks one.
    #[default]
    AllServers,
    /// The first server's URL only; the hives learn the others from the
    /// cluster's INFO and fail over to them.
    FirstServer,
    /// A site server joined to the servers as a leaf node.
    LeafSite,
}

/// How the swarm is set up.
pub struct SwarmSpec<'a> {
    /// Short test name, used in hive and image names.
    pub test: &'a str,
    /// Three servers in a JetStream cluster instead of one.
    pub cluster: bool,
    /// The controller's `stale_after_secs`.
    pub stale_after_secs: u64,
    /// Extra top-level hive config (each hive gets the same).
    pub hive_extra: &'a str,
    /// Environment for every hive process.
    pub hive_envs: &'a [(&'a str, &'a str)],
    /// How many hives (3 unless a test needs more; they share one dockerd).
    pub hives: usize,
    /// Which server(s) the hives connect to.
    pub hives_on: HivesOn,
    /// Each hive's `publish_interval_secs` (1, so tests see statuses soon;
    /// a failed put's retry backs off up to it).
    pub publish_interval_secs: u64,
}

impl Default for SwarmSpec<'_> {
    fn default() -> Self {
        SwarmSpec {
            test: "swarm",
            cluster: false,
            stale_after_secs: 3,
            hive_extra: "",
            hive_envs: &[],
            hives: 3,
            hives_on: HivesOn::AllServers,
            publish_interval_secs: 1,
        }
    }
}

/// Three hives and their servers. Field order is drop order.
pub struct TestSwarm {
    pub hives: Vec<HiveProc>,
    _containers: Vec<ContainerGuard>,
    pub image: TestImage,
    /// The site server and its links to the hub, with [`HivesOn::LeafSite`].
    pub site: Option<LeafSite>,
    pub nats: Vec<NatsServer>,
    /// The hives' names, in the order of [`TestSwarm::hives`].
    pub names: Vec<String>,
    /// Every server's URL joined with commas (what the controller and
    /// [`TestSwarm::connect`] are given; the hub with a leaf site).
    pub url: String,
    pub controller_config: PathBuf,
    replicas: usize,
    _dir: tempfile::TempDir,
}

/// How long a swarm's buckets may take to open or be made: a cluster
/// formed a moment ago elects its JetStream meta leader first (4 to 9 s a
/// round), and on a loaded machine a round can fail (one full run here
/// went past 30 s).
const BUCKET_WITHIN: Duration = Duration::from_secs(90);

/// A free loopback TCP port (bound and released; good enough on loopback).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Three servers forming a JetStream cluster on loopback.
pub fn start_cluster(name: &str) -> Vec<NatsServer> {
    start_servers(name, true, None, "")
}

/// The same, each server's config ending with `extra` (the accounts
/// `swarm-controller nats-config` renders, say: every server of a cluster
/// runs the same).
pub fn start_cluster_with(name: &str, extra: &str) -> Vec<NatsServer> {
    start_servers(name, true, None, extra)
}

/// A site server joined as a leaf node to the swarm's servers (the hub),
/// one [`TcpLink`] per hub server in between.
pub struct LeafSite {
    pub server: NatsServer,
    pub links: Vec<TcpLink>,
}

impl LeafSite {
    /// Sever the leaf link (every connection of it; the site server and
    /// its clients stay up) until [`LeafSite::restore`].
    pub fn cut(&self) {
        self.links.iter().for_each(TcpLink::cut);
    }

    pub fn restore(&self) {
        self.links.iter().for_each(TcpLink::restore);
    }

    /// How many leaf-node connections the site server holds now (its
    /// monitoring endpoint's `/leafz`).
    pub async fn leaf_links(&self) -> usize {
        leaf_links(&self.server).await
    }
}

/// How many leaf-node connections `server` holds now (its monitoring
/// endpoint's `/leafz`; it must run with `-m -1`).
pub async fn leaf_links(server: &NatsServer) -> usize {
    let body = server
        .monitor("/leafz")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    body["leafnodes"].as_u64().unwrap_or(0) as usize
}

/// Per-server config text of a hub server whose leafnode listener is on
/// `leaf_port`: its JetStream domain, and no advertising of its real
/// leafnode address (the site must reach it only through the link).
pub fn hub_config(leaf_port: u16) -> String {
    format!(
        "jetstream {{ domain: {HUB_DOMAIN} }}\nleafnodes {{\n  listen: \"127.0.0.1:{leaf_port}\"\n  no_advertise: true\n}}\n"
    )
}

/// Config text of a site server named `<name>-site` with its own JetStream
/// (domain `site`), joined as a leaf node to the hub at `leaf_urls`
/// (`"nats-leaf://…"`, quoted), redialling every second.
pub fn site_config(name: &str, leaf_urls: &[String]) -> String {
    site_config_with(name, leaf_urls, "")
}

/// The per-server part of a site server that runs the accounts and
/// remotes `nats-config --site` renders (`site_text`): its name, its own
/// JetStream (domain `site`), the hub's leafnode URL (`"nats-leaf://…"`,
/// quoted) and each link seed (`(hive, "SU…")`) as the variables the
/// rendered remotes read.
pub fn secured_site_config(
    name: &str,
    leaf_url: &str,
    seeds: &[(&str, String)],
    site_text: &str,
) -> String {
    use swarm_queue_client::permissions::site::{seed_variable, HUB_URL_VARIABLE};
    let mut out = format!("server_name: {name}-site\njetstream {{ domain: site }}\n");
    out.push_str(&format!("{HUB_URL_VARIABLE}: {leaf_url}\n"));
    for (hive, seed) in seeds {
        let hive = swarm_queue_client::HiveName::new(*hive).expect("a valid hive name");
        out.push_str(&format!("{}: {seed:?}\n", seed_variable(&hive)));
    }
    out.push_str(site_text);
    out
}

fn site_config_with(name: &str, leaf_urls: &[String], remote_extra: &str) -> String {
    format!(
        "server_name: {name}-site\njetstream {{ domain: site }}\nleafnodes {{\n  reconnect: \"1s\"\n  remotes: [ {{ urls: [{}]{remote_extra} }} ]\n}}\n",
        leaf_urls.join(", ")
    )
}

impl TestSwarm {
    pub async fn start(spec: SwarmSpec<'_>) -> TestSwarm {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-swarm-")
            .tempdir()
            .expect("temp dir for the swarm");
        let names: Vec<String> = (0..spec.hives)
            .map(|i| unique_name(&format!("{}{i}", spec.test)))
            .collect();
        let server_name = unique_name(spec.test);
        let count = if spec.cluster { 3 } else { 1 };
        let leaf_ports: Option<Vec<u16>> =
            (spec.hives_on == HivesOn::LeafSite).then(|| (0..count).map(|_| free_port()).collect());
        let nats = start_servers(&server_name, spec.cluster, leaf_ports.as_deref(), "");
        let site = leaf_ports.map(|ports| start_site(&server_name, &ports));
        let replicas = nats.len();
        let url = nats
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",");
        let mut hive_nats = format!(
            "[nats]\nurl = {:?}\n",
            match (&site, spec.hives_on) {
                (Some(site), _) => site.server.url(),
                (None, HivesOn::FirstServer) => nats[0].url(),
                (None, _) => url.clone(),
            }
        );
        if site.is_some() {
            hive_nats.push_str(&format!("jetstream_domain = {HUB_DOMAIN:?}\n"));
        }
        let image = TestImage::busybox(spec.test);
        let containers = names.iter().map(|n| ContainerGuard::new(n)).collect();

        let controller_config =
            write_controller_config(dir.path(), &names, spec.stale_after_secs, &url);

        let mut tables = String::new();
        if spec.cluster {
            for b in ["status", "wanted", "credentials"] {
                tables.push_str(&format!("[nats.buckets.{b}]\nreplicas = {replicas}\n"));
            }
        }
        let extra = format!("{}\n{hive_nats}{tables}", spec.hive_extra);
        let mut swarm = TestSwarm {
            hives: Vec::new(),
            _containers: containers,
            image,
            site,
            nats,
            names,
            url,
            controller_config,
            replicas,
            _dir: dir,
        };
        // The buckets exist (with the replicas wanted) before any hive runs,
        // so a test's own client never creates them with other settings.
        swarm.connect().await;
        for n in swarm.names.clone() {
            let hive = HiveProc::start(HiveSpec {
                name: Some(&n),
                extra: &extra,
                envs: spec.hive_envs,
                publish_interval_secs: spec.publish_interval_secs,
                ..Default::default()
            });
            swarm.hives.push(hive);
        }
        swarm
    }

    /// A plain client on the buckets, creating any that are missing with
    /// this swarm's replica count.
    pub async fn connect(&self) -> Swarm {
        let servers: Vec<async_nats::ServerAddr> = self
            .url
            .split(',')
            .map(|u| u.parse().expect("a server URL"))
            .collect();
        let swarm = wait_until(Duration::from_secs(30), "a connection", || async {
            async_nats::connect(servers.clone()).await.ok()
        })
        .await;
        let js = async_nats::jetstream::new(swarm.clone());
        for b in ["hyperhive-status", "hyperhive-wanted"] {
            let last_error = std::sync::Mutex::new(String::new());
            let made = crate::poll_until(BUCKET_WITHIN, || async {
                let opened = match js.get_key_value(b).await {
                    Ok(_) => return Some(()),
                    Err(e) => e.to_string(),
                };
                let made = js
                    .create_key_value(kv::Config {
                        bucket: b.into(),
                        history: 10,
                        num_replicas: self.replicas,
                        ..Default::default()
                    })
                    .await;
                match made {
                    Ok(_) => Some(()),
                    Err(e) => {
                        *last_error.lock().expect("not poisoned") =
                            format!("open: {opened}; make: {e}");
                        None
                    }
                }
            })
            .await;
            if made.is_none() {
                let mut meta = Vec::new();
                for server in &self.nats {
                    meta.push(server.meta_leader().await);
                }
                panic!(
                    "bucket {b} neither opened nor made within {BUCKET_WITHIN:?}: last {}; \
                     the meta leader each server knows: {meta:?}",
                    last_error.into_inner().expect("not poisoned")
                );
            }
        }
        Swarm {
            client: swarm.clone(),
            js,
        }
    }

    /// One agent `a` running `sleep`, plus an env value that changes the spec.
    pub fn declaration(&self, version: &str) -> String {
        json!({
            "schema": 1,
            "agents": { "a": {
                "image": self.image.reference,
                "command": ["/bin/sleep", "3600"],
                "env": { "V": version },
            }},
        })
        .to_string()
    }

    /// Declare `version` for every hive; the revisions, in hive order.
    pub async fn declare_all(&self, kv: &Swarm, version: &str) -> Vec<u64> {
        let mut revs = Vec::new();
        for n in &self.names {
            revs.push(kv.declare(n, &self.declaration(version)).await);
        }
        revs
    }

    /// Wait until every hive reports its revision converged.
    pub async fn all_converged(&self, kv: &Swarm, revs: &[u64], timeout: Duration) {
        for (n, r) in self.names.iter().zip(revs) {
            kv.converged(n, *r, timeout).await;
        }
    }

    /// The hives' pids, in order.
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.hives.iter().map(|h| h.daemon.pid()).collect()
    }

    /// `swarm-controller --config … status --json`, parsed; `Err` with its
    /// stderr when the verb fails (for example while NATS is down).
    pub fn controller_status(&self) -> Result<Value, String> {
        crate::process::status_json(&self.controller_config)
    }

    /// `swarm-controller serve` on a loopback port the OS picks, as a
    /// process the test can kill; its log is next to the controller config.
    pub fn serve_controller(&self) -> crate::Daemon {
        let cfg = self.controller_config.display().to_string();
        crate::Daemon::spawn(
            &controller_bin(),
            &["--config", &cfg, "serve", "--http-listen", "127.0.0.1:0"],
            &[],
            &self.controller_config.with_file_name("controller.log"),
        )
    }

    /// The controller's row for hive `name` in a `status --json` report.
    pub fn row<'a>(report: &'a Value, name: &str) -> &'a Value {
        report["hives"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["name"] == name))
            .unwrap_or_else(|| panic!("no row for {name} in {report:#}"))
    }
}

/// Write `<dir>/controller.toml`: NATS at `url`, `stale_after_secs`, and a
/// roster of `names`; its path.
pub fn write_controller_config(
    dir: &std::path::Path,
    names: &[String],
    stale_after_secs: u64,
    url: &str,
) -> std::path::PathBuf {
    let mut roster = String::new();
    for n in names {
        roster.push_str(&format!("[hives.{n:?}]\n"));
    }
    let path = dir.join("controller.toml");
    std::fs::write(
        &path,
        format!("stale_after_secs = {stale_after_secs}\n[nats]\nurl = {url:?}\n{roster}"),
    )
    .expect("write controller config");
    path
}

/// The site server, joined to the hub through links to `leaf_ports`.
fn start_site(name: &str, leaf_ports: &[u16]) -> LeafSite {
    let links: Vec<TcpLink> = leaf_ports.iter().map(|p| TcpLink::start(*p)).collect();
    let urls: Vec<String> = links
        .iter()
        .map(|l| format!("\"nats-leaf://127.0.0.1:{}\"", l.port()))
        .collect();
    let server = NatsServer::start_with(Some(&site_config(name, &urls)), &["-m", "-1"]);
    LeafSite { server, links }
}

/// The swarm's servers: one, or three in a JetStream cluster on loopback;
/// with `leaf_ports`, each is a hub server listening for leaf nodes there;
/// `extra` ends each one's config.
fn start_servers(
    name: &str,
    cluster: bool,
    leaf_ports: Option<&[u16]>,
    extra: &str,
) -> Vec<NatsServer> {
    let count = if cluster { 3 } else { 1 };
    let routes: Vec<u16> = (0..count).map(|_| free_port()).collect();
    let mut servers = Vec::new();
    for (i, port) in routes.iter().enumerate() {
        let mut text = format!("server_name: {name}-n{i}\n");
        if cluster {
            let others: Vec<String> = routes
                .iter()
                .filter(|p| *p != port)
                .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
                .collect();
            text.push_str(&format!(
                "cluster {{\n  name: {name}\n  listen: \"127.0.0.1:{port}\"\n  routes: [{}]\n}}\n",
                others.join(", ")
            ));
        }
        if let Some(ports) = leaf_ports {
            text.push_str(&hub_config(ports[i]));
        }
        text.push_str(extra);
        servers.push(NatsServer::start_with(Some(&text), &["-m", "-1"]));
    }
    servers
}
