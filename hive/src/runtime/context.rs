//! Build contexts: a directory on the hive, or a git repository the hive
//! checks out with the `git` CLI; either is streamed to Docker as a tar
//! ([`stream_tar`]), chunk by chunk and under a size cap, never held in
//! memory. Which directories may be contexts is [`super::confine`]'s rule.
//!
//! Checkouts live under the hive's state directory (never inside an agent's
//! state directory, which is mounted into its container) and are reused: a
//! relock fetches, otherwise the existing checkout is used as it is.

use std::io;
use std::path::{Component, Path, PathBuf};

use swarm_queue_client::BuildSpec;

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

/// Longest one git command of a checkout may take: a clone of a large
/// repository is slow, but a hung one must not hold the agent's job forever.
const GIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1800);

async fn git(dir: &Path, args: &[&str]) -> Result<String, RuntimeError> {
    use crate::git::GitError;
    crate::git::run(dir, args, GIT_TIMEOUT)
        .await
        .map_err(|e| RuntimeError::Git {
            args: args.join(" "),
            reason: match e {
                GitError::Failed { stderr, .. } => stderr,
                GitError::Spawn(e) => format!("cannot run git: {e} (is git installed?)"),
                GitError::Timeout { timeout, .. } => format!("timed out after {timeout:?}"),
            },
        })
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
            Path::new("."),
            &["clone", "--quiet", "--no-checkout", "--", url, &target],
        )
        .await?;
    } else if refresh {
        git(dir, &["fetch", "--quiet", "--force", "--tags", "origin"]).await?;
    }
    let candidates: Vec<String> = match git_ref {
        Some(r) => vec![format!("origin/{r}"), r.to_string()],
        None => vec!["origin/HEAD".to_string()],
    };
    let mut commit = None;
    for candidate in &candidates {
        let spec = format!("{candidate}^{{commit}}");
        if let Ok(c) = git(dir, &["rev-parse", "--verify", "--quiet", &spec]).await {
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
        dir,
        &["checkout", "--quiet", "--force", "--detach", &commit],
    )
    .await?;
    git(dir, &["clean", "--quiet", "-ffdx"]).await?;
    Ok(commit)
}

/// Bytes per chunk sent to Docker.
const CHUNK: usize = 64 * 1024;

/// A tar of a context directory on its way to Docker: `body` yields its
/// chunks as a blocking thread writes them (a few chunks in flight, never
/// the whole context in memory); `producer` says how the tar ended.
pub struct TarStream {
    pub body: futures_util::stream::BoxStream<'static, Result<hyper::body::Bytes, io::Error>>,
    pub producer: tokio::task::JoinHandle<TarEnd>,
}

/// How a streamed tar ended.
#[derive(Debug)]
pub enum TarEnd {
    /// Every byte was handed over.
    Sent(u64),
    /// Docker stopped reading (its own error explains why).
    DockerGone,
    /// The context failed: over the cap, or a file could not be read.
    Failed(RuntimeError),
}

/// Start streaming `dir` as a tar of at most `max_bytes`.
pub fn stream_tar(dir: PathBuf, max_bytes: u64) -> TarStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<hyper::body::Bytes, io::Error>>(4);
    let producer = tokio::task::spawn_blocking(move || {
        let writer = ChunkWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
            written: 0,
            max_bytes,
            stop: None,
        };
        let end = match tar_into(&dir, writer).and_then(|w| w.finish(&dir)) {
            Ok(n) => return TarEnd::Sent(n),
            Err((_, Some(Stop::ReceiverGone))) => return TarEnd::DockerGone,
            Err((_, Some(Stop::TooLarge))) => RuntimeError::ContextTooLarge {
                context: dir.display().to_string(),
                max_bytes,
            },
            Err((e, None)) => e,
        };
        // Ends the request body with an error, so Docker never builds from
        // a truncated context.
        let _ = tx.blocking_send(Err(io::Error::other(end.to_string())));
        TarEnd::Failed(end)
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    TarStream {
        body: Box::pin(body),
        producer,
    }
}

/// Why the chunk writer refused more bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    TooLarge,
    ReceiverGone,
}

struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<Result<hyper::body::Bytes, io::Error>>,
    buf: Vec<u8>,
    written: u64,
    max_bytes: u64,
    /// Set when a write is refused; the tar crate wraps the io error, so
    /// the reason is kept here.
    stop: Option<Stop>,
}

impl ChunkWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk =
            hyper::body::Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            self.stop = Some(Stop::ReceiverGone);
            io::Error::new(io::ErrorKind::BrokenPipe, "Docker stopped reading")
        })
    }

    fn finish(mut self, dir: &Path) -> Result<u64, (RuntimeError, Option<Stop>)> {
        let written = self.written;
        self.send().map_err(|e| {
            let err = RuntimeError::Context {
                context: dir.display().to_string(),
                reason: e.to_string(),
            };
            (err, self.stop)
        })?;
        Ok(written)
    }
}

