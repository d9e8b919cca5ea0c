//! # Registry logins for pulls
//!
//! Private images sit behind a login. The hive reads the logins from one
//! file, `registry_auth_file` in its config: a Docker `config.json`, the
//! format `docker login` writes:
//!
//! ```json
//! { "auths": { "registry.example:5000": { "auth": "<base64 of user:pass>" } } }
//! ```
//!
//! An entry may give `username` and `password` instead of `auth`. For each
//! pull the runtime asks [`RegistryAuth::login_for`] with the image
//! reference; the registry host is found the way Docker finds it (the first
//! path component when it has a `.` or a `:` or is `localhost`, else Docker
//! Hub) and the matching login goes to dockerd with that one pull.
//!
//! **The file is re-read when it changes**: its modification time and size
//! are compared on every lookup, which is cheap next to a pull, so a rotated
//! password takes effect on the next pull without a restart.
//!
//! **Invariant: a password never leaves this module except towards
//! dockerd.** [`Login`]'s `Debug` prints the user and the registry only; a
//! parse error names the file and a line and column, never a value; and
//! [`Login::scrub`] removes the password (plain and base64) from any
//! message dockerd sends back before it is logged, stored or published.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Deserialize;

/// The registry Docker uses for a reference without a registry host.
pub const DOCKER_HUB: &str = "docker.io";

/// One registry login, as handed to dockerd for a pull.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// `host[:port]`, as in the image reference.
    pub registry: String,
    pub username: String,
    password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Login {
    /// The credentials in bollard's form, for the one request that needs
    /// them.
    pub fn to_docker(&self) -> bollard::auth::DockerCredentials {
        bollard::auth::DockerCredentials {
            username: Some(self.username.clone()),
            password: Some(self.password.clone()),
            serveraddress: Some(self.registry.clone()),
            ..Default::default()
        }
    }

    /// `text` with every form of the password in it replaced: the plain
    /// password and the base64 of `user:password` (the `auth` field).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        let encoded = STANDARD.encode(format!("{}:{}", self.username, self.password));
        for secret in [encoded.as_str(), self.password.as_str()] {
            if !secret.is_empty() {
                out = out.replace(secret, "<redacted>");
            }
        }
        out
    }
}

/// Why the logins could not be read. Messages name the file, never a value
/// from it.
#[derive(Debug, thiserror::Error)]
pub enum RegistryAuthError {
    #[error("registry_auth_file {path}: cannot read it: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error(
        "registry_auth_file {path}: not a Docker config.json ({category} error at line {line} \
         column {column})"
    )]
    Parse {
        path: PathBuf,
        category: &'static str,
        line: usize,
        column: usize,
    },
    #[error(
        "registry_auth_file {path}: the entry for {registry} has neither a valid `auth` \
         (base64 of user:password) nor `username` and `password`"
    )]
    Entry { path: PathBuf, registry: String },
}

/// The logins of one `registry_auth_file`, re-read when it changes.
#[derive(Debug)]
pub struct RegistryAuth {
    path: PathBuf,
    cached: Mutex<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    stamp: (Option<SystemTime>, u64),
    logins: BTreeMap<String, Login>,
}

