//! The page of one hive: `GET /hive/{name}` (static, like the dashboard;
//! it reads the routes below), `GET /api/hive/{name}` (its row with its
//! agents, and its status ages over the last hour) and
//! `GET /api/hive/{name}/events?limit=N` (its last events). Its log tail
//! is [`super::tail`].
//!
//! Invariants:
//! - A name is checked by [`HiveName`] before anything is looked up; a bad
//!   one is a 400 that names it, a hive the fleet does not hold a 404 that
//!   names it.
//! - `/api/hive/{name}` is one lookup by name and one row evaluated: its
//!   cost does not grow with the fleet.
//! - The events are a bounded read ([`recent_events`]): at most
//!   [`MAX_EVENTS`] messages read, whatever the stream holds.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::json;
use swarm_queue_client::event_stream::hive_events;
use swarm_queue_client::HiveName;
use time::OffsetDateTime;

use super::{reply, Pairs, Shared};
use crate::age::unix_ms;
use crate::fleet::status_age::MINUTES;

mod recent_events;

/// Events one request may ask for.
pub(super) const MAX_EVENTS: usize = 200;
/// Events sent when the request does not say.
const DEFAULT_EVENTS: usize = 50;

const HIVE_PAGE: &str = include_str!("hive.html");

pub(super) async fn page() -> Html<&'static str> {
    Html(HIVE_PAGE)
}

/// `{row, status_age: {minute_secs, minutes: [{start_ms, updates,
/// worst_age_secs}]}, stale_after_secs, server_time_ms}`.
pub(super) async fn api_hive(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Response {
    let hive = match parse_hive(&name) {
        Ok(h) => h,
        Err(r) => return r.into_response(),
    };
    let now = OffsetDateTime::now_utc();
    let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
    let (Some(row), Some(ages)) = (
        fleet.peek_row(hive.as_str(), now),
        fleet.status_age(hive.as_str(), now),
    ) else {
        return unknown_hive(&hive).into_response();
    };
    Json(json!({
        "row": row,
        "status_age": { "minute_secs": 60, "minutes_kept": MINUTES, "minutes": ages },
        "stale_after_secs": fleet.stale_after().as_secs(),
        "server_time_ms": unix_ms(now),
    }))
    .into_response()
}

/// `{hive, limit, matched, events: [{time, seq, subject, event}]}`, oldest
/// first: the last `limit` (default 50, at most [`MAX_EVENTS`]) of the
/// hive's own events in `hyperhive-events`.
pub(super) async fn api_events(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    pairs: Pairs,
) -> Response {
    let hive = match known_hive(&shared, &name) {
        Ok(h) => h,
        Err(r) => return r.into_response(),
    };
    let limit = match events_limit(&pairs.0) {
        Ok(l) => l,
        Err(e) => return reply(StatusCode::BAD_REQUEST, json!({ "error": e })),
    };
    let js = async_nats::jetstream::new(shared.client.clone());
    match recent_events::read(&js, hive_events(&hive), limit).await {
        Ok(recent) => Json(json!({
            "hive": hive,
            "limit": limit,
            "matched": recent.matched,
            "events": recent.events,
            "note": recent.note,
        }))
        .into_response(),
        Err(e) => {
            tracing::warn!(%hive, error = %e, "cannot read the hive's events");
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": format!("cannot read hive {hive}'s events: {e}") }),
            )
        }
    }
}

/// A request refused before anything is read: its status and why, sent
/// as `{"error": why}`.
pub(super) struct Refused(StatusCode, String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        reply(self.0, json!({ "error": self.1 }))
    }
}

impl Refused {
    pub(super) fn bad_name(e: swarm_queue_client::NameError) -> Refused {
        Refused(StatusCode::BAD_REQUEST, e.to_string())
    }
}

/// `name` as a hive name, or the 400 that names it.
fn parse_hive(name: &str) -> Result<HiveName, Refused> {
    HiveName::new(name).map_err(Refused::bad_name)
}

/// `name` as a hive the fleet holds, or the 400 or 404 that names it.
pub(super) fn known_hive(shared: &Shared, name: &str) -> Result<HiveName, Refused> {
    let hive = parse_hive(name)?;
    let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
    if fleet.holds(hive.as_str()) {
        Ok(hive)
    } else {
        Err(unknown_hive(&hive))
    }
}

fn unknown_hive(hive: &HiveName) -> Refused {
    Refused(
        StatusCode::NOT_FOUND,
        format!("no hive {hive} here: it is not on the roster and has no status or declaration"),
    )
}

/// The `limit` of an events request; any other parameter is refused.
fn events_limit(pairs: &[(String, String)]) -> Result<usize, String> {
    let mut limit = DEFAULT_EVENTS;
    for (key, value) in pairs {
        if key != "limit" {
            return Err(format!(
                "unknown parameter {key:?}: this route takes limit only"
            ));
        }
        limit = value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_EVENTS).contains(n))
            .ok_or_else(|| {
                format!("limit={value:?}: it must be a number of events from 1 to {MAX_EVENTS}")
            })?;
    }
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_events_limit_is_bounded_and_a_bad_one_named() {
        assert_eq!(events_limit(&[]), Ok(DEFAULT_EVENTS));
        assert_eq!(events_limit(&pairs(&[("limit", "200")])), Ok(200));
        for bad in ["0", "201", "ten", "-1"] {
            let err = events_limit(&pairs(&[("limit", bad)])).unwrap_err();
            assert!(err.contains(&format!("limit={bad:?}")), "{err}");
        }
        let err = events_limit(&pairs(&[("since", "1h")])).unwrap_err();
        assert!(err.contains("\"since\""), "{err}");
    }
}
