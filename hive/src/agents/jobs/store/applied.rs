//! The newest declaration this hive queued jobs for (table `applied`).
//!
//! It is written in the transaction that queues those jobs, so it is as
//! durable as they are, with no commit of its own; a declaration that needs
//! no job is recorded in a transaction of its own (`enqueue_all` with no
//! request), so a copy older than it is not used either. `wanted.json` is
//! saved only after the converger has planned a declaration (the save is
//! not on the path to a queued job), so a crash can leave the saved copy
//! older than the jobs; at start a saved copy older than this
//! record is not used ([`AppliedRevision::is_newer_than`]), and the hive
//! waits for the swarm's declaration instead of acting on an old one.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{sql_at, Store, StoreError};

/// A declaration's identity: its KV revision and the server's time of that
/// revision (Unix nanoseconds), which tells a bucket made again apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedRevision {
    pub revision: u64,
    pub created_ns: Option<i64>,
}

impl AppliedRevision {
    /// Whether this record is of a newer declaration than the one at
    /// `revision` (written by the server at `created_ns`). Two entries with
    /// server times are ordered by those times (revisions start again in a
    /// bucket made again); otherwise by revision.
    pub fn is_newer_than(&self, revision: u64, created_ns: Option<i64>) -> bool {
        match (self.created_ns, created_ns) {
            (Some(mine), Some(theirs)) if mine != theirs => mine > theirs,
            _ => self.revision > revision,
        }
    }
}

impl Store {
    /// The newest declaration jobs were queued for, if any ever were.
    pub fn applied_revision(&self) -> Result<Option<AppliedRevision>, StoreError> {
        self.conn
            .query_row(
                "SELECT revision, created_ns FROM applied WHERE id = 0",
                [],
                |r| {
                    Ok(AppliedRevision {
                        revision: r.get::<_, i64>(0)? as u64,
                        created_ns: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(self.sql("read the applied revision"))
    }
}

/// Record `applied` inside the transaction that queues its jobs.
pub(super) fn record_applied_tx(
    tx: &Transaction<'_>,
    path: &std::path::Path,
    applied: AppliedRevision,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO applied (id, revision, created_ns) VALUES (0, ?1, ?2)
         ON CONFLICT (id) DO UPDATE SET revision = excluded.revision,
                                        created_ns = excluded.created_ns",
        params![applied.revision as i64, applied.created_ns],
    )
    .map_err(sql_at(path, "record the applied revision"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(revision: u64, created_ns: Option<i64>) -> AppliedRevision {
        AppliedRevision {
            revision,
            created_ns,
        }
    }

    #[test]
    fn recorded_with_the_jobs_and_kept_across_a_reopen() {
        use crate::agents::jobs::JobRequest;
        use swarm_queue_client::{AgentName, AgentSpec};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.db");
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.applied_revision().unwrap(), None);
        let deploy = |revision| {
            vec![(
                AgentName::new("a").unwrap(),
                JobRequest::FirstDeploy {
                    spec: AgentSpec {
                        image: Some("local/x:1".into()),
                        ..Default::default()
                    },
                    revision: Some(revision),
                },
            )]
        };
        store
            .enqueue_all(deploy(4), Some(at(4, Some(40))), 10)
            .unwrap();
        // Jobs queued with no declaration (a repair, an operator's deploy)
        // leave the record as it was.
        store.enqueue_all(deploy(4), None, 11).unwrap();
        assert_eq!(store.applied_revision().unwrap(), Some(at(4, Some(40))));
        store
            .enqueue_all(deploy(5), Some(at(5, Some(50))), 12)
            .unwrap();
        // A declaration that needs no job is recorded all the same.
        store
            .enqueue_all(vec![], Some(at(6, Some(60))), 13)
            .unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.applied_revision().unwrap(), Some(at(6, Some(60))));
    }

    #[test]
    fn newer_by_server_time_when_both_have_one_else_by_revision() {
        // The same bucket: a later revision at a later time.
        assert!(at(7, Some(200)).is_newer_than(6, Some(100)));
        assert!(!at(6, Some(100)).is_newer_than(7, Some(200)));
        assert!(!at(7, Some(200)).is_newer_than(7, Some(200)));
        // The bucket made again after the record: revision 1 is newer.
        assert!(!at(40, Some(200)).is_newer_than(1, Some(300)));
        // Without a time on either side, the revision decides.
        assert!(at(7, None).is_newer_than(6, Some(100)));
        assert!(!at(7, Some(100)).is_newer_than(8, None));
    }
}
