//! The one doubling backoff every retry loop of the hive uses: a node's
//! transient failure ([`crate::agents::jobs::RetryPolicy`]), an agent that
//! keeps failing ([`crate::agents::retry`]), a task the supervisor restarts, a
//! failing reconcile round, and the NATS sessions of the wanted and credentials
//! tasks.
//!
//! Hand-written rather than a crate (`backoff`, `backon`): each caller
//! needs only "double, capped, start again on success", and the callers
//! that sleep do so inside their own `select!` on shutdown and reconnects,
//! which a crate's retry driver would take over. See
//! `docs/architecture.md`, "Hand-written or crate".
//!
//! No jitter here: the waits a whole fleet runs at once after one server
//! restart (the reconnects, the periodic reads and puts, the retry of a
//! failed read or put) are spread by `swarm_queue_client::jitter`; these
//! loops wait after a failure of one task's own session.

use std::time::Duration;

/// The wait after `n` failures in a row (1-based): `first * 2^(n-1)`,
/// capped at `max`. `n = 0` counts as the first.
pub fn nth_delay(first: Duration, max: Duration, n: u32) -> Duration {
    let shift = n.saturating_sub(1).min(31);
    first.saturating_mul(1u32 << shift).min(max)
}

/// Twice `delay`, capped at `max`.
pub fn doubled(delay: Duration, max: Duration) -> Duration {
    delay.saturating_mul(2).min(max)
}

/// A backoff for a loop that retries until it succeeds: [`Backoff::next_wait`]
/// gives the wait and doubles the one after it; [`Backoff::reset`] starts
/// again at `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            current: first,
        }
    }

    /// The wait before the next try; the one after is twice as long.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.current;
        self.current = doubled(self.current, self.max);
        wait
    }

    /// The loop succeeded: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.current = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn delays_double_to_the_cap_and_start_again_after_a_reset() {
        let got: Vec<Duration> = (0..=6).map(|n| nth_delay(MS(500), MS(4000), n)).collect();
        let want = [500, 500, 1000, 2000, 4000, 4000, 4000].map(MS);
        assert_eq!(got, want);
        assert_eq!(nth_delay(MS(500), MS(4000), u32::MAX), MS(4000));
        assert_eq!(doubled(MS(3000), MS(4000)), MS(4000));

        let mut b = Backoff::new(MS(500), MS(1500));
        let waits: Vec<Duration> = (0..4).map(|_| b.next_wait()).collect();
        assert_eq!(waits, [500, 1000, 1500, 1500].map(MS));
        b.reset();
        assert_eq!(b.next_wait(), MS(500));
    }
}
