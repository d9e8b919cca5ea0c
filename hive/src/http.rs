//! The loopback HTTP server: `/health/ready` (200 when ready, 503 when not;
//! the body is the very `Readiness` that is published), `/health/live`,
//! `/metrics` (Prometheus text from the same snapshot), plus whatever the
//! local operator API adds.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::readiness::{render_metrics, Health};
use crate::shutdown::Shutdown;

pub fn health_router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/health/ready", get(ready))
        .route("/health/live", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .with_state(health)
}

async fn ready(State(health): State<Arc<Health>>) -> Response {
    let snap = health.snapshot();
    let code = if snap.readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // A Readiness always serializes: it is plain strings, numbers and maps.
    let body = serde_json::to_string_pretty(&snap.readiness).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn metrics(State(health): State<Arc<Health>>) -> Response {
    let mut text = render_metrics(&health.snapshot());
    text.push_str(&crate::perf::render());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
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
