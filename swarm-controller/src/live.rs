//! What one open dashboard is sent: the per-page half of `serve`'s event
//! stream.
//!
//! Every change of the fleet is formatted once and broadcast as a [`Push`].
//! Each open page has its own query (filter, order, page) and a
//! [`LiveView`] of the names it shows. For each batch of pushes the view
//! decides, without doing any I/O, what this page gets:
//!
//! - a change of a hive it shows that keeps the hive's place: the push's
//!   preformatted `row` event, as is;
//! - a change of a hive it neither shows nor matches: at most a `summary`
//!   event (the fleet counts, a few hundred bytes), and only when the
//!   change moved a count; never the hive's row;
//! - a change that can move the page's membership or order (a hive enters
//!   or leaves the filter, or its rank changes): the page is selected again
//!   from the fleet, once per batch, and only the difference is sent.
//!
//! Invariant: a page is never sent a row it does not show, so what a page
//! costs grows with its page size, not with the fleet.

use std::collections::HashSet;
use std::sync::Arc;

use crate::fleet::Selection;
use crate::roster::Labels;
use crate::view::{Class, Query};

/// One change of the fleet, formatted once for every page.
#[derive(Debug)]
pub struct Push {
    /// The fleet's sequence number of this change.
    pub seq: u64,
    pub name: String,
    pub labels: Labels,
    pub before: Option<Class>,
    pub after: Option<Class>,
    /// `row` (`{row, summary, server_time_ms}`) or `remove`
    /// (`{name, summary, server_time_ms}`).
    pub event: &'static str,
    pub data: String,
    /// `{summary, server_time_ms}` when the change moved a fleet count.
    pub summary: Option<String>,
}

/// What one page shows.
#[derive(Debug)]
pub struct LiveView {
    pub query: Query,
    shown: HashSet<String>,
    pub matched: usize,
    /// The fleet's sequence number the page is up to date with.
    pub seen: u64,
}

/// What a batch of pushes means for one page.
#[derive(Debug, Default)]
pub struct Plan {
    /// Preformatted events to forward as they are, in order.
    pub forward: Vec<Arc<Push>>,
    /// A `summary` event to send after them.
    pub summary: Option<Arc<Push>>,
    /// The page must be selected again (then `forward` is empty).
    pub reselect: bool,
    /// Shown hives that changed in this batch (their rows are re-sent
    /// after a reselection when still shown).
    pub changed: Vec<String>,
}

/// Which names left and entered the page.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub leaving: Vec<String>,
    pub entering: Vec<String>,
}

impl LiveView {
    pub fn new(query: Query, selection: Selection, seq: u64) -> Self {
        LiveView {
            query,
            shown: selection.names.into_iter().collect(),
            matched: selection.matched,
            seen: seq,
        }
    }

    pub fn shows(&self, name: &str) -> bool {
        self.shown.contains(name)
    }

    /// How many rows the page shows.
    pub fn len(&self) -> usize {
        self.shown.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shown.is_empty()
    }

    /// Decide what `batch` (in sequence order) means for this page.
    pub fn plan(&self, batch: &[Arc<Push>]) -> Plan {
        let mut plan = Plan::default();
        let mut last_forward = 0;
        for push in batch.iter().filter(|p| p.seq > self.seen) {
            let matches = |class: &Option<Class>| {
                class
                    .as_ref()
                    .is_some_and(|c| self.query.filter.matches(&push.name, &push.labels, c))
            };
            let (was, is) = (matches(&push.before), matches(&push.after));
            let shown = self.shows(&push.name);
            if shown && !plan.changed.contains(&push.name) {
                plan.changed.push(push.name.clone());
            }
            let key = |c: &Option<Class>| c.as_ref().map(|c| self.query.sort.key(&push.name, c));
            let same_place = key(&push.before) == key(&push.after);
            if was != is || (is && !same_place) {
                plan.reselect = true;
            } else if shown && is {
                plan.forward.push(push.clone());
                last_forward = push.seq;
            }
            if push.summary.is_some() {
                plan.summary = Some(push.clone());
            }
        }
        if plan.reselect {
            plan.forward.clear();
        }
        // A forwarded row carries the summary of its own moment; a later
        // change of the counts needs its own event.
        if plan.summary.as_ref().is_some_and(|s| s.seq <= last_forward) {
            plan.summary = None;
        }
        plan
    }

