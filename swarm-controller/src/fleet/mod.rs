//! The controller's in-memory picture of the fleet, updated one KV entry at
//! a time.
//!
//! It owns, per hive, the last status entry, the last wanted entry and its
//! maintenance hold (each decoded once, when it arrives), the class of the row last computed
//! (freshness and convergence, for the fleet summary) and the moment a fresh
//! row turns stale. Everything in it came from NATS; it is a cache that a
//! restart rebuilds from the buckets, so the controller stays stateless.
//!
//! Invariants:
//! - Applying one KV entry decodes that one value and recomputes that one
//!   hive's row: the cost of an update does not grow with the fleet.
//! - The summary counts always equal the classes of the rows last handed
//!   out; they are adjusted per row, never recounted.
//! - Freshness and attention also change without any KV update, when time
//!   passes: [`Fleet::expire`] recomputes exactly the rows whose deadline
//!   (`stale_at` or a maintenance hold's end, or the moment a progressing
//!   declaration turns slow) came.
//! - Every change gets the next sequence number, under the same lock, so a
//!   reader that looked at the fleet at `seq` can skip older changes.
//! - Every rostered hive has a row; an unrostered key has a row as long as it
//!   has a status, wanted or maintenance entry (it is shown, never dropped).
//! - One hive's page ([`Fleet::peek_row`], [`Fleet::status_age`]) is a
//!   lookup by name that evaluates that one row: it costs the same at
//!   10,000 hives as at 10 (counted by [`Fleet::rows_evaluated`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv::Operation;
use serde::Serialize;
use time::OffsetDateTime;

use crate::evaluate::{evaluate, Declared, Inputs, Link, StatusEntry, WantedEntry};
use crate::maintenance::HoldEntry;
use crate::roster::{Labels, Roster, RosterEntry};
use crate::view::{self, Class, Progress, Query, ViewRow, DEFAULT_PROGRESSING_ATTENTION};

pub mod status_age;
mod summary;

use summary::Counts;
pub use summary::{Summary, Tally};

use status_age::AgeRing;
pub use status_age::AgeSample;

/// Which bucket an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Status,
    Wanted,
    Maintenance,
}

/// One KV entry, as the fleet takes it.
#[derive(Debug, Clone, Copy)]
pub struct Update<'a> {
    pub source: Source,
    pub key: &'a str,
    pub revision: u64,
    /// The server's timestamp of the entry.
    pub created: OffsetDateTime,
    pub operation: Operation,
    pub value: &'a [u8],
}

impl<'a> Update<'a> {
    pub fn from_entry(source: Source, entry: &'a async_nats::jetstream::kv::Entry) -> Self {
        Update {
            source,
            key: &entry.key,
            revision: entry.revision,
            created: entry.created,
            operation: entry.operation,
            value: &entry.value,
        }
    }
}

/// One KV entry decoded, not yet stored: [`Decoded::of`] is the costly
/// part of [`Fleet::store`], and needs no fleet.
#[derive(Debug)]
pub struct Decoded {
    key: String,
    created: OffsetDateTime,
    /// The value's length when it is a put (`None`: a delete or purge).
    len: Option<usize>,
    value: Value,
}

/// The decoded value of a [`Decoded`] entry, `None` when it was removed.
#[derive(Debug)]
enum Value {
    Status(Option<StatusEntry>),
    Wanted(Option<WantedEntry>),
    Hold(Option<HoldEntry>),
}

impl Decoded {
    pub fn of(u: Update<'_>) -> Self {
        let put = u.operation == Operation::Put;
        let value = match u.source {
            Source::Status => Value::Status(
                put.then(|| StatusEntry::decode(u.key, u.revision, u.created, u.value)),
            ),
            Source::Wanted => {
                Value::Wanted(put.then(|| WantedEntry::decode(u.revision, u.created, u.value)))
            }
            Source::Maintenance => {
                Value::Hold(put.then(|| HoldEntry::decode(u.revision, u.created, u.value)))
            }
        };
        Decoded {
            key: u.key.to_string(),
            created: u.created,
            len: put.then_some(u.value.len()),
            value,
        }
    }
}

