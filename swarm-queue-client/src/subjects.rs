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
    /// `hyperhive.hive.<hive>.logs.request`: `LogsRequest`; the frames go
    /// to its reply subject, under the hive's answer prefix.
    pub logs_request: String,
    /// `hyperhive.hive.<hive>.logs.>`: what the hive subscribes to for
    /// its log streams (the requests and the readers' acks).
    pub logs: String,
}

impl HiveSubjects {
    pub fn new(hive: &HiveName) -> Self {
        Self {
            deploy: format!("{HIVE_PREFIX}.{hive}.deploy"),
            credential: format!("{HIVE_PREFIX}.{hive}.credential"),
            logs_request: format!("{HIVE_PREFIX}.{hive}.logs.request"),
            logs: format!("{HIVE_PREFIX}.{hive}.logs.>"),
        }
    }
}

/// The deploy subject of every hive, for permissions: `hyperhive.hive.*.deploy`.
pub fn all_deploy_subjects() -> String {
    format!("{HIVE_PREFIX}.*.deploy")
}

/// Where hive `hive` answers a deploy request: `hyperhive.hive.<hive>.answer`
/// (the request's reply subject is this prefix and a token of the
/// controller's). Each hive may publish under its own prefix only, so an
/// answer names the hive that sent it.
pub fn deploy_answer_prefix(hive: &HiveName) -> String {
    format!("{HIVE_PREFIX}.{hive}.answer")
}

/// The reply subject of one deploy request to `hive`: its answer prefix
/// and `token` (unique per request, one subject token).
pub fn deploy_answer_subject(hive: &HiveName, token: &str) -> String {
    format!("{}.{token}", deploy_answer_prefix(hive))
}

/// A fresh reply subject for one deploy request to `hive` from `client`:
/// the hive's answer prefix and the last token of a new inbox of the
/// client (unique per request).
#[cfg(feature = "nats")]
pub fn fresh_deploy_answer(client: &async_nats::Client, hive: &HiveName) -> String {
    let inbox = client.new_inbox();
    let token = inbox.rsplit('.').next().unwrap_or(&inbox);
    deploy_answer_subject(hive, token)
}

/// The deploy answers of every hive, for the controller's permissions:
/// `hyperhive.hive.*.answer.>`.
pub fn all_deploy_answers() -> String {
    format!("{HIVE_PREFIX}.*.answer.>")
}

/// The token of a reply subject that is exactly `hive`'s answer prefix and
/// one token more; `None` for any other subject (a hive answers nowhere
/// else, and names its log stream's acks by this token).
pub fn answer_token<'a>(hive: &HiveName, reply: &'a str) -> Option<&'a str> {
    let rest = reply.strip_prefix(&deploy_answer_prefix(hive))?;
    let token = rest.strip_prefix('.')?;
    let one = !token.is_empty() && !token.contains(['.', '*', '>', ' ']);
    one.then_some(token)
}

/// Where the reader of log stream `token` of `hive` acknowledges frames:
/// `hyperhive.hive.<hive>.logs.ack.<token>`.
pub fn logs_ack_subject(hive: &HiveName, token: &str) -> String {
    format!("{HIVE_PREFIX}.{hive}.logs.ack.{token}")
}

/// The log subjects of every hive, for the controller's permissions:
/// `hyperhive.hive.*.logs.>`.
pub fn all_logs_subjects() -> String {
    format!("{HIVE_PREFIX}.*.logs.>")
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

/// Key of one forge delivery in the deliveries bucket: `delivery.<id>`.
/// `None` unless `id` is 1 to [`MAX_DELIVERY_ID_LEN`] of `A-Za-z0-9_-`
/// (GitHub, Gitea and Forgejo send a UUID), so the id is one key token.
pub fn delivery_key(id: &str) -> Option<String> {
    let token = !id.is_empty()
        && id.len() <= MAX_DELIVERY_ID_LEN
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    token.then(|| format!("delivery.{id}"))
}

/// The longest delivery id [`delivery_key`] accepts.
const MAX_DELIVERY_ID_LEN: usize = 100;

/// Key of the commit an agent was last deployed for by a forge delivery,
/// in the deliveries bucket: `deployed.<hive>.<agent>`.
pub fn deployed_key(hive: &HiveName, agent: &AgentName) -> String {
    format!("deployed.{hive}.{agent}")
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
        assert_eq!(s.logs_request, "hyperhive.hive.alpha.logs.request");
        assert_eq!(s.logs, "hyperhive.hive.alpha.logs.>");
        assert_eq!(
            logs_ack_subject(&hive, "t1"),
            "hyperhive.hive.alpha.logs.ack.t1"
        );
        assert_eq!(all_logs_subjects(), "hyperhive.hive.*.logs.>");
    }

    #[test]
    fn an_answer_token_is_one_token_under_the_hives_own_prefix() {
        let alpha = HiveName::new("alpha").unwrap();
        assert_eq!(
            answer_token(&alpha, "hyperhive.hive.alpha.answer.x1"),
            Some("x1")
        );
        for bad in [
            "hyperhive.hive.beta.answer.x1",
            "hyperhive.hive.alpha.answer",
            "hyperhive.hive.alpha.answer.",
            "hyperhive.hive.alpha.answer.a.b",
            "hyperhive.hive.alpha.answerx.y",
            "hyperhive.hive.alpha.answer.*",
            "_INBOX_swarm-controller.x",
        ] {
            assert_eq!(answer_token(&alpha, bad), None, "{bad}");
        }
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
    fn delivery_keys_are_one_token() {
        let id = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
        assert_eq!(delivery_key(id).unwrap(), format!("delivery.{id}"));
        for bad in ["", "a.b", "a b", "a>", "*", &"x".repeat(101)] {
            assert_eq!(delivery_key(bad), None, "{bad:?}");
        }
        let h = HiveName::new("alpha").unwrap();
        let a = AgentName::new("bot").unwrap();
        assert_eq!(deployed_key(&h, &a), "deployed.alpha.bot");
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
