//! The NATS side of [`super::Presence`]: subscribe to the connect and
//! disconnect events, read the server's connection list, and say which
//! hive's link changed.
//!
//! Whether events are available is decided by the connection list: when no
//! server answers it (no responders: the config has no system-account
//! export; or no answer within [`FIRST_ANSWER`]: an identity without the
//! grant), [`Watcher::start`] returns `None` and every row keeps the
//! KV-timestamp rule. The list is read again whenever the controller's own
//! connection came back, since events may have been missed meanwhile.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::{Client, StatusCode, Subscriber};
use futures_util::stream::{select_all, SelectAll, StreamExt};
use swarm_queue_client::presence::{
    connz_request, decode_connz, decode_event, ConnKey, CONNECT_EVENTS, CONNZ_REQUEST,
    DISCONNECT_EVENTS,
};
use time::OffsetDateTime;

use super::Presence;
use crate::evaluate::Link;

/// How long the first server may take to answer the connection list.
pub const FIRST_ANSWER: Duration = Duration::from_secs(2);
/// After an answer, how long to wait for other servers' answers, when the
/// connection cannot tell how many there are ([`lone_server`]).
const MORE_ANSWERS: Duration = Duration::from_millis(250);
/// Connections per page of the list.
const PAGE: usize = 1024;
/// How often the watcher checks whether its own connection came back.
pub const RECONNECT_CHECK: Duration = Duration::from_secs(1);

/// Why the connection list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("no server answers {CONNZ_REQUEST} (the NATS config has no system-account export for the controller; see `swarm-controller nats-config`)")]
    NoResponders,
    #[error("no answer to {CONNZ_REQUEST} within {FIRST_ANSWER:?} (the controller's identity may lack the grant)")]
    NoAnswer,
    #[error("{0}")]
    Nats(String),
}

/// See the module documentation.
pub struct Watcher {
    client: Client,
    events: SelectAll<Subscriber>,
    presence: Presence,
    /// The hives whose rows the events decide.
    hives: BTreeSet<String>,
    /// The client's connect count when the list was last read.
    connects: u64,
}

impl Watcher {
    /// Subscribe and read the list; `None` (logged once) when the server
    /// gives no events, so the KV-timestamp rule applies.
    pub async fn start(client: &Client, hives: Vec<String>) -> Option<Watcher> {
        let subscribe = async {
            let connect = client.subscribe(CONNECT_EVENTS).await?;
            let disconnect = client.subscribe(DISCONNECT_EVENTS).await?;
            Ok::<_, async_nats::SubscribeError>(select_all([connect, disconnect]))
        };
        let events = match subscribe.await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "no connection events: subscribing failed; freshness from the KV timestamp");
                return None;
            }
        };
        let mut w = Watcher {
            client: client.clone(),
            events,
            presence: Presence::default(),
            hives: hives.into_iter().collect(),
            connects: 0,
        };
        match w.relist().await {
            Ok(()) => Some(w),
            Err(e) => {
                tracing::info!(error = %e, "no connection events; freshness from the KV timestamp");
                None
            }
        }
    }

    /// Every watched hive's link now.
    pub fn links(&self) -> Vec<(String, Link)> {
        self.hives
            .iter()
            .map(|h| (h.clone(), self.presence.link(h)))
            .collect()
    }

    /// Wait for the next event, or for the controller's own reconnect; the
    /// watched hives whose link may have changed. Cancel-safe: an event not
    /// yet taken stays in its subscription, and a reconnect is still seen
    /// by the next call.
    pub async fn next(&mut self) -> Vec<(String, Link)> {
        if self.reconnected() {
            return self.relist_links().await;
        }
        tokio::select! {
            msg = self.events.next() => {
                let Some(msg) = msg else {
                    // Subscriptions end only when the client is dropped.
                    std::future::pending::<()>().await;
                    return Vec::new();
                };
                let event = match decode_event(&msg.subject, &msg.payload) {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::warn!(error = %e, "ignoring a connection event");
                        return Vec::new();
                    }
                };
                let changed = self.presence.apply(&event, OffsetDateTime::now_utc());
                if changed && self.hives.contains(&event.account) {
                    vec![(event.account.clone(), self.presence.link(&event.account))]
                } else {
                    Vec::new()
                }
            }
            _ = tokio::time::sleep(RECONNECT_CHECK) => {
                if self.reconnected() {
                    self.relist_links().await
                } else {
                    Vec::new()
                }
            }
        }
    }

    fn reconnected(&self) -> bool {
        self.client.statistics().connects.load(Ordering::Relaxed) != self.connects
    }

    async fn relist_links(&mut self) -> Vec<(String, Link)> {
        if let Err(e) = self.relist().await {
            tracing::warn!(error = %e, "reading the connection list again after a reconnect");
        }
        self.links()
    }

    /// Open connections, all accounts together.
    pub fn open_connections(&self) -> usize {
        self.presence.open_connections()
    }

    async fn relist(&mut self) -> Result<(), ListError> {
        self.connects = self.client.statistics().connects.load(Ordering::Relaxed);
        self.presence.begin_list();
        let conns = list(&self.client).await?;
        self.presence.finish_list(conns);
        Ok(())
    }
}

/// One answer, when the server this connection reached names no cluster in
/// its INFO: routes and gateways both need a cluster name, so it is alone
/// and its answer is the whole list. In a cluster, how many servers answer
/// is learned from the first page (after [`MORE_ANSWERS`] of quiet). A
/// one-look `status` waited that quiet spell out on every run, however
/// small the fleet (docs/benchmarks-controller.md).
fn lone_server(cluster: Option<&str>) -> Option<usize> {
    cluster.is_none_or(str::is_empty).then_some(1)
}

/// Every server's open connections, page by page.
async fn list(client: &Client) -> Result<Vec<(String, ConnKey)>, ListError> {
    let nats = |e: &dyn std::fmt::Display| ListError::Nats(format!("{CONNZ_REQUEST}: {e}"));
    let mut all = Vec::new();
    let mut offset = 0;
    // Servers that answer: known for a server alone, else those that
    // answered the first page. A page waits for as many answers, not for
    // a quiet spell.
    let mut servers = lone_server(client.server_info().cluster.as_deref());
    loop {
        let inbox = client.new_inbox();
        let mut answers = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| nats(&e))?;
        client
            .publish_with_reply(CONNZ_REQUEST, inbox, connz_request(offset, PAGE).into())
            .await
            .map_err(|e| nats(&e))?;
        let mut wait = FIRST_ANSWER;
        let mut more = false;
        let mut answered = 0;
        while servers != Some(answered) {
            let Ok(Some(msg)) = tokio::time::timeout(wait, answers.next()).await else {
                break;
            };
            if msg.status == Some(StatusCode::NO_RESPONDERS) {
                return Err(ListError::NoResponders);
            }
            answered += 1;
            wait = MORE_ANSWERS;
            match decode_connz(&msg.payload) {
                Ok(page) => {
                    more |= page.more;
                    all.extend(page.conns);
                }
                Err(e) => return Err(nats(&e)),
            }
        }
        if answered == 0 {
            return Err(ListError::NoAnswer);
        }
        servers.get_or_insert(answered);
        if !more {
            return Ok(all);
        }
        offset += PAGE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_server_that_names_no_cluster_is_known_to_answer_alone() {
        assert_eq!(lone_server(None), Some(1));
        assert_eq!(lone_server(Some("")), Some(1));
        assert_eq!(lone_server(Some("hub")), None);
    }
}
