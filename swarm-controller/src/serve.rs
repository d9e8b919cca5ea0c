//! `serve`: the live dashboard, the JSON API and the forge webhook.
//!
//! Tasks (all stop on the shutdown signal):
//! - **follower**: a KV watch of the status and wanted buckets. Each entry
//!   updates one hive in the [`Fleet`] and pushes that hive's new row to
//!   every open dashboard. Never a full re-read.
//! - **expiry**: freshness changes with time alone, so this task wakes when
//!   the next fresh row's `stale_at` comes (at most a second later) and
//!   pushes the rows that turned stale.
//! - **http** (axum): `GET /` the dashboard page, `GET /api/status` the same
//!   JSON as `status --json`, `GET /api/events` the server-sent events the
//!   page listens to, `POST /hooks/forge` the webhook, `GET /health/live`.
//!
//! Every push is formatted once and handed to all listeners through a
//! broadcast channel, under the same lock that changed the fleet, so two
//! changes of one hive reach every page in the order they happened. A page
//! that falls behind the channel is told to re-read `/api/status`.
//!
//! Everything here is in memory and rebuilt from NATS at start: two `serve`
//! processes show the same fleet and never write the buckets.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::json;
use time::OffsetDateTime;
use tokio::sync::{broadcast, watch};

use crate::config::Config;
use crate::deploy::{self, DeployOutcome};
use crate::fleet::{Change, Fleet, Update};
use crate::nats::{Buckets, Follower, NatsError};
use crate::render::{unix_ms, Report};
use crate::webhook;

/// How long a webhook waits for each hive's deploy reply. Forges give up on
/// a webhook after about 10 s; the requests run in parallel.
const WEBHOOK_DEPLOY_TIMEOUT: Duration = Duration::from_secs(5);
/// Pushes buffered per page before it is told to re-read.
const PUSH_BUFFER: usize = 4096;
/// Longest the expiry task sleeps, so a clock step is noticed soon.
const EXPIRY_MAX_SLEEP: Duration = Duration::from_secs(1);

const DASHBOARD: &str = include_str!("dashboard.html");

/// One server-sent event, formatted once for every listener.
#[derive(Debug)]
pub struct Push {
    pub event: &'static str,
    pub data: String,
}

/// Counters of what was pushed, for `/api/stats` and the benchmark.
#[derive(Debug, Default)]
pub struct PushStats {
    pub pushes: AtomicU64,
    pub push_bytes: AtomicU64,
}

/// What the tasks and handlers share.
pub struct Shared {
    pub fleet: RwLock<Fleet>,
    pushes: broadcast::Sender<Arc<Push>>,
    pub push_stats: PushStats,
    client: async_nats::Client,
    webhook_secret: Option<Vec<u8>>,
    knowledge_repo: Option<String>,
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// Change the fleet and push every resulting row, under one lock.
    fn update(&self, change: impl FnOnce(&mut Fleet, OffsetDateTime) -> Vec<Change>) {
        let now = OffsetDateTime::now_utc();
        let mut fleet = self.fleet.write().unwrap_or_else(|p| p.into_inner());
        let changes = change(&mut fleet, now);
        if changes.is_empty() {
            return;
        }
        let summary = fleet.summary();
        for c in changes {
            let push = match c {
                Change::Row(row) => Push {
                    event: "row",
                    data: json!({ "row": row, "summary": summary, "server_time_ms": unix_ms(now) })
                        .to_string(),
                },
                Change::Removed(name) => Push {
                    event: "remove",
                    data:
                        json!({ "name": name, "summary": summary, "server_time_ms": unix_ms(now) })
                            .to_string(),
                },
            };
            self.push_stats.pushes.fetch_add(1, Ordering::Relaxed);
            self.push_stats
                .push_bytes
                .fetch_add(push.data.len() as u64, Ordering::Relaxed);
            // No listener is not an error: nobody has the page open.
            let _ = self.pushes.send(Arc::new(push));
        }
    }

    fn report(&self) -> Report {
        let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
        Report::of_fleet(&fleet, OffsetDateTime::now_utc())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Nats(#[from] NatsError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("webhook secret: {0}")]
    Secret(String),
    #[error("HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
}

/// A running server: its address and shared state (tests and the benchmark
/// read the counters), and the task to await.
pub struct Server {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
    pub task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

/// Load the fleet from NATS, bind, and start every task. Returns once the
/// server answers; it stops when `shutdown` turns true.
pub async fn start(
    config: &Config,
    client: async_nats::Client,
    buckets: &Buckets,
    listen: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> Result<Server, ServeError> {
    let webhook_secret = match &config.webhook_secret_file {
        Some(p) => Some(webhook::read_secret(p).map_err(ServeError::Secret)?),
        None => None,
    };
    let fleet = RwLock::new(Fleet::new(
        config.hives.clone(),
        config.stale_after,
        OffsetDateTime::now_utc(),
    ));
    let follower = crate::nats::load(buckets, &fleet).await?;
    let (pushes, _) = broadcast::channel(PUSH_BUFFER);
    let shared = Arc::new(Shared {
        fleet,
        pushes,
        push_stats: PushStats::default(),
        client,
        webhook_secret,
        knowledge_repo: config.knowledge_repo.clone(),
        shutdown: shutdown.clone(),
    });
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: listen,
        source,
    })?;
    tracing::info!(%addr, "dashboard at http://{addr}/, webhook at POST /hooks/forge");

    tokio::spawn(follow(shared.clone(), follower, shutdown.clone()));
    tokio::spawn(expire(shared.clone(), shutdown.clone()));
    let app = router(shared.clone());
    // Each pushed row is a small write; without TCP_NODELAY, Nagle's
    // algorithm holds it until the page's delayed ACK (about 40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let mut stop = shutdown;
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
            .map_err(ServeError::Http)
    });
    Ok(Server { addr, shared, task })
}

