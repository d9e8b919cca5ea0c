//! `serve`: the live dashboard, the JSON API and the forge webhook.
//!
//! Tasks (all stop on the shutdown signal):
//! - **follower**: a KV watch of the status and wanted buckets. Each entry
//!   updates one hive in the [`Fleet`] and broadcasts that hive's change.
//!   Never a full re-read.
//! - **presence** (when the server gives connection events,
//!   [`crate::presence`]): each hive whose NATS connection opened or
//!   closed is recomputed and broadcast at once, so a dead hive shows
//!   `offline` within a moment.
//! - **expiry**: freshness and attention change with time alone, so this
//!   task wakes at the next row's deadline (at most a second later) and
//!   broadcasts the rows that turned stale or slow.
//! - **http** (axum): `GET /` the dashboard page, `GET /api/status` the same
//!   JSON as `status --json` (with the filters and paging of
//!   [`crate::view::Query`]), `GET /api/events` the server-sent events the
//!   page listens to, `GET /api/rollout` the staged rollout (its summary,
//!   or with `?hives=true` the document of `rollout status --json`; the
//!   page asks every 2 s, [`rollout`]), `GET /metrics` the controller's own
//!   counts ([`metrics`]), `POST /hooks/forge` the webhook,
//!   `GET /health/live`; one hive's page, `GET /hive/{name}`, with its
//!   row and status ages, its last events ([`hive`]) and an agent's log
//!   tail ([`tail`]).
//!   Every route but the HMAC-checked webhook only reads. At most
//!   `sse_max_clients` event streams and `log_tails_max` log tails are
//!   open at once; past either, 503.
//! - **webhook http**, when `webhook_listen` is set: a listener that
//!   answers `POST /hooks/forge` only (everything else 404), so a forge
//!   can reach the webhook without reaching the dashboard; the dashboard's
//!   listener then no longer answers the webhook.
//!
//! Every change is formatted once and handed to all listeners through a
//! broadcast channel, under the same lock that changed the fleet, so two
//! changes of one hive reach every page in the order they happened. Each
//! event stream then sends its page only what it shows ([`crate::live`]).
//! A page that falls behind the channel gets a new snapshot.
//!
//! Everything here is in memory and rebuilt from NATS at start: two `serve`
//! processes show the same fleet and write only `hyperhive-deliveries`,
//! where the webhook records what it acted on ([`deliveries`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{Query as QueryPairs, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::json;
use swarm_queue_client::http_host::HostRule;
use time::OffsetDateTime;
use tokio::sync::{broadcast, watch, Semaphore};

use crate::age::unix_ms;
use crate::config::Config;
use crate::fleet::{Change, Fleet, Update};
use crate::live::Push;
use crate::nats::{Buckets, Follower, NatsError};
use crate::presence::watch::Watcher;
use crate::render::Report;
use crate::view::{Query, QueryError};
use crate::webhook;

mod deliveries;
mod events;
mod hive;
mod hook;
mod metrics;
mod rollout;
mod tail;

/// Pushes buffered per page before it gets a new snapshot.
const PUSH_BUFFER: usize = 4096;
/// Longest the expiry task sleeps, so a clock step is noticed soon.
const EXPIRY_MAX_SLEEP: Duration = Duration::from_secs(1);

const DASHBOARD: &str = include_str!("dashboard.html");
/// What the dashboard and the hive page share: their style and helpers.
const PAGE_CSS: &str = include_str!("page.css");
const PAGE_JS: &str = include_str!("page.js");

/// Counters of what was pushed, for `/api/stats` and the benchmark.
#[derive(Debug, Default)]
pub struct PushStats {
    /// Changes broadcast, and the bytes of their preformatted row events.
    pub pushes: AtomicU64,
    pub push_bytes: AtomicU64,
    /// Events and data bytes actually sent, summed over every open page.
    pub sent_events: AtomicU64,
    pub sent_bytes: AtomicU64,
}

