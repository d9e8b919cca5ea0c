//! Build contexts: a directory on the hive, or a git repository the hive
//! checks out with the `git` CLI; either is packed into a tar for Docker.
//!
//! Checkouts live under the hive's state directory (never inside an agent's
//! state directory, which is mounted into its container) and are reused: a
//! relock fetches, otherwise the existing checkout is used as it is.

use std::io;
use std::path::{Component, Path, PathBuf};

use swarm_queue_client::BuildSpec;
use tokio::process::Command;

use super::RuntimeError;

/// Where a build's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextSource {
    /// An absolute directory on the hive, used as it is.
    Dir(PathBuf),
    /// A repository to clone, at `git_ref` (branch, tag or commit) or its
    /// default branch.
    Git {
        url: String,
        git_ref: Option<String>,
    },
}

/// Read a declared build context. A `ref`, a URL scheme, `git@…` or a
/// `.git` suffix means git; anything else must be an absolute directory.
pub fn classify(build: &BuildSpec) -> Result<ContextSource, RuntimeError> {
    let ctx = build.context.trim();
    let bad = |reason: &str| RuntimeError::Context {
        context: build.context.clone(),
        reason: reason.to_string(),
    };
    if let Some(r) = &build.git_ref {
        if r.starts_with('-') || r.trim().is_empty() {
            return Err(bad("the git ref must not be empty or start with '-'"));
        }
    }
    if ctx.starts_with('-') {
        return Err(bad("a context must not start with '-'"));
    }
    let looks_git = ctx.contains("://") || ctx.starts_with("git@") || ctx.ends_with(".git");
    if looks_git || build.git_ref.is_some() {
        return Ok(ContextSource::Git {
            url: ctx.to_string(),
            git_ref: build.git_ref.clone(),
        });
    }
    let path = PathBuf::from(ctx);
    if !path.is_absolute() {
        return Err(bad(
            "a directory context must be an absolute path on the hive (or give a git URL)",
        ));
    }
    Ok(ContextSource::Dir(path))
}

/// The Dockerfile path inside the context: relative, without `..`.
pub fn dockerfile_path(build: &BuildSpec) -> Result<String, RuntimeError> {
    let file = build.dockerfile.as_deref().unwrap_or("Dockerfile");
    let ok = !file.is_empty()
        && Path::new(file)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(file.to_string())
    } else {
        Err(RuntimeError::Context {
            context: build.context.clone(),
            reason: format!(
                "dockerfile {file:?} must be a relative path inside the context, without '..'"
            ),
        })
    }
}

