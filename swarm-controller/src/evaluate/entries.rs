//! The stored values a row is computed from, decoded once when they arrive
//! and kept compact: a fleet holds one of each per hive, so their size is
//! most of what 10,000 hives cost the controller.
//!
//! - A status keeps what a row shows of its [`HiveStatus`] as a
//!   [`Reported`], its agents in a sorted slice ([`ByName`]): a `BTreeMap`
//!   node has room for eleven entries, and a hive reports a few.
//! - A declaration keeps only each agent's spec hash and, for the webhook,
//!   the agents built from a repository: the specs themselves are dropped
//!   once hashed. Convergence compares hashes, never specs.
//! - Spec hashes and image digests are kept as their 32 bytes
//!   ([`HashText`]), and of each agent's status only what a row reads
//!   ([`ReportedAgent`]).

use swarm_queue_client::payload::{status_matches_key, DecodeError};
use swarm_queue_client::{
    decode, AgentName, AgentStatus, BuildSpec, Declaration, ExitReport, HiveName, HiveState,
    HiveStatus, JobSummary, Observed, Power, RetryStatus, Unsettled, Warning,
};
use time::OffsetDateTime;

use super::HashText;

/// Why a stored status or declaration is no evidence. Clone and comparable
/// (rows are), so a decode error is kept as its operator-grade text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The value does not decode: [`DecodeError`]'s message.
    #[error("{0}")]
    Undecodable(String),
    /// A status value under one hive's key that says it is another hive.
    #[error("the value stored under key {key:?} says it is hive {claims:?}")]
    ClaimsOtherHive { key: String, claims: String },
}

impl EntryError {
    fn undecodable(e: &DecodeError) -> Self {
        EntryError::Undecodable(e.to_string())
    }
}

/// Values by agent name in a sorted slice: looked up by binary search,
/// iterated in name order, with no spare room.
#[derive(Debug, Clone, PartialEq)]
pub struct ByName<V>(Box<[(AgentName, V)]>);

impl<V> Default for ByName<V> {
    fn default() -> Self {
        ByName(Box::new([]))
    }
}

