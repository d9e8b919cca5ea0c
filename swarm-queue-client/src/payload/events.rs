//! The core-NATS events between the daemons: a deploy request and its
//! reply, and the credential notice. They are small, carry names only
//! (never a secret), and go through the same bounds as the KV payloads.

use serde::{Deserialize, Serialize};

use super::checks::sanitize_message;
use super::codec::{DecodeError, InvalidField, Payload};
use crate::limits::*;
use crate::names::{AccountName, AgentName};

/// `hyperhive.hive.<hive>.deploy`: deploy or redeploy one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployRequest {
    pub schema: u32,
    pub agent: AgentName,
}

impl DeployRequest {
    pub fn new(agent: AgentName) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            agent,
        }
    }
}

impl Payload for DeployRequest {
    const WHAT: &'static str = "deploy request";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        Ok(())
    }
}

/// The reply to a deploy request: the queued job, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeployReply {
    Queued { job: u64 },
    Refused { error: String },
}

impl DeployReply {
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_VALUE_BYTES {
            return Err(DecodeError::TooLarge {
                what: "deploy reply",
                len: bytes.len(),
                max: MAX_VALUE_BYTES,
            });
        }
        serde_json::from_slice(bytes).map_err(|source| DecodeError::Json {
            what: "deploy reply",
            source,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let clipped = match self {
            DeployReply::Refused { error } => DeployReply::Refused {
                error: sanitize_message(error),
            },
            q => q.clone(),
        };
        // A one-field struct of a number or a string always serializes.
        serde_json::to_vec(&clipped).unwrap_or_default()
    }
}

/// `hyperhive.hive.<hive>.credential`: names only, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialNotice {
    pub schema: u32,
    pub agent: AgentName,
    pub account: AccountName,
}

impl CredentialNotice {
    pub fn new(agent: AgentName, account: AccountName) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            agent,
            account,
        }
    }
}

impl Payload for CredentialNotice {
    const WHAT: &'static str = "credential notice";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        Ok(())
    }
}
