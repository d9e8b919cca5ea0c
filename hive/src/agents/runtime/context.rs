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
    Git { repo: Repo, git_ref: Option<String> },
}

/// A repository a context is cloned from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repo {
    /// `https://`, `http://`, `ssh://`, `git://` (`git+ssh://`, `ssh+git://`)
    /// or the scp-like `[user@]host:path`: fetched over the network.
    Remote(String),
    /// A repository on this host, by absolute path: a `file://` URL or a
    /// plain path, with or without a `.git` suffix. It is a directory the
    /// clone reads, so [`super::confine`] holds it to the build roots.
    Local(PathBuf),
}

/// The transports git may use for a remote repository (and anything it
/// names, a submodule say): never `file`, so no remote repository can make
/// the hive read a local path, and never `ext` (a command).
pub const REMOTE_PROTOCOLS: &str = "https:http:ssh:git";
/// The one transport git may use for a local repository.
pub const LOCAL_PROTOCOLS: &str = "file";

/// URL schemes read as a remote repository.
const REMOTE_SCHEMES: [&str; 6] = ["https", "http", "ssh", "git", "git+ssh", "ssh+git"];

/// Read a declared build context. A remote URL (see [`Repo::Remote`]) is
/// cloned; anything else is a local path and must be absolute: it is a
/// git repository to clone when it is a `file://` URL, ends in `.git` or
/// comes with a `ref`, else a directory used as it is.
pub fn classify(build: &BuildSpec) -> Result<ContextSource, RuntimeError> {
    let ctx = build.context.trim();
    let bad = |reason: String| RuntimeError::Context {
        context: swarm_queue_client::redact::userinfo(&build.context).into_owned(),
        reason,
    };
    if let Some(r) = &build.git_ref {
        if r.starts_with('-') || r.trim().is_empty() {
            return Err(bad("the git ref must not be empty or start with '-'".into()));
        }
    }
    if ctx.starts_with('-') {
        return Err(bad("a context must not start with '-'".into()));
    }
    let git_ref = build.git_ref.clone();
    let path = match locate(ctx).map_err(bad)? {
        Repo::Remote(url) => {
            let repo = Repo::Remote(url);
            return Ok(ContextSource::Git { repo, git_ref });
        }
        Repo::Local(path) => path,
    };
    let is_file_url = ctx
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("file://"));
    let is_repo = is_file_url || ctx.trim_end_matches('/').ends_with(".git") || git_ref.is_some();
    Ok(if is_repo {
        let repo = Repo::Local(path);
        ContextSource::Git { repo, git_ref }
    } else {
        ContextSource::Dir(path)
    })
}

/// Remote or local, as git itself reads a URL: `scheme://`, then the
/// scp-like form (a `:` with no `/` before it), else a path. A local path
/// must be absolute: the hive resolves nothing against its own working
/// directory (`/` under systemd), which is no build root.
fn locate(ctx: &str) -> Result<Repo, String> {
    let scheme_len = ctx
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(ctx.len());
    let (scheme, after) = ctx.split_at(scheme_len);
    if !scheme.is_empty() && after.starts_with("::") {
        return Err(format!(
            "{scheme}:: names a git remote helper, which may run any command (rule: a context \
             is a directory, a file:// or {} URL, or host:path)",
            REMOTE_SCHEMES.join("/")
        ));
    }
    if let Some(rest) = after.strip_prefix("://") {
        let scheme = scheme.to_ascii_lowercase();
        if REMOTE_SCHEMES.contains(&scheme.as_str()) {
            return Ok(Repo::Remote(ctx.to_string()));
        }
        if scheme != "file" {
            return Err(format!(
                "the hive does not clone {scheme}:// URLs (rule: a remote context is one of {}, \
                 a local one an absolute path or file:///path)",
                REMOTE_SCHEMES.map(|s| format!("{s}://")).join(", ")
            ));
        }
        if !rest.starts_with('/') {
            return Err(format!(
                "a file:// URL must name an absolute path, as file:///srv/repo (rule: a local \
                 build context must be an absolute path; {rest:?} is relative or names a host)"
            ));
        }
        return Ok(Repo::Local(PathBuf::from(rest)));
    }
    match (ctx.find(':'), ctx.find('/')) {
        (Some(colon), slash) if slash.is_none_or(|s| colon < s) => Ok(Repo::Remote(ctx.into())),
        _ if Path::new(ctx).is_absolute() => Ok(Repo::Local(PathBuf::from(ctx))),
        _ => Err(format!(
            "{ctx:?} is relative (rule: a local build context must be an absolute path inside \
             a build root; the hive resolves no path against its working directory)"
        )),
    }
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

async fn git(dir: &Path, protocols: &str, args: &[&str]) -> Result<String, RuntimeError> {
    use crate::git::{Git, GitError};
    let git = Git {
        dir,
        timeout: GIT_TIMEOUT,
        protocols: Some(protocols),
    };
    // Submodules are never fetched, whatever the hive user's git config
    // says: a local repository's could name a path outside its root.
    let mut full = vec!["-c", "submodule.recurse=false"];
    full.extend_from_slice(args);
    git.run(&full).await.map_err(|e| RuntimeError::Git {
        args: swarm_queue_client::redact::userinfo(&args.join(" ")).into_owned(),
        reason: match e {
            GitError::Failed { stderr, .. } => stderr,
            GitError::Spawn(e) => format!("cannot run git: {e} (is git installed?)"),
            GitError::Timeout { timeout, .. } => format!("timed out after {timeout:?}"),
        },
    })
}

impl Repo {
    /// What git is given: the URL, or the local repository's path.
    fn url(&self) -> String {
        match self {
            Repo::Remote(url) => url.clone(),
            Repo::Local(path) => path.display().to_string(),
        }
    }

    /// The repository as errors, logs and job details show it: a URL
    /// without its userinfo.
    pub fn shown(&self) -> String {
        swarm_queue_client::redact::userinfo(&self.url()).into_owned()
    }

    fn protocols(&self) -> &'static str {
        match self {
            Repo::Remote(_) => REMOTE_PROTOCOLS,
            Repo::Local(_) => LOCAL_PROTOCOLS,
        }
    }
}

