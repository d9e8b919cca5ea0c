//! The volumes and networks the hive made (table `objects`), and which
//! agents used each volume (table `volume_users`).
//!
//! **Invariant:** the create node records an object, and for a volume the
//! agent using it, before it asks Docker to make it, so nothing the hive
//! made is missing here; and only what is recorded here is ever removed.
//! A volume loses an agent only when that agent is purged, and goes once
//! it has none left and no installed agent names it; a network goes once
//! no installed agent names it (after the orphan grace, in the converger).

use std::collections::BTreeSet;

use rusqlite::params;
use swarm_queue_client::{AgentName, ObjectName};

use super::{sql_at, Store, StoreError};
use crate::agents::jobs::model::Millis;
use crate::agents::runtime::objects::ObjectKind;

/// One volume or network the hive made.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RecordedObject {
    pub kind: ObjectKind,
    /// As the agents declared it.
    pub name: ObjectName,
    pub created_at_ms: Millis,
}

impl Store {
    /// Record that `agent` uses the `kind` declared as `name` (for a
    /// volume, the agent is kept as one of its users until it is purged).
    pub fn record_object_use(
        &mut self,
        kind: ObjectKind,
        name: &ObjectName,
        agent: &AgentName,
        now: Millis,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("record object")?;
        tx.execute(
            "INSERT OR IGNORE INTO objects (kind, name, created_at_ms) VALUES (?1, ?2, ?3)",
            params![kind.as_str(), name.as_str(), now],
        )
        .map_err(sql_at(&path, "record object"))?;
        if kind == ObjectKind::Volume {
            tx.execute(
                "INSERT OR IGNORE INTO volume_users (name, agent) VALUES (?1, ?2)",
                params![name.as_str(), agent.as_str()],
            )
            .map_err(sql_at(&path, "record volume user"))?;
        }
        tx.commit().map_err(sql_at(&path, "commit object"))
    }

