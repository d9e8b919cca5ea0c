//! What a credential's change and removal need besides the write: open a
//! directory only when it is there, compare a file with what would be
//! written, remove a file, and list the files of a directory. The same
//! rule as the rest of [`crate::nofollow`]: nothing below the root follows
//! a link, and nothing that is not a regular file is read.

use std::io::Read;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{describe, io, Dir, NoFollowError};

impl Dir {
    /// The directory `name` in this one, or `None` when nothing is there
    /// (nothing is made). A link or a non-directory there is refused.
    pub fn existing_child(&self, name: &str) -> Result<Option<Dir>, NoFollowError> {
        let path = self.entry(name)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(Dir { fd, path })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.refusal(name, "a directory", e)),
        }
    }

    /// Whether the regular file `name` holds exactly `bytes`; `false` when
    /// there is no such file (or something else is there: the write that
    /// follows refuses it). Reads at most one byte more than `bytes`.
    pub fn holds(&self, name: &str, bytes: &[u8]) -> Result<bool, NoFollowError> {
        let path = self.entry(name)?;
        // NONBLOCK: a named pipe planted there must not hang the read; it
        // is refused by the type check below.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP) => return Ok(false),
            Err(e) => return Err(io("open", &path)(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(io("inspect", &path))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Ok(false);
        }
        let mut have = Vec::with_capacity(bytes.len() + 1);
        std::fs::File::from(fd)
            .take(bytes.len() as u64 + 1)
            .read_to_end(&mut have)
            .map_err(|source| NoFollowError::Io {
                what: "read",
                path,
                source,
            })?;
        Ok(have == bytes)
    }

    /// Remove the file `name` (a link there is removed, never followed);
    /// whether there was one. A directory there is refused.
    pub fn remove_file(&self, name: &str) -> Result<bool, NoFollowError> {
        let path = self.entry(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                return Err(NoFollowError::Refused {
                    path,
                    found: describe(FileType::Directory),
                    wanted: "a regular file",
                })
            }
            Ok(_) => {}
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(io("inspect", &path)(e)),
        }
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => {
                let _ = rustix::fs::fsync(&self.fd);
                Ok(true)
            }
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io("remove", &path)(e)),
        }
    }

    /// The names of the entries in this directory that are not hidden
    /// (no leading `.`: the temporary files of a write), at most `max`,
    /// sorted. Whatever they are: the caller reads only names.
    pub fn names(&self, max: usize) -> Result<Vec<String>, NoFollowError> {
        let mut dir = rustix::fs::Dir::read_from(&self.fd).map_err(io("list", &self.path))?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(io("list", &self.path))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            out.push(name.to_string());
            if out.len() >= max {
                break;
            }
        }
        out.sort();
        Ok(out)
    }
}