impl io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.written + data.len() as u64 > self.max_bytes {
            self.stop = Some(Stop::TooLarge);
            return Err(io::Error::other("the build context is over its size cap"));
        }
        self.written += data.len() as u64;
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Write `dir` as an uncompressed tar into `out`, leaving out a top-level
/// `.git`. Symlinks are stored as symlinks, never followed. On failure,
/// the error and the writer's own reason for stopping, when it had one.
fn tar_into<W: io::Write + StopReason>(
    dir: &Path,
    out: W,
) -> Result<W, (RuntimeError, Option<Stop>)> {
    let err = |e: io::Error| RuntimeError::Context {
        context: dir.display().to_string(),
        reason: e.to_string(),
    };
    if !dir.is_dir() {
        let e = RuntimeError::Context {
            context: dir.display().to_string(),
            reason: "is not a directory".to_string(),
        };
        return Err((e, None));
    }
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    if let Err(e) = walk(dir, &mut builder).and_then(|()| builder.finish()) {
        let stop = builder.get_ref().stop_reason();
        return Err((err(e), stop));
    }
    builder.into_inner().map_err(|e| (err(e), None))
}

/// What a writer knows about why it refused bytes.
trait StopReason {
    fn stop_reason(&self) -> Option<Stop>;
}

impl StopReason for ChunkWriter {
    fn stop_reason(&self) -> Option<Stop> {
        self.stop
    }
}

impl StopReason for Vec<u8> {
    fn stop_reason(&self) -> Option<Stop> {
        None
    }
}

fn walk<W: io::Write>(dir: &Path, builder: &mut tar::Builder<W>) -> io::Result<()> {
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(&rel))?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = rel.join(entry.file_name());
            if rel.as_os_str().is_empty() && entry.file_name() == ".git" {
                continue;
            }
            if entry.file_type()?.is_dir() {
                builder.append_dir(&name, entry.path())?;
                stack.push(name);
            } else {
                builder.append_path_with_name(entry.path(), &name)?;
            }
        }
    }
    Ok(())
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
        let bytes = tar_into(dir.path(), Vec::new())
            .map_err(|(e, _)| e)
            .unwrap();
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
        let msg = tar_into(&missing, Vec::new()).unwrap_err().0.to_string();
        assert!(
            msg.contains("nope") && msg.contains("not a directory"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn streamed_tar_is_chunked_and_capped() {
        use futures_util::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(dir.path().join("big"), vec![7u8; 300 * 1024]).unwrap();
        let collect = |max: u64| {
            let dir = dir.path().to_path_buf();
            async move {
                let mut tar = stream_tar(dir, max);
                let mut bytes = Vec::new();
                let mut chunks = 0;
                let mut failed = None;
                while let Some(item) = tar.body.next().await {
                    match item {
                        Ok(c) => {
                            assert!(c.len() <= CHUNK + 10 * 1024, "{}", c.len());
                            chunks += 1;
                            bytes.extend_from_slice(&c);
                        }
                        Err(e) => failed = Some(e.to_string()),
                    }
                }
                (bytes, chunks, failed, tar.producer.await.unwrap())
            }
        };
        let (bytes, chunks, failed, end) = collect(1 << 30).await;
        assert!(failed.is_none(), "{failed:?}");
        assert!(chunks > 3, "{chunks}");
        assert!(
            matches!(end, TarEnd::Sent(n) if n == bytes.len() as u64),
            "{end:?}"
        );
        let names: Vec<String> = tar::Archive::new(&bytes[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, vec!["Dockerfile", "big"]);

        let (_, _, failed, end) = collect(100 * 1024).await;
        let msg = match end {
            TarEnd::Failed(e @ RuntimeError::ContextTooLarge { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(msg.contains("build_context_max_bytes = 102400"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        assert!(
            failed.unwrap().contains("102400"),
            "the body ends in the error"
        );
    }

    #[tokio::test]
    async fn checkout_clones_resolves_refs_and_refreshes_on_relock() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let git = crate::git::git_for_tests;
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main", "."]);
        std::fs::write(repo.join("f"), "one\n").unwrap();
        git(&repo, &["add", "f"]);
        git(&repo, &["commit", "-qm", "one"]);
        git(&repo, &["tag", "v1"]);
        let url = format!("file://{}", repo.display());
        let out = tmp.path().join("checkouts/a");
        let first = checkout(&url, None, &out, false).await.unwrap();
        assert_eq!(std::fs::read_to_string(out.join("f")).unwrap(), "one\n");

        std::fs::write(repo.join("f"), "two\n").unwrap();
        git(&repo, &["commit", "-qam", "two"]);
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
