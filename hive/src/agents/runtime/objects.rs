//! # The volumes and networks the hive makes
//!
//! An agent may name a Docker volume or a network; the hive makes it as
//! `hyperhive.<hive>.<name>` ([`super::admit::object_name`]) with the same
//! ownership labels as its containers, plus `org.hyperhive.volume` or
//! `org.hyperhive.network` = the declared name. Like a container, one of
//! that name without this hive's label is refused
//! ([`RuntimeError::ForeignObject`]) and never touched: an operator's
//! volume that happens to carry the name is not silently mounted, and
//! another hive's is not removed.
//!
//! Which of them may go is not decided here: the worker records each one
//! it makes ([`crate::agents::jobs::store`], table `objects`), a network is
//! removed once no installed agent names it for the orphan grace, and a volume
//! only when the last agent that used it is purged.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use swarm_queue_client::containers::{LABEL_HIVE, LABEL_MANAGED};
use swarm_queue_client::{HiveName, ObjectName};

use super::RuntimeError;

/// `org.hyperhive.volume=<declared name>` on a volume the hive makes.
pub const LABEL_VOLUME: &str = "org.hyperhive.volume";
/// `org.hyperhive.network=<declared name>` on a network the hive makes.
pub const LABEL_NETWORK: &str = "org.hyperhive.network";

/// Which kind of Docker object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    Volume,
    Network,
}

impl ObjectKind {
    /// The word used in the store, in errors and in notes.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Volume => "volume",
            ObjectKind::Network => "network",
        }
    }

    /// The label carrying the declared name.
    pub fn label(self) -> &'static str {
        match self {
            ObjectKind::Volume => LABEL_VOLUME,
            ObjectKind::Network => LABEL_NETWORK,
        }
    }

    pub fn parse(text: &str) -> Option<ObjectKind> {
        match text {
            "volume" => Some(ObjectKind::Volume),
            "network" => Some(ObjectKind::Network),
            _ => None,
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the runtime knows about one volume or network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub kind: ObjectKind,
    /// Docker's name, `hyperhive.<hive>.<name>` for the hive's own.
    pub docker_name: String,
    pub labels: BTreeMap<String, String>,
}

impl ObjectInfo {
    /// The hive named in the ownership label, if any.
    pub fn owner(&self) -> Option<&str> {
        self.labels.get(LABEL_HIVE).map(String::as_str)
    }

    /// The name the agents declared, from its label.
    pub fn declared(&self) -> Option<&str> {
        self.labels.get(self.kind.label()).map(String::as_str)
    }
}

/// The labels of the hive's `kind` declared as `name`.
pub fn object_labels(
    hive: &HiveName,
    kind: ObjectKind,
    name: &ObjectName,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_HIVE.to_string(), hive.to_string()),
        (kind.label().to_string(), name.to_string()),
    ])
}

/// Refuse a volume or network that does not carry `hive`'s label.
pub fn check_object_owner(hive: &HiveName, info: &ObjectInfo) -> Result<(), RuntimeError> {
    if info.owner() == Some(hive.as_str()) {
        Ok(())
    } else {
        Err(RuntimeError::ForeignObject {
            kind: info.kind,
            name: info.docker_name.clone(),
            hive: hive.clone(),
            owner: info.owner().map(str::to_string),
        })
    }
}

/// The volume and network operations of a container engine, for one hive:
/// every method that changes one refuses it without the hive's label.
pub trait ObjectRuntime: Send + Sync {
    /// Make the hive's `kind` declared as `name` unless it exists, with the
    /// hive's labels; refuse one of that name that is not this hive's.
    /// Returns its Docker name.
    fn ensure_object(
        &self,
        kind: ObjectKind,
        name: &ObjectName,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;

    /// Every `kind` carrying this hive's label.
    fn list_objects(
        &self,
        kind: ObjectKind,
    ) -> impl Future<Output = Result<Vec<ObjectInfo>, RuntimeError>> + Send;

    /// Remove the hive's `kind` named `docker_name` (never forced):
    /// `Ok(false)` while a container uses it; gone already counts as
    /// removed; a foreign one is refused.
    fn remove_object(
        &self,
        kind: ObjectKind,
        docker_name: &str,
    ) -> impl Future<Output = Result<bool, RuntimeError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_owned_by_the_hive_label_only() {
        let hive = HiveName::new("alpha").unwrap();
        let name = ObjectName::new("cache").unwrap();
        let labels = object_labels(&hive, ObjectKind::Volume, &name);
        assert_eq!(labels["org.hyperhive.volume"], "cache");
        let info = |labels| ObjectInfo {
            kind: ObjectKind::Volume,
            docker_name: "hyperhive.alpha.cache".into(),
            labels,
        };
        let ours = info(labels);
        check_object_owner(&hive, &ours).unwrap();
        assert_eq!(ours.declared(), Some("cache"));
        let err = check_object_owner(&hive, &info(BTreeMap::new())).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("volume hyperhive.alpha.cache has no org.hyperhive.hive label"),
            "{msg}"
        );
        assert!(!err.is_transient());
        let theirs = object_labels(&HiveName::new("beta").unwrap(), ObjectKind::Network, &name);
        let err = check_object_owner(&hive, &info(theirs)).unwrap_err();
        assert!(
            err.to_string().contains("belongs to hive \"beta\""),
            "{err}"
        );
        assert_eq!(ObjectKind::parse("network"), Some(ObjectKind::Network));
    }
}
