//! The roster: the hives this controller knows, by name, with their labels
//! and identities, as the config's `[hives.<name>]` tables give them. At
//! the bottom of the controller: it imports nothing of it, so the config,
//! the groups and the evaluation can all stand on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use swarm_queue_client::HiveName;

/// One rostered hive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RosterEntry {
    /// Free-form labels shown with the hive (site, rack, owner).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
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
