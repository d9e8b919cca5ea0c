//! Writes below a directory an agent can change: its state dir, mounted
//! read-write at `/state`, where the hive delivers credentials. The agent
//! may replace anything in there with a symbolic link to a host path, and
//! the hive (root on the host) resolves that link on the host, so a write
//! by path could land anywhere.
//!
//! So a [`Dir`] is a descriptor, and each step down is an `openat` with
//! `O_NOFOLLOW | O_DIRECTORY` relative to the descriptor before it: a link
//! (or anything that is not a directory) at any component is refused with
//! [`NoFollowError::Refused`], never followed. A mode is set on the opened
//! descriptor (`fchmod`), never through a path. A file is replaced by a
//! new file made here (`O_CREAT | O_EXCL | O_NOFOLLOW`) and renamed over
//! it: `renameat` replaces a directory entry and follows nothing, so no
//! inode the agent put there (a link, a hard link) is ever written to.
//!
//! Only the root a [`Dir`] starts from is opened by path, following links:
//! the caller passes a directory the agent cannot write (the agent's own
//! dir, whose parent only the hive sees), whose path the operator chose.
//!
//! Invariant: nothing here follows a symbolic link below the root it was
//! given. Blocking: run it on the blocking pool.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Why a path below the root was not used.
#[derive(Debug, thiserror::Error)]
pub enum NoFollowError {
    /// Something other than what the hive writes there: a link planted by
    /// whoever can write the directory, most likely.
    #[error(
        "refused {path}: it is {found}, not {wanted}; the hive follows no link below an \
         agent's state dir"
    )]
    Refused {
        path: PathBuf,
        found: &'static str,
        wanted: &'static str,
    },
    #[error("{name:?} below {dir} is not a single path component")]
    BadName { dir: PathBuf, name: String },
    #[error("cannot {what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl NoFollowError {
    /// What was found where, without the rule: for a list of refusals.
    pub fn finding(&self) -> String {
        match self {
            NoFollowError::Refused {
                path,
                found,
                wanted,
            } => format!("{} is {found}, not {wanted}", path.display()),
            other => other.to_string(),
        }
    }

    /// The path that was refused or failed.
    pub fn path(&self) -> &Path {
        match self {
            NoFollowError::Refused { path, .. } | NoFollowError::Io { path, .. } => path,
            NoFollowError::BadName { dir, .. } => dir,
        }
    }
}

/// An open directory; every step below it follows no link.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// For messages only: never opened again by this path.
    path: PathBuf,
}

impl Dir {
    /// Open `path`, a directory only the hive can write, as the root;
    /// links in `path` itself are followed (the operator chose it).
    pub fn open_root(path: &Path) -> Result<Dir, NoFollowError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(io("open", path))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Where this directory was when it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `name` in this one, made with `mode` (less the
    /// umask) when missing. A link or a non-directory there is refused.
    pub fn child(&self, name: &str, mode: u32) -> Result<Dir, NoFollowError> {
        let path = self.entry(name)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let open = || rustix::fs::openat(&self.fd, name, flags, Mode::empty());
        let fd = match open() {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io("create", &path)(e)),
                }
                // Whatever is there now is checked as if it had been there.
                open().map_err(|e| self.refusal(name, "a directory", e))?
            }
            Err(e) => return Err(self.refusal(name, "a directory", e)),
        };
        Ok(Dir { fd, path })
    }

    /// Set this directory's mode, through its descriptor.
    pub fn set_mode(&self, mode: u32) -> Result<(), NoFollowError> {
        rustix::fs::fchmod(&self.fd, Mode::from_raw_mode(mode)).map_err(io("chmod", &self.path))
    }

    /// Replace the file `name` with `bytes`, mode 0600: written to a new
    /// file beside it, synced, then renamed over it, so a reader never sees
    /// a partial file. Anything but a regular file under `name` is refused.
    pub fn write_private(&self, name: &str, bytes: &[u8]) -> Result<(), NoFollowError> {
        let path = self.entry(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
                return Err(NoFollowError::Refused {
                    path,
                    found: describe(FileType::from_raw_mode(st.st_mode)),
                    wanted: "a regular file",
                })
            }
            Ok(_) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io("inspect", &path)(e)),
        }
        let (tmp, file) = self.new_file(name)?;
        let written = write_synced(file, bytes)
            .map_err(|source| NoFollowError::Io {
                what: "write",
                path: self.path.join(&tmp),
                source,
            })
            // A link planted under `name` since the check is replaced, not
            // followed: rename acts on the entry.
            .and_then(|()| {
                rustix::fs::renameat(&self.fd, &tmp, &self.fd, name).map_err(io("replace", &path))
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written?;
        // The rename itself survives a crash only once the directory is.
        let _ = rustix::fs::fsync(&self.fd);
        Ok(())
    }

    /// A new file for `name`'s next content, under a name no one else
    /// uses (`O_EXCL`: a name taken meanwhile is skipped, never opened).
    fn new_file(&self, name: &str) -> Result<(String, std::fs::File), NoFollowError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut last = Errno::EXIST;
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tmp = format!(".{name}.{}-{n}.tmp", std::process::id());
            match rustix::fs::openat(&self.fd, tmp.as_str(), flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((tmp, fd.into())),
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => {
                    last = e;
                    break;
                }
            }
        }
        Err(io("create a temporary file in", &self.path)(last))
    }

    /// `name` as a path for messages, once it is known to be one component.
    fn entry(&self, name: &str) -> Result<PathBuf, NoFollowError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(NoFollowError::BadName {
                dir: self.path.clone(),
                name: name.to_string(),
            });
        }
        Ok(self.path.join(name))
    }

    /// Why opening `name` as `wanted` failed: what is there, when that is
    /// the reason (a link, a file), else the error.
    fn refusal(&self, name: &str, wanted: &'static str, e: Errno) -> NoFollowError {
        let path = self.path.join(name);
        if matches!(e, Errno::LOOP | Errno::NOTDIR | Errno::NOENT) {
            if let Ok(st) = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                return NoFollowError::Refused {
                    path,
                    found: describe(FileType::from_raw_mode(st.st_mode)),
                    wanted,
                };
            }
        }
        io("open", &path)(e)
    }
}

fn write_synced(mut file: std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.write_all(bytes)?;
    // Exactly 0600, whatever the umask took from the mode it was made with.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.sync_all()
}

fn describe(t: FileType) -> &'static str {
    match t {
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a directory",
        FileType::RegularFile => "a regular file",
        FileType::Fifo => "a named pipe",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "something unknown",
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(Errno) -> NoFollowError {
    let path = path.to_path_buf();
    move |e| NoFollowError::Io {
        what,
        path,
        source: e.into(),
    }
}

mod existing;
#[cfg(test)]
mod tests;
