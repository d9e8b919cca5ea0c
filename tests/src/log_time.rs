//! Time stamps of a daemon's text log (tracing's default format, which
//! starts each line with an RFC 3339 UTC time such as
//! `2026-12-01T08:00:01.514165Z`), so a test can tell when, after an event
//! it caused, a daemon logged something: where a failover's time went.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The first line logged at or after `since` that contains `needle`, as
/// the time after `since`; `None` when there is none yet.
pub fn first_after(log: &str, since: SystemTime, needle: &str) -> Option<Duration> {
    log.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| line_time(l)?.duration_since(since).ok())
        .next()
}

/// The time a log line starts with, if it starts with one.
pub fn line_time(line: &str) -> Option<SystemTime> {
    let stamp = line.split_whitespace().next()?;
    let stamp = stamp.strip_suffix('Z')?;
    let (date, clock) = stamp.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    let nanos: u64 = format!("{frac:0<9}").get(..9)?.parse().ok()?;
    let days = u64::try_from(days_from_civil(y, m, day)).ok()?;
    let secs = days * 86_400 + h * 3600 + min * 60 + s;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_nanos(nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tracing_time_stamps() {
        let t = line_time("2026-12-01T08:00:01.514165Z  INFO hive: connected").unwrap();
        let secs = t.duration_since(UNIX_EPOCH).unwrap();
        // date -u -d 2026-12-01T08:00:01Z +%s
        assert_eq!(secs.as_secs(), 1_796_112_001);
        assert_eq!(secs.subsec_micros(), 514_165);
        assert_eq!(line_time("  INFO no stamp"), None);
        let log = "2026-12-01T08:00:01.0Z a\n2026-12-01T08:00:03.5Z b\n2026-12-01T08:00:04Z b\n";
        let since = UNIX_EPOCH + Duration::from_secs(1_796_112_002);
        assert_eq!(
            first_after(log, since, "b"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(first_after(log, since, "a"), None);
    }
}
