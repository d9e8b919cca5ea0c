//! [`ContainerRuntime`] over Docker's API, with `bollard`.
//!
//! The client is made lazily and remade after a failure to make it: bollard
//! refuses to build a unix-socket client while the socket file is missing,
//! and a hive that starts before dockerd (or whose dockerd restarts) must
//! simply see "unreachable" until the socket is back. Bollard keeps no idle
//! connections on a unix socket, so each request connects afresh and a
//! dockerd restart needs nothing more.

mod create;
mod errors;
mod logs;
mod objects;
mod watch;

pub use logs::log_config;
pub use watch::{docker_time_ms, ContainerEvent, EventAction, RunState};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    BuildImageOptions, CreateContainerOptions, CreateImageOptions, InspectContainerOptions,
    ListContainersOptions, RemoveContainerOptions, StopContainerOptions,
};
use bollard::{Docker, API_DEFAULT_VERSION};
use futures_util::StreamExt;
use swarm_queue_client::containers::{agent_label_filter, hive_label_filter};
use swarm_queue_client::{AgentName, HiveName};

use crate::agents::runtime::registry_auth::{Login, RegistryAuth};
use crate::perf;

use super::pull_progress::PullTally;
use super::{
    check_owner, context, split_image_ref, BuildRequest, ContainerInfo, ContainerRuntime,
    ContainerSpec, ProgressFn, RuntimeError,
};

/// Seconds bollard waits for a response's headers. Streams (pull, build)
/// are not bounded by it once they have started.
const REQUEST_TIMEOUT_SECS: u64 = 120;

/// Docker through bollard, for one hive.
pub struct DockerRuntime {
    hive: HiveName,
    /// The address as configured (or Docker's default), for error messages.
    host: String,
    /// Made on first use; `None` again only if making it failed.
    client: Mutex<Option<Docker>>,
    /// The largest build context streamed to Docker.
    context_max_bytes: u64,
    /// Logins sent with pulls (`registry_auth_file`), if configured.
    registry_auth: Option<Arc<RegistryAuth>>,
    /// Image id -> repo digest, once found: an image id names fixed
    /// content, so its digest never needs asking again.
    digests: Mutex<HashMap<String, Option<String>>>,
}

impl std::fmt::Debug for DockerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerRuntime")
            .field("hive", &self.hive)
            .field("host", &self.host)
            .finish()
    }
}

impl DockerRuntime {
    /// A runtime for `hive` talking to `docker_host` (`unix:///path`, a bare
    /// socket path, or `tcp://host:port`); `None` means `$DOCKER_HOST`, else
    /// `unix:///var/run/docker.sock`. Does not connect yet.
    pub fn new(hive: HiveName, docker_host: Option<&str>) -> DockerRuntime {
        let host = docker_host
            .map(str::to_string)
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_string());
        let host = if host.starts_with('/') {
            format!("unix://{host}")
        } else {
            host
        };
        DockerRuntime {
            hive,
            host,
            client: Mutex::new(None),
            context_max_bytes: super::DEFAULT_BUILD_CONTEXT_MAX_BYTES,
            registry_auth: None,
            digests: Mutex::new(HashMap::new()),
        }
    }

    /// Send the matching login of `auth` with every pull.
    pub fn with_registry_auth(mut self, auth: Arc<RegistryAuth>) -> DockerRuntime {
        self.registry_auth = Some(auth);
        self
    }

    /// Cap build contexts at `max_bytes` (the hive config's
    /// `build_context_max_bytes`).
    pub fn with_context_max_bytes(mut self, max_bytes: u64) -> DockerRuntime {
        self.context_max_bytes = max_bytes;
        self
    }

    /// Where this runtime looks for Docker.
    pub fn host(&self) -> &str {
        &self.host
    }

    fn client(&self) -> Result<Docker, RuntimeError> {
        let mut slot = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(docker) = slot.as_ref() {
            return Ok(docker.clone());
        }
        let made = if let Some(path) = self.host.strip_prefix("unix://") {
            Docker::connect_with_unix(path, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
        } else {
            Docker::connect_with_host(&self.host)
                .map(|d| d.with_timeout(Duration::from_secs(REQUEST_TIMEOUT_SECS)))
        };
        let docker = made.map_err(|e| self.unreachable(&e))?;
        *slot = Some(docker.clone());
        Ok(docker)
    }

    /// Inspect, and refuse unless the container is this hive's.
    async fn owned(&self, container: &str) -> Result<Option<ContainerInfo>, RuntimeError> {
        let info = self.inspect(container).await?;
        if let Some(info) = &info {
            check_owner(&self.hive, info)?;
        }
        Ok(info)
    }
}