/// Make `dir` a checkout of `repo` at `git_ref`: clone when there is no
/// checkout of that repository yet, fetch when `refresh` (a relock), then
/// check out the ref
/// (a branch resolves to the remote's branch) and clean. Returns the
/// commit checked out.
///
/// Git runs in `dir` itself (the clone goes into `.`, made empty first),
/// never in the hive's working directory, and may use only the repository's
/// own kind of transport ([`REMOTE_PROTOCOLS`] or [`LOCAL_PROTOCOLS`]). A
/// local repository is cloned with `--no-local`: through git's transport,
/// which sends the commits the refs reach, never by copying its object
/// files as they lie.
pub async fn checkout(
    repo: &Repo,
    git_ref: Option<&str>,
    dir: &Path,
    refresh: bool,
) -> Result<String, RuntimeError> {
    let protocols = repo.protocols();
    let url = repo.url();
    // A checkout of another repository (the agent's context changed) is
    // never reused: it was confined, or fetched, as what it was then.
    let origin = if dir.join(".git").is_dir() {
        git(dir, protocols, &["remote", "get-url", "origin"])
            .await
            .ok()
    } else {
        None
    };
    if origin.as_deref() != Some(url.as_str()) {
        fresh_dir(dir).await?;
        let mut args = vec!["clone", "--quiet", "--no-checkout"];
        if let Repo::Local(_) = repo {
            args.push("--no-local");
        }
        args.extend(["--", &url, "."]);
        git(dir, protocols, &args).await?;
    } else if refresh {
        let args = ["fetch", "--quiet", "--force", "--tags", "origin"];
        git(dir, protocols, &args).await?;
    }
    let candidates: Vec<String> = match git_ref {
        Some(r) => vec![format!("origin/{r}"), r.to_string()],
        None => vec!["origin/HEAD".to_string()],
    };
    let mut commit = None;
    for candidate in &candidates {
        let spec = format!("{candidate}^{{commit}}");
        let args = ["rev-parse", "--verify", "--quiet", &spec];
        if let Ok(c) = git(dir, protocols, &args).await {
            commit = Some(c);
            break;
        }
    }
    let commit = commit.ok_or_else(|| RuntimeError::Context {
        context: repo.shown(),
        reason: format!(
            "ref {:?} is not a branch, tag or commit of the repository",
            git_ref.unwrap_or("HEAD")
        ),
    })?;
    let args = ["checkout", "--quiet", "--force", "--detach", &commit];
    git(dir, protocols, &args).await?;
    git(dir, protocols, &["clean", "--quiet", "-ffdx"]).await?;
    Ok(commit)
}

