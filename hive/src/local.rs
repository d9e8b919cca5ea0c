//! The local side: what this host's operator and init system reach, with
//! or without NATS. The daemon starts it in its step `start_local_side`
//! ([`crate::daemon`]): the knowledge checkout, the loopback HTTP server
//! and the systemd watchdog; the operator API's socket is served beside
//! them.
//!
//! It uses the container side ([`crate::agents`]): the API lists and
//! queues jobs in its job store and reads agents through its runtime.
//! Nothing in the container side or the NATS side ([`crate::bus`]) uses
//! it; only the daemon wires it, and the command line ([`crate::cli`])
//! runs its operator verbs.
//!
//! - [`api`]: the operator API; [`access`]: who may reach it: its Unix
//!   socket (0660, group `hyperhive`), and the guarded TCP remote writes;
//!   [`client`] speaks to either; [`ops`]: the CLI's operator verbs, a
//!   client of the API.
//! - [`http`]: loopback `/health/ready`, `/health/live`, `/metrics`.
//! - [`systemd`]: sd_notify and the watchdog.
//! - [`knowledge`]: the knowledge checkout, mounted read-only into agents.

pub mod access;
pub mod api;
pub mod client;
pub mod http;
pub mod knowledge;
pub mod ops;
pub mod systemd;