/// What the tasks and handlers share.
pub struct Shared {
    pub fleet: RwLock<Fleet>,
    pushes: broadcast::Sender<Arc<Push>>,
    pub push_stats: PushStats,
    client: async_nats::Client,
    /// `hyperhive-rollouts`, read by `/api/rollout`.
    rollouts: async_nats::jetstream::kv::Store,
    rollout_cache: rollout::RolloutCache,
    /// `hyperhive-deliveries`: the webhook's record of what it acted on.
    deliveries: async_nats::jetstream::kv::Store,
    /// One permit per open event stream: `sse_max_clients` of them.
    sse_slots: Arc<Semaphore>,
    /// The number of those permits, for the 503's message.
    sse_max_clients: usize,
    /// One permit per open log tail: `log_tails_max` of them.
    tail_slots: Arc<Semaphore>,
    log_tails_max: usize,
    webhook_secret: Option<Vec<u8>>,
    knowledge_repo: Option<String>,
    shutdown: watch::Receiver<bool>,
    /// Requests the dashboard's routes answered (for `/metrics`).
    requests: AtomicU64,
    /// The length of the last whole-fleet `/api/status`, to size the next.
    full_len: AtomicUsize,
}

impl Shared {
    /// Change the fleet and broadcast every resulting change, under one lock.
    fn update(&self, change: impl FnOnce(&mut Fleet, OffsetDateTime) -> Vec<Change>) {
        let now = OffsetDateTime::now_utc();
        let mut fleet = self.fleet.write().unwrap_or_else(|p| p.into_inner());
        let changes = change(&mut fleet, now);
        if changes.is_empty() {
            return;
        }
        let summary = fleet.summary();
        let time = unix_ms(now);
        for c in changes {
            let after = c.after();
            let (event, data) = match &c.row {
                Some(row) => (
                    "row",
                    json!({ "row": row, "summary": summary, "server_time_ms": time }),
                ),
                None => (
                    "remove",
                    json!({ "name": c.name, "summary": summary, "server_time_ms": time }),
                ),
            };
            let counts_moved = c.before != after;
            let push = Push {
                seq: c.seq,
                name: c.name,
                labels: c.labels,
                before: c.before,
                after,
                event,
                data: data.to_string(),
                summary: counts_moved
                    .then(|| json!({ "summary": summary, "server_time_ms": time }).to_string()),
            };
            self.push_stats.pushes.fetch_add(1, Ordering::Relaxed);
            self.push_stats
                .push_bytes
                .fetch_add(push.data.len() as u64, Ordering::Relaxed);
            // No listener is not an error: nobody has the page open.
            let _ = self.pushes.send(Arc::new(push));
        }
    }

    /// The page of rows `query` asks for.
    fn report(&self, query: &Query) -> Report {
        let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
        Report::of_query(&fleet, query, OffsetDateTime::now_utc())
    }

    /// The whole fleet's document ([`Report::of_fleet`]'s bytes), written
    /// as each row is evaluated: what is held is the text, never the rows
    /// as well. The text is made whole under the read lock and only then
    /// sent, so a slow client never holds the lock.
    fn full_document(&self) -> serde_json::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.full_len.load(Ordering::Relaxed));
        {
            let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
            crate::render::write_fleet(&fleet, OffsetDateTime::now_utc(), None, false, &mut out)?;
        }
        // With room for a few more hives next time.
        self.full_len
            .store(out.len() + out.len() / 64, Ordering::Relaxed);
        Ok(out)
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
    Secret(#[from] webhook::SecretError),
    #[error("HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
}

