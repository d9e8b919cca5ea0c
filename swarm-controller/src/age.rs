//! Time as the controller shows it: an age as people read it (the same in
//! the table, the dashboard and the maintenance holds) and a moment as
//! Unix milliseconds (in JSON). A leaf.

use std::time::Duration;

use time::OffsetDateTime;

/// "42s", "3m05s", "2h01m", "3d04h".
pub fn human_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}
