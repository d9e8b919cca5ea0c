//! The fleet summary: rows per freshness and convergence, and the line
//! that says them, counted one row at a time.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::evaluate::{Convergence, Freshness};
use crate::view::{Class, ViewRow};

/// The one-line fleet summary, with its counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub hives: usize,
    pub freshness: BTreeMap<&'static str, usize>,
    pub convergence: BTreeMap<&'static str, usize>,
    /// Hives that need attention (see [`crate::view::attention`]).
    pub attention: usize,
    pub line: String,
}

/// A summary counted one row at a time, for rows that are not kept.
#[derive(Debug, Default)]
pub struct Tally {
    rows: usize,
    counts: Counts,
}

impl Tally {
    pub fn add(&mut self, row: &ViewRow) {
        self.rows += 1;
        self.counts.add(&row.class());
    }

    pub fn summary(&self) -> Summary {
        Summary::from_counts(self.rows, &self.counts)
    }

    /// Count `other`'s rows too (rows tallied apart, on another thread).
    pub fn merge(&mut self, other: &Tally) {
        self.rows += other.rows;
        self.counts.merge(&other.counts);
    }
}

impl Summary {
    /// The summary of a set of rows, counted.
    pub fn of_rows(rows: &[ViewRow]) -> Summary {
        let mut tally = Tally::default();
        for row in rows {
            tally.add(row);
        }
        tally.summary()
    }

    pub(super) fn from_counts(hives: usize, counts: &Counts) -> Summary {
        let (freshness_counts, convergence_counts) = (&counts.freshness, &counts.convergence);
        let freshness: BTreeMap<&'static str, usize> = Freshness::ALL
            .iter()
            .map(|f| (f.as_str(), *freshness_counts.get(f).unwrap_or(&0)))
            .collect();
        let convergence: BTreeMap<&'static str, usize> = Convergence::ALL
            .iter()
            .map(|c| (c.as_str(), *convergence_counts.get(c).unwrap_or(&0)))
            .collect();
        let part = |names: Vec<&'static str>, counts: &BTreeMap<&'static str, usize>| {
            let parts: Vec<String> = names
                .into_iter()
                .filter(|n| counts[n] > 0)
                .map(|n| format!("{} {n}", counts[n]))
                .collect();
            if parts.is_empty() {
                "none".to_string()
            } else {
                parts.join(", ")
            }
        };
        let line = format!(
            "{hives} hive{}: {} | {}",
            if hives == 1 { "" } else { "s" },
            part(Freshness::ALL.map(|f| f.as_str()).to_vec(), &freshness),
            part(Convergence::ALL.map(|c| c.as_str()).to_vec(), &convergence),
        );
        Summary {
            hives,
            freshness,
            convergence,
            attention: counts.attention,
            line,
        }
    }
}

/// Rows per class, adjusted one row at a time.
#[derive(Debug, Default)]
pub(super) struct Counts {
    freshness: HashMap<Freshness, usize>,
    convergence: HashMap<Convergence, usize>,
    attention: usize,
}

impl Counts {
    pub(super) fn add(&mut self, c: &Class) {
        *self.freshness.entry(c.freshness).or_default() += 1;
        *self.convergence.entry(c.convergence).or_default() += 1;
        self.attention += usize::from(c.attention.is_some());
    }

    fn merge(&mut self, other: &Counts) {
        for (f, n) in &other.freshness {
            *self.freshness.entry(*f).or_default() += n;
        }
        for (c, n) in &other.convergence {
            *self.convergence.entry(*c).or_default() += n;
        }
        self.attention += other.attention;
    }

    pub(super) fn remove(&mut self, c: &Class) {
        decrement(&mut self.freshness, c.freshness);
        decrement(&mut self.convergence, c.convergence);
        self.attention = self
            .attention
            .saturating_sub(usize::from(c.attention.is_some()));
    }
}

fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: K) {
    if let Some(n) = counts.get_mut(&key) {
        *n = n.saturating_sub(1);
    }
}
