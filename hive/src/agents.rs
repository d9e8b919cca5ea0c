//! The container side: what keeps this host's agents running as declared,
//! with or without NATS. The daemon starts it first, in its step
//! `start_container_side` ([`crate::daemon`]): the job worker, the
//! converger and the Docker event task, which need only a hive name, the
//! job store and dockerd.
//!
//! Both other sides use this one: the NATS side ([`crate::bus`]) queues
//! deploys and restarts and streams logs through it, the local side
//! ([`crate::local`]) serves the operator API over it. It uses neither,
//! only the shared modules at the crate's root (status, fleet events,
//! backoff, the clock, git, the perf counters, the shutdown signal, the
//! test hooks).
//!
//! - [`declared`]: the declaration as this side takes it (`Wanted`) and the
//!   channels that hand it over and say which one was planned.
//! - [`plan`] decides and [`converger`] does: declaration, Docker and job
//!   store compared every round, Docker's containers grouped and cleaned
//!   by [`observe`]; [`retry`]: the per-agent backoff; [`crashloop`]: when
//!   an agent that exited starts again, and when it counts as up.
//! - [`jobs`]: the durable job DAG in SQLite (power intent, installed
//!   agents, cleanup journal); [`worker`]: the task that runs the jobs'
//!   nodes; [`runtime`]: the Docker runtime behind a narrow trait (with
//!   the registry logins pulls send); [`images`]: the images the hive made
//!   or pulled, and their cleanup.
//! - [`docker_events`]: Docker's event stream, which marks an agent for an
//!   immediate look and records how containers ended.
//! - [`agent_logs`]: an agent's output, opened one way for the API and for
//!   the log stream over NATS.

pub mod agent_logs;
pub mod converger;
pub mod crashloop;
pub mod declared;
pub mod docker_events;
pub mod images;
pub mod jobs;
pub mod observe;
pub mod plan;
pub mod retry;
pub mod runtime;
#[cfg(test)]
pub(crate) mod test_names;
pub mod worker;
