//! `GET /api/rollout`: the staged rollout for the dashboard's line, which
//! asks every 2 s from every open page.
//!
//! By default the answer is the summary (`rollout status --json` without
//! the hives: a few hundred bytes, where a rollout over 10,000 hives is a
//! few MB with them); `?hives=true` adds every wave's hives and each hive's
//! row. The whole state is read from `hyperhive-rollouts` again only when
//! the head changed: each request reads the head alone, and the state is
//! cached by the head's revision and server timestamp (a bucket made again
//! starts its revisions over, so the revision alone could name old state).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::sync::Arc;
use time::OffsetDateTime;

use super::{reply, Shared};
use crate::rollout::store::{self, Stored};

/// The last state read, by the head entry it was read from.
#[derive(Default)]
pub struct RolloutCache(tokio::sync::Mutex<Option<(HeadId, Arc<Stored>)>>);

type HeadId = (u64, OffsetDateTime);

#[derive(Debug, serde::Deserialize)]
pub struct RolloutQuery {
    #[serde(default)]
    hives: bool,
}

pub async fn api_rollout(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<RolloutQuery>,
) -> Response {
    match read_cached(&shared).await {
        Ok(stored) => {
            let now = OffsetDateTime::now_utc();
            let stored = stored.as_deref();
            Json(if q.hives {
                crate::rollout::report::status_json(stored, now)
            } else {
                crate::rollout::report::summary_json(stored, now)
            })
            .into_response()
        }
        Err(e) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": e.to_string() }),
        ),
    }
}

/// The stored rollout, read whole only when the head is not the cached one.
pub(super) async fn read_cached(shared: &Shared) -> Result<Option<Arc<Stored>>, store::StoreError> {
    let Some(id) = store::head_id(&shared.rollouts).await? else {
        return Ok(None);
    };
    let mut cache = shared.rollout_cache.0.lock().await;
    if let Some((cached, stored)) = cache.as_ref() {
        if *cached == id {
            return Ok(Some(stored.clone()));
        }
    }
    let Some(stored) = store::read(&shared.rollouts).await? else {
        *cache = None;
        return Ok(None);
    };
    let stored = Arc::new(stored);
    *cache = Some(((stored.revision, stored.created), stored.clone()));
    Ok(Some(stored))
}
