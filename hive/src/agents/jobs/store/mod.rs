//! The SQLite file behind the job DAG, power intent, the installed-agents
//! record, the cleanup journal and the owned images.
//!
//! [`Store`] is synchronous and owns one connection. Every method that
//! changes state is one transaction; every method that claims or decides
//! from what it reads uses `BEGIN IMMEDIATE`, which takes the write lock up
//! front (a deferred transaction that upgrades to a write gets `SQLITE_BUSY`
//! without waiting for the busy timeout). [`JobStore`] is the cheap, cloneable
//! async handle the worker and the API share: it runs each call on tokio's
//! blocking pool so an fsync never stalls the async threads.
//!
//! One file per table, each adding its methods to [`Store`]:
//!
//! - this file: opening, checking and migrating the file, and the errors;
//! - [`jobs`]: queueing requests (`jobs`, `nodes`) and reading jobs back;
//! - [`nodes`]: running nodes: claim, outcome, progress, recovery, pruning;
//! - [`power`]: the operator's power intent (`power`);
//! - [`installed`]: what the hive put there (`installed`);
//! - [`cleanup`]: the journal of destructive steps (`cleanup`);
//! - [`images`]: the images the hive pulled or built (`images`);
//! - [`exits`]: how each agent's container last ended (`exits`);
//! - [`handle`]: the async [`JobStore`] with one typed method per call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use swarm_queue_client::AgentName;

use super::model::JobId;
use super::schema::{self, APPLICATION_ID};

mod applied;
mod cleanup;
mod exits;
#[cfg(feature = "test-hooks")]
mod floor;
mod handle;
mod images;
mod installed;
mod jobs;
mod nodes;
mod objects;
mod power;
#[cfg(test)]
mod tests;

pub use applied::AppliedRevision;
pub use cleanup::{CleanupAction, CleanupEntry};
pub use exits::{ExitRecord, ExitSeen};
pub use handle::{AgentRecords, JobStore};
pub use images::{image_cleanup_plan, OwnedImage};
pub use installed::InstalledAgent;
pub use jobs::{DeployRequest, Enqueued, JobFilter, JobView, NodeView};
pub use nodes::{Claim, Finished};
pub use objects::RecordedObject;

/// How hard each commit is pushed to disk. See the module essay in
/// [`crate::agents::jobs`] for why the hive ships [`Durability::Full`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: a commit survives power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: a commit survives a process crash; the last
    /// commits may be lost on power loss. Only for comparison in benchmarks.
    Normal,
}

/// Everything that can go wrong with the job database. Each variant names
/// the file, so the operator knows which one to look at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the job database {path} is damaged and was left exactly as it was: {reason}. \
         The hive will not start on it. Move the file aside (with its -wal and -shm \
         files) to start with an empty job history, or restore it from a backup"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "{path} is not a hive job database ({reason}); it was left untouched. \
         Point the hive's state_dir somewhere else, or move the file aside"
    )]
    Foreign { path: PathBuf, reason: String },
    #[error(
        "the job database {path} has schema version {found}, newer than version {supported} \
         this hive build knows; it was left untouched. Run the newer hive, or restore a backup"
    )]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("cannot create the directory {path} for the job database: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("job database {path}: {op}: {source}")]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("job database {path}: a stored {what} cannot be read back: {reason}")]
    Decode {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
    #[error("job {job} does not exist (it may have been pruned)")]
    NoSuchJob { job: JobId },
    #[error("node {seq} of job {job} is not running, so its outcome was not recorded")]
    NodeNotRunning { job: JobId, seq: u32 },
    #[error(
        "agent {agent} is not installed on this hive; deploy it first with `hive deploy {agent}`"
    )]
    NotInstalled { agent: AgentName },
    #[error("the job store task stopped: {0}")]
    Task(String),
}