    /// Every recorded `kind`.
    pub fn objects(&self, kind: ObjectKind) -> Result<Vec<RecordedObject>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, created_at_ms FROM objects WHERE kind = ?1 ORDER BY name")
            .map_err(self.sql("read objects"))?;
        let rows = stmt
            .query_map(params![kind.as_str()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(self.sql("read objects"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read objects"))?;
        rows.into_iter()
            .map(|(name, created_at_ms)| {
                Ok(RecordedObject {
                    kind,
                    name: ObjectName::new(name).map_err(self.decode_err("object name"))?,
                    created_at_ms,
                })
            })
            .collect()
    }

    /// The agents recorded as users of the volume `name`.
    pub fn volume_users(&self, name: &ObjectName) -> Result<BTreeSet<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT agent FROM volume_users WHERE name = ?1")
            .map_err(self.sql("read volume users"))?;
        let rows = stmt
            .query_map(params![name.as_str()], |r| r.get::<_, String>(0))
            .map_err(self.sql("read volume users"))?
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(self.sql("read volume users"))?;
        Ok(rows)
    }

    /// A purged agent uses no volume any more. The volumes that no agent
    /// uses now and that no installed agent names: those a purge removes
    /// (every such one, not only this agent's, so a purge cut off before
    /// its removals finishes them when it runs again).
    pub fn release_volumes(&mut self, agent: &AgentName) -> Result<Vec<ObjectName>, StoreError> {
        self.conn
            .execute(
                "DELETE FROM volume_users WHERE agent = ?1",
                params![agent.as_str()],
            )
            .map_err(self.sql("release volumes"))?;
        let named: BTreeSet<String> = self
            .installed_all()?
            .values()
            .flat_map(|i| i.spec.volumes.iter().filter_map(|v| v.name.clone()))
            .map(|n| n.to_string())
            .collect();
        let mut unused = Vec::new();
        for volume in self.objects(ObjectKind::Volume)? {
            if !named.contains(volume.name.as_str()) && self.volume_users(&volume.name)?.is_empty()
            {
                unused.push(volume.name);
            }
        }
        Ok(unused)
    }

    /// The `kind` `name` is gone from Docker: drop its record.
    pub fn forget_object(&mut self, kind: ObjectKind, name: &ObjectName) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("forget object")?;
        tx.execute(
            "DELETE FROM objects WHERE kind = ?1 AND name = ?2",
            params![kind.as_str(), name.as_str()],
        )
        .map_err(sql_at(&path, "forget object"))?;
        if kind == ObjectKind::Volume {
            tx.execute(
                "DELETE FROM volume_users WHERE name = ?1",
                params![name.as_str()],
            )
            .map_err(sql_at(&path, "forget volume users"))?;
        }
        tx.commit().map_err(sql_at(&path, "commit forget object"))
    }

    /// The recorded networks no installed agent names, read with the
    /// installed record in one lock.
    pub fn unused_networks(&self) -> Result<Vec<ObjectName>, StoreError> {
        let named: BTreeSet<String> = self
            .installed_all()?
            .values()
            .filter_map(|i| i.spec.network.as_ref().map(|n| n.to_string()))
            .collect();
        Ok(self
            .objects(ObjectKind::Network)?
            .into_iter()
            .filter(|n| !named.contains(n.name.as_str()))
            .map(|n| n.name)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::jobs::InstalledAgent;
    use swarm_queue_client::{AgentSpec, VolumeSpec};

    fn installed(agent: &AgentName, volume: Option<&str>, network: Option<&str>) -> InstalledAgent {
        let spec = AgentSpec {
            image: Some("i".into()),
            volumes: volume
                .map(|v| VolumeSpec {
                    name: Some(ObjectName::new(v).unwrap()),
                    host: None,
                    target: "/data".into(),
                    rw: None,
                })
                .into_iter()
                .collect(),
            network: network.map(|n| ObjectName::new(n).unwrap()),
            ..Default::default()
        };
        InstalledAgent {
            agent: agent.clone(),
            spec_hash: spec.spec_hash(),
            spec,
            image: "i".into(),
            revision: None,
            updated_at_ms: 1,
        }
    }

    #[test]
    fn a_shared_volume_goes_with_its_last_purged_user_and_a_network_with_its_last_agent() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("hive.db")).unwrap();
        let (a, b) = (AgentName::new("a").unwrap(), AgentName::new("b").unwrap());
        let (data, net) = (
            ObjectName::new("data").unwrap(),
            ObjectName::new("net").unwrap(),
        );
        for agent in [&a, &b] {
            store
                .record_installed(&installed(agent, Some("data"), Some("net")))
                .unwrap();
            store
                .record_object_use(ObjectKind::Volume, &data, agent, 5)
                .unwrap();
            store
                .record_object_use(ObjectKind::Network, &net, agent, 5)
                .unwrap();
        }
        assert_eq!(store.objects(ObjectKind::Volume).unwrap().len(), 1);
        assert!(store.unused_networks().unwrap().is_empty());
        // a retired: the network is still b's, the volume still a's and b's.
        store.forget_agent(&a).unwrap();
        assert!(store.unused_networks().unwrap().is_empty());
        assert!(store.release_volumes(&a).unwrap().is_empty(), "b uses it");
        store.forget_agent(&b).unwrap();
        assert_eq!(store.unused_networks().unwrap(), vec![net.clone()]);
        assert_eq!(store.release_volumes(&b).unwrap(), vec![data.clone()]);
        // Released again (a purge run again) it is still due.
        assert_eq!(store.release_volumes(&b).unwrap(), vec![data.clone()]);
        store.forget_object(ObjectKind::Volume, &data).unwrap();
        store.forget_object(ObjectKind::Network, &net).unwrap();
        assert!(store.objects(ObjectKind::Volume).unwrap().is_empty());
        assert!(store.unused_networks().unwrap().is_empty());
    }

    #[test]
    fn a_volume_an_installed_agent_names_is_kept_whoever_is_purged() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("hive.db")).unwrap();
        let (a, b) = (AgentName::new("a").unwrap(), AgentName::new("b").unwrap());
        let data = ObjectName::new("data").unwrap();
        store
            .record_object_use(ObjectKind::Volume, &data, &a, 5)
            .unwrap();
        // b names it but its create has not run yet.
        store
            .record_installed(&installed(&b, Some("data"), None))
            .unwrap();
        assert!(store.release_volumes(&a).unwrap().is_empty());
    }
}
