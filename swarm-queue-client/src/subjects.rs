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
