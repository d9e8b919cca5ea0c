//! The floor a commit of the job store is measured against: one row
//! written in one `BEGIN IMMEDIATE` transaction on a [`Store`] opened as
//! the hive opens its own (WAL, the same `synchronous`, the same flags), so
//! the converge benchmark compares the enqueue of a declaration's jobs
//! with the bare commit it cannot do without. Only with the `test-hooks`
//! feature (the tests crate's build); a shipped hive has none of it.

use std::path::Path;

use rusqlite::params;

use super::{sql_at, Durability, Store, StoreError};

impl Store {
    /// A scratch store at `path` for [`bare_commit`](Self::bare_commit):
    /// the job schema, plus one table of rows.
    pub fn open_floor(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        let store = Store::open_with(path, durability)?;
        store
            .conn
            .execute_batch("CREATE TABLE IF NOT EXISTS floor_rows (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
            .map_err(store.sql("create floor table"))?;
        Ok(store)
    }

    /// Insert one row of `body` and commit: one fsync of the WAL under
    /// `synchronous = FULL`, none under `NORMAL`.
    pub fn bare_commit(&mut self, body: &[u8]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("floor row")?;
        tx.execute("INSERT INTO floor_rows (body) VALUES (?1)", params![body])
            .map_err(sql_at(&path, "insert floor row"))?;
        tx.commit().map_err(sql_at(&path, "commit floor row"))
    }
}
