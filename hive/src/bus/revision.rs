//! Which read of a key to act on: the revision rule shared by the wanted
//! state and credential delivery.
//!
//! Every read of a key (after a doorbell, at boot, after a reconnect, on a
//! timer) returns the key's last message with its revision (the stream
//! sequence) and the server's timestamp. Revisions only grow while a bucket
//! lives, so a read at or below the last revision handled is normally a
//! duplicate doorbell or a quiet pull and changes nothing.
//!
//! A *lower* revision means one of two things:
//! - the bucket was deleted and made again (a lost NATS store, an operator's
//!   `nats kv del`): revisions start again at 1, and what the bucket holds
//!   now is the truth;
//! - a read served by a replica that lags the leader (direct gets may be
//!   answered by any replica of an R3 bucket): an old value, not the truth.
//!
//! The same revision with another timestamp is another message, so a new
//! bucket too.
//!
//! A lower revision written *after* the one handled (by the server's
//! timestamp) can only be a new bucket: it is taken at once. Otherwise
//! (the time of the last one is unknown after a restart, or the message is
//! older) it is taken only when a second read, at least [`CONFIRM_AFTER`]
//! later, returns it again. Either way the caller warns, naming both
//! revisions: the hive never silently drops a declaration, and never
//! ignores a bucket made again.

use std::time::Duration;

use time::OffsetDateTime;

/// How long a lower revision must persist before it is taken as the truth
/// when its timestamp does not prove it newer. Replica lag is milliseconds.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(2);

/// A read of a key: its revision and the server's time for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub revision: u64,
    /// `None` when not known (a revision restored from disk).
    pub created: Option<OffsetDateTime>,
}

/// What to do with a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing handled yet, or a higher revision: act on it.
    New,
    /// The revision handled last: nothing to do.
    Same,
    /// Lower than `last`, and shown to be a bucket made again: act on it,
    /// and warn.
    Reset { last: u64 },
    /// Lower than `last`, not yet shown to be newer: read again after
    /// [`CONFIRM_AFTER`] and act if it is still there.
    Confirm { last: u64 },
}

/// A lower revision seen once and waiting for its confirming read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspect {
    pub revision: u64,
    pub first_seen: tokio::time::Instant,
}

/// Decide about `read`, given the last revision handled and a pending
/// suspect (pure; `now` is the caller's clock).
pub fn judge(
    last: Option<Seen>,
    suspect: Option<Suspect>,
    read: Seen,
    now: tokio::time::Instant,
) -> Verdict {
    let Some(last) = last else {
        return Verdict::New;
    };
    if read.revision > last.revision {
        return Verdict::New;
    }
    if read.revision == last.revision {
        // The same revision with another timestamp is another message: a
        // bucket made again that has since reached the same revision.
        return match (read.created, last.created) {
            (Some(r), Some(l)) if r != l => Verdict::Reset {
                last: last.revision,
            },
            _ => Verdict::Same,
        };
    }
    let newer = matches!((read.created, last.created), (Some(r), Some(l)) if r > l);
    let confirmed = suspect.is_some_and(|s| {
        s.revision == read.revision && now.duration_since(s.first_seen) >= CONFIRM_AFTER
    });
    if newer || confirmed {
        Verdict::Reset {
            last: last.revision,
        }
    } else {
        Verdict::Confirm {
            last: last.revision,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Option<OffsetDateTime> {
        Some(OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(secs))
    }

    #[tokio::test(start_paused = true)]
    async fn the_revision_rule() {
        let t0 = tokio::time::Instant::now();
        let later = t0 + CONFIRM_AFTER;
        let soon = t0 + CONFIRM_AFTER / 2;
        let seen = |revision, created| Seen { revision, created };
        let suspect = |revision| {
            Some(Suspect {
                revision,
                first_seen: t0,
            })
        };
        type Case = (
            &'static str,
            Option<Seen>,
            Option<Suspect>,
            Seen,
            tokio::time::Instant,
            Verdict,
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("first read", None, None, seen(5, at(10)), t0, Verdict::New),
            ("higher", Some(seen(5, at(10))), None, seen(6, at(11)), t0, Verdict::New),
            ("duplicate doorbell", Some(seen(5, at(10))), None, seen(5, at(10)), t0, Verdict::Same),
            ("same revision, another message", Some(seen(3, at(10))), None, seen(3, at(30)), t0, Verdict::Reset { last: 3 }),
            ("same revision, time unknown", Some(seen(3, None)), None, seen(3, at(30)), t0, Verdict::Same),
            ("bucket made again: lower and newer", Some(seen(9, at(10))), None, seen(1, at(20)), t0, Verdict::Reset { last: 9 }),
            ("lagging replica: lower and older", Some(seen(9, at(10))), None, seen(8, at(9)), t0, Verdict::Confirm { last: 9 }),
            ("after a restart the time is unknown", Some(seen(9, None)), None, seen(1, at(20)), t0, Verdict::Confirm { last: 9 }),
            ("confirmed by a later read", Some(seen(9, None)), suspect(1), seen(1, at(20)), later, Verdict::Reset { last: 9 }),
            ("a second read too soon", Some(seen(9, None)), suspect(1), seen(1, at(20)), soon, Verdict::Confirm { last: 9 }),
            ("a different lower revision restarts the wait", Some(seen(9, None)), suspect(1), seen(2, at(20)), later, Verdict::Confirm { last: 9 }),
        ];
        for (what, last, pending, read, now, want) in cases {
            assert_eq!(judge(last, pending, read, now), want, "{what}");
        }
    }
}
