//! Maintenance holds: an operator says a hive is down on purpose (a planned
//! reboot, a disk swap) so that it shows `maintenance` instead of `stale`
//! or `offline`, needs no attention, and is skipped by rollouts.
//!
//! A hold lives in `hyperhive-maintenance/<hive>` (the controllers' own
//! bucket; hives have no grant on it) and is written by compare-and-set.
//! Its value carries a reason, a time to live and who set it, but no time:
//! the hold started at the entry's own server timestamp and ends `ttl_secs`
//! after it. So a controller with a wrong clock cannot set a hold that
//! outlives its TTL, and every reader judges the expiry the way it judges
//! freshness: the server's timestamp against the reader's clock.
//!
//! An expired hold ends by itself: the evaluation ignores it, `maintenance
//! list` shows it `expired`, and `maintenance off` removes it.
//!
//! Parts: this file is pure (the stored value, its expiry, the TTL rule);
//! `store.rs` reads and writes the bucket.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::age::human_age;

pub mod expiry;
pub mod store;

/// The hold's own schema version.
pub const HOLD_SCHEMA: u32 = 1;
/// The time to live when `--ttl` is not given.
pub const DEFAULT_TTL: Duration = Duration::from_secs(2 * 3600);
/// The shortest and the longest time to live: a second (for tests and a
/// quick restart) to 7 days (a forgotten hold cannot hide a hive for
/// longer).
pub const TTL_BOUNDS: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(7 * 86_400));
/// The longest reason, in bytes.
pub const MAX_REASON_BYTES: usize = 200;

/// The value of `hyperhive-maintenance/<hive>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub schema: u32,
    /// Why, in the operator's words (may be empty).
    pub reason: String,
    /// How long the hold lasts from the entry's server timestamp.
    pub ttl_secs: u64,
    /// The controller that set it: user, host and instance.
    pub by: String,
}

/// One stored hold, with the server's timestamp it is judged by.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldEntry {
    pub revision: u64,
    /// When the server stored it: the start of the hold.
    pub created: OffsetDateTime,
    /// The hold, or why the value does not decode (no hold then).
    pub hold: Result<Hold, String>,
}

impl HoldEntry {
    pub fn decode(revision: u64, created: OffsetDateTime, bytes: &[u8]) -> Self {
        let hold = serde_json::from_slice::<Hold>(bytes)
            .map_err(|e| format!("does not decode as a maintenance hold: {e}"));
        HoldEntry {
            revision,
            created,
            hold,
        }
    }

    /// When the hold ends: the server's timestamp plus its TTL.
    pub fn until(&self) -> Option<OffsetDateTime> {
        let hold = self.hold.as_ref().ok()?;
        Some(self.created + Duration::from_secs(hold.ttl_secs))
    }

    /// The hold as it stands at `now` (the reader's clock), if it decodes.
    pub fn view(&self, now: OffsetDateTime) -> Option<HoldView> {
        let hold = self.hold.as_ref().ok()?;
        let until = self.until()?;
        let left: Duration = (until - now).try_into().unwrap_or(Duration::ZERO);
        Some(HoldView {
            reason: hold.reason.clone(),
            by: hold.by.clone(),
            set_at: rfc3339(self.created),
            until: rfc3339(until),
            until_ms: (until.unix_timestamp_nanos() / 1_000_000) as i64,
            left_secs: left.as_secs(),
            active: until > now,
            revision: self.revision,
        })
    }

    /// The hold when it is still in force at `now`.
    pub fn active(&self, now: OffsetDateTime) -> Option<HoldView> {
        self.view(now).filter(|v| v.active)
    }
}

/// A hold as rows, `maintenance list` and rollouts show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HoldView {
    pub reason: String,
    pub by: String,
    /// The entry's server timestamp (RFC 3339).
    pub set_at: String,
    /// `set_at` plus the TTL (RFC 3339).
    pub until: String,
    pub until_ms: i64,
    /// Seconds left by the reader's clock (0 once expired).
    pub left_secs: u64,
    /// Whether it is still in force: an expired hold is ignored.
    pub active: bool,
    /// The KV revision, what `maintenance off` deletes at.
    pub revision: u64,
}

