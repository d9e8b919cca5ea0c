//! Validated names. Hive, agent and credential-account names are DNS labels,
//! which makes them safe as NATS subject tokens, KV keys, container names and
//! path components all at once. A name is parsed once, at the boundary
//! (config, CLI, payload decode), and never goes back to being a plain string.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The rule every name follows, quoted in every error.
pub const NAME_RULE: &str = "a DNS label: 1 to 63 characters of a-z, 0-9 and '-', \
starting and ending with a letter or digit (regex ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$)";

/// Longest valid name, in bytes.
pub const MAX_NAME_LEN: usize = 63;

/// What kind of name failed, so the error says "hive name" or "agent name".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Hive,
    Agent,
    Account,
    Group,
    LeafSite,
    Object,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Hive => "hive name",
            NameKind::Agent => "agent name",
            NameKind::Account => "credential account name",
            NameKind::Group => "group name",
            NameKind::LeafSite => "leaf site name",
            NameKind::Object => "volume or network name",
        })
    }
}

/// A name that is not a DNS label. The message quotes the value (escaped, so
/// control characters cannot forge log lines) and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {reason}; a name must be {NAME_RULE}")]
pub struct NameError {
    pub kind: NameKind,
    pub value: String,
    pub reason: &'static str,
}

fn check_label(kind: NameKind, value: &str) -> Result<(), NameError> {
    let fail = |reason| {
        // Keep the quoted value bounded: an oversized name must not make an
        // oversized error.
        let shown: String = value.chars().take(80).collect();
        Err(NameError {
            kind,
            value: shown,
            reason,
        })
    };
    if value.is_empty() {
        return fail("it is empty");
    }
    if value.len() > MAX_NAME_LEN {
        return fail("it is longer than 63 bytes");
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return fail(match bad {
            'A'..='Z' => "it has an upper-case letter",
            '.' => "it has a '.', which would split a NATS subject or KV key",
            '*' | '>' => "it has a NATS wildcard ('*' or '>')",
            c if c.is_whitespace() => "it has white space",
            c if !c.is_ascii() => "it has a non-ASCII character",
            _ => "it has a character outside a-z, 0-9 and '-'",
        });
    }
    if value.starts_with('-') || value.ends_with('-') {
        return fail("it starts or ends with '-'");
    }
    Ok(())
}

macro_rules! dns_label_name {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn new(value: impl Into<String>) -> Result<Self, NameError> {
                let value = value.into();
                check_label($kind, &value)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(value: String) -> Result<Self, NameError> {
                Self::new(value)
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(value: &str) -> Result<Self, NameError> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        // Eq, Ord and Hash are those of the inner string, so a map keyed by
        // names can be searched with a `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

dns_label_name!(
    /// The name of one host in the swarm.
    HiveName,
    NameKind::Hive
);
dns_label_name!(
    /// The name of one agent (one container) on a hive.
    AgentName,
    NameKind::Agent
);
dns_label_name!(
    /// The name of one credential account of an agent (for example `smtp`).
    AccountName,
    NameKind::Account
);
dns_label_name!(
    /// The name of a group of hives in a swarm file (`[groups.<name>]`); a
    /// DNS label like the others, so it can be shown and keyed safely.
    GroupName,
    NameKind::Group
);
dns_label_name!(
    /// The name of a leaf-node site in the roster (`[leaf_sites.<name>]`):
    /// a server of its own whose hives reach the buckets through its leaf
    /// link to the hub.
    LeafSiteName,
    NameKind::LeafSite
);

dns_label_name!(
    /// The name of a Docker volume or network an agent declares; the hive
    /// makes it as `hyperhive.<hive>.<name>`, so two hives on one dockerd
    /// never share one.
    ObjectName,
    NameKind::Object
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for ok in ["a", "0", "alpha", "mail-bot", "a1-b2", &"x".repeat(63)] {
            HiveName::new(ok).unwrap_or_else(|e| panic!("{ok:?} rejected: {e}"));
            AgentName::new(ok).unwrap();
            AccountName::new(ok).unwrap();
        }
    }

    #[test]
    fn invalid_names_quote_value_and_rule() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("Alpha", "upper-case"),
            ("a.b", "'.'"),
            ("a*", "wildcard"),
            ("a>", "wildcard"),
            ("a b", "white space"),
            ("zürich", "non-ASCII"),
            ("-a", "starts or ends"),
            ("a-", "starts or ends"),
            ("a_b", "outside"),
            ("a/b", "outside"),
        ];
        for (bad, why) in cases {
            let err = AgentName::new(*bad).expect_err(bad);
            let msg = err.to_string();
            assert!(msg.contains(why), "{bad:?}: {msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("DNS label"), "{msg}");
            assert!(msg.starts_with("invalid agent name"), "{msg}");
        }
        let long = "x".repeat(64);
        let msg = HiveName::new(long).unwrap_err().to_string();
        assert!(msg.contains("longer than 63"), "{msg}");
        assert!(msg.starts_with("invalid hive name"), "{msg}");
    }

    #[test]
    fn serde_validates() {
        let ok: HiveName = serde_json::from_str("\"alpha\"").unwrap();
        assert_eq!(ok.as_str(), "alpha");
        let err = serde_json::from_str::<HiveName>("\"a.b\"").unwrap_err();
        assert!(err.to_string().contains("invalid hive name"), "{err}");
    }
}
