//! How each agent's container last ended (table `exits`): the evidence of
//! a crash loop or an OOM kill that `hive agents` and the published status
//! show, and the streak the crash-loop backoff ([`crate::agents::crashloop`])
//! counts from.
//!
//! **Invariant:** recording is idempotent. The same exit (same finish time)
//! seen twice, from an event and from the full look after the event stream
//! reconnects, counts once; a start older than the one recorded changes
//! nothing. So the look may replay anything it likes.

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension};
use swarm_queue_client::AgentName;

use super::{Store, StoreError};
use crate::agents::jobs::model::Millis;

/// What the store keeps of one agent's runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitRecord {
    /// The spec label of the container the counts are about.
    pub spec_hash: Option<String>,
    pub last_code: Option<i64>,
    /// Docker killed the last run for memory.
    pub oom_killed: bool,
    pub started_at_ms: Option<Millis>,
    pub finished_at_ms: Option<Millis>,
    /// Exits since the spec last changed.
    pub exits: u32,
    pub first_exit_at_ms: Option<Millis>,
    /// Exits in a row whose runs were shorter than the backoff's reset
    /// time; 0 after an operator's deploy or start.
    pub streak: u32,
}

/// One exit as Docker reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitSeen {
    pub agent: AgentName,
    pub spec: Option<String>,
    pub code: Option<i64>,
    pub oom_killed: bool,
    pub started_ms: Option<Millis>,
    pub finished_ms: Millis,
}

impl Store {
    /// Record that `agent`'s container (spec label `spec`) started at
    /// `at`. A new spec starts the counts again. Whether anything changed.
    pub fn record_start(
        &mut self,
        agent: &AgentName,
        spec: Option<&str>,
        at: Millis,
    ) -> Result<bool, StoreError> {
        let mut rec = self.exit_record(agent)?.unwrap_or_default();
        if rec.started_at_ms.is_some_and(|s| s >= at) {
            return Ok(false);
        }
        if rec.spec_hash.as_deref() != spec {
            rec = ExitRecord::default();
            rec.spec_hash = spec.map(str::to_string);
        }
        rec.started_at_ms = Some(at);
        self.write_exit_record(agent, &rec)?;
        Ok(true)
    }

    /// Record an exit; `reset_after` is the run length past which the
    /// streak starts again. Whether it was new.
    pub fn record_exit(
        &mut self,
        seen: &ExitSeen,
        reset_after: Millis,
    ) -> Result<bool, StoreError> {
        let mut rec = self.exit_record(&seen.agent)?.unwrap_or_default();
        if rec.finished_at_ms.is_some_and(|f| f >= seen.finished_ms) {
            // Known; an `oom` event may still have marked it.
            if seen.oom_killed && !rec.oom_killed {
                rec.oom_killed = true;
                self.write_exit_record(&seen.agent, &rec)?;
                return Ok(true);
            }
            return Ok(false);
        }
        if rec.spec_hash != seen.spec {
            rec = ExitRecord {
                spec_hash: seen.spec.clone(),
                ..Default::default()
            };
        }
        let started = seen.started_ms.or(rec.started_at_ms);
        let long_run = started.is_some_and(|s| seen.finished_ms - s >= reset_after);
        rec.streak = if long_run { 1 } else { rec.streak + 1 };
        rec.exits += 1;
        rec.first_exit_at_ms.get_or_insert(seen.finished_ms);
        rec.last_code = seen.code;
        rec.oom_killed = seen.oom_killed;
        rec.started_at_ms = started;
        rec.finished_at_ms = Some(seen.finished_ms);
        self.write_exit_record(&seen.agent, &rec)?;
        Ok(true)
    }

