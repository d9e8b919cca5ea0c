//! Where a declaration's time goes between its put and its jobs queued:
//! one `trace`-level event at each stage boundary of the wanted task and
//! the converger, with the target `hyperhive::stage::<name>`.
//!
//! | event | when |
//! |---|---|
//! | `doorbell` | the wanted task got the key's doorbell |
//! | `read` | the direct get of the key answered |
//! | `decoded` | the value was decoded and validated |
//! | `pass` | the converger began a pass with a declaration to apply |
//! | `looked` | the pass read the jobs in flight and looked at Docker |
//! | `planned` | it planned against the installed record, requests ready |
//! | `committed` | the jobs' transaction committed (the worker is woken next) |
//! | `saved` | `wanted.json` was written and synced, beside the converger (off the path above) |
//!
//! Nothing listens at `trace` in a running hive, so each costs one cached
//! interest check; the converge benchmark installs a layer that timestamps
//! them (`tests/benches/converge.rs`).

/// The prefix of every stage event's target.
pub const TARGET_PREFIX: &str = "hyperhive::stage::";

/// Mark a stage boundary: `crate::stage!("read")`.
#[macro_export]
#[doc(hidden)]
macro_rules! stage {
    ($name:literal) => {
        ::tracing::trace!(target: concat!("hyperhive::stage::", $name), "stage")
    };
}
