//! Supervision of the daemon's long-running tasks.
//!
//! Every task of `hive run` (publisher, wanted, events, credentials,
//! converger, worker, knowledge, http, watchdog) is started through a
//! [`Supervisor`]. A task is a *factory*: a closure that makes a fresh future
//! for each start, so a restart never reuses the state of the run that died.
//! A task that returns before shutdown, or panics, is logged with its error
//! and started again after a backoff ([`RestartPolicy`]: 1 s doubling to
//! 60 s, back to 1 s after a run that lasted a minute).
//!
//! While a task is down, [`StatusBoard`] carries the warning `task_<name>`, so
//! the published `HiveStatus`, `/health/ready` and `hive status` all say which
//! task is missing. An [`Role::Essential`] task's warning is at level
//! `error` (the hive is not ready without it); an auxiliary task's is `warn`.
//! The [`TaskBoard`] says whether every essential task runs; the systemd
//! watchdog is fed only then (see [`crate::local::systemd`]).
//!
//! Invariants: a task is never restarted after shutdown was requested; a
//! task's warning is cleared only by its own next start.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use swarm_queue_client::Level;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::shutdown::Shutdown;
use crate::status::StatusBoard;

/// Status warnings of supervised tasks are `task_<name>`.
pub const TASK_KEY_PREFIX: &str = "task_";

/// Whether the hive can be ready without the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Without it the hive does not do its job (the wanted watch, the
    /// converger, the job worker, the event listener): `ready` is false
    /// while it is down, and the systemd watchdog is not fed.
    Essential,
    /// The hive still does its job without it, degraded.
    Auxiliary,
}

/// When a task that ended is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The wait before the first restart, and after a healthy run.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
    /// A run at least this long counts as healthy: the next wait starts
    /// again from `first`.
    pub healthy_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
            healthy_after: Duration::from_secs(60),
        }
    }
}

impl RestartPolicy {
    /// The wait before the next start, from the previous wait (`None` when
    /// the task has not been restarted yet) and how long the run that just
    /// ended lasted.
    pub fn next_delay(&self, previous: Option<Duration>, ran_for: Duration) -> Duration {
        match previous {
            Some(p) if ran_for < self.healthy_after => crate::backoff::doubled(p, self.max),
            _ => self.first,
        }
    }
}

/// What a task's future gives back; a task that returns at all (before
/// shutdown) has died, and this says why.
pub trait TaskOutcome {
    /// The error it returned, if any.
    fn failure(self) -> Option<String>;
}

impl TaskOutcome for () {
    fn failure(self) -> Option<String> {
        None
    }
}

impl<E: std::error::Error> TaskOutcome for Result<(), E> {
    fn failure(self) -> Option<String> {
        self.err().map(|e| crate::error_chain(&e))
    }
}

/// Which supervised tasks run right now.
#[derive(Debug, Default)]
pub struct TaskBoard {
    tasks: Mutex<BTreeMap<&'static str, (Role, bool)>>,
}

impl TaskBoard {
    fn set(&self, name: &'static str, role: Role, up: bool) {
        self.lock().insert(name, (role, up));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, (Role, bool)>> {
        // Plain data: usable after a panic elsewhere.
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Essential tasks that are down, by name.
    pub fn essential_down(&self) -> Vec<&'static str> {
        self.lock()
            .iter()
            .filter(|(_, (role, up))| *role == Role::Essential && !up)
            .map(|(name, _)| *name)
            .collect()
    }

    /// Whether every essential task runs (true when there are none).
    pub fn essential_up(&self) -> bool {
        self.essential_down().is_empty()
    }

    /// Whether the named task runs; `None` for a task never started.
    pub fn is_up(&self, name: &str) -> Option<bool> {
        self.lock().get(name).map(|(_, up)| *up)
    }
}

/// Starts tasks and keeps them running until shutdown.
pub struct Supervisor {
    status: Arc<StatusBoard>,
    shutdown: Shutdown,
    board: Arc<TaskBoard>,
    policy: RestartPolicy,
    keepers: JoinSet<()>,
}

impl Supervisor {
    pub fn new(status: Arc<StatusBoard>, shutdown: Shutdown) -> Supervisor {
        Supervisor {
            status,
            shutdown,
            board: Arc::default(),
            policy: RestartPolicy::default(),
            keepers: JoinSet::new(),
        }
    }