async fn git(dir: Option<&Path>, args: &[&str]) -> Result<String, RuntimeError> {
    let mut cmd = Command::new("git");
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    let shown = args.join(" ");
    let out = cmd
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| RuntimeError::Git {
            args: shown.clone(),
            reason: format!("cannot run git: {e} (is git installed?)"),
        })?;
    if !out.status.success() {
        return Err(RuntimeError::Git {
            args: shown,
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Make `dir` a checkout of `url` at `git_ref`: clone when there is no
/// checkout yet, fetch when `refresh` (a relock), then check out the ref
/// (a branch resolves to the remote's branch) and clean. Returns the
/// commit checked out.
pub async fn checkout(
    url: &str,
    git_ref: Option<&str>,
    dir: &Path,
    refresh: bool,
) -> Result<String, RuntimeError> {
    if !dir.join(".git").is_dir() {
        if dir.exists() {
            tokio::fs::remove_dir_all(dir)
                .await
                .map_err(|e| RuntimeError::Context {
                    context: dir.display().to_string(),
                    reason: format!("cannot clear a stale checkout: {e}"),
                })?;
        }
        if let Some(parent) = dir.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| RuntimeError::Context {
                    context: parent.display().to_string(),
                    reason: e.to_string(),
                })?;
        }
        let target = dir.to_string_lossy();
        git(
            None,
            &["clone", "--quiet", "--no-checkout", "--", url, &target],
        )
        .await?;
    } else if refresh {
        git(
            Some(dir),
            &["fetch", "--quiet", "--force", "--tags", "origin"],
        )
        .await?;
    }
    let candidates: Vec<String> = match git_ref {
        Some(r) => vec![format!("origin/{r}"), r.to_string()],
        None => vec!["origin/HEAD".to_string()],
    };
    let mut commit = None;
    for candidate in &candidates {
        let spec = format!("{candidate}^{{commit}}");
        if let Ok(c) = git(Some(dir), &["rev-parse", "--verify", "--quiet", &spec]).await {
            commit = Some(c);
            break;
        }
    }
    let commit = commit.ok_or_else(|| RuntimeError::Context {
        context: url.to_string(),
        reason: format!(
            "ref {:?} is not a branch, tag or commit of the repository",
            git_ref.unwrap_or("HEAD")
        ),
    })?;
    git(
        Some(dir),
        &["checkout", "--quiet", "--force", "--detach", &commit],
    )
    .await?;
    git(Some(dir), &["clean", "--quiet", "-ffdx"]).await?;
    Ok(commit)
}

/// Pack a directory into an uncompressed tar, leaving out a top-level
/// `.git`. Symlinks are stored as symlinks.
pub fn tar_directory(dir: &Path) -> Result<Vec<u8>, RuntimeError> {
    let err = |e: io::Error| RuntimeError::Context {
        context: dir.display().to_string(),
        reason: e.to_string(),
    };
    if !dir.is_dir() {
        return Err(RuntimeError::Context {
            context: dir.display().to_string(),
            reason: "is not a directory".to_string(),
        });
    }
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(&rel))
            .map_err(err)?
            .collect::<Result<_, _>>()
            .map_err(err)?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = rel.join(entry.file_name());
            if rel.as_os_str().is_empty() && entry.file_name() == ".git" {
                continue;
            }
            let kind = entry.file_type().map_err(err)?;
            if kind.is_dir() {
                builder.append_dir(&name, entry.path()).map_err(err)?;
                stack.push(name);
            } else {
                builder
                    .append_path_with_name(entry.path(), &name)
                    .map_err(err)?;
            }
        }
    }
    builder.into_inner().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(context: &str, git_ref: Option<&str>, dockerfile: Option<&str>) -> BuildSpec {
        BuildSpec {
            context: context.into(),
            git_ref: git_ref.map(Into::into),
            dockerfile: dockerfile.map(Into::into),
        }
    }

    #[test]
    fn contexts_are_classified_and_bad_ones_named() {
        let git = |url: &str, r: Option<&str>| ContextSource::Git {
            url: url.into(),
            git_ref: r.map(Into::into),
        };
        let ok = [
            (
                build("/srv/ctx", None, None),
                ContextSource::Dir("/srv/ctx".into()),
            ),
            (
                build("https://forge/x.git", None, None),
                git("https://forge/x.git", None),
            ),
            (
                build("file:///srv/repo", Some("v1"), None),
                git("file:///srv/repo", Some("v1")),
            ),
            (
                build("/srv/repo", Some("main"), None),
                git("/srv/repo", Some("main")),
            ),
            (build("git@forge:x", None, None), git("git@forge:x", None)),
        ];
        for (b, want) in ok {
            assert_eq!(classify(&b).unwrap(), want, "{b:?}");
        }
        let bad = [
            (build("ctx", None, None), "absolute path"),
            (
                build("/srv/repo", Some("--upload-pack=x"), None),
                "start with '-'",
            ),
            (build("-x", None, None), "start with '-'"),
        ];
        for (b, why) in bad {
            let msg = classify(&b).unwrap_err().to_string();
            assert!(msg.contains(why), "{msg}");
            assert!(msg.contains(&b.context), "{msg}");
        }
        assert_eq!(
            dockerfile_path(&build("/x", None, None)).unwrap(),
            "Dockerfile"
        );
        assert_eq!(
            dockerfile_path(&build("/x", None, Some("docker/Build.file"))).unwrap(),
            "docker/Build.file"
        );
        for bad in ["../Dockerfile", "/etc/passwd", ""] {
            let msg = dockerfile_path(&build("/x", None, Some(bad)))
                .unwrap_err()
                .to_string();
            assert!(msg.contains("relative path"), "{msg}");
        }
    }

    #[test]
    fn tar_keeps_files_and_symlinks_and_leaves_out_git() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        std::fs::write(dir.path().join("src/deep/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("a.txt", dir.path().join("src/deep/link")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
        let bytes = tar_directory(dir.path()).unwrap();
        let mut archive = tar::Archive::new(&bytes[..]);
        let mut names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                "Dockerfile",
                "src",
                "src/deep",
                "src/deep/a.txt",
                "src/deep/link"
            ]
        );
        let missing = dir.path().join("nope");
        let msg = tar_directory(&missing).unwrap_err().to_string();
        assert!(
            msg.contains("nope") && msg.contains("not a directory"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn checkout_clones_resolves_refs_and_refreshes_on_relock() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let sh = |dir: &Path, script: &str| {
            let ok = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(dir)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@t")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@t")
                .status()
                .unwrap()
                .success();
            assert!(ok, "{script}");
        };
        std::fs::create_dir_all(&repo).unwrap();
        sh(
            &repo,
            "git init -q -b main . && echo one > f && git add f && git commit -qm one && git tag v1",
        );
        let url = format!("file://{}", repo.display());
        let out = tmp.path().join("checkouts/a");
        let first = checkout(&url, None, &out, false).await.unwrap();
        assert_eq!(std::fs::read_to_string(out.join("f")).unwrap(), "one\n");

        sh(&repo, "echo two > f && git commit -qam two");
        // Without a relock the checkout is reused as it is.
        assert_eq!(checkout(&url, None, &out, false).await.unwrap(), first);
        let second = checkout(&url, Some("main"), &out, true).await.unwrap();
        assert_ne!(second, first);
        assert_eq!(std::fs::read_to_string(out.join("f")).unwrap(), "two\n");
        // A tag and a commit resolve too.
        assert_eq!(
            checkout(&url, Some("v1"), &out, false).await.unwrap(),
            first
        );
        assert_eq!(
            checkout(&url, Some(&second), &out, false).await.unwrap(),
            second
        );
        let err = checkout(&url, Some("no-such-branch"), &out, false)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"no-such-branch\" is not a branch"),
            "{err}"
        );
        let err = checkout(
            "file:///nonexistent/repo",
            None,
            &tmp.path().join("b"),
            false,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, RuntimeError::Git { .. }), "{err}");
    }
}