/// The synchronous store. One per connection.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (or create) the job database at `path` with the shipped
    /// durability. An existing file is checked before anything is written
    /// to it: a damaged or foreign file is refused and left byte for byte
    /// as it was.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, Durability::Full)
    }

    pub fn open_with(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let existing = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|source| StoreError::Sqlite {
                path: path.to_path_buf(),
                op: "open",
                source,
            })?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store
            .conn
            .busy_timeout(Duration::from_secs(5))
            .map_err(store.sql("set busy timeout"))?;
        if existing {
            store.check_existing()?;
        }
        store.configure(durability)?;
        store.migrate()?;
        Ok(store)
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(self.sql("read schema version"))
    }

    /// Read-only checks of a file that already has content. Nothing here
    /// writes, so a refused file keeps its bytes.
    fn check_existing(&self) -> Result<(), StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        let problems: Vec<String> = (|| {
            let mut stmt = self.conn.prepare("PRAGMA quick_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<Vec<_>, _>>()
        })()
        .map_err(|e| corrupt(e.to_string()))?;
        if problems != ["ok"] {
            let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
            return Err(corrupt(format!("integrity check: {}", shown.join("; "))));
        }
        let app_id: i32 = self
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| corrupt(e.to_string()))?;
        if app_id == APPLICATION_ID {
            return Ok(());
        }
        let tables: Vec<String> = (|| {
            let mut stmt = self.conn.prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 5",
            )?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<Vec<_>, _>>()
        })()
        .map_err(|e| corrupt(e.to_string()))?;
        if app_id != 0 || !tables.is_empty() {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                reason: format!("application_id {app_id:#x}, tables [{}]", tables.join(", ")),
            });
        }
        Ok(())
    }

    fn configure(&self, durability: Durability) -> Result<(), StoreError> {
        let mode: String = self
            .conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(self.sql("enable WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Sqlite {
                path: self.path.clone(),
                op: "enable WAL",
                source: rusqlite::Error::InvalidParameterName(format!(
                    "journal_mode stayed {mode}"
                )),
            });
        }
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        self.conn
            .pragma_update(None, "synchronous", sync)
            .map_err(self.sql("set synchronous"))?;
        self.conn
            .pragma_update(None, "foreign_keys", "ON")
            .map_err(self.sql("enable foreign keys"))?;
        Ok(())
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let found: u32 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(self.sql("read schema version"))?;
        let latest = schema::latest();
        if found > latest {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found,
                supported: latest,
            });
        }
        for version in found..latest {
            let path = self.path.clone();
            let err = move |source| StoreError::Sqlite {
                path: path.clone(),
                op: "migrate schema",
                source,
            };
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&err)?;
            tx.execute_batch(schema::MIGRATIONS[version as usize])
                .map_err(&err)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(&err)?;
            tx.pragma_update(None, "user_version", version + 1)
                .map_err(&err)?;
            tx.commit().map_err(&err)?;
            tracing::info!(db = %self.path.display(), version = version + 1, "job database schema migrated");
        }
        Ok(())
    }

    fn sql(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            op,
            source,
        }
    }

    fn decode_err<E: std::fmt::Display>(
        &self,
        what: &'static str,
    ) -> impl Fn(E) -> StoreError + '_ {
        move |reason| StoreError::Decode {
            path: self.path.clone(),
            what,
            reason: reason.to_string(),
        }
    }

    fn immediate(&mut self, op: &'static str) -> Result<Transaction<'_>, StoreError> {
        let path = self.path.clone();
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(move |source| StoreError::Sqlite { path, op, source })
    }
}

fn sql_at<'a>(path: &'a Path, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        op,
        source,
    }
}

#[cfg(test)]
use {super::model::JobRequest, rusqlite::params};

#[cfg(test)]
impl Store {
    pub(crate) fn conn_for_tests(&self) -> &Connection {
        &self.conn
    }

    /// The stored request of a job.
    pub(crate) fn claim_request_for_tests(&self, job: JobId) -> JobRequest {
        let json: String = self
            .conn
            .query_row(
                "SELECT request FROM jobs WHERE id = ?1",
                params![job.0],
                |r| r.get(0),
            )
            .unwrap();
        serde_json::from_str(&json).unwrap()
    }
}
