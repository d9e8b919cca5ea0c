//! `swarm-controller nkey FILE`: a NATS user identity for the controller or
//! a hive, without the `nk` tool. Prints the public key (`U…`, the value
//! the roster's `nkey = …` takes) of the user seed in FILE, and creates the
//! seed first, mode 0600, when there is none. The seed is never printed.
//! `scripts/swarm-up` makes the demo's identities with it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use swarm_queue_client::connect::{read_nkey_seed, ConnectError};

#[derive(Debug, thiserror::Error)]
pub enum NkeyFileError {
    #[error(transparent)]
    Read(#[from] ConnectError),
    #[error("cannot create the nkey seed file {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the nkey library failed: {0}")]
    Key(String),
}

/// The public user key of the seed in `path`, making the seed if missing.
pub fn public_key(path: &Path) -> Result<String, NkeyFileError> {
    if !path.exists() {
        let pair = nkeys::KeyPair::new_user();
        let seed = pair.seed().map_err(|e| NkeyFileError::Key(e.to_string()))?;
        let create = |source| NkeyFileError::Create {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(create)?;
        file.write_all(format!("{seed}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(create)?;
    }
    let seed = read_nkey_seed(path)?;
    let pair = nkeys::KeyPair::from_seed(&seed).map_err(|e| NkeyFileError::Key(e.to_string()))?;
    Ok(pair.public_key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_seed_is_made_once_0600_and_its_public_key_is_stable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hive.nk");
        let first = public_key(&path).unwrap();
        assert!(first.starts_with('U'), "{first}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(public_key(&path).unwrap(), first);
        std::fs::write(dir.path().join("bad.nk"), "nope\n").unwrap();
        let e = public_key(&dir.path().join("bad.nk"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.nk"), "{e}");
    }
}
