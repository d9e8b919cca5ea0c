//! `POST /hooks/forge`: a forge's push webhook. The signature is checked
//! before the body is parsed at all; a push then becomes a plan
//! ([`webhook::plan`], pure) of a knowledge event and deploy requests,
//! which run here in parallel, each with its own timeout.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;

use super::{reply, Shared};
use crate::deploy::{self, DeployOutcome};
use crate::webhook::{self, Plan, Push};

/// How long a webhook waits for each hive's deploy reply. Forges give up on
/// a webhook after about 10 s; the requests run in parallel.
const WEBHOOK_DEPLOY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) async fn forge_hook(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let lookup = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let forge = match authenticate(&shared, lookup, &body) {
        Ok(forge) => forge,
        Err(refused) => return refused.reply(),
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
        Err(e) => return reply(StatusCode::BAD_REQUEST, json!({ "error": e.to_string() })),
    };
    let plan = plan(&shared, &push);
    tracing::info!(
        repo = %push.repository.full_name,
        knowledge = plan.knowledge,
        deploys = plan.deploys.len(),
        "push received"
    );
    carry_out(&shared, &push, &plan).await
}

/// Why a webhook is refused before its body is read.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("webhook_secret_file is not configured; refusing unsigned webhooks")]
    NoSecret,
    #[error(transparent)]
    Signature(#[from] webhook::SignatureError),
}

impl Refusal {
    fn reply(&self) -> Response {
        let status = match self {
            Refusal::NoSecret => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Signature(_) => StatusCode::UNAUTHORIZED,
        };
        reply(status, json!({ "error": self.to_string() }))
    }
}

/// The forge whose signature the body carries.
fn authenticate<'a>(
    shared: &Shared,
    lookup: impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
) -> Result<webhook::Forge, Refusal> {
    let secret = shared.webhook_secret.as_ref().ok_or(Refusal::NoSecret)?;
    webhook::verify_signature(lookup, body, secret).map_err(|e| {
        tracing::warn!(error = %e, "webhook refused");
        Refusal::from(e)
    })
}

/// What the push asks for, against the declarations the fleet holds now.
fn plan(shared: &Shared, push: &Push) -> Plan {
    let fleet = shared.fleet.read().unwrap_or_else(|p| p.into_inner());
    webhook::plan(
        push,
        shared.knowledge_repo.as_deref(),
        fleet.declarations().map(|(h, d)| (h, &d.declaration)),
    )
}

/// Publish the knowledge event (if planned), then ask every planned hive to
/// deploy, all at once; the reply lists each outcome.
async fn carry_out(shared: &Shared, push: &Push, plan: &Plan) -> Response {
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
