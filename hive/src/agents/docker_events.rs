//! The Docker event task: follows Docker's events for this hive's
//! containers (`start`, `die`, `oom`, `health_status`, `destroy`,
//! `rename`), records how each run ended in the job store
//! ([`crate::agents::jobs::ExitRecord`]) and wakes the converger, so a
//! container that died is seen, published and repaired within a second rather
//! than at the next reconcile round (which stays as the safety net).
//!
//! When the stream breaks (dockerd restarted, the socket went away) it
//! connects again with backoff (1 s doubling to 30 s) and, once connected,
//! takes a full look: every container of this hive is inspected and its
//! run recorded, and the converger is woken, so an exit in the gap is not
//! lost. Recording is idempotent, so the look may repeat what events said.
//!
//! Everything an event carries is untrusted (anyone who can reach dockerd
//! can label a container as this hive's): an event whose hive label is not
//! this hive's, or whose agent label is not a valid agent name, is dropped,
//! and only the container with the agent's expected name
//! (`hyperhive.<hive>.<agent>`) writes the agent's evidence; any other
//! only wakes a look.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use swarm_queue_client::containers::{container_name, LABEL_AGENT, LABEL_HIVE, LABEL_SPEC};
use swarm_queue_client::{AgentName, HiveName};
use tokio::sync::Notify;

use crate::agents::crashloop::CrashPolicy;
use crate::agents::jobs::{ExitSeen, JobStore, StoreError};
use crate::agents::runtime::{
    ContainerEvent, ContainerRuntime, DockerRuntime, EventAction, RunState,
};
use crate::backoff::Backoff;
use crate::shutdown::Shutdown;

/// The waits between tries to (re)connect to the event stream.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

pub struct DockerEventDeps {
    pub runtime: Arc<DockerRuntime>,
    pub store: JobStore,
    pub hive: HiveName,
    /// Wakes the converger for an immediate observe, publish and repair.
    pub docker_changed: Arc<Notify>,
    pub crash: CrashPolicy,
    /// Where what Docker reported is told (hyperhive-events); `None` in
    /// tests.
    pub events: Option<crate::fleet_events::EventSink>,
}

