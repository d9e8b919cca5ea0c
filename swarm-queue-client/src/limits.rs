//! Every bound of the wire contract. Each payload validates against these
//! before it is written and after it is read, and a test builds the largest
//! valid `HiveStatus` and `Declaration` and checks they fit the server's
//! default max payload (1 MiB).

/// The nats-server default `max_payload`.
pub const SERVER_MAX_PAYLOAD: usize = 1024 * 1024;

/// Largest value any hyperhive payload may encode to. Also the buckets'
/// `max_value_size`, so the server refuses a larger value from anyone.
pub const MAX_VALUE_BYTES: usize = 512 * 1024;

// Any value we accept must also be one the server accepts.
const _: () = assert!(MAX_VALUE_BYTES < SERVER_MAX_PAYLOAD);

/// The schema this build writes, and the newest it fully understands.
pub const SCHEMA_VERSION: u32 = 1;

/// Agents one hive may declare (and report).
pub const MAX_AGENTS_PER_HIVE: usize = 128;
/// Container image reference.
pub const MAX_IMAGE_LEN: usize = 255;
/// Arguments in a command.
pub const MAX_COMMAND_ARGS: usize = 32;
/// Bytes in one command argument.
pub const MAX_ARG_LEN: usize = 512;
/// Environment variables per agent.
pub const MAX_ENV_VARS: usize = 32;
/// Bytes in an environment variable name.
pub const MAX_ENV_KEY_LEN: usize = 64;
/// Bytes in an environment variable value.
pub const MAX_ENV_VALUE_LEN: usize = 512;
/// Credential accounts per agent.
pub const MAX_CREDENTIALS_PER_AGENT: usize = 16;
/// Bytes in a build context path or URL, a git ref, a Dockerfile path.
pub const MAX_BUILD_FIELD_LEN: usize = 255;
/// Memory limit range, MiB.
pub const MIN_MEMORY_MB: u64 = 6;
pub const MAX_MEMORY_MB: u64 = 1024 * 1024;
/// CPU limit range, in cores.
pub const MAX_CPUS: f64 = 1024.0;
/// Longest an agent must run before it counts as up, in seconds: an
/// agent's `min_running_secs`, and the hive-wide setting of that name.
pub const MAX_MIN_RUNNING_SECS: u64 = 3600;

/// Arguments of a health-check command, and bytes in each.
pub const MAX_HEALTH_ARGS: usize = 8;
pub const MAX_HEALTH_ARG_LEN: usize = 256;

/// Warnings in one `HiveStatus`.
pub const MAX_WARNINGS: usize = 32;
/// Bytes in a warning key.
pub const MAX_WARNING_KEY_LEN: usize = 64;
/// Bytes in any human-readable message (warnings, job errors, replies).
pub const MAX_MESSAGE_LEN: usize = 512;
/// Bytes in short free-form fields (observed state, version, xkey, spec hash, job kind).
pub const MAX_SHORT_LEN: usize = 80;

/// An agent's exit count in a `HiveStatus` (the hive saturates at it).
pub const MAX_EXIT_COUNT: u32 = 99_999;
/// Seconds in an agent's exit times in a `HiveStatus` (about 11 days; the
/// hive saturates at it, so it reads "at least").
pub const MAX_EXIT_SECS: u64 = 999_999;

/// Bytes in one sealed secret, before sealing.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;

/// Shorten `message` to at most `MAX_MESSAGE_LEN` bytes on a char boundary,
/// marking the cut, so a long error chain never makes a payload invalid.
pub fn clip_message(message: &str) -> String {
    clip(message, MAX_MESSAGE_LEN)
}

/// Shorten to at most `max` bytes on a char boundary, ending in "…" when cut.
pub fn clip(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let ellipsis = "…";
    let mut end = max - ellipsis.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_respects_bound_and_char_boundaries() {
        assert_eq!(clip_message("short"), "short");
        let long = "é".repeat(MAX_MESSAGE_LEN);
        let c = clip_message(&long);
        assert!(c.len() <= MAX_MESSAGE_LEN, "{}", c.len());
        assert!(c.ends_with('…'));
    }
}