/// A running server: its address and shared state (tests and the benchmark
/// read the counters), and the task to await.
pub struct Server {
    pub addr: SocketAddr,
    /// The webhook's own listener, when `webhook_listen` is set.
    pub webhook_addr: Option<SocketAddr>,
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
    let fleet = RwLock::new(Fleet::for_config(config, OffsetDateTime::now_utc()));
    let follower = crate::nats::load(buckets, &fleet).await?;
    let (pushes, _) = broadcast::channel(PUSH_BUFFER);
    let shared = Arc::new(Shared {
        fleet,
        pushes,
        push_stats: PushStats::default(),
        client,
        rollouts: buckets.rollouts.clone(),
        rollout_cache: Default::default(),
        deliveries: buckets.deliveries.clone(),
        sse_slots: Arc::new(Semaphore::new(config.sse_max_clients)),
        sse_max_clients: config.sse_max_clients,
        full_len: AtomicUsize::new(0),
        tail_slots: Arc::new(Semaphore::new(config.log_tails_max)),
        log_tails_max: config.log_tails_max,
        requests: AtomicU64::new(0),
        webhook_secret,
        knowledge_repo: config.knowledge_repo.clone(),
        shutdown: shutdown.clone(),
    });
    let listener = bind(listen).await?;
    let addr = local_addr(&listener, listen)?;
    let webhook = match config.webhook_listen {
        Some(at) => {
            let l = bind(at).await?;
            Some((local_addr(&l, at)?, l))
        }
        None => None,
    };
    let webhook_addr = webhook.as_ref().map(|(a, _)| *a);
    match webhook_addr {
        Some(w) => {
            tracing::info!(%addr, %w, "dashboard at http://{addr}/, webhook at http://{w}/hooks/forge only")
        }
        None => tracing::info!(%addr, "dashboard at http://{addr}/, webhook at POST /hooks/forge"),
    }

    tokio::spawn(follow(shared.clone(), follower, shutdown.clone()));
    start_presence(&shared, &shutdown).await;
    start_timers(&shared, config, buckets, &shutdown);
    let hosts = HostRule::for_this_machine(config.http_allowed_hosts.clone());
    let dashboard = dashboard_router(shared.clone(), hosts);
    let task = match webhook {
        Some((_, webhook_listener)) => {
            let hook = http(
                webhook_listener,
                webhook_router(shared.clone()),
                shutdown.clone(),
            );
            let page = http(listener, dashboard, shutdown);
            tokio::spawn(async move {
                let (page, hook) = tokio::join!(page, hook);
                page.and(hook)
            })
        }
        None => tokio::spawn(http(
            listener,
            dashboard.merge(webhook_router(shared.clone())),
            shutdown,
        )),
    };
    Ok(Server {
        addr,
        webhook_addr,
        shared,
        task,
    })
}

/// Learn who is connected and follow the server's connection events, when
/// the server offers them (else every row keeps the KV-timestamp rule).
async fn start_presence(shared: &Arc<Shared>, shutdown: &watch::Receiver<bool>) {
    let linkable = shared
        .fleet
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .linkable();
    if let Some(watcher) = Watcher::start(&shared.client, linkable).await {
        let links = watcher.links();
        shared.update(|fleet, now| fleet.set_links(links, now));
        tokio::spawn(presence(shared.clone(), watcher, shutdown.clone()));
    }
}

async fn bind(at: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(at)
        .await
        .map_err(|source| ServeError::Bind { addr: at, source })
}

fn local_addr(
    listener: &tokio::net::TcpListener,
    at: SocketAddr,
) -> Result<SocketAddr, ServeError> {
    listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr: at, source })
}

/// Serve `app` on `listener` until `shutdown` turns true.
async fn http(
    listener: tokio::net::TcpListener,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    // Each pushed row is a small write; without TCP_NODELAY, Nagle's
    // algorithm holds it until the page's delayed ACK (about 40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
        .map_err(ServeError::Http)
}

