//! The hive's xkey: the curve25519 key credentials are sealed to. The seed
//! lives in a file (mode 0600) created at first start; the public half is
//! published in `HiveStatus.xkey` so the controller knows what to seal to.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use swarm_queue_client::credentials::{load_or_create_seed, SeedFileError, XKey};

/// Why the seed file could not be used (it names the file).
pub type XKeyError = SeedFileError;

/// Load the seed at `path`, or create one there (0600, never over a file
/// another process made first: [`load_or_create_seed`]).
pub fn load_or_create(path: &Path) -> Result<XKey, XKeyError> {
    let seed = load_or_create_seed(path)?;
    if seed.created {
        tracing::info!(path = %path.display(), public = %seed.key.public_key(), "created a new hive xkey");
    }
    Ok(seed.key)
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
