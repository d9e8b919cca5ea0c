//! The operator's power intent per agent (table `power`).
//!
//! **Invariant:** an operator's start or stop wins over a declaration's
//! default: seeding writes an intent only where none is recorded, and
//! `Store::set_power` (with the other requests, in `jobs.rs`) writes it and
//! queues the reconcile in one transaction.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};
use swarm_queue_client::{AgentName, Power};

use super::{sql_at, Store, StoreError};
use crate::agents::jobs::model::{Millis, ParseError};

impl Store {
    pub fn power(&self, agent: &AgentName) -> Result<Option<Power>, StoreError> {
        let wanted: Option<String> = self
            .conn
            .query_row(
                "SELECT wanted FROM power WHERE agent = ?1",
                params![agent.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql("read power intent"))?;
        wanted
            .map(|w| parse_power(&w).map_err(self.decode_err("power intent")))
            .transpose()
    }

    pub fn all_power(&self) -> Result<BTreeMap<AgentName, Power>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT agent, wanted FROM power")
            .map_err(self.sql("read power intents"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(self.sql("read power intents"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read power intents"))?;
        rows.into_iter()
            .map(|(a, w)| {
                Ok((
                    AgentName::new(a).map_err(self.decode_err("agent name"))?,
                    parse_power(&w).map_err(self.decode_err("power intent"))?,
                ))
            })
            .collect()
    }

    /// Record `power` for `agent` unless an intent is already recorded: an
    /// operator's earlier start or stop wins over a declaration's default.
    pub fn seed_power(
        &mut self,
        agent: &AgentName,
        power: Power,
        now: Millis,
    ) -> Result<Power, StoreError> {
        write_power_tx(&self.conn, &self.path, agent, power, now, PowerWrite::Seed)?;
        Ok(self.power(agent)?.unwrap_or(power))
    }
}

/// How an intent is written.
#[derive(Clone, Copy)]
pub(super) enum PowerWrite {
    /// An operator's start or stop: it replaces whatever is recorded.
    Replace,
    /// A declaration's default: only where nothing is recorded yet.
    Seed,
}

/// Write an intent inside the caller's transaction.
pub(super) fn write_power_tx(
    conn: &Connection,
    path: &Path,
    agent: &AgentName,
    power: Power,
    now: Millis,
    how: PowerWrite,
) -> Result<(), StoreError> {
    let (sql, what) = match how {
        PowerWrite::Replace => (
            "INSERT INTO power (agent, wanted, updated_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (agent) DO UPDATE SET wanted = ?2, updated_at_ms = ?3",
            "write power intent",
        ),
        PowerWrite::Seed => (
            "INSERT OR IGNORE INTO power (agent, wanted, updated_at_ms) VALUES (?1, ?2, ?3)",
            "seed power intent",
        ),
    };
    conn.execute(sql, params![agent.as_str(), power.to_string(), now])
        .map_err(sql_at(path, what))?;
    Ok(())
}

fn parse_power(s: &str) -> Result<Power, ParseError> {
    match s {
        "up" => Ok(Power::Up),
        "down" => Ok(Power::Down),
        other => Err(ParseError::Unknown {
            what: "power",
            value: other.to_string(),
        }),
    }
}
