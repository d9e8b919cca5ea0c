//! The declaration's copy on disk, `<state>/wanted.json`: what the hive
//! knows is wanted when it starts without NATS. Saved after the converger
//! has planned each declaration ([`save_each`]), and not used at start when
//! the job store shows jobs queued for a newer one ([`unless_older`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agents::declared::{MessageId, PlannedRx, Wanted, WantedRx};
use crate::agents::jobs::{AppliedRevision, StoreError};

/// The longest [`save_each`] waits for the converger before saving anyway
/// (a converger stuck on Docker must not keep the copy old).
pub const SAVE_WAITS_AT_MOST: Duration = Duration::from_secs(1);

/// File that keeps the last valid declaration across restarts.
pub fn saved_path(state_dir: &Path) -> PathBuf {
    state_dir.join("wanted.json")
}

/// The last valid declaration saved on disk, if any. A file that cannot be
/// read or parsed is reported and treated as "not known", never as empty.
pub fn load_saved(state_dir: &Path) -> Option<Wanted> {
    let path = saved_path(state_dir);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the saved declaration");
            return None;
        }
    };
    match serde_json::from_slice::<Wanted>(&text) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the saved declaration is unreadable; waiting for the swarm's");
            None
        }
    }
}

/// The saved declaration, unless the job store shows jobs queued for a
/// newer one: a crash after that commit and before the save left the copy
/// behind, and acting on it would undo the newer declaration. Then, as
/// when the store cannot tell, the hive waits for the swarm's declaration.
pub fn unless_older(
    saved: Option<Wanted>,
    applied: Result<Option<AppliedRevision>, StoreError>,
) -> Option<Wanted> {
    let saved = saved?;
    match applied {
        Ok(Some(a)) if a.is_newer_than(saved.revision, saved.created_ns) => {
            tracing::warn!(saved = saved.revision, queued_for = a.revision, "the saved declaration is older than the one jobs were queued for; waiting for the swarm's");
            None
        }
        Ok(_) => Some(saved),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read which declaration jobs were queued for; the saved declaration is not used until the swarm's is read");
            None
        }
    }
}

/// Save each declaration handed to the converger in `wanted.json`, in the
/// order they were handed over (only the latest, when several came while
/// one was being written). The save is off the path to a queued job: it
/// waits until the converger has planned and committed the declaration
/// (`planned`, at most [`SAVE_WAITS_AT_MOST`]), so serialising, writing
/// and syncing the copy do not compete with the plan and the commit for
/// the machine. A crash before it ends leaves the copy older than the jobs
/// already queued; those jobs' commit records their declaration
/// (`jobs::AppliedRevision`), and at start a copy older than that record
/// is not used.
pub async fn save_each(state_dir: PathBuf, mut handed: WantedRx, mut planned: PlannedRx) {
    // What is there at start came from the file, or is nothing.
    handed.borrow_and_update();
    if crate::test_hooks::skip_wanted_save() {
        tracing::warn!("test hook: wanted.json is never saved");
        return;
    }
    while handed.changed().await.is_ok() {
        // Planned: the newest declaration handed over (one handed over
        // meanwhile is compared when the converger tells of it).
        let caught_up =
            |p: &Option<MessageId>| p.is_some() && *p == handed.borrow().as_deref().map(Wanted::id);
        // A converger that is gone (the sender dropped) is not waited for.
        let _ = tokio::time::timeout(SAVE_WAITS_AT_MOST, planned.wait_for(caught_up)).await;
        let Some(wanted) = handed.borrow_and_update().clone() else {
            continue;
        };
        let dir = state_dir.clone();
        if tokio::task::spawn_blocking(move || save(&dir, &wanted))
            .await
            .is_err()
        {
            return;
        }
        crate::stage!("saved");
    }
}

fn save(state_dir: &Path, wanted: &Wanted) {
    let path = saved_path(state_dir);
    let result = serde_json::to_vec_pretty(wanted)
        .map_err(std::io::Error::other)
        .and_then(|bytes| crate::bus::xkey::write_private(&path, &bytes));
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot save the declaration locally");
    }
}
