//! How old one hive's status entry was over the last hour, for the chart
//! on its page: a gap in its reports shows as an age that climbs.
//!
//! Each hive keeps a ring of [`MINUTES`] one-minute buckets, filled as its
//! status entries arrive (by the server's timestamp of each entry, never
//! the hive's clock): how many came in that minute, the longest wait
//! before one of them, and the second of the last. Recording one entry
//! touches one bucket, and a hive costs the same few hundred bytes however
//! long it runs. The age in a minute without any entry is worked out when
//! the chart is asked for, from the last entry before it.

use serde::Serialize;
use time::OffsetDateTime;

/// Buckets kept per hive: an hour of minutes.
pub const MINUTES: usize = 60;

/// One minute of one hive's reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Minute {
    /// Minutes since the epoch this bucket holds (0: never used), so a
    /// bucket an hour old is told apart from this minute's.
    index: u32,
    /// Status entries stored in this minute.
    updates: u16,
    /// The longest wait, in seconds, before one of them (since the entry
    /// before it).
    worst_gap_secs: u32,
    /// The second within the minute of the last of them.
    last_second: u8,
}

/// See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgeRing {
    minutes: [Minute; MINUTES],
    /// The newest entry's time (seconds since the epoch).
    last: Option<i64>,
}

impl Default for AgeRing {
    fn default() -> Self {
        AgeRing {
            minutes: [Minute::default(); MINUTES],
            last: None,
        }
    }
}

/// One minute of the chart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgeSample {
    /// When the minute began (milliseconds since the epoch).
    pub start_ms: i64,
    /// Status entries stored in it.
    pub updates: u16,
    /// The oldest the status entry was in that minute, in seconds; `None`
    /// when no entry before its end is known.
    pub worst_age_secs: Option<u64>,
}

impl AgeRing {
    /// A status entry stored by the server at `at`.
    pub fn record(&mut self, at: OffsetDateTime) {
        let secs = at.unix_timestamp();
        if self.last.is_some_and(|l| secs < l) {
            return; // older than what the ring holds: no news
        }
        let gap = self.last.map(|l| (secs - l) as u64);
        self.last = Some(secs);
        let index = minute_of(secs);
        let bucket = &mut self.minutes[index as usize % MINUTES];
        if bucket.index != index {
            *bucket = Minute {
                index,
                ..Minute::default()
            };
        }
        bucket.updates = bucket.updates.saturating_add(1);
        if let Some(g) = gap {
            bucket.worst_gap_secs = bucket.worst_gap_secs.max(g.min(u32::MAX as u64) as u32);
        }
        bucket.last_second = secs.rem_euclid(60) as u8;
    }

    /// The last [`MINUTES`] minutes up to `now`, oldest first.
    pub fn chart(&self, now: OffsetDateTime) -> Vec<AgeSample> {
        let now_secs = now.unix_timestamp();
        let current = minute_of(now_secs);
        let first = current.saturating_sub(MINUTES as u32 - 1);
        let window_start = i64::from(first) * 60;
        // An entry from before the window is the start of its first age.
        let mut last_seen = self.last.filter(|l| *l < window_start);
        (first..=current)
            .map(|index| {
                let start = i64::from(index) * 60;
                let end = (start + 60).min(now_secs);
                let bucket = self.minutes[index as usize % MINUTES];
                let mut worst = None;
                let mut updates = 0;
                if bucket.index == index && bucket.updates > 0 {
                    updates = bucket.updates;
                    if last_seen.is_some() || bucket.worst_gap_secs > 0 {
                        worst = Some(u64::from(bucket.worst_gap_secs));
                    }
                    last_seen = Some(start + i64::from(bucket.last_second));
                }
                if let Some(l) = last_seen {
                    let age = (end - l).max(0) as u64;
                    worst = Some(worst.map_or(age, |w: u64| w.max(age)));
                }
                AgeSample {
                    start_ms: start * 1000,
                    updates,
                    worst_age_secs: worst,
                }
            })
            .collect()
    }
}

fn minute_of(secs: i64) -> u32 {
    secs.div_euclid(60).clamp(0, i64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(secs).unwrap()
    }

    /// A time on a minute boundary, far from the epoch.
    const T0: i64 = 1_800_000_000 / 60 * 60;

    #[test]
    fn steady_reports_keep_the_age_low_and_a_gap_climbs() {
        let mut ring = AgeRing::default();
        // Every 20 s for 10 minutes, then silence for 5, then one report.
        for s in (0..600).step_by(20) {
            ring.record(at(T0 + s));
        }
        ring.record(at(T0 + 900));
        let chart = ring.chart(at(T0 + 930));
        assert_eq!(chart.len(), MINUTES);
        let last = chart.len() - 1; // the minute of T0 + 900
        let minute = |i: usize| &chart[last - 15 + i];
        assert_eq!(minute(0).start_ms, T0 * 1000);
        assert_eq!(minute(0).updates, 3);
        assert_eq!(minute(0).worst_age_secs, Some(20));
        assert_eq!(minute(9).worst_age_secs, Some(20));
        // Minutes 10 to 14: no report, the age at each minute's end.
        assert_eq!(minute(10).updates, 0);
        assert_eq!(minute(10).worst_age_secs, Some(80));
        assert_eq!(minute(14).worst_age_secs, Some(320));
        // The report that ended the gap says how long it was.
        assert_eq!(minute(15).updates, 1);
        assert_eq!(minute(15).worst_age_secs, Some(320));
        // Before the first report nothing is known.
        assert_eq!(chart[0].worst_age_secs, None);
    }

    #[test]
    fn an_hour_old_bucket_is_not_read_as_this_minute() {
        let mut ring = AgeRing::default();
        ring.record(at(T0));
        ring.record(at(T0 + 10));
        // 2 hours later: the bucket of T0 is reused by a later minute.
        let later = T0 + 2 * 3600;
        let chart = ring.chart(at(later + 30));
        assert!(chart.iter().all(|m| m.updates == 0));
        assert_eq!(chart[0].worst_age_secs, Some(2 * 3600 - 10 - 3540 + 60));
        assert_eq!(chart[MINUTES - 1].worst_age_secs, Some(2 * 3600 + 20));
        ring.record(at(later));
        let chart = ring.chart(at(later + 30));
        assert_eq!(chart[MINUTES - 1].updates, 1);
        assert_eq!(chart[MINUTES - 1].worst_age_secs, Some(2 * 3600 - 10));
    }

    #[test]
    fn an_older_entry_changes_nothing() {
        let mut ring = AgeRing::default();
        ring.record(at(T0 + 100));
        let before = ring.clone();
        ring.record(at(T0 + 50));
        assert_eq!(ring, before);
    }
}