/// The follower task (see the module documentation).
async fn follow(shared: Arc<Shared>, mut follower: Follower, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            // Cancel-safe: an entry not yet taken stays in the watch.
            (source, entry) = follower.next() => {
                let span = tracing::debug_span!("kv_update", key = %entry.key, revision = entry.revision);
                let _g = span.enter();
                shared.update(|fleet, now| {
                    vec![fleet.apply(Update::from_entry(source, &entry), now)]
                });
            }
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The presence task (see the module documentation).
async fn presence(shared: Arc<Shared>, mut watcher: Watcher, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            // Cancel-safe: see `Watcher::next`.
            links = watcher.next() => {
                shared.update(|fleet, now| fleet.set_links(links, now));
            }
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The expiry task (see the module documentation).
/// The tasks that act on time: rows turning stale, maintenance holds
/// ending (and saying so in hyperhive-events).
fn start_timers(
    shared: &Arc<Shared>,
    config: &Config,
    buckets: &Buckets,
    shutdown: &watch::Receiver<bool>,
) {
    tokio::spawn(expire(shared.clone(), shutdown.clone()));
    tokio::spawn(crate::maintenance::expiry::run(
        shared.client.clone(),
        buckets.maintenance.clone(),
        config.events.clone(),
        shutdown.clone(),
    ));
}

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

/// The page and its API answer only a `Host` that names this machine: a
/// page elsewhere that made its name resolve here (DNS rebinding) would
/// otherwise read the fleet. The liveness probe says nothing, so it
/// answers any name.
fn dashboard_router(shared: Arc<Shared>, hosts: HostRule) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/assets/page.css", get(|| asset("text/css", PAGE_CSS)))
        .route("/assets/page.js", get(|| asset("text/javascript", PAGE_JS)))
        .route("/api/status", get(api_status))
        .route("/api/events", get(events::events))
        .route("/api/stats", get(api_stats))
        .route("/api/rollout", get(rollout::api_rollout))
        .route("/metrics", get(metrics::metrics))
        .route("/hive/{name}", get(hive::page))
        .route("/api/hive/{name}", get(hive::api_hive))
        .route("/api/hive/{name}/events", get(hive::api_events))
        .route("/api/hive/{name}/agents/{agent}/logs", get(tail::logs))
        .route_layer(middleware::from_fn_with_state(
            shared.clone(),
            count_request,
        ))
        .route_layer(middleware::from_fn_with_state(hosts, guard_host))
        .route("/health/live", get(|| async { "ok\n" }))
        .with_state(shared)
}

/// The webhook alone. It is signed, so it answers any `Host`; any other
/// path gets 404.
fn webhook_router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/hooks/forge", post(hook::forge_hook))
        .with_state(shared)
}

async fn count_request(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    shared.requests.fetch_add(1, Ordering::Relaxed);
    next.run(req).await
}

async fn guard_host(State(hosts): State<HostRule>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("(not text)"));
    if let Err(refused) = hosts.check(host) {
        tracing::warn!(host = %refused.host, "refused a dashboard request by its Host header");
        return (StatusCode::MISDIRECTED_REQUEST, format!("{refused}\n")).into_response();
    }
    next.run(req).await
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD)
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    let content_type = format!("{kind}; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The decoded query pairs of `/api/status` and `/api/events`, for
/// [`Query::parse`]; a bad one is a 400 that names it and its value.
type Pairs = QueryPairs<Vec<(String, String)>>;

fn bad_query(e: QueryError) -> Response {
    reply(StatusCode::BAD_REQUEST, json!({ "error": e.to_string() }))
}

async fn api_status(State(shared): State<Arc<Shared>>, pairs: Pairs) -> Response {
    let query = match Query::parse(&pairs.0) {
        Ok(query) => query,
        Err(e) => return bad_query(e),
    };
    if query != Query::default() {
        return Json(shared.report(&query)).into_response();
    }
    // Every row is evaluated: off the async threads.
    match tokio::task::spawn_blocking(move || shared.full_document()).await {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Ok(Err(e)) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": format!("writing the fleet's document: {e}") }),
        ),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": format!("the document's writer failed: {e}") }),
        ),
    }
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
        "sent_events": shared.push_stats.sent_events.load(Ordering::Relaxed),
        "sent_bytes": shared.push_stats.sent_bytes.load(Ordering::Relaxed),
    }))
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response {
    (status, Json(body)).into_response()
}
