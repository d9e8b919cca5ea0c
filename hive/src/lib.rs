//! # hive: the hyperhive daemon for one host
//!
//! Keeps this host's containerised agents running, reports to the swarm, and
//! converges on what the swarm declares. The daemon has three sides, each a
//! module named after the step of [`daemon`] that starts it:
//!
//! - [`agents`], the container side (`start_container_side`): the job
//!   store, the Docker runtime, the worker, the converger, Docker's events;
//!   it runs with no NATS.
//! - [`bus`], the NATS side (`start_nats_side`): the wanted and credential
//!   keys, the status publisher, the event listener, the log stream.
//! - [`local`], the local side (`start_local_side`): the operator API and
//!   its client, the loopback HTTP server, systemd, the knowledge checkout.
//!
//! Imports run one way: the frame ([`cli`], [`daemon`]) uses the sides;
//! `bus` and `local` use `agents`, which uses no other side; [`config`],
//! which holds the container side's settings too, uses `agents` and is
//! used by the frame and `local`; every other module at the root is a
//! shared leaf that uses no side. The root:
//!
//! - [`cli`]: the command line; [`daemon`]: `hive run`, which wires the
//!   tasks and drains on shutdown.
//! - [`config`]: the TOML file, environment and flags; `--check-config`.
//! - [`status`]: the one computation of "is this hive OK"
//!   (`StatusBoard`, whose snapshot is the published `HiveStatus`), and the
//!   metrics from the same snapshot; [`supervisor`]: restarts a task that
//!   dies and names it in the status meanwhile.
//! - [`fleet_events`]: the hive's agents' lifecycle into `hyperhive-events`,
//!   queued by the container side, published by the NATS side.
//! - [`perf`]: counters of where the hive's own time goes, in `/metrics`;
//!   [`backoff`]: the one doubling delay every retry loop uses;
//!   [`clock`]: this host's clock in milliseconds, for what only the hive
//!   reads.
//! - [`git`]: the one way git is run (knowledge, build contexts);
//!   [`nofollow`]: writes below an agent's state dir that follow no link
//!   the agent planted; [`shutdown`]: the signal every task takes;
//!   [`test_hooks`]: hooks that exist only with the `test-hooks` feature.
//!
//! Invariants: one NATS connection per process; nothing stamps its own time;
//! the hive keeps running its agents when NATS or the controller is away.

pub mod agents;
pub mod backoff;
pub mod bus;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod fleet_events;
pub mod git;
pub mod local;
pub mod nofollow;
pub mod perf;
pub mod shutdown;
pub mod status;
pub mod supervisor;
pub mod test_hooks;

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
