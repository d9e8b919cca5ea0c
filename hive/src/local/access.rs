//! # Who may reach the operator API
//!
//! The operator API ([`crate::local::api`]) can deploy any image with any
//! mounts a spec allows and can delete agent data, so "it listens on loopback"
//! is not enough: every local user, and every web page a browser on the host
//! opens, can reach loopback (a cross-site `text/plain` POST needs no
//! preflight). The API is therefore served where dockerd serves its own:
//!
//! - a Unix socket, `<state>/hive.sock`, mode 0660 and a configurable group
//!   (`hyperhive` on NixOS). The file's mode and group are the
//!   authorization; no browser can open a Unix socket. [`bind_socket`]
//!   creates it in a private staging directory, sets mode and group, and
//!   only then moves it into place, so it is never reachable with looser
//!   permissions.
//! - the TCP listener serves only `GET /health/live`, `/health/ready` and
//!   `/metrics`; anything else is 404 or 405. With remote writes enabled
//!   (`api_token_file`), it also serves the API to requests that carry the
//!   bearer token, no `Origin` header and, for writes,
//!   `Content-Type: application/json` ([`check_remote`]).
//!
//! Deciding is apart from doing: [`check_remote`] is a pure function with
//! table tests; the middleware only applies it.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::config::ApiToken;
use crate::shutdown::Shutdown;

/// The socket's mode: owner and group read and write, nobody else.
pub const SOCKET_MODE: u32 = 0o660;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("cannot create the operator API socket {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} exists and is not a socket; refusing to replace it with the operator API socket"
    )]
    NotASocket { path: PathBuf },
    #[error("another process already serves on the operator API socket {path}")]
    InUse { path: PathBuf },
    #[error(
        "api_socket_group {group:?} is not a group on this host (not in /etc/group, not a number)"
    )]
    NoSuchGroup { group: String },
    #[error("cannot give the operator API socket {path} to group {group:?} (gid {gid})")]
    Chown {
        path: PathBuf,
        group: String,
        gid: u32,
        #[source]
        source: std::io::Error,
    },
}

/// Bind the operator API's socket at `path`, mode 0660, group `group` when
/// given. A stale socket left by a killed hive is replaced; a live one, or a
/// file that is not a socket, is an error naming the path. The listener is
/// non-blocking, ready for [`serve_socket`].
pub fn bind_socket(
    path: &Path,
    group: Option<&str>,
) -> Result<std::os::unix::net::UnixListener, SocketError> {
    let create = |source| SocketError::Create {
        path: path.to_path_buf(),
        source,
    };
    remove_stale(path)?;
    let gid = group.map(resolve_group).transpose()?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let staging = parent.join(format!(".hive.sock.staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(create)?;
    let result = (|| {
        let staged = staging.join("hive.sock");
        let listener = std::os::unix::net::UnixListener::bind(&staged).map_err(create)?;
        listener.set_nonblocking(true).map_err(create)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(SOCKET_MODE))
            .map_err(create)?;
        if let (Some(gid), Some(group)) = (gid, group) {
            std::os::unix::fs::chown(&staged, None, Some(gid)).map_err(|source| {
                SocketError::Chown {
                    path: path.to_path_buf(),
                    group: group.to_string(),
                    gid,
                    source,
                }
            })?;
        }
        std::fs::rename(&staged, path).map_err(create)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// Serve `router` on the socket until shutdown. The daemon removes the
/// socket file after the drain (a supervised restart serves the same one).
pub async fn serve_socket(
    listener: std::os::unix::net::UnixListener,
    router: Router,
    mut shutdown: Shutdown,
) -> std::io::Result<()> {
    let listener = tokio::net::UnixListener::from_std(listener)?;
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await
}

/// The routers for the two listeners: the socket gets health and the API;
/// TCP gets health, and the API behind [`check_remote`] only when remote
/// writes are enabled (a token is configured).
pub fn routers(health: Router, api: Option<Router>, token: Option<ApiToken>) -> (Router, Router) {
    let socket = match &api {
        Some(api) => health.clone().merge(api.clone()),
        None => health.clone(),
    };
    let tcp = match (api, token) {
        (Some(api), Some(token)) => {
            health.merge(api.route_layer(axum::middleware::from_fn_with_state(token, remote_guard)))
        }
        _ => health,
    };
    (tcp, socket)
}

/// Why a request over TCP was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A browser page sent it: browsers always set `Origin` on cross-site
    /// and on non-GET requests, and no operator tool does.
    Origin(String),
    /// No `Authorization: Bearer …`, or not the configured token.
    Token,
    /// A write without `Content-Type: application/json`; such a request
    /// would need a CORS preflight from a browser, which is never granted.
    ContentType(Option<String>),
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Origin(_) => StatusCode::FORBIDDEN,
            Refusal::Token => StatusCode::UNAUTHORIZED,
            Refusal::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Origin(o) => format!(
                "request with Origin {o:?} refused: the hive's API does not serve browser pages"
            ),
            Refusal::Token => "the hive's API over TCP needs `Authorization: Bearer <token>` \
                 with the token from the hive's api_token_file"
                .to_string(),
            Refusal::ContentType(ct) => format!(
                "a write to the hive's API needs Content-Type: application/json (got {})",
                ct.as_deref().unwrap_or("none")
            ),
        }
    }
}

/// Decide whether a request over TCP may reach the API.
pub fn check_remote(method: &Method, headers: &HeaderMap, token: &ApiToken) -> Result<(), Refusal> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        return Err(Refusal::Origin(
            String::from_utf8_lossy(origin.as_bytes()).to_string(),
        ));
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(p) if constant_time_eq(p.as_bytes(), token.0.as_bytes()) => {}
        _ => return Err(Refusal::Token),
    }
    // POST is the API's only write; any other method is answered 405 by the
    // router, which changes nothing either.
    if method == Method::POST {
        let ct = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string());
        let essence = ct.as_deref().map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        if essence.as_deref() != Some("application/json") {
            return Err(Refusal::ContentType(ct));
        }
    }
    Ok(())
}

