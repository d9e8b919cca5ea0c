//! `POST /hooks/forge`: a forge's push webhook. The signature is checked
//! before the body is parsed at all; then the event header and delivery id
//! must be there, and the body must be a push with `ref` and `after`. The
//! delivery id is recorded once for every controller ([`deliveries`]): a
//! delivery seen before gets 409 and publishes nothing. A push then becomes
//! a plan ([`webhook::plan`], pure) of a knowledge event and deploy
//! requests; an agent already deployed for the pushed commit is skipped,
//! the others are asked in parallel, each with its own timeout.
//!
//! A replay gets **409**, not a 200 that says "duplicate": nothing was done
//! for it, and a forge's delivery log then shows it as not delivered, with
//! the reason in the body, instead of as a success. Forges do not retry a
//! 4xx on their own.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;

use super::deliveries::{self, Claim};
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
    let Some(event) = webhook::event_name(lookup) else {
        return bad_request(format!(
            "no event header ({}): the event is not signed, so a delivery that names none \
             is refused, not read as a push",
            header_list(&webhook::EVENT_HEADERS)
        ));
    };
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
    let (key, push) = match delivery_and_push(lookup, &body) {
        Ok(accepted) => accepted,
        Err(error) => return bad_request(error),
    };
    if push.deletes_ref() {
        return reply(
            StatusCode::ACCEPTED,
            json!({ "ignored": format!("the push deletes {}; nothing is deployed", push.git_ref) }),
        );
    }
    match deliveries::record_delivery(&shared.deliveries, &key, forge, &push).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(%key, "webhook delivery refused: already acted on");
            return reply(
                StatusCode::CONFLICT,
                json!({ "error": format!(
                    "{key} was acted on before (by this controller or another): a replayed \
                     delivery deploys nothing; deploy again with `swarm-controller deploy`"
                ), "duplicate": key }),
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "webhook delivery not recorded");
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": format!("{e}; nothing was published") }),
            );
        }
    }
    let plan = plan(&shared, &push);
    tracing::info!(
        repo = %push.repository.full_name,
        after = %push.after,
        knowledge = plan.knowledge,
        deploys = plan.deploys.len(),
        "push received"
    );
    carry_out(&shared, &push, &plan).await
}

/// The delivery's key in `hyperhive-deliveries`, and its push payload; or
/// what is missing or bad, for a 400.
fn delivery_and_push<'a>(
    lookup: impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
) -> Result<(String, Push), String> {
    let Some(id) = webhook::delivery_id(&lookup) else {
        return Err(format!(
            "no delivery id header ({}): without it a replayed delivery cannot be told from \
             a new one",
            header_list(&webhook::DELIVERY_HEADERS)
        ));
    };
    let Some(key) = swarm_queue_client::subjects::delivery_key(id) else {
        return Err(format!(
            "delivery id {id:?} must be 1 to 100 of A-Za-z0-9, - and _ (a forge sends a UUID)"
        ));
    };
    match webhook::parse_push(body) {
        Ok(push) => Ok((key, push)),
        Err(e) => Err(e.to_string()),
    }
}

fn bad_request(error: String) -> Response {
    reply(StatusCode::BAD_REQUEST, json!({ "error": error }))
}

/// `X-GitHub-Event, X-Gitea-Event, …` as a forge writes them.
fn header_list(names: &[&str]) -> String {
    let title = |name: &str| -> String {
        name.split('-')
            .map(|w| match w {
                "github" => "GitHub".to_string(),
                w => w[..1].to_ascii_uppercase() + &w[1..],
            })
            .collect::<Vec<_>>()
            .join("-")
    };
    names
        .iter()
        .map(|n| title(n))
        .collect::<Vec<_>>()
        .join(", ")
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
        fleet
            .declarations()
            .flat_map(|(h, d)| d.builds.iter().map(move |(a, b)| (h, a, b))),
    )
}

/// Publish the knowledge event (if planned), then ask every planned hive
/// whose agent is not already deployed for the pushed commit to deploy,
/// all at once; the reply lists each outcome and each agent skipped.
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
    let requests = plan
        .deploys
        .iter()
        .map(|(hive, agent)| deploy_once(shared, hive, agent, &push.after));
    let (deploys, skipped): (Vec<_>, Vec<_>) = futures_util::future::join_all(requests)
        .await
        .into_iter()
        .partition(|d| d.get("skipped").is_none());
    reply(
        StatusCode::OK,
        json!({
            "repository": push.repository.full_name,
            "after": push.after,
            "knowledge": knowledge_result,
            "deploys": deploys,
            "skipped": skipped,
        }),
    )
}

/// Claim the agent's deploy for `commit`, ask the hive, and give the claim
/// back if it queued nothing. A claim already held is a `skipped` entry.
async fn deploy_once(
    shared: &Shared,
    hive: &swarm_queue_client::HiveName,
    agent: &swarm_queue_client::AgentName,
    commit: &str,
) -> serde_json::Value {
    let held = match deliveries::claim(&shared.deliveries, hive, agent, commit).await {
        Ok(Claim::Claimed(held)) => held,
        Ok(Claim::AlreadyDeployed) => {
            tracing::info!(%hive, %agent, commit, "already deployed for this commit; skipped");
            return json!({
                "hive": hive, "agent": agent, "skipped": "already_deployed",
                "text": format!("already deployed for commit {commit} by an earlier delivery; nothing queued"),
            });
        }
        Err(e) => {
            tracing::error!(%hive, %agent, error = %e, "deploy not claimed");
            return json!({
                "hive": hive, "agent": agent,
                "result": { "outcome": "not_sent", "error": e.to_string() },
                "text": format!("not sent: {e}"),
            });
        }
    };
    let outcome: DeployOutcome =
        deploy::request(&shared.client, hive, agent, WEBHOOK_DEPLOY_TIMEOUT).await;
    if !outcome.is_queued() {
        deliveries::release(&shared.deliveries, held).await;
    }
    json!({ "hive": hive, "agent": agent, "result": outcome, "text": outcome.to_string() })
}