    /// Take a new selection of the page. `seen` does not move: a
    /// reselection re-sends only the rows that entered or changed in the
    /// batch, so later pushes still in the channel must still be handled
    /// (one that repeats a state already sent is harmless).
    pub fn reselect(&mut self, selection: Selection) -> Diff {
        let new: HashSet<String> = selection.names.iter().cloned().collect();
        let mut diff = Diff {
            leaving: self.shown.difference(&new).cloned().collect(),
            entering: selection
                .names
                .into_iter()
                .filter(|n| !self.shown.contains(n))
                .collect(),
        };
        diff.leaving.sort();
        self.shown = new;
        self.matched = selection.matched;
        diff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::{Convergence, Freshness};
    use crate::view::{Attention, Order};

    fn class(f: Freshness, c: Convergence, a: Option<Attention>) -> Option<Class> {
        Some(Class {
            freshness: f,
            convergence: c,
            attention: a,
        })
    }

    fn converged() -> Option<Class> {
        class(Freshness::Fresh, Convergence::Converged, None)
    }

    fn stale() -> Option<Class> {
        class(
            Freshness::Stale,
            Convergence::Unknown,
            Some(Attention::Stale),
        )
    }

    fn push(seq: u64, name: &str, before: Option<Class>, after: Option<Class>) -> Arc<Push> {
        Arc::new(Push {
            seq,
            name: name.into(),
            labels: Labels::default(),
            before,
            after,
            event: "row",
            data: String::new(),
            summary: (before != after).then(String::new),
        })
    }

    fn view(query: Query, names: &[&str], matched: usize) -> LiveView {
        let selection = Selection {
            names: names.iter().map(|n| n.to_string()).collect(),
            matched,
        };
        LiveView::new(query, selection, 10)
    }

    fn attention_page() -> Query {
        Query {
            sort: Order::Attention,
            limit: Some(2),
            ..Query::default()
        }
    }

    #[test]
    fn a_shown_row_that_keeps_its_place_is_forwarded_as_is() {
        let v = view(attention_page(), &["a", "b"], 5);
        let plan = v.plan(&[push(11, "a", converged(), converged())]);
        assert_eq!(plan.forward.len(), 1);
        assert!(!plan.reselect);
        assert!(plan.summary.is_none());
    }

    #[test]
    fn a_hive_not_shown_sends_no_row_and_a_summary_only_when_counts_move() {
        let v = view(attention_page(), &["a", "b"], 5);
        let plan = v.plan(&[push(11, "z", converged(), converged())]);
        assert!(plan.forward.is_empty() && plan.summary.is_none() && !plan.reselect);
        // Converged to published: still matches (no filter), same rank.
        let published = class(Freshness::Fresh, Convergence::Published, None);
        let plan = v.plan(&[push(12, "z", converged(), published)]);
        assert!(plan.forward.is_empty() && !plan.reselect);
        assert_eq!(plan.summary.map(|p| p.seq), Some(12));
    }

    #[test]
    fn a_change_of_rank_or_membership_reselects_once_per_batch() {
        let v = view(attention_page(), &["a", "b"], 5);
        let plan = v.plan(&[
            push(11, "a", converged(), converged()),
            push(12, "z", converged(), stale()),
            push(13, "b", converged(), converged()),
        ]);
        assert!(plan.reselect);
        assert!(plan.forward.is_empty());
        assert_eq!(plan.changed, ["a", "b"]);
        // Under a filter, a hive leaving it reselects; one outside stays so.
        let q = Query::parse(&[("freshness", "stale"), ("limit", "2")]).unwrap();
        let v = view(q, &["s"], 1);
        assert!(v.plan(&[push(11, "s", stale(), converged())]).reselect);
        let plan = v.plan(&[push(11, "z", converged(), converged())]);
        assert!(!plan.reselect && plan.forward.is_empty());
        // Name order: a rank change keeps the place.
        let v = view(Query::default(), &["a"], 1);
        let plan = v.plan(&[push(11, "a", converged(), stale())]);
        assert_eq!((plan.reselect, plan.forward.len()), (false, 1));
    }

    #[test]
    fn pushes_the_page_has_already_seen_are_skipped() {
        let v = view(attention_page(), &["a"], 1);
        let plan = v.plan(&[
            push(9, "a", converged(), stale()),
            push(10, "a", None, None),
        ]);
        assert!(plan.forward.is_empty() && !plan.reselect && plan.summary.is_none());
    }

    #[test]
    fn a_later_summary_change_follows_the_forwarded_rows() {
        let v = view(attention_page(), &["a", "b"], 5);
        let published = class(Freshness::Fresh, Convergence::Published, None);
        let plan = v.plan(&[
            push(11, "a", converged(), converged()),
            push(12, "z", converged(), published),
        ]);
        assert_eq!(plan.forward.len(), 1);
        assert_eq!(plan.summary.map(|p| p.seq), Some(12));
        let plan = v.plan(&[
            push(11, "z", converged(), published),
            push(12, "a", converged(), converged()),
        ]);
        assert!(plan.summary.is_none(), "the row carries the newer summary");
    }

    #[test]
    fn reselect_reports_who_left_and_who_entered() {
        let mut v = view(attention_page(), &["a", "b"], 5);
        let diff = v.reselect(Selection {
            names: vec!["z".into(), "a".into()],
            matched: 6,
        });
        assert_eq!(
            diff,
            Diff {
                leaving: vec!["b".into()],
                entering: vec!["z".into()]
            }
        );
        assert_eq!((v.matched, v.seen, v.len()), (6, 10, 2));
        assert!(v.shows("z") && !v.shows("b"));
    }
}
