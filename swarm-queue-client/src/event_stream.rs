//! The `hyperhive-events` stream: what happened to agents, and what
//! operators did.
//!
//! - A hive publishes its agents' lifecycle on
//!   `hyperhive.events.hive.<hive>.<agent>.<kind>` (`_` for no agent), and
//!   may publish nowhere else in the stream (its account imports only its
//!   own prefix).
//! - The controller publishes every operator verb on
//!   `hyperhive.events.audit.<verb>`, with the identity that ran it.
//!
//! The stream keeps events within limits ([`EventsSettings`]: 7 days and
//! 256 MiB by default, the oldest dropped first), so a busy fleet cannot
//! fill the server. No event carries a time of its own: its time is the
//! stream message's, stamped by the server.

use serde::{Deserialize, Serialize};

use crate::limits::SCHEMA_VERSION;
use crate::names::{AgentName, HiveName};
use crate::payload::sanitize_message;

/// The stream's name.
pub const EVENTS_STREAM: &str = "hyperhive-events";
/// Every subject the stream holds.
pub const EVENTS_SUBJECTS: &str = "hyperhive.events.>";
/// Default `[events] max_age_secs`: 7 days.
pub const DEFAULT_EVENTS_MAX_AGE_SECS: u64 = 7 * 86_400;
/// Default `[events] max_bytes`: 256 MiB.
pub const DEFAULT_EVENTS_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// The largest event.
pub const MAX_EVENT_BYTES: usize = 4096;
/// The most hive names one audit event lists (`hive_count` says how many
/// it touched).
pub const MAX_EVENT_HIVES: usize = 32;

/// The token that stands for "no agent" in a hive event's subject (never
/// an agent name: names have no `_`).
const NO_AGENT: &str = "_";

/// `hyperhive.events.hive.<hive>.<agent>.<kind>`.
pub fn hive_event_subject(hive: &HiveName, agent: Option<&AgentName>, kind: &str) -> String {
    let agent = agent.map_or(NO_AGENT, AgentName::as_str);
    format!("hyperhive.events.hive.{hive}.{agent}.{kind}")
}

/// Everything one hive may publish: `hyperhive.events.hive.<hive>.>`.
pub fn hive_events(hive: &HiveName) -> String {
    format!("hyperhive.events.hive.{hive}.>")
}

/// Every hive's events, for the exports: `hyperhive.events.hive.*.>`.
pub fn all_hive_events() -> String {
    "hyperhive.events.hive.*.>".to_string()
}

/// `hyperhive.events.audit.<verb>`.
pub fn audit_subject(verb: &str) -> String {
    format!("hyperhive.events.audit.{verb}")
}

/// Every operator action: `hyperhive.events.audit.>`.
pub fn all_audit_events() -> String {
    "hyperhive.events.audit.>".to_string()
}

/// The stream's limits (the controller's `[events]` table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsSettings {
    #[serde(default = "default_max_age")]
    pub max_age_secs: u64,
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Copies of the stream in a cluster (1 to 5): like the buckets', so
    /// that a server down loses no event.
    #[serde(default = "default_replicas")]
    pub replicas: usize,
}

fn default_replicas() -> usize {
    1
}

fn default_max_age() -> u64 {
    DEFAULT_EVENTS_MAX_AGE_SECS
}

fn default_max_bytes() -> u64 {
    DEFAULT_EVENTS_MAX_BYTES
}

impl Default for EventsSettings {
    fn default() -> Self {
        Self {
            max_age_secs: DEFAULT_EVENTS_MAX_AGE_SECS,
            max_bytes: DEFAULT_EVENTS_MAX_BYTES,
            replicas: default_replicas(),
        }
    }
}

impl EventsSettings {
    /// Every problem of these settings, each naming the bad value.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.max_age_secs < 60 {
            out.push(format!(
                "[events] max_age_secs = {}: keep events at least 60 s",
                self.max_age_secs
            ));
        }
        if self.max_bytes < 1024 * 1024 {
            out.push(format!(
                "[events] max_bytes = {}: give the stream at least 1 MiB (1048576)",
                self.max_bytes
            ));
        }
        if !(1..=5).contains(&self.replicas) {
            out.push(format!(
                "[events] replicas = {}: must be 1 to 5 (a cluster's size at most)",
                self.replicas
            ));
        }
        out
    }
}

