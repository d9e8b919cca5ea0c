//! Crash loops, decided apart from doing: when an agent that exited while
//! it should be up is started again, and why an agent whose container
//! matches its declaration is still not counted as declared.
//!
//! - The first exit of a streak is restarted at once, so a container killed
//!   behind the hive's back runs again within a second or two. Each further
//!   exit in a row waits `first`, doubling to `max`; a run of at least
//!   `reset_after` starts the streak again, and so does an operator's
//!   deploy or start or a new revision (the store sets the streak to 0).
//! - An agent wanted up is not as declared while it has exited and does not
//!   run, while it waits out the backoff, while it has run for less than
//!   `min_running` (the agent's own `min_running_secs` when its spec gives
//!   one, else the hive's), or while Docker reports it unhealthy: a
//!   revision is never converged on an agent that is restarting.
//!
//! Pure: the durable [`ExitRecord`] and a wall-clock time in, a decision
//! out. Docker never restarts an agent itself (its restart policy is `no`).

use std::time::Duration;

use swarm_queue_client::{AgentSpec, Power, Unsettled};

use crate::agents::jobs::{ExitRecord, Millis};

/// The shipped delays: 10 s doubling to 5 min, reset after 10 min of
/// running; an agent counts as up after 10 s.
pub const DEFAULT_FIRST: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX: Duration = Duration::from_secs(300);
pub const DEFAULT_RESET_AFTER: Duration = Duration::from_secs(600);
pub const DEFAULT_MIN_RUNNING: Duration = Duration::from_secs(10);

/// The crash-loop settings (`crash_backoff_*_secs`, `min_running_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashPolicy {
    pub first: Duration,
    pub max: Duration,
    pub reset_after: Duration,
    pub min_running: Duration,
}

impl Default for CrashPolicy {
    fn default() -> Self {
        CrashPolicy {
            first: DEFAULT_FIRST,
            max: DEFAULT_MAX,
            reset_after: DEFAULT_RESET_AFTER,
            min_running: DEFAULT_MIN_RUNNING,
        }
    }
}

impl CrashPolicy {
    /// The wait before the start that follows the `streak`-th exit in a
    /// row: none after the first.
    pub fn delay(&self, streak: u32) -> Duration {
        if streak <= 1 {
            Duration::ZERO
        } else {
            crate::backoff::nth_delay(self.first, self.max, streak - 1)
        }
    }

    /// When the next start of an exited agent is due; `None` when it may
    /// start now or has no exit recorded.
    pub fn next_start_at(&self, rec: &ExitRecord, now: Millis) -> Option<Millis> {
        let finished = rec.finished_at_ms?;
        let due = finished.saturating_add(self.delay(rec.streak).as_millis() as Millis);
        (due > now).then_some(due)
    }

    pub fn reset_after_ms(&self) -> Millis {
        self.reset_after.as_millis() as Millis
    }

    /// The policy for one agent: its spec's `min_running_secs`, when it
    /// gives one, in place of the hive's. The contract bounds it as the
    /// hive's config is bounded, so no agent can ask for more.
    pub fn for_agent(&self, spec: Option<&AgentSpec>) -> CrashPolicy {
        match spec.and_then(|s| s.min_running_secs) {
            Some(secs) => CrashPolicy {
                min_running: Duration::from_secs(secs),
                ..*self
            },
            None => *self,
        }
    }
}

/// What [`unsettled`] looks at for one agent.
pub struct SettleInput<'a> {
    pub wanted: Power,
    /// Whether the container runs; `None` when there is none (or Docker
    /// could not be asked): the observed state says that already.
    pub running: Option<bool>,
    pub record: Option<&'a ExitRecord>,
    pub health: Option<&'a str>,
    pub now: Millis,
}