/// What one update did to one hive's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The fleet's sequence number after this change.
    pub seq: u64,
    pub name: String,
    /// The hive's roster labels (empty when unrostered), for filters.
    pub labels: Labels,
    /// The class of the row handed out before (`None`: it had no row).
    pub before: Option<Class>,
    /// The row now; `None`: this unrostered hive has nothing left to show.
    pub row: Option<Box<ViewRow>>,
}

impl Change {
    pub fn after(&self) -> Option<Class> {
        self.row.as_ref().map(|r| r.class())
    }
}

/// The rows of one page of a query, and how many rows matched in all.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub names: Vec<String>,
    pub matched: usize,
}

/// Values decoded so far: the cost measure of updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    pub values_decoded: u64,
    pub bytes_decoded: u64,
}

#[derive(Debug, Default)]
struct Slot {
    status: Option<StatusEntry>,
    wanted: Option<WantedEntry>,
    /// Its maintenance hold, active or not (the evaluation decides); boxed,
    /// as few hives have one and every slot would carry its 88 bytes.
    hold: Option<Box<HoldEntry>>,
    /// Class of the row last handed out, counted in `Fleet::counts`.
    class: Option<Class>,
    /// Key into `Fleet::deadlines`: when the row changes with time alone.
    due_at: Option<OffsetDateTime>,
    /// Its status entries' ages over the last hour, from the first entry
    /// on (boxed: most of a slot's size, and none before a report).
    ages: Option<Box<AgeRing>>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Fleet {
    /// Searched by the plain name a KV key arrives as (a hive name
    /// borrows as its string).
    roster: Roster,
    stale_after: Duration,
    /// A declaration still progressing after this needs attention.
    progress_limit: Duration,
    slots: BTreeMap<String, Slot>,
    counts: Counts,
    /// Rows ordered by when they change with time alone (turn stale, or
    /// turn slow while progressing).
    deadlines: BTreeSet<(OffsetDateTime, String)>,
    /// Changes handed out so far.
    seq: u64,
    stats: ReadStats,
    /// What the server's connection events say of each hive they cover;
    /// a hive without an entry has its freshness from the KV timestamp.
    links: HashMap<String, Link>,
    /// Rows evaluated so far (a counter, atomic so that readers under the
    /// read lock may count too): what one hive's page costs is checked by it.
    evaluated: AtomicU64,
    /// Whether each hive's status ages are charted (off for a fleet read
    /// once: 736 bytes a hive that nobody would look at).
    chart_ages: bool,
}

impl Fleet {
    /// A fleet of the rostered hives, none of which has reported yet.
    pub fn new(roster: Roster, stale_after: Duration, now: OffsetDateTime) -> Self {
        let mut fleet = Fleet::unevaluated(roster, stale_after, DEFAULT_PROGRESSING_ATTENTION);
        fleet.refresh_all(now);
        fleet
    }

    /// The fleet a controller process watches: `config`'s roster,
    /// stale_after and attention_progressing_secs.
    pub fn for_config(config: &crate::config::Config, now: OffsetDateTime) -> Self {
        let mut fleet = Fleet::unevaluated(
            config.hives.clone(),
            config.stale_after,
            config.attention_progressing,
        );
        fleet.refresh_all(now);
        fleet
    }

    /// The fleet of a reader that looks once and stops (`status`): no row
    /// is computed until it asks for them ([`Fleet::rows_dealt`], after
    /// [`Fleet::store`] without [`Fleet::refresh_all`]), so the summary
    /// counts stay empty; and it charts no status ages (736 bytes a hive,
    /// for a chart nobody would see). It takes the config's roster rather
    /// than copying it: such a reader has no other use for it.
    pub fn for_one_look(config: crate::config::Config) -> Self {
        let mut fleet = Fleet::unevaluated(
            config.hives,
            config.stale_after,
            config.attention_progressing,
        );
        fleet.chart_ages = false;
        fleet
    }

