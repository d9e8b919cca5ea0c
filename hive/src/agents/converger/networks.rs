//! Networks the hive made that no installed agent names any more are
//! removed after the orphan grace, like an orphaned container: the
//! record ([`crate::agents::jobs::Store::unused_networks`], the installed
//! agents and the hive's own networks read in one lock) is the only input, what
//! Docker shows is never evidence, and a network is removed only with the
//! hive's label. One still in use (a retire not finished) is tried again
//! next round; a failure is logged and never fails the round, since a
//! network kept a little longer harms nothing.

use std::collections::BTreeMap;

use swarm_queue_client::ObjectName;
use tokio::time::Instant;

use super::ConvergerDeps;
use crate::agents::runtime::admit::object_name;
use crate::agents::runtime::objects::ObjectKind;
use crate::agents::runtime::{ContainerRuntime, RuntimeError};

/// When each recorded network was first seen unused.
#[derive(Debug, Default)]
pub(super) struct NetworkReaper {
    first_unused: BTreeMap<ObjectName, Instant>,
}

impl NetworkReaper {
    /// Note the networks that became unused and remove those unused for
    /// the grace.
    pub(super) async fn sweep<R: ContainerRuntime>(
        &mut self,
        deps: &ConvergerDeps<R>,
        now: Instant,
    ) {
        let unused = match deps.store.call(|s| s.unused_networks()).await {
            Ok(unused) => unused,
            Err(error) => {
                let error = crate::error_chain(&error);
                tracing::warn!(hive = %deps.hive, %error, "cannot read the hive's networks");
                return;
            }
        };
        self.first_unused.retain(|n, _| unused.contains(n));
        for name in unused {
            let since = *self.first_unused.entry(name.clone()).or_insert(now);
            if now.duration_since(since) < deps.orphan_grace {
                continue;
            }
            if remove(deps, &name).await {
                self.first_unused.remove(&name);
            }
        }
    }
}

/// Remove one unused network and its record; whether it is gone.
async fn remove<R: ContainerRuntime>(deps: &ConvergerDeps<R>, name: &ObjectName) -> bool {
    let docker_name = object_name(&deps.hive, name.as_str());
    let gone = match deps
        .runtime
        .remove_object(ObjectKind::Network, &docker_name)
        .await
    {
        Ok(gone) => gone,
        // Not the hive's (it was there before the hive recorded it):
        // never touched, and no longer recorded.
        Err(RuntimeError::ForeignObject { .. }) => true,
        Err(error) => {
            let error = crate::error_chain(&error);
            tracing::warn!(hive = %deps.hive, network = %docker_name, %error, "cannot remove an unused network; trying again next round");
            return false;
        }
    };
    if !gone {
        tracing::info!(hive = %deps.hive, network = %docker_name, "an unused network still has containers; trying again next round");
        return false;
    }
    let forgotten = name.clone();
    match deps
        .store
        .call(move |s| s.forget_object(ObjectKind::Network, &forgotten))
        .await
    {
        Ok(()) => {
            tracing::info!(hive = %deps.hive, network = %docker_name, "removed a network no agent uses");
            true
        }
        Err(error) => {
            let error = crate::error_chain(&error);
            tracing::warn!(hive = %deps.hive, network = %docker_name, %error, "removed a network but cannot drop its record");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use swarm_queue_client::HiveName;
    use tokio::sync::Notify;

    use super::*;
    use crate::agents::jobs::JobStore;
    use crate::agents::runtime::fake::FakeRuntime;
    use crate::agents::runtime::objects::ObjectRuntime;
    use crate::status::StatusBoard;

    #[tokio::test(start_paused = true)]
    async fn an_unused_network_goes_after_the_grace_and_a_foreign_or_busy_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let hive = HiveName::new("alpha").unwrap();
        let (_tx, wanted) = tokio::sync::watch::channel(None);
        let deps = ConvergerDeps {
            store: JobStore::open(&dir.path().join("hive.db")).unwrap(),
            runtime: Arc::new(FakeRuntime::new("alpha")),
            hive: hive.clone(),
            board: Arc::new(StatusBoard::new(Some(hive), None)),
            wake: Arc::new(Notify::new()),
            wanted,
            reconcile_interval: Duration::from_secs(1),
            orphan_grace: Duration::from_secs(10),
            retry_base: crate::agents::retry::DEFAULT_BASE,
            docker_changed: Arc::new(Notify::new()),
            crash: crate::agents::crashloop::CrashPolicy::default(),
            planned: Default::default(),
        };
        let agent = swarm_queue_client::AgentName::new("a").unwrap();
        let names = ["ours", "busy", "theirs"].map(|n| ObjectName::new(n).unwrap());
        for n in &names {
            let (n, a) = (n.clone(), agent.clone());
            deps.store
                .call(move |s| s.record_object_use(ObjectKind::Network, &n, &a, 1))
                .await
                .unwrap();
        }
        let fake = &deps.runtime;
        fake.ensure_object(ObjectKind::Network, &names[0])
            .await
            .unwrap();
        fake.ensure_object(ObjectKind::Network, &names[1])
            .await
            .unwrap();
        fake.objects_in_use
            .lock()
            .unwrap()
            .insert("hyperhive.alpha.busy".into());
        fake.plant_object(ObjectKind::Network, "hyperhive.alpha.theirs", Some("beta"));
        let mut reaper = NetworkReaper::default();
        reaper.sweep(&deps, Instant::now()).await;
        tokio::time::advance(Duration::from_secs(9)).await;
        reaper.sweep(&deps, Instant::now()).await;
        assert_eq!(
            fake.object_names(ObjectKind::Network).len(),
            3,
            "inside the grace"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        reaper.sweep(&deps, Instant::now()).await;
        assert_eq!(
            fake.object_names(ObjectKind::Network),
            vec!["hyperhive.alpha.busy", "hyperhive.alpha.theirs"]
        );
        let recorded = deps.store.call(|s| s.unused_networks()).await.unwrap();
        assert_eq!(
            recorded,
            vec![names[1].clone()],
            "only the busy one is still due"
        );
    }
}