impl ContainerRuntime for DockerRuntime {
    fn hive(&self) -> &HiveName {
        &self.hive
    }

    async fn logs(
        &self,
        container: &str,
        request: &crate::agents::runtime::logs::LogRequest,
    ) -> Result<Option<crate::agents::runtime::logs::LogStream>, RuntimeError> {
        self.log_stream(container, request).await
    }

    async fn ping(&self) -> Result<(), RuntimeError> {
        let docker = self.client()?;
        docker
            .ping()
            .await
            .map(|_| ())
            .map_err(|e| self.classify("ping", &self.host, e))
    }

    async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError> {
        let docker = self.client()?;
        match perf::DOCKER_IMAGE_INSPECT
            .time(docker.inspect_image(image))
            .await
        {
            Ok(_) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(self.classify("inspect image", image, e)),
        }
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        let docker = self.client()?;
        match perf::DOCKER_IMAGE_INSPECT
            .time(docker.inspect_image(image))
            .await
        {
            Ok(found) => Ok(found.id),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(self.classify("inspect image", image, e)),
        }
    }

    async fn remove_image(&self, image_id: &str) -> Result<bool, RuntimeError> {
        let docker = self.client()?;
        let options = bollard::query_parameters::RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        match docker.remove_image(image_id, Some(options), None).await {
            Ok(_) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(true),
            // 409: a container uses it, or it is tagged in several
            // repositories and needs force; either way, leave it.
            Err(BollardError::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(false),
            Err(e) => Err(self.classify("remove image", image_id, e)),
        }
    }

    async fn image_digest(&self, image_id: &str) -> Result<Option<String>, RuntimeError> {
        if let Some(known) = self
            .digests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(image_id)
        {
            return Ok(known.clone());
        }
        let docker = self.client()?;
        let found = match perf::DOCKER_IMAGE_INSPECT
            .time(docker.inspect_image(image_id))
            .await
        {
            Ok(found) => found,
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(self.classify("inspect image", image_id, e)),
        };
        // `repo@sha256:…`; every repo of one image id has the same digest
        // when it came from one manifest, and the first is as good as any.
        let digest = found
            .repo_digests
            .unwrap_or_default()
            .into_iter()
            .find_map(|r| r.split_once('@').map(|(_, d)| d.to_string()));
        self.digests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(image_id.to_string(), digest.clone());
        Ok(digest)
    }

    async fn pull(&self, image: &str, progress: ProgressFn<'_>) -> Result<(), RuntimeError> {
        let docker = self.client()?;
        let login = self.login_for(image)?;
        let (repo, tag) = split_image_ref(image);
        let options = CreateImageOptions {
            from_image: Some(repo),
            tag,
            ..Default::default()
        };
        let credentials = login.as_ref().map(Login::to_docker);
        let mut stream = docker.create_image(Some(options), None, credentials);
        let mut tally = PullTally::default();
        while let Some(item) = stream.next().await {
            let info = match item {
                Ok(info) => info,
                Err(BollardError::DockerStreamError { error }) => {
                    return Err(self.pull_failed(image, login.as_ref(), error))
                }
                Err(e) => {
                    return Err(match self.classify("pull", image, e) {
                        RuntimeError::Docker { source, .. } => self.pull_failed(
                            image,
                            login.as_ref(),
                            crate::error_chain(source.as_ref()),
                        ),
                        RuntimeError::NoSuchImage { image, message } => {
                            match self.pull_failed(&image, login.as_ref(), message) {
                                RuntimeError::Pull { image, message } => {
                                    RuntimeError::NoSuchImage { image, message }
                                }
                                denied => denied,
                            }
                        }
                        other => other,
                    })
                }
            };
            let (current, total) = info
                .progress_detail
                .map(|d| (d.current, d.total))
                .unwrap_or_default();
            let status = info.status.unwrap_or_default();
            let current = current.and_then(|c| u64::try_from(c).ok());
            let total = total.and_then(|t| u64::try_from(t).ok()).filter(|t| *t > 0);
            tally.observe(info.id.as_deref(), &status, current, total);
            let amount = match (current, total) {
                (Some(c), Some(t)) => Some(format!("{c}/{t} bytes")),
                _ => None,
            };
            let line = [info.id, Some(status), amount]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            if !line.is_empty() {
                match tally.summary() {
                    Some(sum) => progress(&format!("{sum}: {line}")),
                    None => progress(&line),
                }
            }
        }
        Ok(())
    }

    async fn build(
        &self,
        request: &BuildRequest<'_>,
        progress: ProgressFn<'_>,
    ) -> Result<(), RuntimeError> {
        let &BuildRequest {
            context: context_dir,
            dockerfile,
            tag,
            no_cache,
        } = request;
        let docker = self.client()?;
        let tar = context::stream_tar(context_dir.to_path_buf(), self.context_max_bytes);
        progress(&format!(
            "streaming the build context (at most {} bytes)",
            self.context_max_bytes
        ));
        let options = BuildImageOptions {
            dockerfile: dockerfile.to_string(),
            t: Some(tag.to_string()),
            rm: true,
            forcerm: true,
            nocache: no_cache,
            ..Default::default()
        };
        let mut stream =
            docker.build_image(options, None, Some(bollard::body_try_stream(tar.body)));
        let mut built = Ok(());
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    let text = info.stream.or(info.status).unwrap_or_default();
                    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                        progress(line);
                    }
                }
                Err(BollardError::DockerStreamError { error }) => {
                    built = Err(RuntimeError::Build {
                        tag: tag.to_string(),
                        message: error,
                    });
                    break;
                }
                Err(e) => {
                    built = Err(self.classify("build", tag, e));
                    break;
                }
            }
        }
        drop(stream);
        // The context's own failure (over the cap, unreadable) explains a
        // failed build better than Docker's view of a cut-off upload.
        match tar.producer.await {
            Ok(context::TarEnd::Failed(e)) => Err(e),
            Ok(context::TarEnd::Sent(_) | context::TarEnd::DockerGone) => built,
            Err(e) => Err(RuntimeError::Context {
                context: context_dir.display().to_string(),
                reason: format!("the tar writer stopped: {e}"),
            }),
        }
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let docker = self.client()?;
        let body = create::body(spec);
        let options = CreateContainerOptions {
            name: Some(spec.name.clone()),
            ..Default::default()
        };
        let created = perf::DOCKER_CREATE
            .time(docker.create_container(Some(options), body))
            .await
            .map_err(|e| match self.classify("create", &spec.name, e) {
                RuntimeError::NoSuchImage { message, .. } => RuntimeError::NoSuchImage {
                    image: spec.image.clone(),
                    message,
                },
                other => other,
            })?;
        Ok(created.id)
    }

    async fn start(&self, container: &str) -> Result<(), RuntimeError> {
        let info = self
            .owned(container)
            .await?
            .ok_or_else(|| RuntimeError::NoSuchContainer {
                container: container.to_string(),
            })?;
        if info.running {
            return Ok(());
        }
        let docker = self.client()?;
        perf::DOCKER_START
            .time(docker.start_container(&info.id, None))
            .await
            .map_err(|e| self.classify("start", container, e))
    }

    async fn stop(&self, container: &str, timeout: Duration) -> Result<(), RuntimeError> {
        let Some(info) = self.owned(container).await? else {
            return Ok(());
        };
        if !info.running {
            return Ok(());
        }
        // The container's own grace (its spec's stop_grace_secs) wins; the
        // request waits for the whole of it and a margin.
        let grace = info.stop_grace_secs.unwrap_or(timeout.as_secs());
        let wait = Duration::from_secs(grace.max(REQUEST_TIMEOUT_SECS) + 30);
        let docker = self.client()?.with_timeout(wait);
        let options = StopContainerOptions {
            t: Some(grace.min(i32::MAX as u64) as i32),
            ..Default::default()
        };
        match perf::DOCKER_STOP
            .time(docker.stop_container(&info.id, Some(options)))
            .await
        {
            // Gone between the inspect and the stop: as stopped as it gets.
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            other => other.map_err(|e| self.classify("stop", container, e)),
        }
    }

    async fn remove(&self, container: &str) -> Result<(), RuntimeError> {
        let Some(info) = self.owned(container).await? else {
            return Ok(());
        };
        let docker = self.client()?;
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        match perf::DOCKER_REMOVE
            .time(docker.remove_container(&info.id, Some(options)))
            .await
        {
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            other => other.map_err(|e| self.classify("remove", container, e)),
        }
    }

    async fn inspect(&self, container: &str) -> Result<Option<ContainerInfo>, RuntimeError> {
        let Some(found) = self.inspect_raw(container).await? else {
            return Ok(None);
        };
        let state = found.state.unwrap_or_default();
        let config = found.config.unwrap_or_default();
        Ok(Some(ContainerInfo {
            id: found.id.unwrap_or_default(),
            name: found
                .name
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_string(),
            image: config.image.unwrap_or_default(),
            image_id: found.image.unwrap_or_default(),
            running: state.running.unwrap_or(false),
            status: state.status.map(|s| s.to_string()).unwrap_or_default(),
            failing_streak: state
                .health
                .as_ref()
                .and_then(|h| h.failing_streak)
                .and_then(|n| u64::try_from(n).ok()),
            health: state
                .health
                .and_then(|h| h.status)
                .map(|s| s.to_string())
                .filter(|s| matches!(s.as_str(), "starting" | "healthy" | "unhealthy")),
            stop_grace_secs: config.stop_timeout.and_then(|t| u64::try_from(t).ok()),
            labels: labels_of(config.labels),
        }))
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        self.list_labelled(vec![hive_label_filter(&self.hive)])
            .await
    }

    async fn list_agent(&self, agent: &AgentName) -> Result<Vec<ContainerInfo>, RuntimeError> {
        self.list_labelled(vec![
            hive_label_filter(&self.hive),
            agent_label_filter(agent),
        ])
        .await
    }
}