    pub fn with_policy(mut self, policy: RestartPolicy) -> Supervisor {
        self.policy = policy;
        self
    }

    /// The board the watchdog reads.
    pub fn board(&self) -> Arc<TaskBoard> {
        Arc::clone(&self.board)
    }

    /// Start `factory(shutdown)` now, and again after each death until
    /// shutdown.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, role: Role, factory: F)
    where
        F: FnMut(Shutdown) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: TaskOutcome + Send,
    {
        let kept = Kept {
            name,
            role,
            key: format!("{TASK_KEY_PREFIX}{name}"),
            status: Arc::clone(&self.status),
            board: Arc::clone(&self.board),
            policy: self.policy,
            shutdown: self.shutdown.clone(),
        };
        kept.board.set(name, role, true);
        self.keepers.spawn(kept.keep(factory));
    }

    /// After shutdown was requested: wait up to `grace` for every task to
    /// finish, then abort what is left (dropping a task's future).
    pub async fn drain(mut self, grace: Duration) {
        let drained = tokio::time::timeout(grace, async {
            while let Some(r) = self.keepers.join_next().await {
                if let Err(e) = r {
                    tracing::error!(error = %e, "a task keeper ended abnormally");
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(?grace, "tasks did not finish in time; stopping anyway");
            self.keepers.abort_all();
            while self.keepers.join_next().await.is_some() {}
        }
    }
}

/// One supervised task: everything its keeper loop needs.
struct Kept {
    name: &'static str,
    role: Role,
    key: String,
    status: Arc<StatusBoard>,
    board: Arc<TaskBoard>,
    policy: RestartPolicy,
    shutdown: Shutdown,
}

impl Kept {
    async fn keep<F, Fut>(self, mut factory: F)
    where
        F: FnMut(Shutdown) -> Fut,
        Fut: Future,
        Fut::Output: TaskOutcome,
    {
        let mut wait: Option<Duration> = None;
        let mut deaths: u64 = 0;
        loop {
            let started = Instant::now();
            let run = crate::test_hooks::killable(self.name, factory(self.shutdown.clone()));
            // The future is only polled here and dropped after a panic; the
            // state it shares (StatusBoard, the job store) stays usable.
            let ended = AssertUnwindSafe(run).catch_unwind().await;
            if self.shutdown.is_requested() {
                return;
            }
            deaths += 1;
            let why = match ended {
                Ok(Some(out)) => out
                    .failure()
                    .unwrap_or_else(|| "it returned without an error".into()),
                Ok(None) => "it was stopped by the test hook".into(),
                Err(panic) => format!("it panicked: {}", panic_message(panic.as_ref())),
            };
            let next = self.policy.next_delay(wait, started.elapsed());
            wait = Some(next);
            self.down(&why, next, deaths);
            if !self.shutdown.clone().sleep(next).await {
                return;
            }
            tracing::info!(task = self.name, "restarting the task");
            self.board.set(self.name, self.role, true);
            self.status.clear(&self.key);
        }
    }

    fn down(&self, why: &str, next: Duration, deaths: u64) {
        tracing::error!(task = self.name, error = %why, restart_in = ?next, deaths, "task ended; restarting it after a backoff");
        self.board.set(self.name, self.role, false);
        let (level, effect) = match self.role {
            Role::Essential => (Level::Error, "the hive is not ready without it"),
            Role::Auxiliary => (Level::Warn, "the hive works on without it"),
        };
        self.status.raise(
            &self.key,
            level,
            format!(
                "task {} is down ({why}); {effect}; restarting in {}s ({deaths} deaths since start)",
                self.name,
                next.as_secs_f64()
            ),
        );
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

#[cfg(test)]
mod tests;
