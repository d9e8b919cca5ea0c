//! The NATS side: what the hive says to and hears from the swarm, all on
//! the one NATS connection. The daemon starts it in its step
//! `start_nats_side` ([`crate::daemon`]), when it has a hive name and a
//! connection: the status publisher, the wanted task, credential delivery,
//! the event listener and the log server.
//!
//! It uses the container side ([`crate::agents`]): it hands declarations
//! to it, queues deploys and restarts in its job store and opens agents'
//! logs through it. Nothing in the container side or the local side
//! ([`crate::local`]) uses it; only the daemon wires it.
//!
//! - [`wanted`]: this hive's key in `hyperhive-wanted`, read by direct get
//!   on a core-NATS doorbell (no JetStream consumer), and its copy on disk;
//!   [`revision`]: the rule for a revision that went back (a bucket made
//!   again).
//! - [`credentials`]: this hive's credential keys, read the same way,
//!   opened with the hive's sealing key and written below the agents'
//!   state dirs; [`xkey`]: that key's seed file, and the atomic private
//!   writes.
//! - [`publisher`]: the task that puts the `HiveStatus` in
//!   `hyperhive-status`.
//! - [`events`]: the listener for the hive's NATS subjects (deploy,
//!   credential, knowledge); [`deploy`]: the deploy subject's handler.
//! - [`logs`]: agents' logs over NATS, to the controller.

pub mod credentials;
pub mod deploy;
pub mod events;
pub mod logs;
pub mod publisher;
pub mod revision;
pub mod wanted;
pub mod xkey;
