//! # hive: the hyperhive daemon for one host
//!
//! Keeps this host's containerised agents running, reports to the swarm, and
//! converges on what the swarm declares. Parts, and what each owns:
//!
//! - [`config`]: the TOML file, environment and flags; `--check-config`.
//! - [`readiness`]: the one computation of "is this hive OK" (`Readiness`),
//!   and the metrics from the same snapshot.
//! - [`publisher`]: task that puts the `Readiness` in `hyperhive-status`.
//! - [`wanted`], [`credentials`]: this hive's keys, read by direct get on a
//!   core-NATS doorbell (no JetStream consumer); [`revision`]: the rule for
//!   a revision that went back (a bucket made again).
//! - [`http`]: loopback `/health/ready`, `/health/live`, `/metrics`;
//!   [`perf`]: counters of where the hive's own time goes, in `/metrics`.
//! - [`access`]: who may reach the operator API ([`api`]): its Unix socket
//!   (0660, group `hyperhive`), and the guarded TCP remote writes;
//!   [`client`] speaks to either.
//! - [`cli`]: the command line; [`ops`]: its operator verbs, a client of
//!   the API; [`agent_logs`]: an agent's output, for the API and NATS.
//! - [`events`]: the listener for the hive's NATS subjects (deploy,
//!   credential, knowledge); [`knowledge`]: the knowledge checkout;
//!   [`fleet_events`]: the hive's agents' lifecycle into `hyperhive-events`.
//! - [`daemon`]: `hive run`, which wires the tasks and drains on shutdown;
//!   [`supervisor`]: restarts a task that dies and names it in readiness
//!   meanwhile; [`deploy`]: the deploy subject's handler.
//! - [`jobs`]: the durable job DAG in SQLite (power intent, installed
//!   agents, cleanup journal); [`runtime`]: the Docker runtime behind a
//!   narrow trait; [`registry_auth`]: the registry logins pulls send;
//!   [`images`]: the images the hive made or pulled, and their cleanup;
//!   [`worker`]: the task that runs the jobs' nodes.
//! - [`plan`] decides and [`converger`] does: declaration, Docker and
//!   job store compared every round, Docker's containers grouped and
//!   cleaned by [`observe`]; [`retry`]: the per-agent backoff;
//!   [`backoff`]: the one doubling delay every retry loop uses;
//!   [`crashloop`]: when an agent that exited starts again, and when it
//!   counts as up; [`docker_events`]: Docker's event stream, which marks
//!   an agent for an immediate look and records how containers ended.
//! - [`git`]: the one way git is run (knowledge, build contexts);
//!   [`xkey`]: the hive's sealing key; [`nofollow`]: writes below an
//!   agent's state dir that follow no link the agent planted;
//!   [`systemd`]: sd_notify; [`shutdown`]: the signal every task takes;
//!   [`clock`]: this host's clock in milliseconds, for what only the hive
//!   reads;
//!   [`test_hooks`]: hooks that exist only with the `test-hooks` feature.
//!
//! Invariants: one NATS connection per process; nothing stamps its own time;
//! the hive keeps running its agents when NATS or the controller is away.

pub mod access;
pub mod agent_logs;
pub mod api;
pub mod backoff;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod converger;
pub mod crashloop;
pub mod credentials;
pub mod daemon;
pub mod deploy;
pub mod docker_events;
pub mod events;
pub mod fleet_events;
pub mod git;
pub mod http;
pub mod images;
pub mod jobs;
pub mod knowledge;
pub mod nofollow;
pub mod observe;
pub mod ops;
pub mod perf;
pub mod plan;
pub mod publisher;
pub mod readiness;
pub mod registry_auth;
pub mod retry;
pub mod revision;
pub mod runtime;
pub mod shutdown;
pub mod supervisor;
pub mod systemd;
pub mod test_hooks;
pub mod wanted;
pub mod worker;
pub mod xkey;

/// An error and every cause under it, outermost first, joined by ": ". A
/// cause whose text an earlier part already contains is left out, so
/// wrappers that quote their source do not repeat it, and a URL's userinfo
/// is redacted. The one rendering of error chains in logs, warnings and
/// replies.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    // The one funnel of error text into logs, job errors and the status:
    // a URL's userinfo (a token) never passes it.
    swarm_queue_client::redact::userinfo(&parts.join(": ")).into_owned()
}