impl<V> ByName<V> {
    pub fn get(&self, name: &AgentName) -> Option<&V> {
        self.0
            .binary_search_by(|(n, _)| n.cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, name: &AgentName) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&AgentName, &V)> {
        self.0.iter().map(|(n, v)| (n, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &AgentName> {
        self.0.iter().map(|(n, _)| n)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every name of `self` or `other`, in name order, with its value in
    /// each: one walk of both sorted slices, no lookup. A row joins a
    /// hive's declared agents with its reported ones this way (see
    /// [`crate::fleet::Fleet::rows_dealt`] for what the lookups cost).
    pub fn outer_join<'a, W>(
        &'a self,
        other: &'a ByName<W>,
    ) -> impl Iterator<Item = (&'a AgentName, Option<&'a V>, Option<&'a W>)> + 'a {
        let (mut left, mut right) = (self.0.iter().peekable(), other.0.iter().peekable());
        std::iter::from_fn(move || {
            let order = match (left.peek(), right.peek()) {
                (Some((l, _)), Some((r, _))) => l.cmp(r),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => return None,
            };
            Some(match order {
                std::cmp::Ordering::Less => left.next().map(|(n, v)| (n, Some(v), None))?,
                std::cmp::Ordering::Greater => right.next().map(|(n, w)| (n, None, Some(w)))?,
                std::cmp::Ordering::Equal => {
                    let (n, v) = left.next()?;
                    let (_, w) = right.next()?;
                    (n, Some(v), Some(w))
                }
            })
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a, V> IntoIterator for &'a ByName<V> {
    type Item = (&'a AgentName, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (AgentName, V)>,
        fn(&'a (AgentName, V)) -> (&'a AgentName, &'a V),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(n, v)| (n, v))
    }
}

impl<V> FromIterator<(AgentName, V)> for ByName<V> {
    /// Sorted by name; of two entries with one name the last is kept, as a
    /// map would.
    fn from_iter<I: IntoIterator<Item = (AgentName, V)>>(iter: I) -> Self {
        let mut v: Vec<(AgentName, V)> = iter.into_iter().collect();
        v.reverse();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, earlier| later.0 == earlier.0);
        ByName(v.into_boxed_slice())
    }
}

/// What a row needs of a hive's [`HiveStatus`] (its name was checked against
/// the key, its xkey is read from the bucket by `credential`).
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    pub ready: bool,
    pub state: HiveState,
    pub warnings: Vec<Warning>,
    pub converged_revision: Option<u64>,
    pub seen_revision: Option<u64>,
    pub agents: ByName<ReportedAgent>,
    pub version: String,
}

/// What a row needs of one agent's [`AgentStatus`]: all of it but the
/// image pull's progress, its hashes as [`HashText`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedAgent {
    pub wanted: Power,
    pub observed: Observed,
    /// Spec hash of the running container, if any.
    pub spec: Option<HashText>,
    /// Spec hash of the declaration the hive worked towards, if it says.
    pub declared_spec: Option<HashText>,
    pub last_job: Option<JobSummary>,
    /// The repo digest of the image the container runs.
    pub image_digest: Option<HashText>,
    /// Docker's health check: `starting`, `healthy` or `unhealthy`.
    pub health: Option<String>,
    pub retry: Option<RetryStatus>,
    pub exits: Option<ExitReport>,
    pub unsettled: Option<Unsettled>,
}

impl From<AgentStatus> for ReportedAgent {
    fn from(a: AgentStatus) -> Self {
        ReportedAgent {
            wanted: a.wanted,
            observed: a.observed,
            spec: a.spec.map(HashText::from),
            declared_spec: a.declared_spec.map(HashText::from),
            last_job: a.last_job,
            image_digest: a.image_digest.map(HashText::from),
            health: a.health,
            retry: a.retry,
            exits: a.exits,
            unsettled: a.unsettled,
        }
    }
}

impl From<HiveStatus> for Reported {
    fn from(r: HiveStatus) -> Self {
        Reported {
            ready: r.ready,
            state: r.state,
            warnings: r.warnings,
            converged_revision: r.converged_revision,
            seen_revision: r.seen_revision,
            agents: r
                .agents
                .into_iter()
                .map(|(name, a)| (name, ReportedAgent::from(a)))
                .collect(),
            version: r.version,
        }
    }
}

/// One value of `hyperhive-status/<hive>`, decoded once when it arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusEntry {
    /// KV revision of this value.
    pub revision: u64,
    /// When the server stored it: the only clock freshness trusts.
    pub created: OffsetDateTime,
    /// What the hive reported, or why it could not be read.
    pub reported: Result<Reported, EntryError>,
    /// Things the reader should know (for example a newer schema).
    pub notes: Vec<String>,
}

impl StatusEntry {
    /// Decode a status value stored under `key`. A value that claims to be
    /// another hive is refused: it is no evidence about this one.
    pub fn decode(key: &str, revision: u64, created: OffsetDateTime, bytes: &[u8]) -> Self {
        let (reported, notes) = match decode::<HiveStatus>(bytes) {
            Ok(d) => {
                let claims_other = HiveName::new(key)
                    .map(|k| !status_matches_key(&d.value, &k))
                    .unwrap_or(true);
                if claims_other {
                    (
                        Err(EntryError::ClaimsOtherHive {
                            key: key.to_string(),
                            claims: d.value.hive.as_str().to_string(),
                        }),
                        d.warnings,
                    )
                } else {
                    (Ok(Reported::from(d.value)), d.warnings)
                }
            }
            Err(e) => (Err(EntryError::undecodable(&e)), Vec::new()),
        };
        StatusEntry {
            revision,
            created,
            reported,
            notes,
        }
    }
}

/// What the controller keeps of a decoded declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// Each declared agent's spec hash.
    pub spec_hashes: ByName<HashText>,
    /// The agents built from a repository, with their build (what the
    /// forge webhook matches a push against).
    pub builds: ByName<BuildSpec>,
}

impl Declared {
    /// Hash every agent's spec, keep the hashes and builds, drop the rest.
    pub fn new(declaration: Declaration) -> Self {
        let mut builds = Vec::new();
        let spec_hashes = declaration
            .agents
            .into_iter()
            .map(|(name, spec)| {
                if let Some(b) = &spec.build {
                    builds.push((name.clone(), b.clone()));
                }
                (name, HashText::Sha256(spec.into_spec_digest()))
            })
            .collect();
        Declared {
            spec_hashes,
            builds: builds.into_iter().collect(),
        }
    }
}

/// One value of `hyperhive-wanted/<hive>`.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedEntry {
    /// KV revision: the declaration's identity.
    pub revision: u64,
    pub created: OffsetDateTime,
    pub declared: Result<Declared, EntryError>,
    pub notes: Vec<String>,
}

impl WantedEntry {
    pub fn decode(revision: u64, created: OffsetDateTime, bytes: &[u8]) -> Self {
        let (declared, notes) = match decode::<Declaration>(bytes) {
            Ok(d) => (Ok(Declared::new(d.value)), d.warnings),
            Err(e) => (Err(EntryError::undecodable(&e)), Vec::new()),
        };
        WantedEntry {
            revision,
            created,
            declared,
            notes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> AgentName {
        AgentName::new(n).unwrap()
    }

    #[test]
    fn by_name_is_sorted_keeps_the_last_of_a_name_and_finds_each() {
        let m: ByName<u32> = [("b", 1), ("a", 2), ("b", 3), ("c", 4)]
            .into_iter()
            .map(|(n, v)| (name(n), v))
            .collect();
        let keys: Vec<&str> = m.keys().map(AgentName::as_str).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert_eq!(m.get(&name("b")), Some(&3));
        assert_eq!(m.get(&name("a")), Some(&2));
        assert!(m.get(&name("d")).is_none());
        assert_eq!(m.len(), 3);
    }

    fn by_name<V>(pairs: Vec<(&str, V)>) -> ByName<V> {
        pairs
            .into_iter()
            .map(|(n, v)| (AgentName::new(n).unwrap(), v))
            .collect()
    }

    fn joined(a: &ByName<u8>, b: &ByName<char>) -> Vec<(String, Option<u8>, Option<char>)> {
        a.outer_join(b)
            .map(|(n, x, y)| (n.to_string(), x.copied(), y.copied()))
            .collect()
    }

    #[test]
    fn an_outer_join_gives_every_name_once_in_order_with_both_values() {
        let a = by_name(vec![("web", 1), ("api", 2), ("zed", 3), ("db", 4)]);
        let b = by_name(vec![
            ("db", 'd'),
            ("cache", 'c'),
            ("web", 'w'),
            ("zzz", 'z'),
        ]);
        let s = |n: &str| n.to_string();
        assert_eq!(
            joined(&a, &b),
            vec![
                (s("api"), Some(2), None),
                (s("cache"), None, Some('c')),
                (s("db"), Some(4), Some('d')),
                (s("web"), Some(1), Some('w')),
                (s("zed"), Some(3), None),
                (s("zzz"), None, Some('z')),
            ]
        );
        // Against the lookups it replaces: every name of either side, with
        // what `get` finds on each.
        for (name, x, y) in a.outer_join(&b) {
            assert_eq!(x, a.get(name));
            assert_eq!(y, b.get(name));
        }
    }

    #[test]
    fn an_outer_join_with_an_empty_side_is_the_other_side() {
        let a = by_name(vec![("b", 1), ("a", 2)]);
        let none_a = ByName::<u8>::default();
        let none_b = ByName::<char>::default();
        assert_eq!(
            joined(&a, &none_b),
            vec![
                ("a".to_string(), Some(2), None),
                ("b".to_string(), Some(1), None)
            ]
        );
        let b = by_name(vec![("x", 'x')]);
        assert_eq!(
            joined(&none_a, &b),
            vec![("x".to_string(), None, Some('x'))]
        );
        assert!(joined(&none_a, &none_b).is_empty());
    }
}