    /// Docker's `oom` event: the run that is ending was killed for memory.
    pub fn record_oom(&mut self, agent: &AgentName) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO exits (agent, oom_killed) VALUES (?1, 1)
                 ON CONFLICT (agent) DO UPDATE SET oom_killed = 1",
                params![agent.as_str()],
            )
            .map_err(self.sql("record an oom kill"))?;
        Ok(())
    }

    /// An operator's deploy or start, or a new revision, queued at
    /// `asked_at`: the backoff starts again for exits before it.
    pub fn reset_streak(&mut self, agent: &AgentName, asked_at: Millis) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE exits SET streak = 0 WHERE agent = ?1 AND streak > 0
                 AND (finished_at_ms IS NULL OR finished_at_ms <= ?2)",
                params![agent.as_str(), asked_at],
            )
            .map_err(self.sql("reset a crash-loop backoff"))?;
        Ok(())
    }

    pub fn exit_records(&self) -> Result<BTreeMap<AgentName, ExitRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT agent, {COLUMNS} FROM exits"))
            .map_err(self.sql("read exits"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, row(r, 1)?)))
            .map_err(self.sql("read exits"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read exits"))?;
        rows.into_iter()
            .map(|(a, rec)| {
                Ok((
                    AgentName::new(a).map_err(self.decode_err("agent name"))?,
                    rec,
                ))
            })
            .collect()
    }

    fn exit_record(&self, agent: &AgentName) -> Result<Option<ExitRecord>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM exits WHERE agent = ?1"),
                params![agent.as_str()],
                |r| row(r, 0),
            )
            .optional()
            .map_err(self.sql("read exits"))
    }

    fn write_exit_record(&mut self, agent: &AgentName, rec: &ExitRecord) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO exits (agent, spec_hash, last_code, oom_killed,
                    started_at_ms, finished_at_ms, exits, first_exit_at_ms, streak)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    agent.as_str(),
                    rec.spec_hash,
                    rec.last_code,
                    rec.oom_killed,
                    rec.started_at_ms,
                    rec.finished_at_ms,
                    rec.exits,
                    rec.first_exit_at_ms,
                    rec.streak
                ],
            )
            .map_err(self.sql("record an exit"))?;
        Ok(())
    }
}

const COLUMNS: &str = "spec_hash, last_code, oom_killed, started_at_ms, finished_at_ms, exits, \
                       first_exit_at_ms, streak";

fn row(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ExitRecord> {
    Ok(ExitRecord {
        spec_hash: r.get(at)?,
        last_code: r.get(at + 1)?,
        oom_killed: r.get(at + 2)?,
        started_at_ms: r.get(at + 3)?,
        finished_at_ms: r.get(at + 4)?,
        exits: r.get(at + 5)?,
        first_exit_at_ms: r.get(at + 6)?,
        streak: r.get(at + 7)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(finished: Millis, started: Millis) -> ExitSeen {
        ExitSeen {
            agent: AgentName::new("web").unwrap(),
            spec: Some("s1".into()),
            code: Some(3),
            oom_killed: false,
            started_ms: Some(started),
            finished_ms: finished,
        }
    }

    #[test]
    fn exits_count_once_and_streaks_reset() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("hive.db")).unwrap();
        let web = AgentName::new("web").unwrap();
        assert!(s.record_start(&web, Some("s1"), 1_000).unwrap());
        assert!(!s.record_start(&web, Some("s1"), 1_000).unwrap());
        assert!(s.record_exit(&seen(2_000, 1_000), 60_000).unwrap());
        assert!(
            !s.record_exit(&seen(2_000, 1_000), 60_000).unwrap(),
            "replayed"
        );
        assert!(s.record_exit(&seen(4_000, 3_000), 60_000).unwrap());
        let rec = &s.exit_records().unwrap()[&web];
        assert_eq!((rec.exits, rec.streak, rec.last_code), (2, 2, Some(3)));
        assert_eq!(rec.first_exit_at_ms, Some(2_000));
        // A long run starts the streak again, not the count.
        s.record_exit(&seen(100_000, 5_000), 60_000).unwrap();
        let rec = &s.exit_records().unwrap()[&web];
        assert_eq!((rec.exits, rec.streak), (3, 1));
        s.record_oom(&web).unwrap();
        s.reset_streak(&web, 200_000).unwrap();
        let rec = &s.exit_records().unwrap()[&web];
        assert!(rec.oom_killed);
        assert_eq!(rec.streak, 0);
        // A new spec starts the counts again.
        s.record_start(&web, Some("s2"), 300_000).unwrap();
        let rec = &s.exit_records().unwrap()[&web];
        assert_eq!((rec.exits, rec.spec_hash.as_deref()), (0, Some("s2")));
    }
}
