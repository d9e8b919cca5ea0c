//! The cleanup journal (table `cleanup`): a destructive step written down
//! before it is taken, and replayed until it succeeds.
//!
//! **Invariant:** containers are journalled by id, never by name, so a
//! replay cannot hit a newer container of the same name.

use std::path::PathBuf;

use rusqlite::params;
use serde::{Deserialize, Serialize};
use swarm_queue_client::AgentName;

use super::{Store, StoreError};
use crate::agents::jobs::model::Millis;

/// A destructive step written down before it is taken, and replayed until
/// it succeeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CleanupAction {
    /// Remove one container, by id: a newer container of the same name is
    /// a different id and is never hit by a replay.
    RemoveContainer { id: String, name: String },
    /// Delete a directory tree (an agent's state directory, on purge).
    DeleteDir { path: PathBuf },
}

/// One outstanding entry of the cleanup journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupEntry {
    pub id: i64,
    pub agent: AgentName,
    pub action: CleanupAction,
    pub attempts: u32,
    pub last_error: Option<String>,
}

impl Store {
    /// Write a destructive step down before taking it. Returns the entry id
    /// to clear once it succeeded.
    pub fn journal_cleanup(
        &mut self,
        agent: &AgentName,
        action: &CleanupAction,
        now: Millis,
    ) -> Result<i64, StoreError> {
        let json = serde_json::to_string(action).map_err(self.decode_err("cleanup action"))?;
        self.conn
            .execute(
                "INSERT INTO cleanup (agent, action, created_at_ms) VALUES (?1, ?2, ?3)",
                params![agent.as_str(), json, now],
            )
            .map_err(self.sql("journal cleanup"))?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn cleanup_done(&mut self, id: i64) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM cleanup WHERE id = ?1", params![id])
            .map_err(self.sql("clear cleanup entry"))?;
        Ok(())
    }

    pub fn cleanup_failed(&mut self, id: i64, error: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE cleanup SET attempts = attempts + 1, last_error = ?2 WHERE id = ?1",
                params![id, error],
            )
            .map_err(self.sql("record cleanup failure"))?;
        Ok(())
    }

    /// Outstanding cleanups, oldest first; of one agent, or of all.
    pub fn pending_cleanups(
        &self,
        agent: Option<&AgentName>,
    ) -> Result<Vec<CleanupEntry>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, agent, action, attempts, last_error FROM cleanup
                 WHERE (?1 IS NULL OR agent = ?1) ORDER BY id",
            )
            .map_err(self.sql("read cleanup journal"))?;
        let rows = stmt
            .query_map(params![agent.map(AgentName::as_str)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })
            .map_err(self.sql("read cleanup journal"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read cleanup journal"))?;
        rows.into_iter()
            .map(|(id, agent, action, attempts, last_error)| {
                Ok(CleanupEntry {
                    id,
                    agent: AgentName::new(agent).map_err(self.decode_err("agent name"))?,
                    action: serde_json::from_str(&action)
                        .map_err(self.decode_err("cleanup action"))?,
                    attempts,
                    last_error,
                })
            })
            .collect()
    }
}
