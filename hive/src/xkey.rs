//! The hive's xkey: the curve25519 key credentials are sealed to. The seed
//! lives in a file (mode 0600) created at first start; the public half is
//! published in `Readiness.xkey` so the controller knows what to seal to.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use swarm_queue_client::credentials::XKey;

#[derive(Debug, thiserror::Error)]
pub enum XKeyError {
    #[error("cannot read xkey seed file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("xkey seed file {path} does not hold an xkey seed (it should start with SX)")]
    Invalid { path: PathBuf },
    #[error("cannot create xkey seed file {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Load the seed at `path`, or create one there (0600, written atomically).
pub fn load_or_create(path: &Path) -> Result<XKey, XKeyError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            if let Ok(meta) = std::fs::metadata(path) {
                if meta.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), "xkey seed file is readable by others; chmod 600 it");
                }
            }
            XKey::from_seed(text.trim()).map_err(|_| XKeyError::Invalid {
                path: path.to_path_buf(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = XKey::new();
            let seed = key.seed().map_err(|_| XKeyError::Invalid {
                path: path.to_path_buf(),
            })?;
            write_private(path, seed.as_bytes()).map_err(|source| XKeyError::Write {
                path: path.to_path_buf(),
                source,
            })?;
            tracing::info!(path = %path.display(), public = %key.public_key(), "created a new hive xkey");
            Ok(key)
        }
        Err(source) => Err(XKeyError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Write `bytes` to `path` with mode 0600: to a temp file in the same
/// directory, fsync, then rename, so a reader never sees a partial file.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_reloaded_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/xkey.seed");
        let a = load_or_create(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = load_or_create(&p).unwrap();
        assert_eq!(a.public_key(), b.public_key());
    }

    #[test]
    fn garbage_seed_is_a_clear_error_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("xkey.seed");
        std::fs::write(&p, "not a seed").unwrap();
        let e = load_or_create(&p).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "not a seed");
    }
}
