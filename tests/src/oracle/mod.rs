//! # The truth oracle (issue 11, build point 7)
//!
//! A long, seeded fault schedule against three real hives (each on its own
//! private dockerd), one nats-server and the controller's `status --json`,
//! with a checker that compares every claim the controller makes against
//! ground truth it gathers itself: the containers each hive's dockerd runs
//! (through bollard, not through the hive) and the hive processes
//! (`/proc/<pid>/stat`, and the moment the oracle killed or stopped them).
//!
//! - [`judge`]: what counts as a false claim. Pure functions, table tests.
//! - [`plan`]: the seeded fault schedule (a SplitMix64 generator, so a seed
//!   means the same schedule on every machine and crate version).
//! - [`checker`]: the 250 ms sampler and its counters.
//! - [`world`]: the processes, and one function per fault.
//!
//! The definitions are stated once, in [`judge`]'s docs; `docs/operations.md`
//! ("Fault oracle") says how to run it.

pub mod checker;
pub mod judge;
pub mod plan;
pub mod world;

use std::time::Duration;

/// The controller's `stale_after_secs` in the oracle's swarm.
pub const STALE_AFTER: Duration = Duration::from_secs(3);
/// Each hive's `publish_interval_secs`.
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// Each hive's `min_running_secs`: shorter than the shipped 10 s so each
/// new container counts sooner, and longer than a run of the crash-loop
/// fault's agent (3 s), so no run of it is ever as declared.
pub const MIN_RUNNING: Duration = Duration::from_secs(5);
/// How often the checker asks the controller (a sample that takes longer
/// starts the next one at once).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
