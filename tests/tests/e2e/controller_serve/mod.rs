//! `swarm-controller serve` over a real nats-server: the JSON API, the
//! server-sent events (one row per KV update, never a re-read), the forge
//! webhook (good and bad signatures, replays and what its signature does
//! not cover), the webhook's own listener, the cap on event streams, and
//! two controllers at once.
//!
//! A module per concern: `api` (the JSON API and the
//! event stream), `webhook` (signatures, and what a cross-origin page can
//! send), `hardening` (replays, unsigned headers, the webhook listener, the
//! event-stream cap), `controllers` (two at once, and following across a
//! server restart).

mod api;
mod controllers;
mod hardening;
mod webhook;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::controller_support::*;
use bytes::Bytes;
use futures_util::StreamExt;
use hyperhive_tests::sse::EventStream;
use hyperhive_tests::wait_until;
use swarm_controller::webhook::sign;
use swarm_queue_client::subjects::all_deploy_subjects;
use swarm_queue_client::{decode, DeployReply, DeployRequest, HiveState};

/// The controller's event stream, each event's data parsed.
struct Events(EventStream);

impl Events {
    async fn open(base: &str) -> Events {
        Events::open_query(base, "").await
    }

    async fn open_query(base: &str, query: &str) -> Events {
        Events(EventStream::open(&format!("{base}/api/events?{query}"), T).await)
    }

    /// The next event: (name, parsed data).
    async fn next(&mut self) -> (String, serde_json::Value) {
        let (name, data) = self.0.next().await;
        (name, serde_json::from_str(&data).unwrap())
    }
}

async fn get_json(url: &str) -> serde_json::Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}