/// Why the agent is not as declared although its container may match, and
/// when that may change by itself (for a wake-up); `None` when it is
/// settled.
pub fn unsettled(
    policy: &CrashPolicy,
    input: &SettleInput<'_>,
) -> Option<(Unsettled, Option<Millis>)> {
    if input.wanted != Power::Up {
        return None;
    }
    let rec = input.record;
    match input.running? {
        false => {
            let rec = rec.filter(|r| r.finished_at_ms.is_some())?;
            Some(match policy.next_start_at(rec, input.now) {
                Some(due) => (Unsettled::Backoff, Some(due)),
                None => (Unsettled::Exited, None),
            })
        }
        true if input.health == Some("unhealthy") => Some((Unsettled::Unhealthy, None)),
        true => {
            let started = rec.and_then(|r| r.started_at_ms)?;
            let settled_at = started.saturating_add(policy.min_running.as_millis() as Millis);
            (settled_at > input.now).then_some((Unsettled::Young, Some(settled_at)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(streak: u32, started: Millis, finished: Option<Millis>) -> ExitRecord {
        ExitRecord {
            last_code: Some(3),
            started_at_ms: Some(started),
            finished_at_ms: finished,
            exits: streak,
            streak,
            ..Default::default()
        }
    }

    #[test]
    fn the_first_exit_restarts_at_once_then_the_delay_doubles_to_the_cap() {
        let p = CrashPolicy::default();
        let delays: Vec<u64> = (1..=8).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(p.next_start_at(&rec(1, 0, Some(5_000)), 5_001), None);
        assert_eq!(
            p.next_start_at(&rec(3, 0, Some(5_000)), 5_001),
            Some(25_000)
        );
    }

    #[test]
    fn restarting_agents_are_not_settled() {
        let p = CrashPolicy::default();
        let input = |running, record, health, now| SettleInput {
            wanted: Power::Up,
            running,
            record,
            health,
            now,
        };
        let looping = rec(2, 0, Some(1_000));
        let got = unsettled(&p, &input(Some(false), Some(&looping), None, 2_000));
        assert_eq!(got, Some((Unsettled::Backoff, Some(11_000))));
        let first = rec(1, 0, Some(1_000));
        let got = unsettled(&p, &input(Some(false), Some(&first), None, 2_000));
        assert_eq!(got, Some((Unsettled::Exited, None)));
        let young = rec(1, 20_000, Some(1_000));
        let got = unsettled(&p, &input(Some(true), Some(&young), None, 25_000));
        assert_eq!(got, Some((Unsettled::Young, Some(30_000))));
        let got = unsettled(&p, &input(Some(true), Some(&young), None, 30_000));
        assert_eq!(got, None, "up for min_running");
        let got = unsettled(&p, &input(Some(true), None, Some("unhealthy"), 0));
        assert_eq!(got, Some((Unsettled::Unhealthy, None)));
        assert_eq!(unsettled(&p, &input(None, Some(&looping), None, 0)), None);
        let down = SettleInput {
            wanted: Power::Down,
            ..input(Some(false), Some(&looping), None, 2_000)
        };
        assert_eq!(unsettled(&p, &down), None);
    }

    #[test]
    fn an_agents_own_min_running_overrides_the_hives() {
        let hive = CrashPolicy {
            min_running: Duration::from_secs(60),
            ..CrashPolicy::default()
        };
        let spec = |secs| AgentSpec {
            image: Some("i".into()),
            min_running_secs: secs,
            ..Default::default()
        };
        let (own, zero, none) = (spec(Some(3)), spec(Some(0)), spec(None));
        assert_eq!(
            hive.for_agent(Some(&own)).min_running,
            Duration::from_secs(3)
        );
        assert_eq!(hive.for_agent(Some(&zero)).min_running, Duration::ZERO);
        assert_eq!(hive.for_agent(Some(&none)), hive);
        assert_eq!(hive.for_agent(None), hive, "an undeclared agent");
        assert_eq!(hive.for_agent(Some(&own)).first, hive.first);
        // Up since 10 s, judged at `now`.
        let young = rec(1, 10_000, None);
        let at = |policy: &CrashPolicy, now| {
            let input = SettleInput {
                wanted: Power::Up,
                running: Some(true),
                record: Some(&young),
                health: None,
                now,
            };
            unsettled(policy, &input)
        };
        let own_policy = hive.for_agent(Some(&own));
        assert_eq!(
            at(&own_policy, 12_000),
            Some((Unsettled::Young, Some(13_000)))
        );
        assert_eq!(at(&own_policy, 13_000), None, "up for its own 3 s");
        assert_eq!(at(&hive, 13_000), Some((Unsettled::Young, Some(70_000))));
        assert_eq!(at(&hive.for_agent(Some(&zero)), 10_000), None);
    }
}
