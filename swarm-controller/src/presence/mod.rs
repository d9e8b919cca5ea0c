//! Which hives have an open NATS connection, from the server's own connect
//! and disconnect events (see [`swarm_queue_client::presence`]), so that a
//! dead hive's row turns `offline` within a moment of its connection
//! closing instead of after `stale_after`.
//!
//! [`Presence`] is the pure part: the set of open connections per account
//! (hive accounts are named like their hive), changed one event at a time,
//! and merged with the server's connection list when the controller starts
//! (or its own connection came back, when it may have missed events).
//! [`watch`] subscribes, asks for the list and feeds the events in.
//!
//! Invariants:
//! - A connection is named by its server and client id; a hive is up while
//!   any of its connections is open. A disconnect of a connection that is
//!   not open (a late event of a connection already replaced, or one the
//!   list never showed) changes nothing, so it cannot mark a live hive
//!   offline.
//! - While a connection list is being read, events still apply; when the
//!   list arrives, a connection it shows that closed meanwhile stays
//!   closed, one opened meanwhile stays open, and one it does not show is
//!   gone (its disconnect was missed).
//! - Without events (no system-account export, a hive on a leaf-node site)
//!   a hive has no link at all, and its row keeps the KV-timestamp rule.

use std::collections::{BTreeSet, HashMap, HashSet};

use swarm_queue_client::presence::{ConnEvent, ConnKey};
use time::OffsetDateTime;

use crate::evaluate::Link;

pub mod watch;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Presence {
    /// Open connections per account.
    open: HashMap<String, BTreeSet<ConnKey>>,
    /// Why each account's last connection closed, for the row.
    closed_why: HashMap<String, String>,
    /// Events seen since the connection list was asked for.
    reading: Option<Meanwhile>,
}

/// What happened while a connection list was being read.
#[derive(Debug, Default)]
struct Meanwhile {
    opened: HashSet<ConnKey>,
    closed: HashSet<ConnKey>,
}

impl Presence {
    /// Apply one event; `true` when `event.account` turned up or down.
    pub fn apply(&mut self, event: &ConnEvent, at: OffsetDateTime) -> bool {
        let was_up = self.is_up(&event.account);
        if let Some(m) = &mut self.reading {
            if event.up {
                m.opened.insert(event.conn.clone());
            } else {
                m.closed.insert(event.conn.clone());
            }
        }
        if event.up {
            self.open
                .entry(event.account.clone())
                .or_default()
                .insert(event.conn.clone());
        } else if let Some(set) = self.open.get_mut(&event.account) {
            if set.remove(&event.conn) && set.is_empty() {
                self.open.remove(&event.account);
                let reason = if event.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", event.reason)
                };
                let when = at
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default();
                self.closed_why.insert(
                    event.account.clone(),
                    format!("its NATS connection closed at {when}{reason}"),
                );
            }
        }
        was_up != self.is_up(&event.account)
    }

    /// A connection list is about to be asked for.
    pub fn begin_list(&mut self) {
        self.reading = Some(Meanwhile::default());
    }

    /// The connection list (every server's, with each connection's
    /// account) arrived: it replaces what was known, corrected by the
    /// events seen while it was read.
    pub fn finish_list(&mut self, conns: Vec<(String, ConnKey)>) {
        let meanwhile = self.reading.take().unwrap_or_default();
        let mut open: HashMap<String, BTreeSet<ConnKey>> = HashMap::new();
        for (account, conn) in conns {
            if !meanwhile.closed.contains(&conn) {
                open.entry(account).or_default().insert(conn);
            }
        }
        for (account, conns) in &self.open {
            for conn in conns.iter().filter(|c| meanwhile.opened.contains(*c)) {
                open.entry(account.clone())
                    .or_default()
                    .insert(conn.clone());
            }
        }
        self.open = open;
    }

    pub fn is_up(&self, account: &str) -> bool {
        self.open.get(account).is_some_and(|s| !s.is_empty())
    }

    /// What a hive's row shows of its connection.
    pub fn link(&self, account: &str) -> Link {
        if self.is_up(account) {
            return Link::Up;
        }
        let why = self.closed_why.get(account).cloned().unwrap_or_else(|| {
            "no NATS connection open by the server's connection list".to_string()
        });
        Link::Down { why }
    }

    /// Open connections, all accounts together (for the benchmark).
    pub fn open_connections(&self) -> usize {
        self.open.values().map(BTreeSet::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(cid: u64) -> ConnKey {
        ConnKey {
            server: "S1".into(),
            cid,
        }
    }

    fn ev(account: &str, cid: u64, up: bool) -> ConnEvent {
        ConnEvent {
            account: account.into(),
            conn: conn(cid),
            up,
            reason: if up { "" } else { "Client Closed" }.into(),
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    /// Two connections, a reconnect that races the old connection's
    /// disconnect, and a disconnect of a connection never seen: a hive is
    /// down only when its last open connection closed.
    #[test]
    fn a_hive_is_down_only_when_its_last_connection_closed() {
        let mut p = Presence::default();
        assert!(p.apply(&ev("alpha", 1, true), now()));
        assert!(
            !p.apply(&ev("alpha", 2, true), now()),
            "a second connection"
        );
        assert!(!p.apply(&ev("alpha", 1, false), now()), "one of two closed");
        assert_eq!(p.link("alpha"), Link::Up);
        // The reconnect (cid 3) is heard before the old one's disconnect.
        assert!(!p.apply(&ev("alpha", 3, true), now()));
        assert!(
            !p.apply(&ev("alpha", 2, false), now()),
            "a stale disconnect"
        );
        assert!(!p.apply(&ev("alpha", 9, false), now()), "never seen");
        assert_eq!(p.link("alpha"), Link::Up);
        assert!(p.apply(&ev("alpha", 3, false), now()));
        let Link::Down { why } = p.link("alpha") else {
            panic!("alpha is up")
        };
        assert!(
            why.contains("closed at 2027-01-15") && why.contains("Client Closed"),
            "{why}"
        );
        assert!(matches!(p.link("beta"), Link::Down { .. }));
    }

    /// The connection list is merged with the events heard while it was
    /// read: a listed connection that closed meanwhile stays closed, one
    /// opened meanwhile stays open, and one known before but not listed is
    /// gone.
    #[test]
    fn the_connection_list_is_corrected_by_the_events_heard_meanwhile() {
        let mut p = Presence::default();
        p.apply(&ev("gone", 1, true), now());
        p.begin_list();
        p.apply(&ev("alpha", 2, false), now());
        p.apply(&ev("beta", 5, true), now());
        p.finish_list(vec![("alpha".into(), conn(2)), ("gamma".into(), conn(4))]);
        assert!(!p.is_up("alpha"), "closed while the list was read");
        assert!(p.is_up("beta"), "opened while the list was read");
        assert!(p.is_up("gamma"));
        assert!(!p.is_up("gone"), "its disconnect was missed");
        assert_eq!(p.open_connections(), 2);
    }
}