    /// A slot for each rostered hive, no row computed.
    fn unevaluated(roster: Roster, stale_after: Duration, progress_limit: Duration) -> Self {
        let slots = roster
            .keys()
            .map(|h| (h.to_string(), Slot::default()))
            .collect();
        Fleet {
            roster,
            stale_after,
            progress_limit,
            slots,
            counts: Counts::default(),
            deadlines: BTreeSet::new(),
            seq: 0,
            stats: ReadStats::default(),
            links: HashMap::new(),
            evaluated: AtomicU64::new(0),
            chart_ages: true,
        }
    }

    pub fn roster(&self) -> &Roster {
        &self.roster
    }

    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// Set how long a declaration may progress before its hive needs
    /// attention (default [`DEFAULT_PROGRESSING_ATTENTION`]); recomputes
    /// every row.
    pub fn set_progress_limit(&mut self, limit: Duration, now: OffsetDateTime) {
        self.progress_limit = limit;
        self.refresh_all(now);
    }

    /// Changes handed out so far.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Apply one KV entry and return the hive's new row (or its removal).
    pub fn apply(&mut self, update: Update<'_>, now: OffsetDateTime) -> Change {
        self.store(update);
        self.refresh(update.key, now)
    }

    /// Store one KV entry without recomputing its row: for the initial read
    /// of a whole bucket, which ends with [`Fleet::refresh_all`].
    pub fn store(&mut self, update: Update<'_>) {
        self.store_decoded(Decoded::of(update));
    }

    /// [`Fleet::store`] of an entry decoded already (decoding needs no
    /// fleet, so a reader may decode on other threads).
    pub fn store_decoded(&mut self, d: Decoded) {
        let slot = self.slots.entry(d.key).or_default();
        if let Some(len) = d.len {
            self.stats.values_decoded += 1;
            self.stats.bytes_decoded += len as u64;
        }
        match d.value {
            Value::Status(status) => {
                if status.is_some() && self.chart_ages {
                    slot.ages.get_or_insert_default().record(d.created);
                }
                slot.status = status;
            }
            Value::Wanted(wanted) => slot.wanted = wanted,
            Value::Hold(hold) => slot.hold = hold.map(Box::new),
        }
    }

    /// Recompute every row (after [`Fleet::store`]), keeping the counts and
    /// deadlines in step.
    pub fn refresh_all(&mut self, now: OffsetDateTime) {
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            self.refresh(&name, now);
        }
    }

    /// Recompute one hive's row, keeping the counts and deadlines in step.
    fn refresh(&mut self, name: &str, now: OffsetDateTime) -> Change {
        self.seq += 1;
        let labels = self
            .roster
            .get(name)
            .map(|r| r.labels.clone())
            .unwrap_or_default();
        let mut change = Change {
            seq: self.seq,
            name: name.to_string(),
            labels,
            before: None,
            row: None,
        };
        let Some(slot) = self.slots.get_mut(name) else {
            return change;
        };
        if let Some(at) = slot.due_at.take() {
            self.deadlines.remove(&(at, name.to_string()));
        }
        change.before = slot.class.take();
        if let Some(c) = &change.before {
            self.counts.remove(c);
        }
        let rostered = self.roster.contains_key(name);
        if !rostered && slot.status.is_none() && slot.wanted.is_none() && slot.hold.is_none() {
            self.slots.remove(name);
            return change;
        }
        let (row, due_at) = self.view_row(name, now);
        if let Some(slot) = self.slots.get_mut(name) {
            let class = row.class();
            self.counts.add(&class);
            slot.class = Some(class);
            if let Some(at) = due_at {
                slot.due_at = Some(at);
                self.deadlines.insert((at, name.to_string()));
            }
        }
        change.row = Some(Box::new(row));
        change
    }

