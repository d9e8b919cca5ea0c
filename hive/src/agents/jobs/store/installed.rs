//! What the hive installed for each agent (table `installed`).
//!
//! **Invariant:** this record, never what Docker happens to show, is the
//! only input retirement and orphan reaping use. The create node writes it
//! before it creates the container, so a container the hive made is never
//! missing from it.

use std::collections::BTreeMap;

use rusqlite::params;
use serde::{Deserialize, Serialize};
use swarm_queue_client::{AgentName, AgentSpec};

use super::{sql_at, Store, StoreError};
use crate::agents::jobs::model::Millis;

/// What the hive has installed for one agent: the only input retirement and
/// orphan reaping may use ("what did I put there"), never inferred from
/// what Docker happens to show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstalledAgent {
    pub agent: AgentName,
    pub spec_hash: String,
    pub spec: AgentSpec,
    pub image: String,
    /// The declaration revision the spec came from, when it came from one.
    pub revision: Option<u64>,
    pub updated_at_ms: Millis,
}

impl Store {
    /// Write what is (about to be) installed for an agent. The create node
    /// writes it before it creates the container, so a container the hive
    /// made is never missing from the record.
    pub fn record_installed(&mut self, rec: &InstalledAgent) -> Result<(), StoreError> {
        let spec = serde_json::to_string(&rec.spec).map_err(self.decode_err("agent spec"))?;
        self.conn
            .execute(
                "INSERT INTO installed (agent, spec_hash, spec, image, revision, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (agent) DO UPDATE SET spec_hash = ?2, spec = ?3, image = ?4,
                     revision = ?5, updated_at_ms = ?6",
                params![
                    rec.agent.as_str(),
                    rec.spec_hash,
                    spec,
                    rec.image,
                    rec.revision.map(|r| r as i64),
                    rec.updated_at_ms
                ],
            )
            .map_err(self.sql("write installed agent"))?;
        Ok(())
    }

    pub fn installed(&self, agent: &AgentName) -> Result<Option<InstalledAgent>, StoreError> {
        Ok(self
            .query_installed("WHERE agent = ?1", params![agent.as_str()])?
            .pop())
    }

    /// Every installed agent. The convergence work's only input for
    /// retirement and orphan reaping.
    pub fn installed_all(&self) -> Result<BTreeMap<AgentName, InstalledAgent>, StoreError> {
        Ok(self
            .query_installed("", params![])?
            .into_iter()
            .map(|r| (r.agent.clone(), r))
            .collect())
    }

    /// Drop the installed record and power intent of a retired agent, in
    /// one transaction.
    pub fn forget_agent(&mut self, agent: &AgentName) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("forget agent")?;
        for table in [
            "DELETE FROM installed WHERE agent = ?1",
            "DELETE FROM power WHERE agent = ?1",
            "DELETE FROM exits WHERE agent = ?1",
        ] {
            tx.execute(table, params![agent.as_str()])
                .map_err(sql_at(&path, "forget agent"))?;
        }
        tx.commit().map_err(sql_at(&path, "commit forget agent"))
    }
}

impl Store {
    fn query_installed(
        &self,
        filter: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<InstalledAgent>, StoreError> {
        let sql = format!(
            "SELECT agent, spec_hash, spec, image, revision, updated_at_ms FROM installed {filter}
             ORDER BY agent"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(self.sql("read installed agents"))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            })
            .map_err(self.sql("read installed agents"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read installed agents"))?;
        rows.into_iter()
            .map(|(agent, spec_hash, spec, image, revision, updated)| {
                Ok(InstalledAgent {
                    agent: AgentName::new(agent).map_err(self.decode_err("agent name"))?,
                    spec_hash,
                    spec: serde_json::from_str(&spec).map_err(self.decode_err("agent spec"))?,
                    image,
                    revision: revision.map(|r| r as u64),
                    updated_at_ms: updated,
                })
            })
            .collect()
    }
}
