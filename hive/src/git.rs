//! The one way the hive runs git: for the knowledge checkout
//! ([`crate::local::knowledge`]) and for build contexts from a repository
//! ([`crate::agents::runtime::context`]). No prompt for credentials (a job or a
//! pull must never hang on a terminal), killed when the caller gives up or
//! the timeout passes, and stdout trimmed. A URL's userinfo (a token) never
//! reaches an error: the arguments and git's own message are redacted
//! ([`swarm_queue_client::redact::userinfo`]). A caller may restrict the
//! transports git may use ([`Git::protocols`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// Why a git command did not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git (is it installed?)")]
    Spawn(#[source] std::io::Error),
    #[error("`git {args}` failed in {dir}: {stderr}")]
    Failed {
        args: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error("`git {args}` timed out after {timeout:?}")]
    Timeout { args: String, timeout: Duration },
}

/// Run `git -C dir args…` and return its trimmed stdout.
pub async fn run(dir: &Path, args: &[&str], timeout: Duration) -> Result<String, GitError> {
    Git {
        dir,
        timeout,
        protocols: None,
    }
    .run(args)
    .await
}

/// One way of running git: where, for how long, over which transports.
#[derive(Debug, Clone, Copy)]
pub struct Git<'a> {
    /// `git -C dir`: every command runs there, never in the hive's own
    /// working directory.
    pub dir: &'a Path,
    pub timeout: Duration,
    /// `GIT_ALLOW_PROTOCOL` (`https:ssh`, `file`): the only transports git
    /// may use, for the repository and anything it names (a submodule, a
    /// redirect); `None` keeps git's defaults.
    pub protocols: Option<&'a str>,
}

impl Git<'_> {
    /// Run `git -C dir args…` and return its trimmed stdout.
    pub async fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let joined = swarm_queue_client::redact::userinfo(&args.join(" ")).into_owned();
        let mut command = Command::new("git");
        command
            .arg("-C")
            .arg(self.dir)
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .kill_on_drop(true);
        if let Some(protocols) = self.protocols {
            command.env("GIT_ALLOW_PROTOCOL", protocols);
        }
        let out = match tokio::time::timeout(self.timeout, command.output()).await {
            Err(_) => {
                return Err(GitError::Timeout {
                    args: joined,
                    timeout: self.timeout,
                })
            }
            Ok(r) => r.map_err(GitError::Spawn)?,
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(GitError::Failed {
                args: joined,
                dir: self.dir.to_path_buf(),
                stderr: swarm_queue_client::redact::userinfo(stderr.trim()).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// Run `git args…` in `dir` as a fixed test author, and panic unless it
/// succeeds: how the unit tests and the end-to-end tests make the
/// repositories they pull from. Only in test builds.
#[cfg(any(test, feature = "test-hooks"))]
pub fn git_for_tests(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .expect("git runs")
        .success();
    assert!(ok, "git {args:?} in {}", dir.display());
}
