//! Staged rollouts: `declare --rollout` writes the changed hives in waves,
//! and goes on to the next wave only when the controller's own evaluation
//! says every hive of the current one is fresh and converged.
//!
//! No controller keeps any of it in memory only: the whole plan and where it
//! stands live in `hyperhive-rollouts` ([`state::Rollout`], stored as a head
//! `current` naming parts, [`parts`]), changed only by a compare-and-set of
//! the head ([`store`]). So a controller killed mid-wave
//! leaves a rollout that another one resumes (once the dead one's lease ran
//! out), and of two controllers acting on the same read, one wins and the
//! other backs off. Hives never read the bucket: they have no grant on it.
//!
//! - [`settings`]: the swarm file's `[rollout]` table and the wave split
//!   (pure; the crate's `rollout_settings`, outside this folder because
//!   the swarm file, below the rollout, reads it).
//! - [`state`]: the stored state and the judgement of a wave (pure).
//! - [`parts`]: cutting the state into values that fit, and joining them (pure).
//! - [`store`]: the compare-and-set reads and writes.
//! - [`drive`]: the loop that writes waves and waits on the fleet.
//! - [`verbs`]: start, resume, abort.
//! - [`report`]: what a rollout shows as JSON, to the command line and
//!   to `serve` alike.

pub mod drive;
pub mod parts;
pub mod report;
pub mod state;
pub mod store;
pub mod verbs;

pub use crate::rollout_settings as settings;