/// Follow the events until shutdown. Never ends otherwise: a broken stream
/// is connected again.
pub async fn run(deps: DockerEventDeps, mut shutdown: Shutdown) {
    let mut backoff = RECONNECT;
    let mut since: Option<i64> = None;
    loop {
        // From the second before connecting on: what happens while the
        // full look runs is replayed, not lost.
        let from = since.unwrap_or_else(|| crate::agents::jobs::now_ms() / 1000 - 1);
        let stream = match deps.runtime.container_events(Some(from)) {
            Ok(s) => s,
            Err(e) => {
                let wait = backoff.next_wait();
                tracing::warn!(hive = %deps.hive, error = %crate::error_chain(&e), ?wait, "cannot follow Docker's events; trying again");
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut looked = false;
        loop {
            tokio::select! {
                // Cancel-safe: an event not yet taken stays in the stream.
                _ = shutdown.wait() => return,
                item = stream.next(), if looked => match item {
                    Some(Ok(event)) => {
                        backoff.reset();
                        since = Some(event.at_ms / 1000);
                        on_event(&deps, event).await;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(hive = %deps.hive, error = %crate::error_chain(&e), "Docker's event stream broke; connecting again");
                        break;
                    }
                    None => {
                        tracing::warn!(hive = %deps.hive, "Docker's event stream ended; connecting again");
                        break;
                    }
                },
                // Look at everything once per connection, so an exit in
                // the gap is not missed; the stream replays from `from`.
                ok = look_at_everything(&deps), if !looked => {
                    looked = ok;
                    if !ok {
                        break;
                    }
                }
            }
        }
        let wait = backoff.next_wait();
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The agent an event or inspect is about, when it is this hive's.
fn agent_of(
    hive: &HiveName,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<AgentName> {
    if labels.get(LABEL_HIVE).map(String::as_str) != Some(hive.as_str()) {
        return None;
    }
    AgentName::new(labels.get(LABEL_AGENT)?).ok()
}

/// Only the container with the agent's expected name speaks for it, as in
/// [`crate::agents::observe`].
fn speaks_for(hive: &HiveName, agent: &AgentName, name: &str) -> bool {
    name == container_name(hive, agent)
}

async fn on_event(deps: &DockerEventDeps, event: ContainerEvent) {
    let Some(agent) = agent_of(&deps.hive, &event.labels) else {
        return;
    };
    if !speaks_for(&deps.hive, &agent, &event.name) {
        // A renamed copy, or anyone's container wearing this hive's labels:
        // it may wake a look, never write the agent's evidence.
        deps.docker_changed.notify_one();
        return;
    }
    let spec = event.labels.get(LABEL_SPEC).cloned();
    tracing::debug!(hive = %deps.hive, %agent, action = ?event.action, container = %event.container, "Docker event");
    // What Docker shows now is enough to see the change and repair it;
    // the recorded evidence follows with a second wake.
    deps.docker_changed.notify_one();
    tell(deps, &agent, &event);
    let recorded = match event.action {
        EventAction::Start => deps
            .store
            .record_start(&agent, spec, event.at_ms)
            .await
            .map(drop),
        EventAction::Oom => deps.store.record_oom(&agent).await,
        EventAction::Die => record_die(deps, &agent, &event, spec).await,
        EventAction::Health | EventAction::Destroy | EventAction::Rename => Ok(()),
    };
    if let Err(e) = recorded {
        tracing::warn!(hive = %deps.hive, %agent, error = %crate::error_chain(&e), "cannot record what Docker reported");
    }
    deps.docker_changed.notify_one();
}

/// Tell the event stream what Docker reported of `agent`'s container. A
/// `die` is told with its code as Docker's event carries it.
fn tell(deps: &DockerEventDeps, agent: &AgentName, event: &ContainerEvent) {
    let Some(events) = &deps.events else {
        return;
    };
    let kind = match event.action {
        EventAction::Start => "started",
        EventAction::Die => "exited",
        EventAction::Oom => "oom",
        EventAction::Health => "health",
        EventAction::Destroy => "removed",
        EventAction::Rename => return,
    };
    let mut e = swarm_queue_client::event_stream::Event::new(kind);
    e.exit_code = event.exit_code.filter(|_| event.action == EventAction::Die);
    events.emit(agent, e);
}

/// A `die`: inspect says whether it was an OOM kill and when the run
/// started; the event's own code and time when the container is gone.
async fn record_die(
    deps: &DockerEventDeps,
    agent: &AgentName,
    event: &ContainerEvent,
    spec: Option<String>,
) -> Result<(), StoreError> {
    let state = deps
        .runtime
        .run_state(&event.container)
        .await
        .ok()
        .flatten();
    let seen = ExitSeen {
        agent: agent.clone(),
        spec,
        code: state.as_ref().and_then(|s| s.exit_code).or(event.exit_code),
        oom_killed: state.as_ref().is_some_and(|s| s.oom_killed),
        started_ms: state.as_ref().and_then(|s| s.started_ms),
        finished_ms: state
            .as_ref()
            .and_then(|s| s.finished_ms)
            .unwrap_or(event.at_ms),
    };
    let new = deps
        .store
        .record_exit(seen.clone(), deps.crash.reset_after_ms())
        .await?;
    if new {
        tracing::warn!(hive = %deps.hive, %agent, code = ?seen.code, oom_killed = seen.oom_killed, "agent container exited");
    }
    Ok(())
}

/// Inspect every container of this hive and record its run; wake the
/// converger. `false` when Docker could not be asked.
async fn look_at_everything(deps: &DockerEventDeps) -> bool {
    let containers = match deps.runtime.list().await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(hive = %deps.hive, error = %crate::error_chain(&e), "cannot list containers after connecting to Docker's events");
            return false;
        }
    };
    for c in containers {
        let Ok(Some(state)) = deps.runtime.run_state(&c.id).await else {
            continue;
        };
        let Some(agent) = agent_of(&deps.hive, &state.labels) else {
            continue;
        };
        if !speaks_for(&deps.hive, &agent, &c.name) {
            continue;
        }
        if let Err(e) = record_state(deps, &agent, &state).await {
            tracing::warn!(hive = %deps.hive, %agent, error = %crate::error_chain(&e), "cannot record a container's run");
        }
    }
    deps.docker_changed.notify_one();
    true
}

async fn record_state(
    deps: &DockerEventDeps,
    agent: &AgentName,
    state: &RunState,
) -> Result<(), StoreError> {
    let spec = state.labels.get(LABEL_SPEC).cloned();
    if let Some(started) = state.started_ms {
        deps.store
            .record_start(agent, spec.clone(), started)
            .await?;
    }
    if let (false, Some(finished)) = (state.running, state.finished_ms) {
        let seen = ExitSeen {
            agent: agent.clone(),
            spec,
            code: state.exit_code,
            oom_killed: state.oom_killed,
            started_ms: state.started_ms,
            finished_ms: finished,
        };
        deps.store
            .record_exit(seen, deps.crash.reset_after_ms())
            .await?;
    }
    Ok(())
}
