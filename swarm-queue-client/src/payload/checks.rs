//! The small checks the payload validators share, and the sanitizers that
//! make text read from outside (Docker, error chains) safe to carry, so odd
//! input can never make a payload invalid.

use std::fmt::{self, Display};

use crate::limits::*;
use crate::names::AgentName;

/// A bound or rule a payload breaks that serde cannot express. Each variant
/// names the field (`agents.web.env key`, `warnings`) and what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidField {
    #[error("{field} is {len} bytes, over the {max}-byte limit")]
    TooLong {
        field: String,
        len: usize,
        max: usize,
    },
    #[error("{field} contains a control character")]
    ControlCharacter { field: String },
    #[error("{field} has {count} entries, over the limit of {max}")]
    TooMany {
        field: String,
        count: usize,
        max: usize,
    },
    #[error("{field} is empty")]
    Empty { field: String },
    #[error("{field} is empty; give the program and its arguments")]
    EmptyCommand { field: String },
    #[error("{field} = {value}: it must be between 1 and {max}")]
    NotBetweenOneAnd { field: String, value: u64, max: u64 },
    #[error("{field} is {value}; it must be {allowed}")]
    OutOfRange {
        field: String,
        value: String,
        allowed: String,
    },
    #[error("{field} has neither image nor build; give one of them")]
    NoImageOrBuild { field: String },
    #[error("{field} {value:?} is not an image reference")]
    NotAnImageReference { field: String, value: String },
    #[error("{field} {value:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")]
    NotAnEnvName { field: String, value: String },
    #[error(
        "host port {port} is published by both agent {first} and agent {second}; give each its own"
    )]
    PortTwice {
        port: String,
        first: String,
        second: String,
    },
    #[error("sender is not a public xkey (X…)")]
    NotAPublicXKey,
    #[error("sealed value is {len} hex characters, over the limit for a {max_secret}-byte secret")]
    SealedTooLong { len: usize, max_secret: usize },
}

/// Make a free-form message safe to carry: a URL's userinfo is redacted
/// ([`crate::redact::userinfo`]), control characters become spaces and the
/// length is clipped. Use it on every error text put in a payload.
pub fn sanitize_message(message: &str) -> String {
    let cleaned: String = crate::redact::userinfo(message)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    clip_message(&cleaned)
}

/// Make a short field read from outside (a Docker label, a container name)
/// safe to carry: control characters become `?` and the length is clipped
/// to [`MAX_SHORT_LEN`], so odd input can never make a payload invalid.
pub fn sanitize_short(value: &str) -> String {
    let cleaned: String = value
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    crate::limits::clip(&cleaned, MAX_SHORT_LEN)
}

/// `agents.NAME.FIELD`, the name of an agent's field in an error. A field's
/// name is written out only when its check fails: every value the
/// controller reads is validated, and formatting each name first showed
/// in the profile of a fleet's read (about 5% of its samples).
#[derive(Clone, Copy)]
pub(super) struct AgentField<'a>(pub &'a AgentName, pub &'a str);

impl Display for AgentField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "agents.{}.{}", self.0, self.1)
    }
}

pub(super) fn check_len(
    field: impl Display + Copy,
    value: &str,
    max: usize,
) -> Result<(), InvalidField> {
    if value.len() > max {
        return Err(InvalidField::TooLong {
            field: field.to_string(),
            len: value.len(),
            max,
        });
    }
    Ok(())
}

pub(super) fn check_text(
    field: impl Display + Copy,
    value: &str,
    max: usize,
) -> Result<(), InvalidField> {
    check_len(field, value, max)?;
    if value.chars().any(char::is_control) {
        return Err(InvalidField::ControlCharacter {
            field: field.to_string(),
        });
    }
    Ok(())
}

pub(super) fn check_count(
    field: impl Display + Copy,
    count: usize,
    max: usize,
) -> Result<(), InvalidField> {
    if count > max {
        return Err(InvalidField::TooMany {
            field: field.to_string(),
            count,
            max,
        });
    }
    Ok(())
}