/// One event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub schema: u32,
    /// What happened: `started`, `exited`, `oom`, `created`, `rebuilt`,
    /// `retired`, `job_failed`, `credential_delivered`, … for a hive; the
    /// verb (`declare`, `deploy`, …) for an operator action.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hive: Option<HiveName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    /// An operator action: the hives it touched (at most
    /// [`MAX_EVENT_HIVES`]) and how many there were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hives: Vec<HiveName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hive_count: Option<u64>,
    /// An operator action: who ran it (the controller's nkey, the user and
    /// the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// What to say of it, at most 512 bytes, control characters replaced.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Event {
    pub fn new(kind: &str) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            kind: kind.to_string(),
            ..Default::default()
        }
    }

    /// This event with `message`.
    pub fn said(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// The hives an operator action touched: the first
    /// [`MAX_EVENT_HIVES`] named, all counted.
    pub fn touching(mut self, hives: &[HiveName]) -> Self {
        self.hives = hives.iter().take(MAX_EVENT_HIVES).cloned().collect();
        self.hive_count = Some(hives.len() as u64);
        self
    }

    /// The bytes of this event as it is published: the message sanitized
    /// and clipped, the whole within [`MAX_EVENT_BYTES`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.clone();
        out.message = sanitize_message(&out.message);
        out.by = out.by.as_deref().map(sanitize_message);
        out.kind = out
            .kind
            .chars()
            .filter(|c| c.is_ascii_lowercase() || *c == '_' || *c == '-')
            .take(40)
            .collect();
        let bytes = serde_json::to_vec(&out).unwrap_or_default();
        // Every field is bounded: 32 names of at most 63 bytes, two
        // sanitized texts of at most 512, a kind of at most 40.
        debug_assert!(bytes.len() <= MAX_EVENT_BYTES, "{}", bytes.len());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<Event, crate::payload::DecodeError> {
        if bytes.len() > MAX_EVENT_BYTES {
            return Err(crate::payload::DecodeError::TooLarge {
                what: "event",
                len: bytes.len(),
                max: MAX_EVENT_BYTES,
            });
        }
        serde_json::from_slice(bytes).map_err(|source| crate::payload::DecodeError::Json {
            what: "event",
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_put_each_hive_under_its_own_prefix() {
        let h = HiveName::new("alpha").unwrap();
        let a = AgentName::new("mail").unwrap();
        assert_eq!(
            hive_event_subject(&h, Some(&a), "exited"),
            "hyperhive.events.hive.alpha.mail.exited"
        );
        assert_eq!(
            hive_event_subject(&h, None, "started"),
            "hyperhive.events.hive.alpha._.started"
        );
        assert_eq!(hive_events(&h), "hyperhive.events.hive.alpha.>");
        assert_eq!(audit_subject("declare"), "hyperhive.events.audit.declare");
        assert!(AgentName::new(NO_AGENT).is_err());
    }

    #[test]
    fn events_round_trip_bounded_and_sanitized() {
        let hives: Vec<HiveName> = (0..10_000)
            .map(|i| HiveName::new(format!("hive-{i:05}-with-a-longish-name")).unwrap())
            .collect();
        let mut e = Event::new("declare").touching(&hives);
        e.by = Some("UABC (user ops\u{1b}[31m on host)".into());
        e.message = "x".repeat(10_000);
        let bytes = e.encode();
        assert!(bytes.len() <= MAX_EVENT_BYTES, "{}", bytes.len());
        let back = Event::decode(&bytes).unwrap();
        assert_eq!(back.hives.len(), MAX_EVENT_HIVES);
        assert_eq!(back.hive_count, Some(10_000));
        assert!(!back.by.unwrap().contains('\u{1b}'));
        assert!(back.message.len() <= crate::limits::MAX_MESSAGE_LEN);
    }

    #[test]
    fn settings_name_the_bad_value() {
        assert!(EventsSettings::default().problems().is_empty());
        let bad = EventsSettings {
            max_age_secs: 5,
            max_bytes: 10,
            replicas: 7,
        };
        let p = bad.problems().join("\n");
        assert!(
            p.contains("max_age_secs = 5")
                && p.contains("max_bytes = 10")
                && p.contains("replicas = 7"),
            "{p}"
        );
        let none = EventsSettings {
            replicas: 0,
            ..EventsSettings::default()
        };
        assert!(none.problems().join("").contains("replicas = 0"));
    }
}
