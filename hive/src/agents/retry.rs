//! Per-agent retry backoff for level-triggered convergence.
//!
//! A job that fails for good (its nodes used up their own retries, see
//! [`crate::agents::jobs::RetryPolicy`]) is not the end: the reconciler
//! compares the declaration with Docker every round and queues a new job for
//! any agent that is not as declared. So that a broken agent does not get a new
//! job every round, each agent backs off on its own: the first retry comes
//! `base` (30 s by default) after the failure, each further one twice as
//! late, capped at an hour.
//!
//! The rules, all here and table-tested:
//! - A failed job is counted once (by its id).
//! - A job the converger did not queue (an operator's `hive deploy` or
//!   `rebuild`, the deploy subject) starts the count again: the operator
//!   asked for a try now, and its failure is the first of a new series.
//! - The count is forgotten when the agent is as declared, when its newest
//!   job is done, and on a new declaration revision.
//!
//! Pure: it reads tokio's clock only through the `now` its callers pass, so
//! unit tests drive it with the paused clock.

use std::collections::BTreeMap;
use std::time::Duration;

use swarm_queue_client::AgentName;
use tokio::time::Instant;

use crate::agents::jobs::JobId;

/// The first retry of an agent comes this long after its failure.
pub const DEFAULT_BASE: Duration = Duration::from_secs(30);
/// The longest an agent waits between tries.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// One failed job, as the job store tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub job: JobId,
    /// The node that failed (`image`, `create`, …).
    pub step: Option<String>,
    pub error: Option<String>,
    /// Queued by the converger itself (a retry or a declaration's job), as
    /// opposed to an operator's request.
    pub ours: bool,
}

/// Where one agent stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRetry {
    /// Failed jobs in a row.
    pub attempts: u32,
    /// The failed job counted last, so it is never counted twice.
    pub counted: JobId,
    pub step: Option<String>,
    pub error: Option<String>,
    /// No new job before this.
    pub next_try: Instant,
}

/// The backoff state of every agent that is failing.
#[derive(Debug, Clone)]
pub struct Retries {
    base: Duration,
    agents: BTreeMap<AgentName, AgentRetry>,
}

impl Retries {
    pub fn new(base: Duration) -> Retries {
        Retries {
            base,
            agents: BTreeMap::new(),
        }
    }

    /// The wait after `attempts` failures in a row: `base * 2^(attempts-1)`,
    /// capped at [`MAX_DELAY`].
    pub fn delay(&self, attempts: u32) -> Duration {
        crate::backoff::nth_delay(self.base, MAX_DELAY, attempts)
    }

    /// Count a failed job of `agent`, once.
    pub fn failed(&mut self, agent: &AgentName, failure: Failure, now: Instant) {
        let previous = self.agents.get(agent);
        if previous.is_some_and(|p| p.counted == failure.job) {
            return;
        }
        let attempts = match previous {
            Some(p) if failure.ours => p.attempts.saturating_add(1),
            _ => 1,
        };
        let next_try = now + self.delay(attempts);
        self.agents.insert(
            agent.clone(),
            AgentRetry {
                attempts,
                counted: failure.job,
                step: failure.step,
                error: failure.error,
                next_try,
            },
        );
    }

    /// Forget `agent`'s failures (it is as declared, or a job of it
    /// succeeded, or an operator asked for a try).
    pub fn reset(&mut self, agent: &AgentName) {
        self.agents.remove(agent);
    }

    /// A new declaration revision: every agent may be tried at once.
    pub fn reset_all(&mut self) {
        self.agents.clear();
    }

    /// Still backing off: no new job for `agent` yet.
    pub fn waiting(&self, agent: &AgentName, now: Instant) -> bool {
        self.agents.get(agent).is_some_and(|r| r.next_try > now)
    }

    pub fn get(&self, agent: &AgentName) -> Option<&AgentRetry> {
        self.agents.get(agent)
    }

    /// Keep only the agents `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&AgentName) -> bool) {
        self.agents.retain(|a, _| keep(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(n: &str) -> AgentName {
        AgentName::new(n).unwrap()
    }

    fn failure(job: i64, ours: bool) -> Failure {
        Failure {
            job: JobId(job),
            step: Some("image".into()),
            error: Some("image local/x:1 is not available".into()),
            ours,
        }
    }

    #[test]
    fn the_delays_double_from_30s_to_an_hour() {
        let r = Retries::new(DEFAULT_BASE);
        let got: Vec<u64> = (1..=10).map(|n| r.delay(n).as_secs()).collect();
        assert_eq!(got, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]);
        assert_eq!(r.delay(u32::MAX), MAX_DELAY, "no overflow");
        let fast = Retries::new(Duration::from_secs(1));
        assert_eq!(fast.delay(1), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn each_failed_job_backs_the_agent_off_and_is_counted_once() {
        let web = a("web");
        let mut r = Retries::new(DEFAULT_BASE);
        let mut waits = Vec::new();
        for job in 1..=9 {
            let now = Instant::now();
            r.failed(&web, failure(job, true), now);
            // The same failure seen again (every round) changes nothing.
            r.failed(&web, failure(job, true), now);
            let retry = r.get(&web).unwrap().clone();
            assert_eq!(retry.attempts, job as u32);
            assert_eq!(retry.step.as_deref(), Some("image"));
            let wait = retry.next_try - now;
            waits.push(wait.as_secs());
            assert!(r.waiting(&web, now));
            tokio::time::advance(wait - Duration::from_millis(1)).await;
            assert!(r.waiting(&web, Instant::now()), "not due a moment early");
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(!r.waiting(&web, Instant::now()), "due on time");
        }
        assert_eq!(waits, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert!(!r.waiting(&a("other"), Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn resets_on_success_new_revision_and_operator_request() {
        let (web, db) = (a("web"), a("db"));
        let now = Instant::now();
        let three_failures = |r: &mut Retries| {
            for job in 1..=3 {
                r.failed(&web, failure(job, true), now);
                r.failed(&db, failure(100 + job, true), now);
            }
        };
        let mut r = Retries::new(DEFAULT_BASE);
        three_failures(&mut r);
        assert_eq!(r.get(&web).unwrap().attempts, 3);

        // Success (or being as declared) forgets that agent only.
        r.reset(&web);
        assert!(r.get(&web).is_none() && !r.waiting(&web, now));
        assert_eq!(r.get(&db).unwrap().attempts, 3);
        r.failed(&web, failure(4, true), now);
        assert_eq!(r.get(&web).unwrap().attempts, 1, "counting starts again");

        // A new revision forgets every agent.
        three_failures(&mut r);
        r.reset_all();
        assert!(r.get(&web).is_none() && r.get(&db).is_none());

        // An operator's job that fails is the first of a new series.
        three_failures(&mut r);
        r.failed(&web, failure(50, false), now);
        let retry = r.get(&web).unwrap();
        assert_eq!(retry.attempts, 1);
        assert_eq!(retry.next_try - now, DEFAULT_BASE);

        r.retain(|agent| agent == &db);
        assert!(r.get(&web).is_none() && r.get(&db).is_some());
    }
}
