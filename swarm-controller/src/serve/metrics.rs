//! `GET /metrics`: the controller's own figures in Prometheus' text format.
//! Counts, never one series per hive, so a fleet of 10,000 costs a scrape
//! the same as a fleet of ten:
//!
//! - `hyperhive_controller_hives{freshness}` and
//!   `hyperhive_controller_hives_by_convergence{convergence}`: the fleet as
//!   the page's summary counts it; `hyperhive_controller_hives_attention`;
//! - `hyperhive_controller_rollout{outcome}` (1 for the stored rollout's
//!   outcome, none without one), `hyperhive_controller_rollout_wave`,
//!   `hyperhive_controller_rollout_hives{step}`;
//! - `hyperhive_controller_sse_clients` (open event streams) and
//!   `hyperhive_controller_sse_max_clients`;
//! - `hyperhive_controller_http_requests_total` (dashboard routes, this one
//!   included), `hyperhive_controller_pushes_total`,
//!   `hyperhive_controller_values_decoded_total`;
//! - `hyperhive_controller_nats_connected` (1 or 0) and
//!   `hyperhive_controller_nats_reconnects_total`.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::Shared;

pub async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let mut out = String::new();
    let (summary, stats) = {
        let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
        (fleet.summary(), fleet.stats())
    };
    family(&mut out, "hives", "gauge", "Hives by freshness.");
    for (f, n) in &summary.freshness {
        let _ = writeln!(out, "hyperhive_controller_hives{{freshness=\"{f}\"}} {n}");
    }
    family(
        &mut out,
        "hives_by_convergence",
        "gauge",
        "Hives by convergence.",
    );
    for (c, n) in &summary.convergence {
        let _ = writeln!(
            out,
            "hyperhive_controller_hives_by_convergence{{convergence=\"{c}\"}} {n}"
        );
    }
    let attention = summary.attention;
    gauge(
        &mut out,
        "hives_attention",
        "Hives that need attention.",
        attention as u64,
    );
    rollout(&mut out, &shared).await;
    let open = shared.sse_max_clients - shared.sse_slots.available_permits();
    gauge(&mut out, "sse_clients", "Open event streams.", open as u64);
    let max = shared.sse_max_clients as u64;
    gauge(
        &mut out,
        "sse_max_clients",
        "The cap on event streams.",
        max,
    );
    let requests = shared.requests.load(Ordering::Relaxed);
    counter(
        &mut out,
        "http_requests_total",
        "Dashboard requests.",
        requests,
    );
    let pushes = shared.push_stats.pushes.load(Ordering::Relaxed);
    counter(&mut out, "pushes_total", "Row changes broadcast.", pushes);
    let decoded = stats.values_decoded;
    counter(
        &mut out,
        "values_decoded_total",
        "KV values decoded.",
        decoded,
    );
    let connected = shared.client.connection_state() == async_nats::connection::State::Connected;
    gauge(
        &mut out,
        "nats_connected",
        "1 while connected to NATS.",
        connected.into(),
    );
    let connects = shared.client.statistics().connects.load(Ordering::Relaxed);
    let reconnects = connects.saturating_sub(1);
    counter(
        &mut out,
        "nats_reconnects_total",
        "NATS reconnects.",
        reconnects,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The stored rollout's outcome, wave and steps; a read error is a
/// comment, never a made-up value.
async fn rollout(out: &mut String, shared: &Shared) {
    family(
        out,
        "rollout",
        "gauge",
        "1 for the stored rollout's outcome.",
    );
    let stored = match super::rollout::read_cached(shared).await {
        Ok(s) => s,
        Err(e) => {
            let why = e.to_string().replace('\n', " ");
            let _ = writeln!(out, "# the rollout state cannot be read: {why}");
            return;
        }
    };
    let Some(stored) = stored else {
        return;
    };
    let r = &stored.rollout;
    let outcome = match &r.outcome {
        crate::rollout::state::Outcome::Running => "running",
        crate::rollout::state::Outcome::Halted { .. } => "halted",
        crate::rollout::state::Outcome::Completed => "completed",
        crate::rollout::state::Outcome::Aborted => "aborted",
    };
    let _ = writeln!(
        out,
        "hyperhive_controller_rollout{{outcome=\"{outcome}\"}} 1"
    );
    let wave = (r.wave as u64 + 1).min(r.waves.len() as u64);
    gauge(out, "rollout_wave", "The wave in progress, from 1.", wave);
    family(
        out,
        "rollout_hives",
        "gauge",
        "The rollout's hives by step.",
    );
    let c = r.counts();
    for (step, n) in [
        ("done", c.done),
        ("written", c.written),
        ("waiting", c.waiting),
        ("failed", c.failed),
        ("restored", c.restored),
        ("skipped", c.skipped),
    ] {
        let _ = writeln!(
            out,
            "hyperhive_controller_rollout_hives{{step=\"{step}\"}} {n}"
        );
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP hyperhive_controller_{name} {help}");
    let _ = writeln!(out, "# TYPE hyperhive_controller_{name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "hyperhive_controller_{name} {value}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    family(out, name, "counter", help);
    let _ = writeln!(out, "hyperhive_controller_{name} {value}");
}