impl HoldView {
    /// "until 2026-12-01T21:00:00Z (1h59m left), set by ops@host: reboot".
    pub fn line(&self) -> String {
        let when = if self.active {
            format!(
                "until {} ({} left)",
                self.until,
                human_age(Duration::from_secs(self.left_secs))
            )
        } else {
            format!("expired at {}", self.until)
        };
        let why = if self.reason.is_empty() {
            "no reason given".to_string()
        } else {
            self.reason.clone()
        };
        format!("{when}, set by {}: {why}", self.by)
    }
}

/// Parse a `--ttl`: a whole number with `s`, `m`, `h` or `d` (`90s`, `2h`,
/// `7d`), within [`TTL_BOUNDS`]. The error names the value and the rule.
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let rule = "give a whole number with s, m, h or d (90s, 30m, 2h, 7d)";
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("--ttl {text:?} is not a duration: {rule}"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "" => return Err(format!("--ttl {text:?} has no unit: {rule}")),
        _ => return Err(format!("--ttl {text:?} has unit {unit:?}: {rule}")),
    };
    let ttl = Duration::from_secs(n.saturating_mul(scale));
    let (low, high) = TTL_BOUNDS;
    if ttl < low || ttl > high {
        return Err(format!(
            "--ttl {text:?} is out of bounds: a hold lasts {} to {} (7 days)",
            human_age(low),
            human_age(high)
        ));
    }
    Ok(ttl)
}

/// Check a `--reason`: at most [`MAX_REASON_BYTES`], no control character.
pub fn check_reason(reason: &str) -> Result<(), String> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(format!(
            "--reason is {} bytes, over the {MAX_REASON_BYTES}-byte limit",
            reason.len()
        ));
    }
    if reason.chars().any(char::is_control) {
        return Err(format!("--reason {reason:?} contains a control character"));
    }
    Ok(())
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ttl_secs: u64, created: OffsetDateTime) -> HoldEntry {
        let hold = Hold {
            schema: HOLD_SCHEMA,
            reason: "reboot".into(),
            ttl_secs,
            by: "ops@host".into(),
        };
        HoldEntry::decode(3, created, &serde_json::to_vec(&hold).unwrap())
    }

    #[test]
    fn a_hold_ends_at_the_servers_timestamp_plus_its_ttl() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let e = entry(60, t0);
        let v = e.active(t0 + Duration::from_secs(59)).unwrap();
        assert_eq!(v.left_secs, 1);
        assert!(
            v.line().contains("(1s left), set by ops@host: reboot"),
            "{}",
            v.line()
        );
        assert_eq!(e.active(t0 + Duration::from_secs(60)), None);
        let expired = e.view(t0 + Duration::from_secs(3600)).unwrap();
        assert!(!expired.active && expired.left_secs == 0);
        assert!(
            expired.line().starts_with("expired at "),
            "{}",
            expired.line()
        );
    }

    #[test]
    fn an_undecodable_hold_is_no_hold() {
        let e = HoldEntry::decode(1, OffsetDateTime::UNIX_EPOCH, b"{not json");
        assert!(e.hold.is_err());
        assert_eq!(e.active(OffsetDateTime::UNIX_EPOCH), None);
    }

    #[test]
    fn ttls_parse_within_bounds_and_errors_name_the_value() {
        assert_eq!(parse_ttl("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_ttl("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for (bad, says) in [
            ("8d", "out of bounds"),
            ("0s", "out of bounds"),
            ("2", "no unit"),
            ("2w", "has unit \"w\""),
            ("h", "not a duration"),
            ("-1h", "not a duration"),
        ] {
            let e = parse_ttl(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")) && e.contains(says), "{e}");
        }
    }

    #[test]
    fn reasons_are_bounded_and_plain() {
        assert!(check_reason("kernel update").is_ok());
        assert!(check_reason(&"x".repeat(201))
            .unwrap_err()
            .contains("201 bytes"));
        assert!(check_reason("a\nb").unwrap_err().contains("control"));
    }
}
