//! The credential files below the agents' dirs: written (saying whether the
//! content changed), removed on a delete marker, and listed, so a deletion
//! the hive missed is found at its next boot even for an account no agent
//! declares. Everything below an agent's dir is opened without following
//! links ([`crate::nofollow`]). Blocking: run these on the blocking pool.

use std::path::Path;

use swarm_queue_client::{AccountName, AgentName};

use crate::nofollow::{Dir, NoFollowError};

/// The most credential files listed per agent: more is the agent's doing
/// (it can write its `credentials` dir) and is not read.
pub const MAX_LISTED: usize = 64;

/// `credentials/<file>` below the agent's dir: the directory 0700, the
/// file 0600 through a unique temporary file beside it, no link followed
/// below `agent_dir`. The agent's dir itself is the hive's (its parent is
/// not in any container), so it is made by path. Whether the file held
/// something else before (or nothing).
pub fn write_secret(agent_dir: &Path, file: &str, secret: &[u8]) -> Result<bool, NoFollowError> {
    std::fs::create_dir_all(agent_dir).map_err(|source| NoFollowError::Io {
        what: "create",
        path: agent_dir.to_path_buf(),
        source,
    })?;
    let dir = Dir::open_root(agent_dir)?.child("credentials", 0o700)?;
    dir.set_mode(0o700)?;
    let changed = !dir.holds(file, secret)?;
    // Written even when the same: the write also puts the mode right.
    dir.write_private(file, secret)?;
    Ok(changed)
}

/// Remove `credentials/<file>` below the agent's dir; whether it was
/// there. Nothing is made: a missing agent dir or `credentials` dir has
/// nothing to remove.
pub fn remove_secret(agent_dir: &Path, file: &str) -> Result<bool, NoFollowError> {
    let root = match Dir::open_root(agent_dir) {
        Ok(root) => root,
        Err(NoFollowError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(false)
        }
        Err(e) => return Err(e),
    };
    match root.existing_child("credentials")? {
        Some(dir) => dir.remove_file(file),
        None => Ok(false),
    }
}

/// Each agent dir's credential files whose names are an agent's and an
/// account's: the keys whose files a delete marker would remove. A dir
/// that cannot be read is skipped (it holds nothing the hive can remove
/// either); at most [`MAX_LISTED`] files per agent.
pub fn delivered(agents_dir: &Path) -> Vec<(AgentName, AccountName)> {
    let Ok(entries) = std::fs::read_dir(agents_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(agent) = entry
            .file_name()
            .to_str()
            .and_then(|n| AgentName::new(n).ok())
        else {
            continue;
        };
        let names = Dir::open_root(&entry.path())
            .and_then(|root| root.existing_child("credentials"))
            .and_then(|dir| dir.map_or(Ok(Vec::new()), |d| d.names(MAX_LISTED)));
        for name in names.unwrap_or_default() {
            if let Ok(account) = AccountName::new(&name) {
                out.push((agent.clone(), account));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_says_whether_the_content_changed_and_a_removal_whether_there_was_one() {
        let tmp = tempfile::tempdir().unwrap();
        let agents = tmp.path().join("agents");
        let web = agents.join("web");
        assert!(!remove_secret(&web, "smtp").unwrap(), "no agent dir");
        assert!(write_secret(&web, "smtp", b"one").unwrap(), "first");
        assert!(!write_secret(&web, "smtp", b"one").unwrap(), "the same");
        assert!(write_secret(&web, "smtp", b"two").unwrap(), "changed");
        assert!(write_secret(&web, "imap", b"x").unwrap());
        std::fs::create_dir_all(agents.join("not a name/credentials")).unwrap();
        std::fs::write(agents.join("web/credentials/NOT VALID"), "x").unwrap();
        let listed: Vec<String> = delivered(&agents)
            .iter()
            .map(|(a, c)| format!("{a}/{c}"))
            .collect();
        assert_eq!(listed, ["web/imap", "web/smtp"]);
        assert!(remove_secret(&web, "smtp").unwrap());
        assert!(!remove_secret(&web, "smtp").unwrap(), "gone already");
        assert!(!web.join("credentials/smtp").exists());
        assert_eq!(std::fs::read(web.join("credentials/imap")).unwrap(), b"x");
    }
}
