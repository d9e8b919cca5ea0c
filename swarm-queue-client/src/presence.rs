//! The NATS server's own word on who is connected: the connect and
//! disconnect events it publishes in its system account, and its connection
//! list (`CONNZ`), as the controller reads them to show a dead hive
//! `offline` within a moment instead of after `stale_after`.
//!
//! The generated accounts (see [`crate::permissions::accounts`]) have the
//! system account export exactly these three subjects to the buckets'
//! account alone, and the controller's user may subscribe to the two event
//! subjects and publish the one request ([`CONNZ_REQUEST`], the local name
//! of the import); nothing else of the system account reaches any identity
//! of hyperhive.
//!
//! With per-hive accounts, the account token of an event subject is the
//! hive's name. A connection is named by the server that holds it and the
//! client id that server gave it: client ids are unique per server, so a
//! reconnect (a new id) never shares a name with the connection it
//! replaces, and a late disconnect of the old one cannot close the new.

use serde::Deserialize;

/// The account nats-server uses as its system account when
/// `system_account` is not set; the generated config defines it.
pub const SYSTEM_ACCOUNT: &str = "$SYS";

/// `$SYS.ACCOUNT.<account>.CONNECT`: a client connected (all accounts).
pub const CONNECT_EVENTS: &str = "$SYS.ACCOUNT.*.CONNECT";

/// `$SYS.ACCOUNT.<account>.DISCONNECT`: a client's connection closed.
pub const DISCONNECT_EVENTS: &str = "$SYS.ACCOUNT.*.DISCONNECT";

/// In the system account: every server answers with its own open
/// connections, of every account.
pub const CONNZ_EXPORT: &str = "$SYS.REQ.SERVER.PING.CONNZ";

/// Where the buckets' account imports [`CONNZ_EXPORT`], and so what the
/// controller asks. Not the export's own name: every account already has
/// an automatic import of that name which answers with its own account's
/// connections only, and a server without the system-account part must
/// give no answer here (no responders), not a list without the hives.
pub const CONNZ_REQUEST: &str = "hyperhive.connz";

/// One client connection: the server holding it and the id it gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    pub server: String,
    pub cid: u64,
}

/// What a connect or disconnect event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnEvent {
    /// The account the client is in: the hive's name for a hive.
    pub account: String,
    pub conn: ConnKey,
    /// `true` for a connect, `false` for a disconnect.
    pub up: bool,
    /// Why it closed (the server's words; empty for a connect).
    pub reason: String,
}

/// A system message that does not say what hyperhive reads from it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresenceError {
    #[error("subject {0:?} is not $SYS.ACCOUNT.<account>.CONNECT or .DISCONNECT")]
    Subject(String),
    #[error("the payload on {subject} does not decode: {error}")]
    Payload { subject: String, error: String },
}

#[derive(Deserialize)]
struct ServerInfo {
    id: String,
}

#[derive(Deserialize)]
struct ClientInfo {
    #[serde(default)]
    id: u64,
}

#[derive(Deserialize)]
struct EventPayload {
    server: ServerInfo,
    client: ClientInfo,
    #[serde(default)]
    reason: String,
}

/// Decode one event from its subject and payload.
pub fn decode_event(subject: &str, payload: &[u8]) -> Result<ConnEvent, PresenceError> {
    let tokens: Vec<&str> = subject.split('.').collect();
    let up = match tokens.as_slice() {
        ["$SYS", "ACCOUNT", _, "CONNECT"] => true,
        ["$SYS", "ACCOUNT", _, "DISCONNECT"] => false,
        _ => return Err(PresenceError::Subject(subject.to_string())),
    };
    let p: EventPayload = serde_json::from_slice(payload).map_err(|e| PresenceError::Payload {
        subject: subject.to_string(),
        error: e.to_string(),
    })?;
    Ok(ConnEvent {
        account: tokens[2].to_string(),
        conn: ConnKey {
            server: p.server.id,
            cid: p.client.id,
        },
        up,
        reason: p.reason,
    })
}

