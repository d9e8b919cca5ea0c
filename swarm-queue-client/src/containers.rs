//! How a hive names and labels what it creates in Docker.
//!
//! Several hives can share one dockerd (tests do), so every container a hive
//! creates carries its hive's name twice: in the container name and in a
//! label. The label is the ownership mark: a hive only ever touches a
//! container whose `org.hyperhive.hive` label is its own name. Tools outside
//! the hive (the test harness, an operator's `docker ps --filter`) rely on
//! the same names, so they are written here and nowhere else.

use crate::names::{AgentName, HiveName};

/// `org.hyperhive.managed=true` on everything hyperhive creates.
pub const LABEL_MANAGED: &str = "org.hyperhive.managed";
/// `org.hyperhive.hive=<hive>`: the owner. A hive touches nothing without its own.
pub const LABEL_HIVE: &str = "org.hyperhive.hive";
/// `org.hyperhive.agent=<agent>`.
pub const LABEL_AGENT: &str = "org.hyperhive.agent";
/// `org.hyperhive.spec=<spec hash>` (`sha256:…`): a changed spec means a rebuild.
pub const LABEL_SPEC: &str = "org.hyperhive.spec";

/// Where an agent's state directory is mounted inside its container.
pub const STATE_MOUNT: &str = "/state";
/// Where the knowledge checkout is mounted, read-only.
pub const KNOWLEDGE_MOUNT: &str = "/knowledge";

/// `hyperhive.<hive>.<agent>`: both parts are DNS labels, so the name is a
/// valid container name and cannot collide across hives.
pub fn container_name(hive: &HiveName, agent: &AgentName) -> String {
    format!("hyperhive.{hive}.{agent}")
}

/// Docker `label=` filter value selecting every container of one hive.
pub fn hive_label_filter(hive: &HiveName) -> String {
    format!("{LABEL_HIVE}={hive}")
}

/// Docker `label=` filter value selecting the containers of one agent
/// (together with [`hive_label_filter`], of one hive's agent).
pub fn agent_label_filter(agent: &AgentName) -> String {
    format!("{LABEL_AGENT}={agent}")
}

/// The tag given to an image the hive builds itself from a build context:
/// `hyperhive-build/<hive>/<agent>:<first 16 hex digits of the spec hash>`.
/// A new spec is a new tag, so a build never overwrites the image a running
/// container was created from.
pub fn built_image_tag(hive: &HiveName, agent: &AgentName, spec_hash: &str) -> String {
    let hex = spec_hash
        .strip_prefix(crate::payload::SPEC_HASH_PREFIX)
        .unwrap_or(spec_hash);
    let short: String = hex
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    let tag = if short.is_empty() { "latest" } else { &short };
    format!("hyperhive-build/{hive}/{agent}:{tag}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        let h = HiveName::new("alpha").unwrap();
        let a = AgentName::new("mail-bot").unwrap();
        assert_eq!(container_name(&h, &a), "hyperhive.alpha.mail-bot");
        assert_eq!(hive_label_filter(&h), "org.hyperhive.hive=alpha");
        assert_eq!(
            built_image_tag(&h, &a, "sha256:0123456789abcdef0123"),
            "hyperhive-build/alpha/mail-bot:0123456789abcdef"
        );
        assert_eq!(
            built_image_tag(&h, &a, ""),
            "hyperhive-build/alpha/mail-bot:latest"
        );
    }
}
