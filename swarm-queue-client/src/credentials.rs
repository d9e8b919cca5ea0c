//! Sealed credentials. The controller seals a secret to the hive's public
//! xkey (curve25519 box, `nkeys`) and stores the envelope; only that hive's
//! private xkey opens it, and only when the sender is a key the hive trusts.
//! Nothing here logs, formats or returns a secret in an error. The seed
//! files that hold the two sides' xkeys are read and made by
//! [`load_or_create_seed`].

mod seed_file;

pub use seed_file::{load_or_create_seed, SeedFile, SeedFileError};

use serde::{Deserialize, Serialize};

use crate::limits::{MAX_SECRET_BYTES, SCHEMA_VERSION};
use crate::payload::{InvalidField, Payload};

pub use nkeys::XKey;

/// The stored value in `hyperhive-credentials`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialEnvelope {
    pub schema: u32,
    /// Public xkey of the sender (the controller).
    pub sender: String,
    /// Hex of the sealed bytes.
    pub sealed: String,
}

// Hand-written so that even a sealed value never lands in a log by accident.
impl std::fmt::Debug for CredentialEnvelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialEnvelope")
            .field("schema", &self.schema)
            .field("sender", &self.sender)
            .field("sealed_len", &self.sealed.len())
            .finish()
    }
}

impl Payload for CredentialEnvelope {
    const WHAT: &'static str = "credential envelope";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        if !self.sender.starts_with('X') || self.sender.len() > 80 {
            return Err(InvalidField::NotAPublicXKey);
        }
        // Sealing adds a header, nonce and tag; hex doubles it.
        if self.sealed.len() > 2 * (MAX_SECRET_BYTES + 256) {
            return Err(InvalidField::SealedTooLong {
                len: self.sealed.len(),
                max_secret: MAX_SECRET_BYTES,
            });
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("secret is {len} bytes, over the {MAX_SECRET_BYTES}-byte limit")]
    TooLarge { len: usize },
    #[error("{what} is not a valid xkey ({reason})")]
    BadKey { what: &'static str, reason: String },
    #[error("envelope sender {sender} is not a trusted controller key; refusing to open it")]
    Untrusted { sender: String },
    #[error("sealed value is not hex")]
    NotHex,
    #[error("envelope could not be opened with this hive's xkey (sealed to another key, or tampered with)")]
    Open,
    #[error("sealing failed")]
    Seal,
}

/// Seal `secret` from `sender` (the controller's private xkey) to the hive's
/// public xkey.
pub fn seal(
    secret: &[u8],
    sender: &XKey,
    recipient_public: &str,
) -> Result<CredentialEnvelope, CredentialError> {
    if secret.len() > MAX_SECRET_BYTES {
        return Err(CredentialError::TooLarge { len: secret.len() });
    }
    let recipient =
        XKey::from_public_key(recipient_public).map_err(|e| CredentialError::BadKey {
            what: "recipient",
            reason: e.to_string(),
        })?;
    let sealed = sender
        .seal(secret, &recipient)
        .map_err(|_| CredentialError::Seal)?;
    Ok(CredentialEnvelope {
        schema: SCHEMA_VERSION,
        sender: sender.public_key(),
        sealed: hex::encode(sealed),
    })
}

/// Open an envelope with the hive's private xkey, only if its sender is in
/// `trusted_senders`.
pub fn open(
    envelope: &CredentialEnvelope,
    recipient: &XKey,
    trusted_senders: &[String],
) -> Result<Vec<u8>, CredentialError> {
    if !trusted_senders.iter().any(|t| t == &envelope.sender) {
        return Err(CredentialError::Untrusted {
            sender: envelope.sender.clone(),
        });
    }
    let sender = XKey::from_public_key(&envelope.sender).map_err(|e| CredentialError::BadKey {
        what: "sender",
        reason: e.to_string(),
    })?;
    let sealed = hex::decode(&envelope.sealed).map_err(|_| CredentialError::NotHex)?;
    recipient
        .open(&sealed, &sender)
        .map_err(|_| CredentialError::Open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_refusals() {
        let controller = XKey::new();
        let hive = XKey::new();
        let other_hive = XKey::new();
        let trusted = vec![controller.public_key()];
        let env = seal(b"hunter2", &controller, &hive.public_key()).unwrap();
        assert!(!env.sealed.contains(&hex::encode(b"hunter2")));
        assert!(!format!("{env:?}").contains(&env.sealed));
        assert_eq!(open(&env, &hive, &trusted).unwrap(), b"hunter2");
        assert!(matches!(
            open(&env, &other_hive, &trusted),
            Err(CredentialError::Open)
        ));
        let stranger = XKey::new();
        let planted = seal(b"evil", &stranger, &hive.public_key()).unwrap();
        assert!(matches!(
            open(&planted, &hive, &trusted),
            Err(CredentialError::Untrusted { .. })
        ));
        let big = vec![0u8; MAX_SECRET_BYTES + 1];
        assert!(matches!(
            seal(&big, &controller, &hive.public_key()),
            Err(CredentialError::TooLarge { .. })
        ));
        assert!(seal(b"x", &controller, "not-a-key").is_err());
    }
}