    /// One hive's row at `now` and when it next changes with time alone,
    /// without touching the incremental state.
    fn view_row(&self, name: &str, now: OffsetDateTime) -> (ViewRow, Option<OffsetDateTime>) {
        self.view_row_of(name, self.slots.get(name), self.roster.get(name), now)
    }

    /// [`Fleet::view_row`] with the hive's slot and roster entry at hand.
    fn view_row_of(
        &self,
        name: &str,
        slot: Option<&Slot>,
        roster: Option<&RosterEntry>,
        now: OffsetDateTime,
    ) -> (ViewRow, Option<OffsetDateTime>) {
        self.evaluated.fetch_add(1, Ordering::Relaxed);
        let wanted = slot.and_then(|s| s.wanted.as_ref());
        let row = evaluate(Inputs {
            name,
            roster,
            status: slot.and_then(|s| s.status.as_ref()),
            wanted,
            hold: slot.and_then(|s| s.hold.as_deref()),
            now,
            stale_after: self.stale_after,
            link: self.links.get(name),
        });
        let progress = Progress {
            declared_at: wanted.map(|w| w.created),
            limit: self.progress_limit,
        };
        let due_at = match (row.stale_at, view::slow_at(&row, progress, now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let attention = view::attention(&row, progress, now);
        (ViewRow { row, attention }, due_at)
    }

    /// Set what the connection events say of hive `name` (`None`: nothing,
    /// so the KV-timestamp rule); its new row when that changed anything.
    pub fn set_link(
        &mut self,
        name: &str,
        link: Option<Link>,
        now: OffsetDateTime,
    ) -> Option<Change> {
        let changed = match link {
            Some(l) => self.links.insert(name.to_string(), l.clone()) != Some(l),
            None => self.links.remove(name).is_some(),
        };
        (changed && self.slots.contains_key(name)).then(|| self.refresh(name, now))
    }

    /// Record what the connection events say of each hive without
    /// recomputing a row: for a reader that evaluates every row next
    /// ([`Fleet::rows_dealt`]), after [`Fleet::store`] without
    /// [`Fleet::refresh_all`].
    pub fn note_links(&mut self, links: Vec<(String, Link)>) {
        self.links.extend(links);
    }

    /// [`Fleet::set_link`] for each hive; the rows that changed.
    pub fn set_links(&mut self, links: Vec<(String, Link)>, now: OffsetDateTime) -> Vec<Change> {
        links
            .into_iter()
            .filter_map(|(name, link)| self.set_link(&name, Some(link), now))
            .collect()
    }

    /// The hives whose freshness the connection events can decide: the
    /// rostered ones that connect to the buckets' servers (not through a
    /// leaf-node site, whose server does not pass its events on).
    pub fn linkable(&self) -> Vec<String> {
        self.roster
            .iter()
            .filter(|(_, e)| e.jetstream_domain.is_none())
            .map(|(h, _)| h.to_string())
            .collect()
    }

    /// Recompute the rows whose deadline came by `now`.
    pub fn expire(&mut self, now: OffsetDateTime) -> Vec<Change> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.deadlines.first() {
            if *at >= now {
                break;
            }
            if let Some((_, name)) = self.deadlines.pop_first() {
                due.push(name);
            }
        }
        due.iter().map(|name| self.refresh(name, now)).collect()
    }

    /// When the next row changes with time alone (turns stale or slow).
    pub fn next_stale_at(&self) -> Option<OffsetDateTime> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Every row evaluated at `now`, sorted by name, without touching the
    /// incremental state (the summary counts and deadlines stay those of the
    /// rows last pushed).
    pub fn peek_rows(&self, now: OffsetDateTime) -> Vec<ViewRow> {
        self.slots
            .keys()
            .map(|name| self.view_row(name, now).0)
            .collect()
    }

    /// How many rows the fleet has (rostered hives and unrostered keys).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The rows of [`Fleet::peek_rows`] cut into runs of `run` rows dealt
    /// to `of` takers in turn, each evaluated as it is taken: taker
    /// `taker`'s rows (runs `taker`, `taker + of`, …), so that several
    /// threads can evaluate and write out one fleet's rows in name order
    /// ([`crate::render::write_fleet`]), each holding one at a time.
    pub fn rows_dealt(
        &self,
        now: OffsetDateTime,
        run: usize,
        taker: usize,
        of: usize,
    ) -> impl Iterator<Item = ViewRow> + '_ {
        // Slots and roster are both in name order: each roster entry is
        // found by walking along, not looked up (docs/benchmarks-controller.md).
        let mut roster = self.roster.iter().peekable();
        self.slots
            .iter()
            .enumerate()
            .filter(move |(i, _)| (i / run) % of == taker)
            .map(move |(_, (name, slot))| {
                while roster
                    .next_if(|(h, _)| h.as_str() < name.as_str())
                    .is_some()
                {}
                let entry = roster.next_if(|(h, _)| h.as_str() == *name).map(|(_, e)| e);
                self.view_row_of(name, Some(slot), entry, now).0
            })
    }

