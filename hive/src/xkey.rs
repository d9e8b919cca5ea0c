//! The hive's xkey: the curve25519 key credentials are sealed to. The seed
//! lives in a file (mode 0600) created at first start; the public half is
//! published in `Readiness.xkey` so the controller knows what to seal to.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use swarm_queue_client::credentials::XKey;
use zeroize::Zeroizing;

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
    match std::fs::read_to_string(path).map(Zeroizing::new) {
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
            let seed = key
                .seed()
                .map(Zeroizing::new)
                .map_err(|_| XKeyError::Invalid {
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

/// Write `bytes` to `path` with mode 0600: to a unique temporary file in
/// the same directory (`tempfile` makes it 0600 and picks a name no other
/// writer uses), fsync, then rename over `path`, so a reader never sees a
/// partial file. Blocking.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))?;
    tmp.persist(path).map_err(|e| e.error)?;
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

    #[test]
    fn private_writes_replace_whole_files_and_leave_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["secret"]);
        // Two writers of the same file at once: each through its own
        // temporary file, so the result is one of the two whole values.
        let (a, b) = (p.clone(), p.clone());
        let t1 = std::thread::spawn(move || {
            for _ in 0..50 {
                write_private(&a, &[b'a'; 4096]).unwrap();
            }
        });
        let t2 = std::thread::spawn(move || {
            for _ in 0..50 {
                write_private(&b, &[b'b'; 4096]).unwrap();
            }
        });
        t1.join().unwrap();
        t2.join().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert!(got == [b'a'; 4096] || got == [b'b'; 4096]);
    }
}
