//! The previous release's state that `tests/tests/e2e/upgrade_state.rs`
//! upgrades over (`tests/data/upgrade-prev/`), and what both that test and
//! the tool that made the data (`examples/capture_upgrade_state.rs`) need
//! to agree on: the hive's name, the image, the declaration.

use std::path::{Path, PathBuf};

use crate::docker::{busybox_rootfs, import_rootfs, remove_image};

/// Fixed: the committed spec hashes and container names depend on them.
pub const HIVE: &str = "upgrade-prev";
pub const IMAGE: &str = "hhtest-upgrade-prev:1";
/// Stands for the capture's state dir in the committed files.
pub const STATE: &str = "@STATE@";

pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/upgrade-prev")
}

/// What the previous release was given: every field of its agent spec
/// (spec 2) but credentials, which need a controller's key.
pub fn declaration() -> String {
    serde_json::json!({ "schema": 1, "agents": {
        "full": {
            "image": IMAGE, "command": ["/bin/sleep", "3600"],
            "env": { "MODE": "prod", "EMPTY": "" }, "power": "up",
            "memory_mb": 64, "cpus": 0.5, "min_running_secs": 1,
            "health": { "command": ["/bin/true"], "interval_secs": 5, "retries": 2,
                        "timeout_secs": 3, "start_period_secs": 1 }
        },
        "plain": { "image": IMAGE, "command": ["/bin/sleep", "3600"] },
        "parked": { "image": IMAGE, "command": ["/bin/sleep", "3600"], "power": "down" },
    }})
    .to_string()
}

/// Removes the fixed image on drop.
pub struct ImageGuard;
impl Drop for ImageGuard {
    fn drop(&mut self) {
        remove_image(IMAGE);
    }
}

pub fn import_image() -> ImageGuard {
    let root = busybox_rootfs();
    import_rootfs(root.path(), IMAGE);
    ImageGuard
}

/// The job store's files (its write-ahead log, if a crash left one).
pub fn copy_job_store(from: &Path, to: &Path) {
    for f in ["hive.db", "hive.db-wal"] {
        if from.join(f).exists() {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
        }
    }
}
