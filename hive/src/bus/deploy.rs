//! The deploy subject's handler: a [`Deployer`] queues the deploy of a
//! declared agent (a first deploy, or a rebuild that re-resolves its image)
//! and wakes the job worker. The event listener holds one.
//!
//! Fails closed: an agent that is not in the declaration in force, or a job
//! store that cannot be written, gets an error reply that names the agent
//! and the hive and says what to do.

use std::sync::Arc;

use swarm_queue_client::{AgentName, HiveName};
use tokio::sync::Notify;

use crate::agents::declared::WantedRx;
use crate::agents::jobs::{now_ms, DeployRequest, JobStore, StoreError};

/// Why a deploy request was refused. The message goes back to the
/// requester as it is.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error(
        "hive {hive} has no declaration yet, so agent {agent} is not declared; \
         declare it first (swarm-controller declare)"
    )]
    NoDeclaration { hive: HiveName, agent: AgentName },
    #[error(
        "agent {agent} is not declared on hive {hive} (declaration revision {revision}); \
         add it to the swarm file and run swarm-controller declare"
    )]
    NotDeclared {
        hive: HiveName,
        agent: AgentName,
        revision: u64,
    },
    #[error(
        "agent {agent} on hive {hive} declares fields this hive (version {version}) does not \
         know: {fields}; it is left as it is: upgrade the hive, or declare it without them"
    )]
    NotUnderstood {
        hive: HiveName,
        agent: AgentName,
        version: &'static str,
        fields: String,
    },
    #[error("cannot queue the deploy of {agent} on hive {hive}")]
    Store {
        hive: HiveName,
        agent: AgentName,
        #[source]
        source: StoreError,
    },
}

/// Queues deploys of declared agents.
#[derive(Clone, Debug)]
pub struct Deployer {
    pub store: JobStore,
    /// Woken after a job is queued.
    pub wake: Arc<Notify>,
    /// The declaration in force (the wanted task's latest).
    pub wanted: WantedRx,
    pub hive: HiveName,
}

impl Deployer {
    /// Queue a deploy of `agent` with its declared spec; the job id.
    pub async fn deploy(&self, agent: AgentName) -> Result<u64, DeployError> {
        let hive = self.hive.clone();
        let Some(current) = self.wanted.borrow().clone() else {
            return Err(DeployError::NoDeclaration { hive, agent });
        };
        let Some(spec) = current.declaration.agents.get(&agent).cloned() else {
            return Err(DeployError::NotDeclared {
                hive,
                agent,
                revision: current.revision,
            });
        };
        if let Some(fields) = crate::agents::plan::unknown_fields(&spec) {
            return Err(DeployError::NotUnderstood {
                hive,
                agent,
                version: env!("CARGO_PKG_VERSION"),
                fields,
            });
        }
        let deploy = DeployRequest {
            spec,
            revision: Some(current.revision),
            relock: true,
        };
        let queued = self
            .store
            .request_deploy(&agent, deploy, now_ms())
            .await
            .map_err(|source| DeployError::Store {
                hive,
                agent,
                source,
            })?;
        self.wake.notify_one();
        Ok(queued.job.0 as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use swarm_queue_client::{AgentSpec, Declaration};

    use super::*;
    use crate::agents::declared::Wanted;

    fn name(s: &str) -> AgentName {
        AgentName::new(s).unwrap()
    }

    #[tokio::test]
    async fn only_declared_agents_are_queued_and_refusals_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::open(&dir.path().join("hive.db")).unwrap();
        let (tx, rx) = tokio::sync::watch::channel(None);
        let d = Deployer {
            store: store.clone(),
            wake: Arc::default(),
            wanted: rx,
            hive: HiveName::new("alpha").unwrap(),
        };
        let e = d.deploy(name("mail")).await.unwrap_err().to_string();
        assert!(
            e.contains("no declaration yet") && e.contains("mail"),
            "{e}"
        );
        let spec = AgentSpec {
            image: Some("local/mail:1".into()),
            ..Default::default()
        };
        tx.send_replace(Some(Arc::new(Wanted {
            revision: 7,
            declaration: Declaration {
                schema: 1,
                agents: BTreeMap::from([(name("mail"), spec)]),
            },
            created_ns: None,
        })));
        let e = d.deploy(name("ghost")).await.unwrap_err().to_string();
        assert!(
            e.contains("agent ghost is not declared on hive alpha (declaration revision 7)"),
            "{e}"
        );
        let job = d.deploy(name("mail")).await.unwrap();
        let jobs = store.jobs(Default::default()).await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].id.0 as u64, jobs[0].agent.as_str()), (job, "mail"));
        // A field this hive does not know: refused by name, nothing queued.
        let mut newer = AgentSpec {
            image: Some("local/mail:2".into()),
            ..Default::default()
        };
        newer.unknown.insert("user_ns".into(), "remap".into());
        tx.send_replace(Some(Arc::new(Wanted {
            revision: 8,
            declaration: Declaration {
                schema: 1,
                agents: BTreeMap::from([(name("mail"), newer)]),
            },
            created_ns: None,
        })));
        let e = d.deploy(name("mail")).await.unwrap_err().to_string();
        assert!(
            e.contains("agent mail on hive alpha declares fields this hive")
                && e.contains("does not know: user_ns; it is left as it is"),
            "{e}"
        );
        assert_eq!(store.jobs(Default::default()).await.unwrap().len(), 1);
    }
}
