//! The small checks the payload validators share, and the sanitizers that
//! make text read from outside (Docker, error chains) safe to carry, so odd
//! input can never make a payload invalid.

use super::codec::InvalidField;
use crate::limits::*;

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

pub(super) fn check_len(field: &str, value: &str, max: usize) -> Result<(), InvalidField> {
    if value.len() > max {
        return Err(InvalidField::TooLong {
            field: field.to_string(),
            len: value.len(),
            max,
        });
    }
    Ok(())
}

pub(super) fn check_text(field: &str, value: &str, max: usize) -> Result<(), InvalidField> {
    check_len(field, value, max)?;
    if value.chars().any(char::is_control) {
        return Err(InvalidField::ControlCharacter {
            field: field.to_string(),
        });
    }
    Ok(())
}

pub(super) fn check_count(field: &str, count: usize, max: usize) -> Result<(), InvalidField> {
    if count > max {
        return Err(InvalidField::TooMany {
            field: field.to_string(),
            count,
            max,
        });
    }
    Ok(())
}
