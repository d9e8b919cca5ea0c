//! `knowledge-changed`: tell every hive that the knowledge repository moved
//! on. The event is an empty message on the knowledge subject; each hive
//! pulls the repository itself.

use bytes::Bytes;
use swarm_queue_client::subjects::KNOWLEDGE;
use swarm_queue_client::{ensure_connected, NotConnected};

#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error(transparent)]
    NotConnected(#[from] NotConnected),
    #[error("cannot publish on {KNOWLEDGE}: {0}")]
    Publish(String),
}

/// Publish the knowledge event and flush it to the server.
pub async fn publish(client: &async_nats::Client) -> Result<(), KnowledgeError> {
    ensure_connected(client)?;
    client
        .publish(KNOWLEDGE, Bytes::new())
        .await
        .map_err(|e| KnowledgeError::Publish(e.to_string()))?;
    client
        .flush()
        .await
        .map_err(|e| KnowledgeError::Publish(e.to_string()))?;
    tracing::info!(subject = KNOWLEDGE, "published the knowledge event");
    Ok(())
}
