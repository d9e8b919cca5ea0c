//! # A client of a hive's operator API
//!
//! The operator API is served on a Unix socket (`<state>/hive.sock`, mode
//! 0660, group `hyperhive`), as dockerd's is: the file mode and group decide
//! who may drive the hive, and no browser page can reach a Unix socket.
//! The TCP listener serves health and metrics, and the API only when the
//! operator enabled remote writes (a bearer token from a 0600 file).
//!
//! [`ApiClient`] speaks to either: an endpoint that starts with `http://`
//! or `https://` is TCP (through reqwest, with the token when one is
//! given); anything else is a socket path (`unix:` prefix optional),
//! spoken to with hyper's HTTP/1 client over a tokio `UnixStream`. reqwest
//! has no Unix socket support, and hyper is already in the tree through
//! axum and bollard, so this costs no new crate.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::Method;
use hyper_util::rt::TokioIo;

/// How long one request may take before the client gives up.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Where the API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The hive's Unix socket.
    Socket(PathBuf),
    /// A TCP base URL; writes there need the hive's bearer token.
    Tcp { base: String },
}

impl Endpoint {
    /// `http://…`/`https://…` is TCP; `unix:PATH` or a plain path is a socket.
    pub fn parse(text: &str) -> Endpoint {
        let t = text.trim();
        if t.starts_with("http://") || t.starts_with("https://") {
            Endpoint::Tcp {
                base: t.trim_end_matches('/').to_string(),
            }
        } else {
            Endpoint::Socket(PathBuf::from(t.strip_prefix("unix:").unwrap_or(t)))
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Socket(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp { base } => f.write_str(base),
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "permission denied on the hive's socket {path}: only root and members of the \
         socket's group (hyperhive on NixOS) may use the operator API"
    )]
    SocketDenied {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to the hive's socket {path}")]
    SocketConnect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the request to {endpoint} failed")]
    Transport {
        endpoint: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("no answer from {endpoint} within {TIMEOUT:?}")]
    Timeout { endpoint: String },
    #[error("cannot read the API token file {path}")]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A status and the raw body of an answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// A client of one hive's API.
#[derive(Debug, Clone)]
pub struct ApiClient {
    pub endpoint: Endpoint,
    /// Sent as `Authorization: Bearer …` over TCP; never over the socket,
    /// whose file mode is the authorization.
    token: Option<String>,
    http: reqwest::Client,
    /// For answers read as they come (`logs --follow`): no limit on the
    /// whole answer, only on getting its status.
    streaming: reqwest::Client,
}

impl ApiClient {
    pub fn new(endpoint: Endpoint) -> ApiClient {
        ApiClient {
            endpoint,
            token: None,
            http: reqwest::Client::builder()
                .timeout(TIMEOUT)
                .build()
                .unwrap_or_default(),
            streaming: reqwest::Client::builder()
                .connect_timeout(TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }

    /// Read the bearer token for TCP writes from `path` (trailing
    /// whitespace trimmed).
    pub fn with_token_file(mut self, path: &Path) -> Result<ApiClient, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClientError::TokenFile {
            path: path.to_path_buf(),
            source,
        })?;
        self.token = Some(text.trim().to_string());
        Ok(self)
    }

    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.request(Method::GET, path, None).await
    }

    /// POST `body` as `application/json`.
    pub async fn post_json(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<Answer, ClientError> {
        // Plain data always serializes.
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        self.request(Method::POST, path, Some(bytes)).await
    }

    /// GET `path` and pass each piece of a 200 answer's body to `on_chunk`
    /// as it arrives, for as long as the answer lasts (only its status must
    /// come within the usual time). Any other answer is returned whole;
    /// after a 200, the returned body is empty.
    pub async fn get_streaming(
        &self,
        path: &str,
        on_chunk: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<Answer, ClientError> {
        let endpoint = self.endpoint.to_string();
        let transport = |e: Box<dyn std::error::Error + Send + Sync>| ClientError::Transport {
            endpoint: endpoint.clone(),
            source: e,
        };
        let timeout = || ClientError::Timeout {
            endpoint: endpoint.clone(),
        };
        match &self.endpoint {
            Endpoint::Socket(socket) => {
                let send = unix_send(socket, Method::GET, path, None);
                let resp = tokio::time::timeout(TIMEOUT, send)
                    .await
                    .map_err(|_| timeout())??;
                if resp.status() != 200 {
                    return read_whole(resp, &endpoint).await;
                }
                let mut body = resp.into_body();
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| transport(Box::new(e)))?;
                    if let Some(data) = frame.data_ref() {
                        on_chunk(data);
                    }
                }
                Ok(Answer {
                    status: 200,
                    body: Bytes::new(),
                })
            }
            Endpoint::Tcp { base } => {
                let mut req = self.streaming.get(format!("{base}{path}"));
                if let Some(t) = &self.token {
                    req = req.header(AUTHORIZATION, format!("Bearer {t}"));
                }
                let resp = tokio::time::timeout(TIMEOUT, req.send())
                    .await
                    .map_err(|_| timeout())?
                    .map_err(|e| transport(Box::new(e)))?;
                let status = resp.status().as_u16();
                if status != 200 {
                    let body = resp.bytes().await.map_err(|e| transport(Box::new(e)))?;
                    return Ok(Answer { status, body });
                }
                let mut resp = resp;
                while let Some(chunk) = resp.chunk().await.map_err(|e| transport(Box::new(e)))? {
                    on_chunk(&chunk);
                }
                Ok(Answer {
                    status,
                    body: Bytes::new(),
                })
            }
        }
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClientError> {
        let endpoint = self.endpoint.to_string();
        let work = async {
            match &self.endpoint {
                Endpoint::Socket(socket) => unix_request(socket, method, path, body).await,
                Endpoint::Tcp { base } => self.tcp_request(base, method, path, body).await,
            }
        };
        tokio::time::timeout(TIMEOUT, work)
            .await
            .map_err(|_| ClientError::Timeout { endpoint })?
    }

    async fn tcp_request(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClientError> {
        let transport = |e: reqwest::Error| ClientError::Transport {
            endpoint: base.to_string(),
            source: Box::new(e),
        };
        let mut req = self.http.request(method, format!("{base}{path}"));
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req.header(CONTENT_TYPE, "application/json").body(b);
        }
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(transport)?;
        Ok(Answer { status, body })
    }
}

async fn unix_request(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Answer, ClientError> {
    let resp = unix_send(socket, method, path, body).await?;
    read_whole(resp, &format!("unix:{}", socket.display())).await
}

/// The status and whole body of `resp`.
async fn read_whole(
    resp: hyper::Response<hyper::body::Incoming>,
    endpoint: &str,
) -> Result<Answer, ClientError> {
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ClientError::Transport {
            endpoint: endpoint.to_string(),
            source: Box::new(e),
        })?
        .to_bytes();
    Ok(Answer { status, body })
}

/// Send one request on a new connection to `socket`; the answer with its
/// body still to read.
async fn unix_send(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::PermissionDenied => ClientError::SocketDenied {
                path: socket.to_path_buf(),
                source,
            },
            _ => ClientError::SocketConnect {
                path: socket.to_path_buf(),
                source,
            },
        })?;
    let transport = |e: Box<dyn std::error::Error + Send + Sync>| ClientError::Transport {
        endpoint: format!("unix:{}", socket.display()),
        source: e,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| transport(Box::new(e)))?;
    // The connection task ends when the answer is read and the sender dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, "localhost");
    if body.is_some() {
        req = req.header(CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| transport(Box::new(e)))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| transport(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let table = [
            (
                "http://127.0.0.1:7390/",
                Endpoint::Tcp {
                    base: "http://127.0.0.1:7390".into(),
                },
            ),
            (
                "/var/lib/hyperhive/hive.sock",
                Endpoint::Socket("/var/lib/hyperhive/hive.sock".into()),
            ),
            ("unix:/run/h.sock", Endpoint::Socket("/run/h.sock".into())),
        ];
        for (text, want) in table {
            assert_eq!(Endpoint::parse(text), want, "{text}");
        }
        assert_eq!(
            Endpoint::Socket("/run/h.sock".into()).to_string(),
            "unix:/run/h.sock"
        );
    }
}
