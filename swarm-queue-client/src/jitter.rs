//! Jitter for the timers every hive of a fleet runs.
//!
//! A server restart disconnects every hive at the same instant. With fixed
//! delays they would all retry the connect at the same instants, all come
//! back in the same millisecond, and from then on re-read their keys and
//! publish their status in lockstep: 10,000 requests at once every minute
//! instead of 170 a second. So each of those waits is drawn at random:
//!
//! - a periodic wait (the status publisher's interval, the declaration and
//!   credential re-reads, the read a second into each session, the retry
//!   of a failed read or put) from `interval ± percent` ([`Jitter::spread`]);
//! - a reconnect delay from `[0, backoff]` ([`Jitter::up_to`], "full
//!   jitter"): the backoff itself only grows with the attempts, so without
//!   the draw every hive disconnected by one event keeps one schedule.
//!
//! The mean of a spread wait is its interval, so the load on the server is
//! the same as without jitter, only not synchronised. `percent` is bounded
//! by [`MAX_PERCENT`] (50): the longest wait is then 1.5 intervals, which
//! keeps the controller's default `stale_after` (two publish intervals)
//! true. Percent 0 turns every draw off (the waits are the intervals and
//! backoffs themselves), which is what the scale bench compares against.
//!
//! The source is a [`fastrand::Rng`] behind a mutex, shared by the tasks of
//! one process; [`Jitter::seeded`] makes its draws reproducible for tests.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The hive's `jitter_percent` when it is not configured.
pub const DEFAULT_PERCENT: u8 = 20;
/// The largest `jitter_percent` (see the module docs).
pub const MAX_PERCENT: u8 = 50;

/// How much this process spreads its fleet-wide waits, and the random
/// source it draws from. Clones share the source.
#[derive(Clone, Debug)]
pub struct Jitter {
    /// Spread of a periodic wait, in percent of it; 0 is no jitter at all.
    percent: u8,
    rng: Arc<Mutex<fastrand::Rng>>,
}

impl Default for Jitter {
    /// [`DEFAULT_PERCENT`], seeded at random.
    fn default() -> Jitter {
        Jitter::new(DEFAULT_PERCENT)
    }
}

impl Jitter {
    /// `percent` (at most [`MAX_PERCENT`]; more is taken as that), seeded
    /// at random.
    pub fn new(percent: u8) -> Jitter {
        Jitter::from_rng(percent, fastrand::Rng::new())
    }

    /// The same, with draws fixed by `seed`.
    pub fn seeded(percent: u8, seed: u64) -> Jitter {
        Jitter::from_rng(percent, fastrand::Rng::with_seed(seed))
    }

    /// No jitter: every wait is its interval or backoff.
    pub fn none() -> Jitter {
        Jitter::seeded(0, 0)
    }

    fn from_rng(percent: u8, rng: fastrand::Rng) -> Jitter {
        Jitter {
            percent: percent.min(MAX_PERCENT),
            rng: Arc::new(Mutex::new(rng)),
        }
    }

    pub fn percent(&self) -> u8 {
        self.percent
    }

    /// A wait drawn evenly from [`spread_bounds`]`(interval, percent)`.
    pub fn spread(&self, interval: Duration) -> Duration {
        if self.percent == 0 {
            return interval;
        }
        let (low, high) = spread_bounds(interval, self.percent);
        self.draw(low, high)
    }

    /// A delay drawn evenly from `[0, backoff]`; `backoff` itself when the
    /// jitter is off.
    pub fn up_to(&self, backoff: Duration) -> Duration {
        if self.percent == 0 {
            return backoff;
        }
        self.draw(Duration::ZERO, backoff)
    }

    fn draw(&self, low: Duration, high: Duration) -> Duration {
        // A panic while holding the lock leaves a generator that is still
        // a generator: take it.
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        draw_between(&mut rng, low, high)
    }
}

