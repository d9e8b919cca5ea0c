//! A container's log from Docker (`GET /containers/{id}/logs`), as the
//! stream [`crate::agents::runtime::logs`] describes, and two settings every
//! container is created with: its log driver, and its host mounts.

use bollard::container::LogOutput;
use bollard::models::{HostConfigLogConfig, Mount, MountType};
use bollard::query_parameters::LogsOptions;
use futures_util::StreamExt;

use super::DockerRuntime;
use crate::agents::runtime::logs::{LogLine, LogRequest, LogSource, LogStream, MAX_TAIL};
use crate::agents::runtime::{Bind, HostLimits, RuntimeError};

impl DockerRuntime {
    /// See [`crate::agents::runtime::ContainerRuntime::logs`].
    pub(super) async fn log_stream(
        &self,
        container: &str,
        request: &LogRequest,
    ) -> Result<Option<LogStream>, RuntimeError> {
        let gone = || RuntimeError::NoSuchContainer {
            container: container.to_string(),
        };
        let owned = self.owned(container).await?.ok_or_else(gone)?;
        // The lines before the current run: Docker stamps a line when it
        // reads it, so a run's last lines may carry a time after its
        // `FinishedAt` and the next run's first lines one before its
        // `StartedAt`; lines are cut in the middle of that gap (the hive's
        // restart takes a few hundred ms, a crash-loop delay seconds). A
        // container that ended and was not started again: its whole log.
        // Docker's `until` is whole seconds: later lines in that second are
        // dropped here by their own time.
        let cut = if request.previous {
            let state = self.run_state(&owned.id).await?.ok_or_else(gone)?;
            let Some(finished) = state.finished_ms else {
                return Ok(None);
            };
            match state.started_ms.filter(|_| state.running) {
                Some(started) if started > finished => Some(finished + (started - finished) / 2),
                started => started,
            }
        } else {
            None
        };
        let until = cut.map_or(0, |ms| ms / 1000 + 1);
        let options = LogsOptions {
            follow: request.follow && !request.previous,
            stdout: true,
            stderr: true,
            since: request.since_unix.unwrap_or(0).clamp(0, i32::MAX.into()) as i32,
            until: until.clamp(0, i32::MAX.into()) as i32,
            timestamps: true,
            tail: request
                .tail
                .map_or_else(|| "all".to_string(), |n| n.min(MAX_TAIL).to_string()),
        };
        let docker = self.client()?;
        let host = self.host.clone();
        let id = owned.id;
        let stream = docker.logs(&id, Some(options)).filter_map(move |item| {
            let out = match item {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    Some(Ok(LogLine::parse(LogSource::Stdout, &message)))
                }
                Ok(LogOutput::StdErr { message }) => {
                    Some(Ok(LogLine::parse(LogSource::Stderr, &message)))
                }
                Ok(LogOutput::StdIn { .. }) => None,
                Err(e) => Some(Err(RuntimeError::Unreachable {
                    host: host.clone(),
                    reason: format!("the log stream broke: {}", crate::error_chain(&e)),
                })),
            };
            let after_end = |l: &LogLine| {
                cut.is_some_and(|c| super::docker_time_ms(&l.time).is_none_or(|t| t >= c))
            };
            std::future::ready(out.filter(|r| !r.as_ref().is_ok_and(after_end)))
        });
        Ok(Some(stream.boxed()))
    }
}

/// Docker's log settings for [`HostLimits`]: `json-file`, capped.
pub fn log_config(limits: &HostLimits) -> HostConfigLogConfig {
    let (driver, options) = limits.log_driver();
    HostConfigLogConfig {
        typ: Some(driver.to_string()),
        config: Some(options.into_iter().collect()),
    }
}

/// Docker's `bind` mount of `b`. A mount, not a bind: Docker makes a
/// bind's missing host path as an empty directory, where a mount's missing
/// path is an error, so an agent whose state dir went away fails to start
/// and says so instead of running on an empty one made behind the hive.
pub fn mount_of(b: &Bind) -> Mount {
    Mount {
        target: Some(b.container.clone()),
        source: Some(b.host.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(b.read_only),
        ..Default::default()
    }
}
