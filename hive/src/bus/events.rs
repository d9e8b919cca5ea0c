//! The event listener: core-NATS subjects on the one shared connection.
//!
//! - `hyperhive.knowledge`: wake the knowledge task (it pulls the repo).
//! - `hyperhive.hive.<hive>.deploy`: queue a deploy; reply with the job id
//!   or the error when the request has a reply subject.
//! - `hyperhive.hive.<hive>.credential`: deliver the named credential.
//!
//! An undecodable payload is a `warn` log and changes nothing (a deploy
//! request that has a reply subject is told why, so its sender does not
//! wait for a timeout). Subscriptions survive reconnects: the client
//! re-subscribes by itself.

use std::sync::Arc;

use futures_util::StreamExt;
use swarm_queue_client::subjects::{HiveSubjects, KNOWLEDGE};
use swarm_queue_client::{decode, CredentialNotice, DeployReply, DeployRequest, HiveName, Level};
use tokio::sync::Notify;

use crate::bus::credentials::Credentials;
use crate::bus::deploy::Deployer;
use crate::shutdown::Shutdown;
use crate::status::{keys, StatusBoard};

#[derive(Clone)]
pub struct EventDeps {
    pub client: async_nats::Client,
    pub hive: HiveName,
    pub board: Arc<StatusBoard>,
    pub knowledge: Option<Arc<Notify>>,
    /// Delivers a credential named by a notice (opens the bucket on first
    /// use).
    pub credentials: Credentials,
    pub deploy: Deployer,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot subscribe to {subject}")]
pub struct SubscribeError {
    subject: String,
    #[source]
    source: async_nats::SubscribeError,
}

pub(crate) async fn subscribe(
    client: &async_nats::Client,
    subject: String,
) -> Result<async_nats::Subscriber, SubscribeError> {
    client
        .subscribe(subject.clone())
        .await
        .map_err(|source| SubscribeError { subject, source })
}

/// Subscribe and handle events until shutdown.
pub async fn run(deps: EventDeps, mut shutdown: Shutdown) -> Result<(), SubscribeError> {
    let subjects = HiveSubjects::new(&deps.hive);
    let mut knowledge = subscribe(&deps.client, KNOWLEDGE.to_string()).await?;
    let mut deploy = subscribe(&deps.client, subjects.deploy.clone()).await?;
    let mut credential = subscribe(&deps.client, subjects.credential.clone()).await?;
    tracing::info!(hive = %deps.hive, deploy = %subjects.deploy, credential = %subjects.credential, "listening for events");
    loop {
        tokio::select! {
            // Subscriber::next is cancel-safe: an undelivered message stays
            // queued in the subscriber.
            _ = shutdown.wait() => break,
            Some(_) = knowledge.next() => {
                match &deps.knowledge {
                    Some(n) => n.notify_one(),
                    None => tracing::info!(hive = %deps.hive, "knowledge event ignored: no knowledge_repo configured"),
                }
            }
            Some(msg) = deploy.next() => {
                if !is_redirected_stream_message(&deps, &msg) {
                    on_deploy(&deps, msg).await
                }
            }
            Some(msg) = credential.next() => {
                if !is_redirected_stream_message(&deps, &msg) {
                    on_credential(&deps, msg).await
                }
            }
        }
    }
    let _ = knowledge.unsubscribe().await;
    let _ = deploy.unsubscribe().await;
    let _ = credential.unsubscribe().await;
    Ok(())
}

/// A JetStream consumer can be pointed at any deliver subject (the server
/// does not check it), so another identity could push stored KV values onto
/// this hive's subjects. Those carry a `$JS.ACK.` reply; real requests and
/// notices never do. Dropped with a warning.
fn is_redirected_stream_message(deps: &EventDeps, msg: &async_nats::Message) -> bool {
    is_redirected(&deps.hive, msg)
}

/// [`is_redirected_stream_message`] for any of this hive's subjects.
pub(crate) fn is_redirected(hive: &HiveName, msg: &async_nats::Message) -> bool {
    let redirected = msg
        .reply
        .as_ref()
        .is_some_and(|r| r.as_str().starts_with("$JS.ACK."));
    if redirected {
        tracing::warn!(%hive, subject = %msg.subject, "dropped a JetStream message delivered onto an event subject");
    }
    redirected
}

async fn on_deploy(deps: &EventDeps, msg: async_nats::Message) {
    let reply = match decode::<DeployRequest>(&msg.payload) {
        Err(e) => {
            tracing::warn!(hive = %deps.hive, subject = %msg.subject, error = %e, "undecodable deploy request ignored");
            DeployReply::Refused {
                error: format!("{e}"),
            }
        }
        Ok(req) => {
            let agent = req.value.agent;
            match deps.deploy.deploy(agent.clone()).await {
                Ok(job) => {
                    tracing::info!(hive = %deps.hive, %agent, job, "deploy queued from the swarm");
                    DeployReply::Queued { job }
                }
                Err(e) => {
                    let error = crate::error_chain(&e);
                    tracing::warn!(hive = %deps.hive, %agent, %error, "deploy request refused");
                    DeployReply::Refused { error }
                }
            }
        }
    };
    if let Some(to) = msg.reply {
        if let Err(e) = deps.client.publish(to, reply.encode().into()).await {
            tracing::warn!(hive = %deps.hive, error = %e, "could not reply to a deploy request");
        }
    }
}

async fn on_credential(deps: &EventDeps, msg: async_nats::Message) {
    let notice = match decode::<CredentialNotice>(&msg.payload) {
        Ok(n) => n.value,
        Err(e) => {
            tracing::warn!(hive = %deps.hive, subject = %msg.subject, error = %e, "undecodable credential notice ignored");
            return;
        }
    };
    match deps
        .credentials
        .deliver(&notice.agent, &notice.account, &deps.board)
        .await
    {
        Ok(_) => deps.board.clear(keys::CREDENTIALS),
        // Logged, and named in `credential_refused`, by the delivery.
        Err(e) if e.refused() => {}
        Err(e) => {
            let msg = crate::error_chain(&e);
            tracing::warn!(hive = %deps.hive, agent = %notice.agent, account = %notice.account, error = %msg, "credential delivery failed");
            deps.board.raise(
                keys::CREDENTIALS,
                Level::Warn,
                format!("credential delivery failed: {msg}"),
            );
        }
    }
}