async fn remote_guard(State(token): State<ApiToken>, request: Request, next: Next) -> Response {
    match check_remote(request.method(), request.headers(), &token) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(method = %request.method(), path = %request.uri().path(), reason = %refusal.message(), "operator API request over TCP refused");
            let body = crate::local::api::ErrorBody {
                error: refusal.message(),
            };
            (refusal.status(), axum::Json(body)).into_response()
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn remove_stale(path: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(SocketError::InUse {
            path: path.to_path_buf(),
        });
    }
    std::fs::remove_file(path).map_err(|source| SocketError::Create {
        path: path.to_path_buf(),
        source,
    })
}

/// A group name (from /etc/group) or a numeric gid.
fn resolve_group(group: &str) -> Result<u32, SocketError> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let text = std::fs::read_to_string("/etc/group").unwrap_or_default();
    gid_in_group_file(&text, group).ok_or_else(|| SocketError::NoSuchGroup {
        group: group.to_string(),
    })
}

fn gid_in_group_file(text: &str, group: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let gid = fields.nth(1)?;
        (name == group).then(|| gid.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn remote_requests_need_token_json_and_no_origin() {
        let token = ApiToken("0123456789abcdef0123".into());
        let good = "Bearer 0123456789abcdef0123";
        let json = "application/json";
        type Case<'a> = (Method, Vec<(&'static str, &'a str)>, Result<(), Refusal>);
        let table: Vec<Case> = vec![
            (
                Method::POST,
                vec![("authorization", good), ("content-type", json)],
                Ok(()),
            ),
            (
                Method::POST,
                vec![
                    ("authorization", good),
                    ("content-type", "application/json; charset=utf-8"),
                ],
                Ok(()),
            ),
            (Method::GET, vec![("authorization", good)], Ok(())),
            (
                Method::POST,
                vec![("content-type", json)],
                Err(Refusal::Token),
            ),
            (
                Method::POST,
                vec![("authorization", "Bearer nope"), ("content-type", json)],
                Err(Refusal::Token),
            ),
            (Method::GET, vec![], Err(Refusal::Token)),
            (
                Method::POST,
                vec![("authorization", good), ("content-type", "text/plain")],
                Err(Refusal::ContentType(Some("text/plain".into()))),
            ),
            (
                Method::POST,
                vec![("authorization", good)],
                Err(Refusal::ContentType(None)),
            ),
            (
                Method::POST,
                vec![
                    ("authorization", good),
                    ("content-type", json),
                    ("origin", "https://evil.example"),
                ],
                Err(Refusal::Origin("https://evil.example".into())),
            ),
            (
                Method::GET,
                vec![("origin", "null")],
                Err(Refusal::Origin("null".into())),
            ),
        ];
        for (method, pairs, want) in table {
            let got = check_remote(&method, &headers(&pairs), &token);
            assert_eq!(got, want, "{method} {pairs:?}");
        }
        assert_eq!(Refusal::Token.status(), StatusCode::UNAUTHORIZED);
        assert!(Refusal::ContentType(Some("text/plain".into()))
            .message()
            .contains("text/plain"));
    }

    #[test]
    fn groups_resolve_by_name_or_number() {
        let file = "root:x:0:\nhyperhive:x:991:alice,bob\nnogroup:x:65534:\n";
        assert_eq!(gid_in_group_file(file, "hyperhive"), Some(991));
        assert_eq!(gid_in_group_file(file, "hyper"), None);
        assert_eq!(resolve_group("1234").unwrap(), 1234);
        let e = resolve_group("no-such-group-here").unwrap_err().to_string();
        assert!(e.contains("no-such-group-here"), "{e}");
    }

    #[tokio::test]
    async fn socket_is_0660_and_a_stale_one_is_replaced_but_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hive.sock");
        let listener = bind_socket(&path, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let e = bind_socket(&path, None).unwrap_err().to_string();
        assert!(e.contains("already serves"), "{e}");
        drop(listener);
        bind_socket(&path, None).unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let e = bind_socket(&file, None).unwrap_err().to_string();
        assert!(e.contains("is not a socket") && e.contains("plain"), "{e}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.contains("staging"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
