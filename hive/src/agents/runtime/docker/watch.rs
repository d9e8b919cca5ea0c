//! Docker's event stream and a container's run state, for the
//! [`crate::agents::docker_events`] task: what a container did (started, died,
//! was killed for memory) as it happens, and what `inspect` says of its last
//! run. Only containers with this hive's label are asked about; everything
//! read here is untrusted and checked again by the caller.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{EventMessage, EventMessageTypeEnum};
use bollard::query_parameters::EventsOptions;
use futures_util::{Stream, StreamExt};
use swarm_queue_client::containers::hive_label_filter;

use super::DockerRuntime;
use crate::agents::runtime::RuntimeError;

/// One container event this hive acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    /// `die`, `oom`, `start`, `health_status`, `destroy` or `rename`.
    pub action: EventAction,
    pub container: String,
    /// The container's name as the event carries it (no leading `/`).
    pub name: String,
    /// The container's labels as the event carries them.
    pub labels: BTreeMap<String, String>,
    /// When Docker saw it, in ms since the epoch.
    pub at_ms: i64,
    /// The exit code a `die` carries.
    pub exit_code: Option<i64>,
}

/// The actions the hive follows; every other one is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventAction {
    Start,
    Die,
    Oom,
    Health,
    Destroy,
    Rename,
}

impl EventAction {
    /// The action of Docker's text (`health_status: healthy` is a health
    /// event); `None` for one the hive does not follow.
    pub fn parse(action: &str) -> Option<EventAction> {
        let word = action.split(':').next().unwrap_or_default();
        Some(match word {
            "start" => EventAction::Start,
            "die" => EventAction::Die,
            "oom" => EventAction::Oom,
            "health_status" => EventAction::Health,
            "destroy" => EventAction::Destroy,
            "rename" => EventAction::Rename,
            _ => return None,
        })
    }
}

/// What `inspect` says of a container's current or last run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunState {
    pub running: bool,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    /// ms since the epoch; `None` when Docker shows it never ran.
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub labels: BTreeMap<String, String>,
}

impl DockerRuntime {
    /// Docker's events for this hive's containers from `since` (seconds
    /// since the epoch) on, endless until dockerd goes away.
    pub fn container_events(
        &self,
        since: Option<i64>,
    ) -> Result<impl Stream<Item = Result<ContainerEvent, RuntimeError>> + use<>, RuntimeError>
    {
        let docker = self.client()?;
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("label".to_string(), vec![hive_label_filter(&self.hive)]),
        ]);
        let options = EventsOptions {
            since: since.map(|s| s.to_string()),
            filters: Some(filters),
            ..Default::default()
        };
        let host = self.host.clone();
        Ok(docker.events(Some(options)).filter_map(move |item| {
            let out = match item {
                Ok(msg) => event_of(msg).map(Ok),
                Err(e) => Some(Err(RuntimeError::Unreachable {
                    host: host.clone(),
                    reason: format!("the event stream broke: {}", crate::error_chain(&e)),
                })),
            };
            std::future::ready(out)
        }))
    }

    /// The run state of `container`; `None` when it is gone.
    pub async fn run_state(&self, container: &str) -> Result<Option<RunState>, RuntimeError> {
        let Some(found) = self.inspect_raw(container).await? else {
            return Ok(None);
        };
        let state = found.state.unwrap_or_default();
        let labels = found
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default()
            .into_iter()
            .collect();
        Ok(Some(RunState {
            running: state.running.unwrap_or(false),
            exit_code: state.exit_code,
            oom_killed: state.oom_killed.unwrap_or(false),
            started_ms: state.started_at.as_deref().and_then(docker_time_ms),
            finished_ms: state.finished_at.as_deref().and_then(docker_time_ms),
            labels,
        }))
    }
}

fn event_of(msg: EventMessage) -> Option<ContainerEvent> {
    if msg.typ != Some(EventMessageTypeEnum::CONTAINER) {
        return None;
    }
    let action = EventAction::parse(msg.action.as_deref()?)?;
    let actor = msg.actor?;
    let mut labels: BTreeMap<String, String> =
        actor.attributes.unwrap_or_default().into_iter().collect();
    let exit_code = labels.get("exitCode").and_then(|c| c.parse().ok());
    let name = labels
        .get("name")
        .map(|n| n.trim_start_matches('/').to_string())
        .unwrap_or_default();
    // Docker mixes the labels with its own attributes; these are not labels.
    for k in [
        "exitCode",
        "name",
        "image",
        "oldName",
        "execDuration",
        "signal",
    ] {
        labels.remove(k);
    }
    let at_ms = msg
        .time_nano
        .map(|n| n / 1_000_000)
        .or(msg.time.map(|s| s.saturating_mul(1000)))
        .unwrap_or_else(crate::clock::now_ms);
    Some(ContainerEvent {
        action,
        container: actor.id?,
        name,
        labels,
        at_ms,
        exit_code,
    })
}

/// Docker's RFC 3339 time in ms since the epoch; `None` for its "never"
/// (year 1) and for text that does not parse.
pub fn docker_time_ms(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let ms = (t.unix_timestamp_nanos() / 1_000_000) as i64;
    (ms > 0).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_and_times_parse() {
        assert_eq!(
            EventAction::parse("health_status: unhealthy"),
            Some(EventAction::Health)
        );
        assert_eq!(EventAction::parse("die"), Some(EventAction::Die));
        assert_eq!(EventAction::parse("exec_start: sh"), None);
        assert_eq!(docker_time_ms("0001-01-01T00:00:00Z"), None);
        assert_eq!(
            docker_time_ms("2026-12-01T16:50:00.123456789Z"),
            Some(1_796_143_800_123)
        );
        assert_eq!(docker_time_ms("yesterday"), None);
    }
}
