//! The knowledge repo: a git checkout under `<state>/knowledge`, mounted
//! read-only into agents. A knowledge event pulls it (cloning it first when
//! it is missing). The checkout is the hive's own, never edited in place, so
//! a pull resets to the remote's head even after a history rewrite.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest a clone or fetch may take before it is abandoned.
const GIT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error("no knowledge_repo is configured")]
    NotConfigured,
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("cannot prepare {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

async fn git(dir: &Path, args: &[&str]) -> Result<String, KnowledgeError> {
    Ok(crate::git::run(dir, args, GIT_TIMEOUT).await?)
}

/// Clone `repo` into `dir` if it is not a checkout yet, else fetch and reset
/// to the remote's default branch. Returns the commit now checked out.
pub async fn pull(repo: &str, dir: &Path) -> Result<String, KnowledgeError> {
    if !dir.join(".git").is_dir() {
        let parent = dir.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).map_err(|source| KnowledgeError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
        // Clone beside the target and rename, so a crash mid-clone never
        // leaves a half checkout where agents read.
        let tmp = parent.join(format!(".knowledge-clone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let tmp_s = tmp.display().to_string();
        git(parent, &["clone", "--quiet", repo, &tmp_s]).await?;
        if dir.exists() {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::fs::rename(&tmp, dir).map_err(|source| KnowledgeError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    } else {
        git(dir, &["remote", "set-url", "origin", repo]).await?;
        git(dir, &["fetch", "--quiet", "--prune", "origin"]).await?;
        git(dir, &["remote", "set-head", "origin", "--auto"]).await?;
        git(dir, &["reset", "--quiet", "--hard", "origin/HEAD"]).await?;
    }
    git(dir, &["rev-parse", "HEAD"]).await
}

/// What the knowledge task needs.
#[derive(Clone)]
pub struct KnowledgeDeps {
    /// The configured `knowledge_repo` (a git URL or path).
    pub repo: String,
    /// The checkout agents mount read-only.
    pub dir: PathBuf,
    /// Rung by each knowledge event.
    pub trigger: std::sync::Arc<tokio::sync::Notify>,
    /// Where a failed pull is raised as a warning.
    pub board: std::sync::Arc<crate::status::StatusBoard>,
}

/// The knowledge task: pull at start, then on every trigger (knowledge
/// events coalesce: several events during one pull cause one more pull).
pub async fn run(deps: KnowledgeDeps, mut shutdown: crate::shutdown::Shutdown) {
    use crate::status::keys;
    let KnowledgeDeps {
        repo,
        dir,
        trigger,
        board,
    } = deps;
    // Logs and warnings show the repository without a URL's userinfo.
    let shown = swarm_queue_client::redact::userinfo(&repo).into_owned();
    loop {
        match pull(&repo, &dir).await {
            Ok(commit) => {
                tracing::info!(repo = %shown, %commit, dir = %dir.display(), "knowledge repo up to date");
                board.clear(keys::KNOWLEDGE);
            }
            Err(e) => {
                let msg = crate::error_chain(&e);
                tracing::warn!(repo = %shown, error = %msg, "knowledge pull failed");
                board.raise(
                    keys::KNOWLEDGE,
                    swarm_queue_client::Level::Warn,
                    format!(
                        "knowledge pull from {shown} failed: {msg}; agents keep the last checkout"
                    ),
                );
            }
        }
        tokio::select! {
            // Both cancel-safe.
            _ = shutdown.wait() => return,
            _ = trigger.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::git_for_tests as sh;

    #[tokio::test]
    async fn clones_then_pulls_from_a_local_bare_repo() {
        let tmp = tempfile::tempdir().unwrap();
        let bare = tmp.path().join("k.git");
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        sh(
            tmp.path(),
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                "k.git",
            ],
        );
        sh(&work, &["init", "--quiet", "-b", "main"]);
        std::fs::write(work.join("a.md"), "one").unwrap();
        sh(&work, &["add", "."]);
        sh(&work, &["commit", "--quiet", "-m", "one"]);
        sh(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);

        let dest = tmp.path().join("state/knowledge");
        let c1 = pull(bare.to_str().unwrap(), &dest).await.unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("a.md")).unwrap(), "one");

        std::fs::write(work.join("a.md"), "two").unwrap();
        sh(&work, &["commit", "--quiet", "-am", "two"]);
        sh(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
        let c2 = pull(bare.to_str().unwrap(), &dest).await.unwrap();
        assert_ne!(c1, c2);
        assert_eq!(std::fs::read_to_string(dest.join("a.md")).unwrap(), "two");

        let e = pull("/nonexistent/repo.git", &tmp.path().join("other"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/repo.git"), "{e}");
    }
}