/// The follower task (see the module documentation).
async fn follow(shared: Arc<Shared>, mut follower: Follower, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            // Cancel-safe: an entry not yet taken stays in the watch.
            (source, entry) = follower.next() => {
                let span = tracing::debug_span!("kv_update", key = %entry.key, revision = entry.revision);
                let _g = span.enter();
                shared.update(|fleet, now| vec![fleet.apply(Update::from_entry(source, &entry), now)]);
            }
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The expiry task (see the module documentation).
async fn expire(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        shared.update(|fleet, now| fleet.expire(now));
        let next = {
            let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
            fleet.next_stale_at()
        };
        let sleep = next
            .map(|at| {
                let d = at - OffsetDateTime::now_utc();
                // Wake just after the deadline: a row turns stale when its age
                // is over stale_after, not at it.
                Duration::try_from(d).unwrap_or(Duration::ZERO) + Duration::from_millis(5)
            })
            .unwrap_or(EXPIRY_MAX_SLEEP)
            .min(EXPIRY_MAX_SLEEP);
        tokio::select! {
            // Both cancel-safe: a sleep and a watch receiver hold nothing.
            _ = tokio::time::sleep(sleep) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/api/status", get(api_status))
        .route("/api/events", get(events))
        .route("/api/stats", get(api_stats))
        .route("/hooks/forge", post(forge_hook))
        .route("/health/live", get(|| async { "ok\n" }))
        .with_state(shared)
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD)
}

async fn api_status(State(shared): State<Arc<Shared>>) -> Json<Report> {
    Json(shared.report())
}

async fn api_stats(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let stats = shared
        .fleet
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .stats();
    Json(json!({
        "values_decoded": stats.values_decoded,
        "bytes_decoded": stats.bytes_decoded,
        "pushes": shared.push_stats.pushes.load(Ordering::Relaxed),
        "push_bytes": shared.push_stats.push_bytes.load(Ordering::Relaxed),
    }))
}

/// A snapshot first, then every pushed change. Ends at shutdown, so open
/// pages do not hold the server up.
async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribe before the snapshot: a change made in between arrives twice,
    // and a row pushed twice is the same row.
    let rx = shared.pushes.subscribe();
    let snapshot = Event::default()
        .event("snapshot")
        .data(serde_json::to_string(&shared.report()).unwrap_or_default());
    let live = stream::unfold(rx, |mut rx| async move {
        let event = match rx.recv().await {
            Ok(push) => Event::default().event(push.event).data(push.data.as_str()),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "a dashboard fell behind; telling it to re-read");
                Event::default().event("resync").data("{}")
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok(event), rx))
    });
    let mut stop = shared.shutdown.clone();
    let stream = stream::once(async { Ok(snapshot) })
        .chain(live)
        .take_until(async move {
            let _ = stop.wait_for(|s| *s).await;
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response {
    (status, Json(body)).into_response()
}

async fn forge_hook(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let lookup = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(secret) = &shared.webhook_secret else {
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "webhook_secret_file is not configured; refusing unsigned webhooks" }),
        );
    };
    let forge = match webhook::verify_signature(lookup, &body, secret) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "webhook refused");
            return reply(StatusCode::UNAUTHORIZED, json!({ "error": e.to_string() }));
        }
    };
    let event = webhook::event_name(lookup).unwrap_or("push");
    let span = tracing::info_span!("webhook", ?forge, event);
    let _g = span.enter();
    match event {
        "push" => {}
        "ping" => return reply(StatusCode::OK, json!({ "pong": true })),
        other => {
            return reply(
                StatusCode::ACCEPTED,
                json!({ "ignored": format!("{other} events do nothing; only push does") }),
            )
        }
    }
    let push = match webhook::parse_push(&body) {
        Ok(p) => p,
        Err(e) => return reply(StatusCode::BAD_REQUEST, json!({ "error": e })),
    };
    let plan = {
        let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
        webhook::plan(
            &push,
            shared.knowledge_repo.as_deref(),
            fleet.declarations().map(|(h, d)| (h, &d.declaration)),
        )
    };
    tracing::info!(
        repo = %push.repository.full_name,
        knowledge = plan.knowledge,
        deploys = plan.deploys.len(),
        "push received"
    );
    let mut knowledge_result = serde_json::Value::Null;
    if plan.knowledge {
        knowledge_result = match crate::knowledge::publish(&shared.client).await {
            Ok(()) => json!("published"),
            Err(e) => {
                return reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": format!("knowledge event not published: {e}") }),
                )
            }
        };
    }
    let requests = plan.deploys.iter().map(|(hive, agent)| {
        let client = shared.client.clone();
        async move {
            let outcome: DeployOutcome =
                deploy::request(&client, hive, agent, WEBHOOK_DEPLOY_TIMEOUT).await;
            json!({ "hive": hive, "agent": agent, "result": outcome, "text": outcome.to_string() })
        }
    });
    let deploys = futures_util::future::join_all(requests).await;
    reply(
        StatusCode::OK,
        json!({
            "repository": push.repository.full_name,
            "knowledge": knowledge_result,
            "deploys": deploys,
        }),
    )
}
