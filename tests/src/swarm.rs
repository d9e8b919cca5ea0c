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

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use async_nats::jetstream::kv;
use serde_json::{json, Value};

use crate::docker::{ContainerGuard, TestImage};
use crate::hive::{HiveProc, HiveSpec};
use crate::kv::Swarm;
use crate::{controller_bin, unique_name, wait_until, NatsServer};

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
        }
    }
}

/// Three hives and their servers. Field order is drop order.
pub struct TestSwarm {
    pub hives: Vec<HiveProc>,
    _containers: Vec<ContainerGuard>,
    pub image: TestImage,
    pub nats: Vec<NatsServer>,
    /// The hives' names, in the order of [`TestSwarm::hives`].
    pub names: Vec<String>,
    /// Every server's URL joined with commas (what the hives are given).
    pub url: String,
    pub controller_config: PathBuf,
    replicas: usize,
    _dir: tempfile::TempDir,
}

/// A free loopback TCP port (bound and released; good enough on loopback).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Three servers forming a JetStream cluster on loopback.
pub fn start_cluster(name: &str) -> Vec<NatsServer> {
    let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut servers = Vec::new();
    for (i, port) in routes.iter().enumerate() {
        let others: Vec<String> = routes
            .iter()
            .filter(|p| *p != port)
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect();
        let text = format!(
            "server_name: {name}-n{i}\ncluster {{\n  name: {name}\n  listen: \"127.0.0.1:{port}\"\n  routes: [{}]\n}}\n",
            others.join(", ")
        );
        servers.push(NatsServer::start_with(Some(&text), &[]));
    }
    servers
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
        let nats = if spec.cluster {
            start_cluster(&unique_name(spec.test))
        } else {
            vec![NatsServer::start()]
        };
        let replicas = nats.len();
        let url = nats
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",");
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
        let extra = format!("{}\n{tables}", spec.hive_extra);
        let mut swarm = TestSwarm {
            hives: Vec::new(),
            _containers: containers,
            image,
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
                nats_url: Some(&swarm.url),
                extra: &extra,
                envs: spec.hive_envs,
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
            wait_until(Duration::from_secs(30), &format!("bucket {b}"), || async {
                if js.get_key_value(b).await.is_ok() {
                    return Some(());
                }
                js.create_key_value(kv::Config {
                    bucket: b.into(),
                    history: 10,
                    num_replicas: self.replicas,
                    ..Default::default()
                })
                .await
                .ok()
                .map(|_| ())
            })
            .await;
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
        let out = Command::new(controller_bin())
            .arg("--config")
            .arg(&self.controller_config)
            .args(["status", "--json"])
            .env_remove("HYPERHIVE_NATS_URL")
            .output()
            .map_err(|e| format!("run the controller: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("status --json is not JSON: {e}"))
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