impl DockerRuntime {
    /// Docker's whole inspect answer; `None` when there is no such
    /// container.
    async fn inspect_raw(
        &self,
        container: &str,
    ) -> Result<Option<bollard::models::ContainerInspectResponse>, RuntimeError> {
        let docker = self.client()?;
        match perf::DOCKER_INSPECT
            .time(docker.inspect_container(container, None::<InspectContainerOptions>))
            .await
        {
            Ok(found) => Ok(Some(found)),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(self.classify("inspect", container, e)),
        }
    }

    /// The containers carrying every one of `labels` (Docker ANDs them).
    async fn list_labelled(&self, labels: Vec<String>) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let docker = self.client()?;
        let filters = HashMap::from([("label".to_string(), labels)]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let found = perf::DOCKER_LIST
            .time(docker.list_containers(Some(options)))
            .await
            .map_err(|e| self.classify("list", self.hive.as_str(), e))?;
        Ok(found
            .into_iter()
            .map(|c| {
                let status = c.state.map(|s| s.to_string()).unwrap_or_default();
                ContainerInfo {
                    id: c.id.unwrap_or_default(),
                    name: c
                        .names
                        .and_then(|n| n.into_iter().next())
                        .unwrap_or_default()
                        .trim_start_matches('/')
                        .to_string(),
                    image: c.image.unwrap_or_default(),
                    image_id: c.image_id.unwrap_or_default(),
                    running: status == "running",
                    health: c.status.as_deref().and_then(super::health_of_status_text),
                    status,
                    labels: labels_of(c.labels),
                    stop_grace_secs: None,
                    failing_streak: None,
                }
            })
            .collect())
    }
}

fn labels_of(map: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    map.unwrap_or_default().into_iter().collect()
}
