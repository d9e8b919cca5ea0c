//! The xkey seed file each daemon keeps: the hive's (credentials are
//! sealed to its public half) and the controller's (it seals them). One
//! writer for both, so they cannot drift apart.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use super::XKey;

/// Why a seed file could not be used. No variant holds the file's content.
#[derive(Debug, thiserror::Error)]
pub enum SeedFileError {
    #[error("cannot read xkey seed file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "xkey seed file {path} does not hold an xkey seed (SX..., as `nk -gen x25519` prints); \
         it is left as it is"
    )]
    Invalid { path: PathBuf },
    #[error("cannot create xkey seed file {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A seed read or made by [`load_or_create_seed`].
pub struct SeedFile {
    pub key: XKey,
    /// Made by this call (there was no file).
    pub created: bool,
}

/// Read the xkey seed at `path`, or make a new one there when there is no
/// file. A new seed is written with mode 0600 to a temporary file of its
/// own in the same directory (created exclusively, named after the
/// process and a random number), synced, and linked into place only if no
/// file is there yet: a reader never sees part of a seed, and two daemons
/// starting at once end up with the same key. A file that is there but
/// holds no seed is an error and is left untouched; one that others may
/// read is used, with a warning. Blocking.
pub fn load_or_create_seed(path: &Path) -> Result<SeedFile, SeedFileError> {
    match read_seed(path) {
        Err(SeedFileError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {}
        read => {
            return read.map(|key| SeedFile {
                key,
                created: false,
            })
        }
    }
    let write_error = |error| SeedFileError::Write {
        path: path.to_path_buf(),
        error,
    };
    let key = XKey::new();
    let seed = Zeroizing::new(key.seed().map_err(|_| SeedFileError::Invalid {
        path: path.to_path_buf(),
    })?);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(write_error)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        fastrand::u64(..)
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(seed.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()
    };
    let linked = write().and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(SeedFile { key, created: true })
        }
        // Another daemon made it first: its key is the key.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_seed(path).map(|key| SeedFile {
                key,
                created: false,
            })
        }
        Err(e) => Err(write_error(e)),
    }
}

fn read_seed(path: &Path) -> Result<XKey, SeedFileError> {
    let text = std::fs::read_to_string(path)
        .map(Zeroizing::new)
        .map_err(|error| SeedFileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "the xkey seed file is readable by others; chmod 600 it");
        }
    }
    // The error of from_seed never includes the seed itself, and is not kept.
    XKey::from_seed(text.trim()).map_err(|_| SeedFileError::Invalid {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_with_mode_0600_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/xkey.seed");
        let a = load_or_create_seed(&path).unwrap();
        assert!(a.created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = load_or_create_seed(&path).unwrap();
        assert!(!b.created);
        assert_eq!(a.key.public_key(), b.key.public_key());
        // No temporary file is left beside it.
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("xkey.seed")]);
    }

    #[test]
    fn racing_writers_end_with_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("xkey.seed");
        let keys: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| load_or_create_seed(&path).unwrap().key.public_key()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|k| k == &keys[0]), "{keys:?}");
        let on_disk = load_or_create_seed(&path).unwrap().key.public_key();
        assert_eq!(on_disk, keys[0]);
    }

    #[test]
    fn not_a_seed_is_an_error_naming_the_file_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("xkey.seed");
        std::fs::write(&path, "not a seed").unwrap();
        let err = load_or_create_seed(&path).err().unwrap().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("does not hold an xkey seed"), "{err}");
        assert!(
            !err.contains("not a seed\""),
            "the content is never echoed: {err}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a seed");
    }

    #[test]
    fn a_path_through_a_file_is_an_error_not_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let path = file.join("xkey.seed");
        let err = load_or_create_seed(&path).err().unwrap();
        assert!(matches!(err, SeedFileError::Read { .. }), "{err}");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }
}
