//! Test-only hooks. Their bodies exist only with the `test-hooks` cargo
//! feature, which the tests crate turns on for its `hh-hive` binary; in a
//! build without it (`cargo build -p hive`, the NixOS package) every hook is
//! a no-op and the variables below are not even in the binary.
//!
//! - `HYPERHIVE_TEST_HOLD_BEFORE_NODE=<op>`: the job worker never claims
//!   nodes of that op, so a test can kill the daemon at a chosen point of a
//!   job (for example with `create` done and `start` not yet run).
//! - `HYPERHIVE_TEST_KILL_DIR=<dir>`: a file `<dir>/<task>` written by a
//!   test makes that supervised task die once: it panics when the file holds
//!   `panic`, otherwise it returns. The hook removes the file, so the
//!   supervisor's restart runs normally.
//! - `HYPERHIVE_TEST_SKIP_WANTED_SAVE=1`: `wanted.json` is never written,
//!   as if the hive died each time between a declaration's jobs being
//!   committed and its copy being saved.

use std::future::Future;

/// Names a node op the worker must not claim.
#[cfg(feature = "test-hooks")]
pub const HOLD_ENV: &str = "HYPERHIVE_TEST_HOLD_BEFORE_NODE";

/// Stops `wanted.json` being written.
#[cfg(feature = "test-hooks")]
pub const SKIP_WANTED_SAVE_ENV: &str = "HYPERHIVE_TEST_SKIP_WANTED_SAVE";

/// Whether [`SKIP_WANTED_SAVE_ENV`] is compiled in and set.
pub fn skip_wanted_save() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var(SKIP_WANTED_SAVE_ENV).is_ok_and(|v| v == "1")
    }
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// Names the directory watched for task kill files.
#[cfg(feature = "test-hooks")]
pub const KILL_DIR_ENV: &str = "HYPERHIVE_TEST_KILL_DIR";

/// How often the kill directory is looked at.
#[cfg(feature = "test-hooks")]
const KILL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The op named by [`HOLD_ENV`], when the hook is compiled in and set.
pub fn hold_before() -> Option<String> {
    #[cfg(feature = "test-hooks")]
    {
        let op = std::env::var(HOLD_ENV).ok().filter(|s| !s.is_empty())?;
        tracing::warn!(op = %op, "{HOLD_ENV} is set: nodes of this op will not run (test hook)");
        Some(op)
    }
    #[cfg(not(feature = "test-hooks"))]
    None
}

/// Run `task`'s future; `None` when the kill hook made it return early.
/// It panics when the hook says `panic`, as a buggy task would.
pub async fn killable<T>(task: &'static str, run: impl Future<Output = T>) -> Option<T> {
    #[cfg(feature = "test-hooks")]
    {
        let Some(dir) = std::env::var_os(KILL_DIR_ENV) else {
            return Some(run.await);
        };
        let file = std::path::Path::new(&dir).join(task);
        tokio::pin!(run);
        let mut poll = tokio::time::interval(KILL_POLL);
        loop {
            tokio::select! {
                out = &mut run => return Some(out),
                _ = poll.tick() => {
                    let Ok(order) = tokio::fs::read_to_string(&file).await else { continue };
                    let _ = tokio::fs::remove_file(&file).await;
                    tracing::warn!(task, order = order.trim(), "test hook: killing the task");
                    if order.trim() == "panic" {
                        panic!("test hook: task {task} told to panic");
                    }
                    return None;
                }
            }
        }
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = task;
        Some(run.await)
    }
}