    /// One hive's row evaluated at `now`, if it has one.
    pub fn peek_row(&self, name: &str, now: OffsetDateTime) -> Option<ViewRow> {
        self.slots
            .contains_key(name)
            .then(|| self.view_row(name, now).0)
    }

    /// One hive's status ages over the last hour, a sample a minute
    /// (`None`: no such hive; empty: it never reported while watched).
    pub fn status_age(&self, name: &str, now: OffsetDateTime) -> Option<Vec<AgeSample>> {
        let slot = self.slots.get(name)?;
        Some(slot.ages.as_ref().map(|a| a.chart(now)).unwrap_or_default())
    }

    /// Whether hive `name` has a row (a lookup, nothing evaluated).
    pub fn holds(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// Rows evaluated since the fleet was made.
    pub fn rows_evaluated(&self) -> u64 {
        self.evaluated.load(Ordering::Relaxed)
    }

    /// The names on the page `query` asks for, by the classes of the rows
    /// last handed out (so it evaluates no row), and how many matched.
    pub fn select(&self, query: &Query) -> Selection {
        let no_labels = Labels::default();
        let mut matched: Vec<(u8, &str)> = self
            .slots
            .iter()
            .filter_map(|(name, slot)| {
                let class = slot.class.as_ref()?;
                let labels = self
                    .roster
                    .get(name.as_str())
                    .map_or(&no_labels, |r| &r.labels);
                query
                    .filter
                    .matches(name, labels, class)
                    .then(|| query.sort.key(name, class))
            })
            .collect();
        // Slots iterate by name, which is already the name order.
        if query.sort != view::Order::Name {
            matched.sort_unstable();
        }
        let total = matched.len();
        let names = matched
            .into_iter()
            .skip(query.offset)
            .take(query.limit.unwrap_or(usize::MAX))
            .map(|(_, n)| n.to_string())
            .collect();
        Selection {
            names,
            matched: total,
        }
    }

    /// The one-line summary of the rows last handed out.
    pub fn summary(&self) -> Summary {
        Summary::from_counts(self.slots.len(), &self.counts)
    }

    /// Decodes done so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// Every hive's current, decodable declaration.
    pub fn declarations(&self) -> impl Iterator<Item = (&str, &Declared)> {
        self.slots.iter().filter_map(|(name, slot)| {
            let declared = slot.wanted.as_ref()?.declared.as_ref().ok()?;
            Some((name.as_str(), declared))
        })
    }

    /// The wanted entry of one hive, if any.
    pub fn wanted(&self, name: &str) -> Option<&WantedEntry> {
        self.slots.get(name)?.wanted.as_ref()
    }

    /// The status entry of one hive, if any.
    pub fn status(&self, name: &str) -> Option<&StatusEntry> {
        self.slots.get(name)?.status.as_ref()
    }
}

#[cfg(test)]
mod tests;
