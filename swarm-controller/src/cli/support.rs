//! What the command line's verbs share below `cli/mod.rs`, which only
//! parses and dispatches: how long a one-shot verb waits for NATS. (Exit
//! codes, `--json` printing and the shutdown signal are the contract's
//! `cli`, shared with the hive.)

use std::time::Duration;

/// How long a one-shot verb waits for NATS before giving up.
pub(crate) const CONNECT_WAIT: Duration = Duration::from_secs(5);
