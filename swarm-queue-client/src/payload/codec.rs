//! The one encode and decode path: every payload is bounded in size before
//! it is parsed and before it is written, validated against the rules serde
//! cannot express, and read with a warning when a newer schema wrote it.
//! Keeping it in one place is what makes "decoders never panic on arbitrary
//! bytes" one property to test instead of one per payload.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::limits::*;

pub use super::checks::InvalidField;

/// A payload that could not be decoded. Each variant names the payload kind.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{what} is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} is not valid: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} has schema {found}, newer than schema {SCHEMA_VERSION} this build reads, and its fields no longer fit: {source}")]
    NewerSchema {
        what: &'static str,
        found: u32,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} has schema 0; schema versions start at 1")]
    ZeroSchema { what: &'static str },
    #[error("{what} is not valid: {reason}")]
    Invalid {
        what: &'static str,
        reason: InvalidField,
    },
}

/// A payload that may not be written because it breaks a bound or rule.
#[derive(Debug, thiserror::Error)]
#[error("refusing to write {what}: {reason}")]
pub struct EncodeError {
    pub what: &'static str,
    pub reason: String,
}

/// A decoded payload plus anything the reader should be told about it (for
/// example that it was written by a newer schema).
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    pub value: T,
    pub warnings: Vec<String>,
}

/// Implemented by every wire payload; gives one encode and one decode path.
pub trait Payload: Serialize + DeserializeOwned {
    /// What this payload is called in errors, for example "declaration".
    const WHAT: &'static str;
    fn schema(&self) -> u32;
    /// Check every bound and rule that serde cannot express.
    fn validate(&self) -> Result<(), InvalidField>;
    /// Where the payload carries fields this build does not know, in the
    /// places where ignoring one could drop a constraint (an agent spec):
    /// decoding names them in a warning instead of ignoring them silently.
    fn ignored_fields(&self) -> Vec<String> {
        Vec::new()
    }
}

/// How many ignored fields one warning names; the rest are counted.
const IGNORED_NAMED: usize = 8;

/// Decode and validate a payload. Never panics, whatever the bytes.
pub fn decode<T: Payload>(bytes: &[u8]) -> Result<Decoded<T>, DecodeError> {
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(DecodeError::TooLarge {
            what: T::WHAT,
            len: bytes.len(),
            max: MAX_VALUE_BYTES,
        });
    }
    let value: T = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(source) => {
            if let Ok(SchemaOnly { schema }) = serde_json::from_slice(bytes) {
                if schema > SCHEMA_VERSION {
                    return Err(DecodeError::NewerSchema {
                        what: T::WHAT,
                        found: schema,
                        source,
                    });
                }
            }
            return Err(DecodeError::Json {
                what: T::WHAT,
                source,
            });
        }
    };
    let schema = value.schema();
    if schema == 0 {
        return Err(DecodeError::ZeroSchema { what: T::WHAT });
    }
    value.validate().map_err(|reason| DecodeError::Invalid {
        what: T::WHAT,
        reason,
    })?;
    let mut warnings = Vec::new();
    if schema > SCHEMA_VERSION {
        warnings.push(format!(
            "{} has schema {schema}, newer than schema {SCHEMA_VERSION} this build reads; \
             fields this build does not know were ignored",
            T::WHAT
        ));
    }
    warnings.extend(ignored_warning(T::WHAT, &value.ignored_fields()));
    Ok(Decoded { value, warnings })
}

/// Validate and encode a payload, refusing anything over [`MAX_VALUE_BYTES`].
pub fn encode<T: Payload>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let err = |reason| EncodeError {
        what: T::WHAT,
        reason,
    };
    if value.schema() == 0 {
        return Err(err("schema 0 is not a schema version".into()));
    }
    value.validate().map_err(|e| err(e.to_string()))?;
    let bytes = serde_json::to_vec(value).map_err(|e| err(e.to_string()))?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(err(format!(
            "it encodes to {} bytes, over the {MAX_VALUE_BYTES}-byte limit",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Pretty JSON for people (`nats kv get` shows whatever was stored, so the
/// hive stores this form). Same rules as [`encode`].
pub fn encode_pretty<T: Payload>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let compact = encode(value)?;
    let pretty = serde_json::to_vec_pretty(value).map_err(|e| EncodeError {
        what: T::WHAT,
        reason: e.to_string(),
    })?;
    Ok(if pretty.len() <= MAX_VALUE_BYTES {
        pretty
    } else {
        compact
    })
}

/// One warning naming the fields a payload carried that this build does not
/// know, clipped to [`IGNORED_NAMED`] names and cleaned of control characters.
fn ignored_warning(what: &str, fields: &[String]) -> Option<String> {
    if fields.is_empty() {
        return None;
    }
    let named: Vec<String> = fields
        .iter()
        .take(IGNORED_NAMED)
        .map(|f| super::checks::sanitize_short(f))
        .collect();
    let more = match fields.len().saturating_sub(IGNORED_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "{what} has fields this build does not know, which it ignores: {}{more}",
        named.join(", ")
    ))
}

#[derive(Deserialize)]
struct SchemaOnly {
    schema: u32,
}