impl RegistryAuth {
    /// Logins from `path`; nothing is read until the first lookup.
    pub fn new(path: PathBuf) -> RegistryAuth {
        RegistryAuth {
            path,
            cached: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The login for the registry `image` is pulled from, if the file has
    /// one.
    pub fn login_for(&self, image: &str) -> Result<Option<Login>, RegistryAuthError> {
        let registry = registry_of(image);
        let meta = std::fs::metadata(&self.path).map_err(|e| RegistryAuthError::Read {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut slot = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().map(|c| c.stamp) != Some(stamp) {
            let text = std::fs::read(&self.path).map_err(|e| RegistryAuthError::Read {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
            let logins = parse(&self.path, &text)?;
            tracing::info!(file = %self.path.display(), registries = ?logins.keys().collect::<Vec<_>>(), "registry logins read");
            *slot = Some(Cached { stamp, logins });
        }
        Ok(slot.as_ref().and_then(|c| c.logins.get(&registry)).cloned())
    }
}

/// The registry host of an image reference, Docker's way.
pub fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => {
            normalize_host(first)
        }
        _ => DOCKER_HUB.to_string(),
    }
}

/// A key of `auths` as a bare `host[:port]`: `docker login` writes
/// `https://index.docker.io/v1/` for Docker Hub and a plain host otherwise.
fn normalize_host(key: &str) -> String {
    let bare = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = bare.split('/').next().unwrap_or(bare).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DOCKER_HUB.to_string()
        }
        _ => host,
    }
}

#[derive(Deserialize)]
struct DockerConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

fn parse(path: &Path, text: &[u8]) -> Result<BTreeMap<String, Login>, RegistryAuthError> {
    let file: DockerConfigFile =
        serde_json::from_slice(text).map_err(|e| RegistryAuthError::Parse {
            path: path.to_path_buf(),
            category: match e.classify() {
                serde_json::error::Category::Io => "read",
                serde_json::error::Category::Syntax => "syntax",
                serde_json::error::Category::Data => "type",
                serde_json::error::Category::Eof => "truncated",
            },
            line: e.line(),
            column: e.column(),
        })?;
    let mut logins = BTreeMap::new();
    for (key, entry) in file.auths {
        let registry = normalize_host(&key);
        let bad = || RegistryAuthError::Entry {
            path: path.to_path_buf(),
            registry: registry.clone(),
        };
        let (username, password) = match (entry.username, entry.password, entry.auth) {
            (Some(u), Some(p), _) if !u.is_empty() => (u, p),
            (_, _, Some(auth)) => {
                let decoded = STANDARD.decode(auth.trim()).map_err(|_| bad())?;
                let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
                let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
                (u.to_string(), p.to_string())
            }
            _ => return Err(bad()),
        };
        logins.insert(
            registry.clone(),
            Login {
                registry,
                username,
                password,
            },
        );
    }
    Ok(logins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_of_a_reference_is_found_the_docker_way() {
        let cases = [
            ("busybox", "docker.io"),
            ("library/busybox:1", "docker.io"),
            ("127.0.0.1:5000/x/y:1", "127.0.0.1:5000"),
            ("localhost/x", "localhost"),
            (
                "Registry.Example.com/team/app@sha256:ab",
                "registry.example.com",
            ),
        ];
        for (image, registry) in cases {
            assert_eq!(registry_of(image), registry, "{image}");
        }
    }

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn auth_and_username_password_entries_are_both_read() {
        let auth = STANDARD.encode("alice:pa:ss");
        let (_d, path) = write(&format!(
            r#"{{"auths": {{"127.0.0.1:5000": {{"auth": "{auth}"}},
                "https://index.docker.io/v1/": {{"username": "bob", "password": "hub"}}}}}}"#
        ));
        let auth = RegistryAuth::new(path);
        let l = auth.login_for("127.0.0.1:5000/x:1").unwrap().unwrap();
        assert_eq!(
            (l.username.as_str(), l.password.as_str()),
            ("alice", "pa:ss")
        );
        let l = auth.login_for("busybox").unwrap().unwrap();
        assert_eq!((l.username.as_str(), l.password.as_str()), ("bob", "hub"));
        assert!(auth.login_for("other.example/x").unwrap().is_none());
    }

    #[test]
    fn a_changed_file_is_read_again() {
        let (_d, path) = write(r#"{"auths": {"r.example": {"username": "u", "password": "one"}}}"#);
        let auth = RegistryAuth::new(path.clone());
        assert_eq!(
            auth.login_for("r.example/x").unwrap().unwrap().password,
            "one"
        );
        // A different size is a change even within the mtime's resolution.
        std::fs::write(
            &path,
            r#"{"auths": {"r.example": {"username": "u", "password": "two2"}}}"#,
        )
        .unwrap();
        assert_eq!(
            auth.login_for("r.example/x").unwrap().unwrap().password,
            "two2"
        );
    }

    #[test]
    fn no_error_and_no_debug_output_shows_a_password() {
        let (_d, path) = write(r#"{"auths": {"r.example": {"auth": 12345678}}}"#);
        let err = RegistryAuth::new(path)
            .login_for("r.example/x")
            .unwrap_err();
        assert!(!err.to_string().contains("12345678"), "{err}");
        let (_d, path) = write(r#"{"auths": {"r.example": {"auth": "not base64 s3cret"}}}"#);
        let err = RegistryAuth::new(path)
            .login_for("r.example/x")
            .unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(err.to_string().contains("r.example"), "{err}");

        let login = Login {
            registry: "r.example".into(),
            username: "u".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{login:?}").contains("s3cret"));
        let encoded = STANDARD.encode("u:s3cret");
        let scrubbed = login.scrub(&format!("got s3cret and {encoded} back"));
        assert_eq!(scrubbed, "got <redacted> and <redacted> back");
    }
}
