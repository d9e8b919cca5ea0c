//! The loopback HTTP server: `/health/ready` (200 when ready, 503 when not;
//! the body is the very `HiveStatus` that is published), `/health/live`,
//! `/metrics` (Prometheus text from the same snapshot), plus whatever the
//! local operator API adds.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use swarm_queue_client::http_host::HostRule;

use crate::shutdown::Shutdown;
use crate::status::{render_metrics, StatusBoard};

pub fn probe_router(board: Arc<StatusBoard>) -> Router {
    Router::new()
        .route("/health/ready", get(ready))
        .route("/health/live", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .with_state(board)
}

async fn ready(State(board): State<Arc<StatusBoard>>) -> Response {
    let snap = board.snapshot();
    let code = if snap.status.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // A `HiveStatus` always serializes: it is plain strings, numbers and maps.
    let body = serde_json::to_string_pretty(&snap.status).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn metrics(State(board): State<Arc<StatusBoard>>) -> Response {
    let mut text = render_metrics(&board.snapshot());
    text.push_str(&crate::perf::render());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `router` answering only requests whose `Host` names this machine (the
/// guard against DNS rebinding): any other gets 421 and reaches no route.
pub fn guard_host(router: Router, rule: HostRule) -> Router {
    router.layer(middleware::from_fn(move |req: Request, next: Next| {
        let rule = rule.clone();
        async move {
            let host = req
                .headers()
                .get(header::HOST)
                .map(|h| h.to_str().unwrap_or("(not text)"));
            match rule.check(host) {
                Ok(()) => next.run(req).await,
                Err(refused) => {
                    tracing::warn!(host = %refused.host, "refused a request by its Host header");
                    (StatusCode::MISDIRECTED_REQUEST, format!("{refused}\n")).into_response()
                }
            }
        }
    }))
}

/// Serve `router` on `listener` until shutdown.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, mut shutdown: Shutdown) {
    let result = axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "local HTTP server failed");
    }
}
