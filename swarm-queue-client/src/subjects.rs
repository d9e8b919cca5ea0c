//! Every NATS subject hyperhive uses comes from here, so the hive and the
//! controller cannot drift apart. No other crate formats a subject.

use crate::names::{AccountName, AgentName, HiveName};

/// Core-NATS subject: "the knowledge repo changed" (empty payload).
pub const KNOWLEDGE: &str = "hyperhive.knowledge";

const HIVE_PREFIX: &str = "hyperhive.hive";

/// The subjects one hive listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiveSubjects {
    /// `hyperhive.hive.<hive>.deploy`: `DeployRequest`, request/reply.
    pub deploy: String,
    /// `hyperhive.hive.<hive>.credential`: `CredentialNotice`, names only.
    pub credential: String,
}

impl HiveSubjects {
    pub fn new(hive: &HiveName) -> Self {
        Self {
            deploy: format!("{HIVE_PREFIX}.{hive}.deploy"),
            credential: format!("{HIVE_PREFIX}.{hive}.credential"),
        }
    }
}

/// The deploy subject of every hive, for permissions: `hyperhive.hive.*.deploy`.
pub fn all_deploy_subjects() -> String {
    format!("{HIVE_PREFIX}.*.deploy")
}

/// The credential subject of every hive: `hyperhive.hive.*.credential`.
pub fn all_credential_subjects() -> String {
    format!("{HIVE_PREFIX}.*.credential")
}

/// Connection name of the controller; its inbox prefix derives from it.
pub const CONTROLLER_CONNECTION_NAME: &str = "swarm-controller";

/// Connection name of one hive's daemon: `hive-<hive>`.
pub fn hive_connection_name(hive: &HiveName) -> String {
    format!("hive-{hive}")
}

/// The reply-inbox prefix a connection named `connection_name` uses:
/// `_INBOX_<name>` with every character outside `A-Za-z0-9_-` turned into
/// `_`. Each identity may subscribe only under its own prefix, so no client
/// can read the replies (JetStream answers, KV values) sent to another.
pub fn inbox_prefix(connection_name: &str) -> String {
    let token: String = connection_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("_INBOX_{token}")
}

/// The inbox prefix of one hive's daemon: `_INBOX_hive-<hive>`.
pub fn hive_inbox_prefix(hive: &HiveName) -> String {
    inbox_prefix(&hive_connection_name(hive))
}

/// The inbox prefix of the controller: `_INBOX_swarm-controller`.
pub fn controller_inbox_prefix() -> String {
    inbox_prefix(CONTROLLER_CONNECTION_NAME)
}

/// Key of one sealed credential in the credentials bucket: `<hive>.<agent>.<account>`.
pub fn credential_key(hive: &HiveName, agent: &AgentName, account: &AccountName) -> String {
    format!("{hive}.{agent}.{account}")
}

/// Key filter for every credential of one hive: `<hive>.>`.
pub fn credential_prefix_filter(hive: &HiveName) -> String {
    format!("{hive}.>")
}

/// Split a credential key back into its names. Every part is validated, so a
/// key planted with a bad name is refused here rather than used as a path.
pub fn parse_credential_key(
    key: &str,
) -> Result<(HiveName, AgentName, AccountName), crate::names::NameError> {
    let mut parts = key.splitn(3, '.');
    let hive = HiveName::new(parts.next().unwrap_or_default())?;
    let agent = AgentName::new(parts.next().unwrap_or_default())?;
    let account = AccountName::new(parts.next().unwrap_or_default())?;
    Ok((hive, agent, account))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_follow_the_contract() {
        let hive = HiveName::new("alpha").unwrap();
        let s = HiveSubjects::new(&hive);
        assert_eq!(s.deploy, "hyperhive.hive.alpha.deploy");
        assert_eq!(s.credential, "hyperhive.hive.alpha.credential");
        assert_eq!(KNOWLEDGE, "hyperhive.knowledge");
        assert_eq!(all_deploy_subjects(), "hyperhive.hive.*.deploy");
    }

    #[test]
    fn inbox_prefixes_are_one_token_per_identity() {
        let hive = HiveName::new("alpha").unwrap();
        assert_eq!(hive_inbox_prefix(&hive), "_INBOX_hive-alpha");
        assert_eq!(controller_inbox_prefix(), "_INBOX_swarm-controller");
        assert_eq!(inbox_prefix("a.b *>c"), "_INBOX_a_b___c");
        assert_ne!(
            hive_inbox_prefix(&HiveName::new("controller").unwrap()),
            controller_inbox_prefix()
        );
    }

    #[test]
    fn credential_keys_round_trip() {
        let h = HiveName::new("alpha").unwrap();
        let a = AgentName::new("mail-bot").unwrap();
        let c = AccountName::new("smtp").unwrap();
        let key = credential_key(&h, &a, &c);
        assert_eq!(key, "alpha.mail-bot.smtp");
        assert_eq!(parse_credential_key(&key).unwrap(), (h, a, c));
        assert!(parse_credential_key("alpha.mail-bot").is_err());
        assert!(parse_credential_key("alpha.mail-bot.smtp.extra").is_err());
        assert!(parse_credential_key("alpha..smtp").is_err());
    }
}
