//! The deliveries refused for what was found below an agent's dir (a link
//! it planted), kept until a delivery of the same key is written: what the
//! `credential_refused` warning says. Pure: the deliverer records each
//! outcome and publishes the warning.

use std::collections::BTreeMap;

use swarm_queue_client::{AccountName, AgentName};

use super::DeliverError;

/// What was found where, by agent and account.
#[derive(Debug, Default)]
pub struct Refusals {
    standing: BTreeMap<(AgentName, AccountName), String>,
}

impl Refusals {
    /// One delivery's outcome: a write clears the key's refusal, a refusal
    /// records it, any other failure (the bucket, the envelope) leaves it.
    pub fn note(
        &mut self,
        agent: &AgentName,
        account: &AccountName,
        outcome: Result<(), &DeliverError>,
    ) {
        let key = (agent.clone(), account.clone());
        match outcome {
            Ok(()) => {
                self.standing.remove(&key);
            }
            Err(DeliverError::Refused { source, .. }) => {
                self.standing.insert(key, source.finding());
            }
            Err(_) => {}
        }
    }

    /// The warning's message, naming each agent, account and path; `None`
    /// when nothing stands refused.
    pub fn warning(&self) -> Option<String> {
        if self.standing.is_empty() {
            return None;
        }
        let each: Vec<String> = self
            .standing
            .iter()
            .map(|((agent, account), finding)| {
                format!("agent {agent}, credential {account}: {finding}")
            })
            .collect();
        let count = match each.len() {
            1 => "1 credential delivery".to_string(),
            n => format!("{n} credential deliveries"),
        };
        Some(format!(
            "{count} refused: {}. The hive follows no link below an agent's \
             state dir; once the path is fixed the credential, still in the bucket, is delivered",
            each.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::nofollow::NoFollowError;

    fn refused(agent: &str, path: &str) -> DeliverError {
        DeliverError::Refused {
            key: format!("alpha.{agent}.smtp"),
            source: NoFollowError::Refused {
                path: PathBuf::from(path),
                found: "a symbolic link",
                wanted: "a directory",
            },
        }
    }

    #[test]
    fn each_refusal_stands_until_its_own_key_is_written() {
        let (web, mail) = (
            AgentName::new("web").unwrap(),
            AgentName::new("mail").unwrap(),
        );
        let smtp = AccountName::new("smtp").unwrap();
        let mut r = Refusals::default();
        assert_eq!(r.warning(), None);
        r.note(
            &web,
            &smtp,
            Err(&refused("web", "/s/agents/web/credentials")),
        );
        r.note(
            &mail,
            &smtp,
            Err(&refused("mail", "/s/agents/mail/credentials")),
        );
        let w = r.warning().unwrap();
        assert!(w.starts_with("2 credential deliveries refused"), "{w}");
        assert!(
            w.contains("agent web, credential smtp: /s/agents/web/credentials is a symbolic link"),
            "{w}"
        );
        assert!(w.contains("agent mail"), "{w}");

        // Another failure of web's key is not a good delivery.
        let missing = DeliverError::Missing {
            key: "alpha.web.smtp".into(),
        };
        r.note(&web, &smtp, Err(&missing));
        assert!(r.warning().unwrap().contains("agent web"));

        r.note(&web, &smtp, Ok(()));
        let w = r.warning().unwrap();
        assert!(w.starts_with("1 credential delivery refused"), "{w}");
        assert!(!w.contains("agent web") && w.contains("agent mail"), "{w}");
        r.note(&mail, &smtp, Ok(()));
        assert_eq!(r.warning(), None);
    }
}
