//! `GET /api/events`: one server-sent event stream per open page. It
//! starts with a snapshot of the page the query asks for, then sends only
//! the changes that page shows ([`crate::live`] decides), batched; a page
//! that falls behind the broadcast channel gets a new snapshot.
//!
//! Each open stream holds one of `sse_max_clients` permits for as long as
//! it is open; a request past the cap gets 503 and no stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::json;
use time::OffsetDateTime;
use tokio::sync::{broadcast, OwnedSemaphorePermit};

use super::{bad_query, reply, Pairs, Shared};
use crate::age::unix_ms;
use crate::live::{LiveView, Push};
use crate::render::Report;
use crate::view::{Query, DEFAULT_PAGE};

/// Most pushes one page handles as one batch (one reselection at most).
const BATCH: usize = 1024;

/// A snapshot of the page the query asks for (at most [`DEFAULT_PAGE`]
/// rows unless `limit` says otherwise), then what changes on it. Ends at
/// shutdown, so open pages do not hold the server up.
pub(super) async fn events(State(shared): State<Arc<Shared>>, pairs: Pairs) -> Response {
    let mut query = match Query::parse(&pairs.0) {
        Ok(q) => q,
        Err(e) => return bad_query(e),
    };
    query.limit = Some(query.limit.unwrap_or(DEFAULT_PAGE));
    let Ok(slot) = shared.sse_slots.clone().try_acquire_owned() else {
        tracing::warn!(
            cap = shared.sse_max_clients,
            "refused an event stream: sse_max_clients are open"
        );
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": format!(
                "{} event streams are open, the most this server holds (sse_max_clients); \
                 close a dashboard page or try again later",
                shared.sse_max_clients
            ) }),
        );
    };
    // Subscribe before the snapshot; changes it already holds are skipped
    // by their sequence number.
    let rx = shared.pushes.subscribe();
    let (view, snapshot) = snapshot(&shared, query);
    let page = Page {
        shared: shared.clone(),
        rx,
        view,
        pending: VecDeque::from([snapshot]),
        _slot: slot,
    };
    let live = stream::unfold(page, |mut page| async move {
        let event = page.next_event().await?;
        Some((event, page))
    });
    until_shutdown(&shared, live)
}

/// `events` as a server-sent event stream with keep-alive comments, ended
/// at shutdown so that open pages do not hold the server up.
pub(super) fn until_shutdown(
    shared: &Shared,
    events: impl futures_util::Stream<Item = Event> + Send + 'static,
) -> Response {
    let mut stop = shared.shutdown.clone();
    let stream = events.map(Ok::<_, Infallible>).take_until(async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Select the page for `query` and format its snapshot event.
fn snapshot(shared: &Shared, query: Query) -> (LiveView, Sent) {
    let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
    let report = Report::of_query(&fleet, &query, OffsetDateTime::now_utc());
    let selection = crate::fleet::Selection {
        names: report.hives.iter().map(|r| r.name.clone()).collect(),
        matched: report.matched,
    };
    let view = LiveView::new(query, selection, fleet.seq());
    let data = serde_json::to_string(&report).unwrap_or_default();
    (view, Sent::new("snapshot", data))
}

/// One event about to be sent.
struct Sent {
    event: &'static str,
    data: String,
}

impl Sent {
    fn new(event: &'static str, data: String) -> Self {
        Sent { event, data }
    }
}

/// One open event stream: its page and the events not yet sent.
struct Page {
    shared: Arc<Shared>,
    rx: broadcast::Receiver<Arc<Push>>,
    view: LiveView,
    pending: VecDeque<Sent>,
    /// This stream's place under `sse_max_clients`, given back when the
    /// stream is dropped (the page closed, or the server stops).
    _slot: OwnedSemaphorePermit,
}

impl Page {
    /// The next event for this page; `None` when the server stops.
    async fn next_event(&mut self) -> Option<Event> {
        while self.pending.is_empty() {
            let first = match self.rx.recv().await {
                Ok(push) => push,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "a dashboard fell behind; sending a new snapshot");
                    let (view, snapshot) = snapshot(&self.shared, self.view.query.clone());
                    self.view = view;
                    self.pending.push_back(snapshot);
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match self.rx.try_recv() {
                    Ok(push) => batch.push(push),
                    // Empty, or lagged: the next recv says which.
                    Err(_) => break,
                }
            }
            self.plan(&batch);
        }
        let sent = self.pending.pop_front()?;
        let stats = &self.shared.push_stats;
        stats.sent_events.fetch_add(1, Ordering::Relaxed);
        stats
            .sent_bytes
            .fetch_add(sent.data.len() as u64, Ordering::Relaxed);
        Some(Event::default().event(sent.event).data(sent.data))
    }

    /// Turn one batch of pushes into this page's events.
    fn plan(&mut self, batch: &[Arc<Push>]) {
        let plan = self.view.plan(batch);
        if let Some(last) = batch.last() {
            self.view.seen = self.view.seen.max(last.seq);
        }
        if plan.reselect {
            self.reselect(&plan.changed);
            return;
        }
        for push in plan.forward {
            self.pending
                .push_back(Sent::new(push.event, push.data.clone()));
        }
        if let Some(push) = plan.summary {
            let data = push.summary.clone().unwrap_or_default();
            self.pending.push_back(Sent::new("summary", data));
        }
    }

    /// Select the page again and send the difference: removals, then the
    /// rows that entered or changed, each with the page's new counts.
    fn reselect(&mut self, changed: &[String]) {
        let fleet = self.shared.fleet.read().unwrap_or_else(|p| p.into_inner());
        let now = OffsetDateTime::now_utc();
        let diff = self.view.reselect(fleet.select(&self.view.query));
        let summary = fleet.summary();
        let view = json!({
            "matched": self.view.matched,
            "offset": self.view.query.offset,
            "limit": self.view.query.limit,
        });
        let time = unix_ms(now);
        for name in &diff.leaving {
            let data =
                json!({ "name": name, "summary": summary, "view": view, "server_time_ms": time });
            self.pending
                .push_back(Sent::new("remove", data.to_string()));
        }
        let mut rows: Vec<&String> = diff.entering.iter().collect();
        rows.extend(
            changed
                .iter()
                .filter(|n| self.view.shows(n) && !diff.entering.contains(n)),
        );
        for name in rows {
            let Some(row) = fleet.peek_row(name, now) else {
                continue;
            };
            let data =
                json!({ "row": row, "summary": summary, "view": view, "server_time_ms": time });
            self.pending.push_back(Sent::new("row", data.to_string()));
        }
        if self.pending.is_empty() {
            let data = json!({ "summary": summary, "view": view, "server_time_ms": time });
            self.pending
                .push_back(Sent::new("summary", data.to_string()));
        }
    }
}