/// The shortest and longest wait a spread of `percent` makes of
/// `interval`: `interval × (100 ∓ percent) / 100`, to the nanosecond.
pub fn spread_bounds(interval: Duration, percent: u8) -> (Duration, Duration) {
    let percent = u128::from(percent.min(MAX_PERCENT));
    let nanos = interval.as_nanos();
    let scale = |p: u128| nanos_to_duration(nanos * p / 100);
    (scale(100 - percent), scale(100 + percent))
}

/// A duration drawn evenly from `[low, high]`, to the nanosecond.
fn draw_between(rng: &mut fastrand::Rng, low: Duration, high: Duration) -> Duration {
    let low = u64::try_from(low.as_nanos()).unwrap_or(u64::MAX);
    let high = u64::try_from(high.as_nanos()).unwrap_or(u64::MAX);
    if high <= low {
        return Duration::from_nanos(low);
    }
    Duration::from_nanos(rng.u64(low..=high))
}

fn nanos_to_duration(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn spread_bounds_are_the_interval_plus_and_minus_the_percent() {
        assert_eq!(spread_bounds(S(60), 20), (S(48), S(72)));
        assert_eq!(spread_bounds(S(5), 20), (S(4), S(6)));
        assert_eq!(spread_bounds(S(1), 20), (MS(800), MS(1200)));
        assert_eq!(spread_bounds(S(60), 0), (S(60), S(60)));
        // Past the maximum counts as the maximum: never a zero wait.
        assert_eq!(spread_bounds(S(60), 100), (S(30), S(90)));
        assert_eq!(
            spread_bounds(Duration::ZERO, 20),
            (Duration::ZERO, Duration::ZERO)
        );
    }

    #[test]
    fn spread_draws_stay_in_bounds_cover_them_and_average_the_interval() {
        let jitter = Jitter::seeded(20, 7);
        let draws: Vec<Duration> = (0..10_000).map(|_| jitter.spread(S(60))).collect();
        assert!(draws.iter().all(|d| (S(48)..=S(72)).contains(d)));
        let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(*min < S(49) && *max > S(71), "{min:?} .. {max:?}");
        let mean = draws.iter().sum::<Duration>() / draws.len() as u32;
        assert!((S(59)..=S(61)).contains(&mean), "mean {mean:?}");
        // Spread, not clustered: each of the 24 one-second buckets gets
        // its share (417 expected).
        let mut buckets = [0u32; 24];
        for d in &draws {
            buckets[((d.as_secs_f64() - 48.0) as usize).min(23)] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (300..550).contains(&n)),
            "{buckets:?}"
        );
    }

    #[test]
    fn up_to_draws_from_zero_to_the_backoff() {
        let jitter = Jitter::seeded(20, 11);
        let draws: Vec<Duration> = (0..10_000).map(|_| jitter.up_to(S(5))).collect();
        assert!(draws.iter().all(|d| *d <= S(5)));
        assert!(draws.iter().any(|d| *d < MS(50)) && draws.iter().any(|d| *d > MS(4950)));
        let mean = draws.iter().sum::<Duration>() / draws.len() as u32;
        assert!((MS(2400)..=MS(2600)).contains(&mean), "mean {mean:?}");
        assert_eq!(jitter.up_to(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_same_seed_draws_the_same_waits() {
        let draws = |seed| {
            let jitter = Jitter::seeded(20, seed);
            let clone = jitter.clone();
            // Clones share one source: the draws interleave, never repeat.
            (0..4)
                .flat_map(|_| [jitter.spread(S(60)), clone.up_to(S(5))])
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
        let d = draws(3);
        assert_ne!(d[0], d[2]);
    }

    #[test]
    fn percent_zero_is_no_jitter_and_percent_is_capped() {
        let off = Jitter::none();
        assert_eq!(off.spread(S(60)), S(60));
        assert_eq!(off.up_to(S(5)), S(5));
        assert_eq!(Jitter::seeded(200, 1).percent(), MAX_PERCENT);
        assert_eq!(Jitter::default().percent(), DEFAULT_PERCENT);
    }
}
