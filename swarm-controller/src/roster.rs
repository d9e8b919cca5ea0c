//! The roster: the hives this controller knows, by name, with their labels
//! and identities, as the config's `[hives.<name>]` tables give them. At
//! the bottom of the controller: it imports nothing of it, so the config,
//! the groups and the evaluation can all stand on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use swarm_queue_client::HiveName;

/// One rostered hive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RosterEntry {
    /// Free-form labels shown with the hive (site, rack, owner).
    #[serde(default)]
    pub labels: Labels,
    /// The hive's public NATS user nkey (`U…`), for per-hive permissions.
    #[serde(default)]
    pub nkey: Option<String>,
    /// The JetStream domain of the buckets as this hive reaches them (a
    /// hive on a leaf-node site): the same value as the hive's own `[nats]
    /// jetstream_domain`. Only `nats-config` reads it: the hive's grants
    /// then name `$JS.<domain>.API.…`.
    #[serde(default)]
    pub jetstream_domain: Option<String>,
}

/// The hives this controller knows, by name.
pub type Roster = BTreeMap<HiveName, RosterEntry>;

/// A hive's labels, by key: a list sorted by key, each key once.
///
/// A map would do, but a map holds a node of eleven entries however few it
/// has (about 540 bytes for `site` and `rack`), and a roster holds one a
/// hive: at 10,000 hives with two labels each, `status --json` peaked at
/// a median 42.2 MiB with lists against 47.0 with maps (30 alternated
/// runs; docs/benchmarks-controller.md, "Stop 41"). It reads and writes
/// as a map, in TOML and JSON alike.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// Where `key` is, or where it would go.
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        Some(&self.0[self.find(key).ok()?].1)
    }

    /// Set `key` to `value`; the value it had before, if any.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                self.0.insert(at, (key, value));
                None
            }
        }
    }

    /// Each label, by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &String)> {
        self.into_iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Hold no spare room: for labels kept as long as the roster.
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

/// A later value of the same key wins, as in a map.
impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        let mut labels = Labels::default();
        for (key, value) in pairs {
            labels.insert(key, value);
        }
        labels.shrink_to_fit();
        labels
    }
}

impl<const N: usize> From<[(String, String); N]> for Labels {
    fn from(pairs: [(String, String); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Labels {
    type Output = String;

    /// The value of `key`; panics when there is none, as a map does.
    fn index(&self, key: &str) -> &String {
        self.get(key).unwrap_or_else(|| panic!("no label {key:?}"))
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(deserializer)?;
        Ok(map.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_and_write_as_a_map() {
        let pairs = [
            ("site", "attic"),
            ("rack", "r1"),
            ("owner", "ops"),
            ("rack", "r2"),
        ];
        let labels: Labels = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(labels.len(), 3);
        assert_eq!(labels["rack"], "r2");
        assert_eq!(labels.get("nope"), None);
        assert!(labels.iter().eq(map.iter()));
        assert_eq!(format!("{labels:?}"), format!("{map:?}"));
        let json = serde_json::to_string(&labels).unwrap();
        assert_eq!(json, serde_json::to_string(&map).unwrap());
        assert_eq!(serde_json::from_str::<Labels>(&json).unwrap(), labels);
        let mut more = labels.clone();
        assert_eq!(more.insert("rack".into(), "r3".into()), Some("r2".into()));
        assert_eq!(more.insert("aisle".into(), "4".into()), None);
        let keys: Vec<&String> = more.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["aisle", "owner", "rack", "site"]);
    }
}