/// Make `dir` an empty directory of the hive's own, clearing a stale
/// checkout (one without `.git`, or of another repository) first.
async fn fresh_dir(dir: &Path) -> Result<(), RuntimeError> {
    let failed = |reason: String| RuntimeError::Context {
        context: dir.display().to_string(),
        reason,
    };
    if dir.exists() {
        tokio::fs::remove_dir_all(dir)
            .await
            .map_err(|e| failed(format!("cannot clear a stale checkout: {e}")))?;
    }
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| failed(format!("cannot make the checkout directory: {e}")))
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
        let remote = |url: &str, r: Option<&str>| ContextSource::Git {
            repo: Repo::Remote(url.into()),
            git_ref: r.map(Into::into),
        };
        let local = |path: &str, r: Option<&str>| ContextSource::Git {
            repo: Repo::Local(path.into()),
            git_ref: r.map(Into::into),
        };
        let dir = |path: &str| ContextSource::Dir(path.into());
        let ok = [
            (build("/srv/ctx", None, None), dir("/srv/ctx")),
            (build(" /srv/ctx/ ", None, None), dir("/srv/ctx/")),
            (build("/srv/a:b", None, None), dir("/srv/a:b")),
            (build("/srv/../etc", None, None), dir("/srv/../etc")),
            (
                build("/srv/repo", Some("main"), None),
                local("/srv/repo", Some("main")),
            ),
            (
                build("/srv/repo.git", None, None),
                local("/srv/repo.git", None),
            ),
            (
                build("/srv/repo/.git", None, None),
                local("/srv/repo/.git", None),
            ),
            (
                build("/srv/repo/.git/", None, None),
                local("/srv/repo/.git/", None),
            ),
            (
                build("file:///srv/repo", Some("v1"), None),
                local("/srv/repo", Some("v1")),
            ),
            (
                build("file:///srv/repo", None, None),
                local("/srv/repo", None),
            ),
            (build("FILE:///srv/r", None, None), local("/srv/r", None)),
            (
                build("https://forge/x.git", None, None),
                remote("https://forge/x.git", None),
            ),
            (
                build("HTTPS://forge/x", Some("m"), None),
                remote("HTTPS://forge/x", Some("m")),
            ),
            (
                build("http://forge/x", None, None),
                remote("http://forge/x", None),
            ),
            (
                build("ssh://git@forge/x", None, None),
                remote("ssh://git@forge/x", None),
            ),
            (
                build("git://forge/x", None, None),
                remote("git://forge/x", None),
            ),
            (
                build("git+ssh://forge/x", None, None),
                remote("git+ssh://forge/x", None),
            ),
            (
                build("git@forge:x", None, None),
                remote("git@forge:x", None),
            ),
            (
                build("forge:org/x.git", None, None),
                remote("forge:org/x.git", None),
            ),
        ];
        for (b, want) in ok {
            assert_eq!(classify(&b).unwrap(), want, "{b:?}");
        }
        let relative = "a local build context must be an absolute path";
        let bad = [
            (build("ctx", None, None), relative),
            (build("srv/secret", None, None), relative),
            (build("srv/secret", Some("main"), None), relative),
            (build("srv/secret/.git", None, None), relative),
            (build("./srv/secret", None, None), relative),
            (build("./srv/secret", Some("main"), None), relative),
            (build("../secret.git", None, None), relative),
            (build("srv/a:b", Some("main"), None), relative),
            (build("", Some("main"), None), relative),
            (build(".git", None, None), relative),
            (
                build("file://srv/secret", None, None),
                "must name an absolute path",
            ),
            (
                build("file://localhost/srv", None, None),
                "must name an absolute path",
            ),
            (
                build("file://", Some("main"), None),
                "must name an absolute path",
            ),
            (
                build("ftp://forge/x.git", None, None),
                "does not clone ftp://",
            ),
            (build("ext::sh -c id", Some("main"), None), "remote helper"),
            (build("fd::3", None, None), "remote helper"),
            (
                build("/srv/repo", Some("--upload-pack=x"), None),
                "start with '-'",
            ),
            (build("/srv/repo", Some(" "), None), "must not be empty"),
            (build("-x", None, None), "start with '-'"),
            (build("--upload-pack=x:y", None, None), "start with '-'"),
        ];
        for (b, why) in bad {
            let msg = classify(&b).unwrap_err().to_string();
            assert!(msg.contains(why), "{b:?}: {msg}");
            assert!(msg.contains(&b.context), "{msg}");
        }
        let leaky = build("ftp://user:s3cr3t@forge/x", None, None);
        let msg = classify(&leaky).unwrap_err().to_string();
        assert!(
            !msg.contains("s3cr3t") && msg.contains("ftp://***@forge/x"),
            "{msg}"
        );
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
        let url = Repo::Local(repo.clone());
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
        // A checkout of another repository is replaced, never reused.
        let other = tmp.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        git(&other, &["init", "-q", "-b", "main", "."]);
        std::fs::write(other.join("g"), "other\n").unwrap();
        git(&other, &["add", "g"]);
        git(&other, &["commit", "-qm", "other"]);
        checkout(&Repo::Local(other), None, &out, false)
            .await
            .unwrap();
        assert!(!out.join("f").exists());
        assert_eq!(std::fs::read_to_string(out.join("g")).unwrap(), "other\n");

        let missing = Repo::Local("/nonexistent/repo".into());
        let err = checkout(&missing, None, &tmp.path().join("b"), false)
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeError::Git { .. }), "{err}");

        // A remote repository may not use the file transport: neither
        // itself nor anything it names (a submodule, a redirect).
        let as_remote = Repo::Remote(format!("file://{}", repo.display()));
        let err = checkout(&as_remote, None, &tmp.path().join("c"), false)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("transport 'file' not allowed"), "{err}");
    }
}