/// One server's page of its open connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnzPage {
    /// Every connection on the page, with its account.
    pub conns: Vec<(String, ConnKey)>,
    /// Whether the server has more after this page.
    pub more: bool,
}

/// The body of a connection-list request: one page, with each
/// connection's account (`auth`).
pub fn connz_request(offset: usize, limit: usize) -> Vec<u8> {
    serde_json::json!({ "auth": true, "offset": offset, "limit": limit })
        .to_string()
        .into_bytes()
}

#[derive(Deserialize)]
struct ConnInfo {
    cid: u64,
    #[serde(default)]
    account: String,
}

#[derive(Deserialize)]
struct Connz {
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    total: usize,
    #[serde(default)]
    connections: Vec<ConnInfo>,
}

#[derive(Deserialize)]
struct ConnzResponse {
    server: ServerInfo,
    data: Option<Connz>,
    error: Option<serde_json::Value>,
}

/// Decode one server's answer to [`connz_request`].
pub fn decode_connz(payload: &[u8]) -> Result<ConnzPage, PresenceError> {
    let bad = |error: String| PresenceError::Payload {
        subject: CONNZ_EXPORT.to_string(),
        error,
    };
    let r: ConnzResponse = serde_json::from_slice(payload).map_err(|e| bad(e.to_string()))?;
    if let Some(e) = r.error {
        return Err(bad(format!("the server answered an error: {e}")));
    }
    let data = r.data.ok_or_else(|| bad("no data".to_string()))?;
    let seen = data.offset + data.connections.len();
    let conns = data
        .connections
        .into_iter()
        .map(|c| {
            let key = ConnKey {
                server: r.server.id.clone(),
                cid: c.cid,
            };
            (c.account, key)
        })
        .collect();
    Ok(ConnzPage {
        conns,
        more: seen < data.total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payloads as nats-server 2.15.1 sends them (trimmed).
    #[test]
    fn decodes_the_servers_events_and_connection_list() {
        let connect = br#"{"type":"io.nats.server.advisory.v1.client_connect","id":"x",
            "server":{"name":"n","host":"0.0.0.0","id":"NSRV","ver":"2.15.1","seq":3},
            "client":{"start":"2026-12-01T16:49:40Z","host":"127.0.0.1","id":8,"acc":"alpha",
            "name":"hive-alpha","kind":"Client"}}"#;
        let ev = decode_event("$SYS.ACCOUNT.alpha.CONNECT", connect).unwrap();
        assert_eq!(ev.account, "alpha");
        assert_eq!(
            ev.conn,
            ConnKey {
                server: "NSRV".into(),
                cid: 8
            }
        );
        assert!(ev.up);
        let disconnect = br#"{"server":{"id":"NSRV"},"client":{"id":8},"reason":"Client Closed"}"#;
        let ev = decode_event("$SYS.ACCOUNT.alpha.DISCONNECT", disconnect).unwrap();
        assert!(!ev.up);
        assert_eq!(ev.reason, "Client Closed");
        assert!(decode_event("$SYS.ACCOUNT.alpha.LEAFNODE.CONNECT", connect).is_err());
        assert!(decode_event("$SYS.ACCOUNT.alpha.CONNECT", b"{").is_err());

        let connz = br#"{"server":{"id":"NSRV"},"data":{"offset":0,"limit":2,"total":3,
            "connections":[{"cid":7,"account":"HYPERHIVE"},{"cid":8,"account":"alpha"}]}}"#;
        let page = decode_connz(connz).unwrap();
        assert!(page.more);
        assert_eq!(
            page.conns[1],
            (
                "alpha".into(),
                ConnKey {
                    server: "NSRV".into(),
                    cid: 8
                }
            )
        );
        let err = br#"{"server":{"id":"NSRV"},"error":{"code":500,"description":"x"}}"#;
        assert!(decode_connz(err).is_err());
    }
}
