//! An in-memory [`ContainerRuntime`] for unit tests of the worker: it keeps
//! containers and images in maps, records every call, and can be told to be
//! unreachable or to fail one operation. It enforces ownership exactly like
//! the Docker runtime, through the same [`check_owner`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use swarm_queue_client::containers::LABEL_HIVE;
use swarm_queue_client::{HiveName, ObjectName};

use super::admit::object_name;
use super::objects::{check_object_owner, object_labels, ObjectInfo, ObjectKind, ObjectRuntime};
use super::{
    check_owner, BuildRequest, ContainerInfo, ContainerRuntime, ContainerSpec, ProgressFn,
    RuntimeError,
};

#[derive(Debug, Default)]
pub struct FakeRuntime {
    hive: Option<HiveName>,
    pub containers: Mutex<BTreeMap<String, ContainerInfo>>,
    /// Images present locally.
    pub images: Mutex<BTreeSet<String>>,
    /// Images a pull can find.
    pub registry: Mutex<BTreeSet<String>>,
    /// `op target` of every call, in order.
    pub calls: Mutex<Vec<String>>,
    pub unreachable: AtomicBool,
    /// Errors to return, once each, from the named op.
    pub failures: Mutex<VecDeque<(&'static str, RuntimeError)>>,
    /// The spec of every create, in order.
    pub created: Mutex<Vec<ContainerSpec>>,
    /// Volumes and networks, by kind and Docker name.
    pub objects: Mutex<BTreeMap<(ObjectKind, String), ObjectInfo>>,
    /// Docker names of objects a container uses: their remove says so.
    pub objects_in_use: Mutex<BTreeSet<String>>,
    next_id: AtomicU64,
}

impl FakeRuntime {
    pub fn new(hive: &str) -> FakeRuntime {
        FakeRuntime {
            hive: Some(HiveName::new(hive).unwrap()),
            ..Default::default()
        }
    }

    pub fn with_registry(self, images: &[&str]) -> Self {
        self.registry
            .lock()
            .unwrap()
            .extend(images.iter().map(|s| s.to_string()));
        self
    }

    pub fn fail_next(&self, op: &'static str, error: RuntimeError) {
        self.failures.lock().unwrap().push_back((op, error));
    }

    /// A container some other party made under `name`.
    pub fn plant(&self, name: &str, owner: Option<&str>, running: bool) {
        let labels = owner
            .map(|o| BTreeMap::from([(LABEL_HIVE.to_string(), o.to_string())]))
            .unwrap_or_default();
        self.containers.lock().unwrap().insert(
            name.to_string(),
            ContainerInfo {
                id: format!("planted-{name}"),
                name: name.to_string(),
                image: "other".into(),
                image_id: "sha256:other".into(),
                running,
                status: if running { "running" } else { "created" }.into(),
                health: None,
                labels,
                stop_grace_secs: None,
                failing_streak: None,
            },
        );
    }

    /// A volume or network some other party made under `docker_name`.
    pub fn plant_object(&self, kind: ObjectKind, docker_name: &str, owner: Option<&str>) {
        let labels = owner
            .map(|o| BTreeMap::from([(LABEL_HIVE.to_string(), o.to_string())]))
            .unwrap_or_default();
        let info = ObjectInfo {
            kind,
            docker_name: docker_name.to_string(),
            labels,
        };
        let key = (kind, docker_name.to_string());
        self.objects.lock().unwrap().insert(key, info);
    }

    /// The Docker names of every `kind` there is, owned or not.
    pub fn object_names(&self, kind: ObjectKind) -> Vec<String> {
        let objects = self.objects.lock().unwrap();
        objects
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n.clone())
            .collect()
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    pub fn container(&self, name: &str) -> Option<ContainerInfo> {
        self.containers.lock().unwrap().get(name).cloned()
    }

    fn enter(&self, op: &'static str, target: &str) -> Result<(), RuntimeError> {
        self.calls.lock().unwrap().push(format!("{op} {target}"));
        if self.unreachable.load(Ordering::SeqCst) {
            return Err(RuntimeError::Unreachable {
                host: "unix:///fake/docker.sock".into(),
                reason: "the socket /fake/docker.sock does not exist".into(),
            });
        }
        let mut failures = self.failures.lock().unwrap();
        if let Some(i) = failures.iter().position(|(o, _)| *o == op) {
            return Err(failures.remove(i).unwrap().1);
        }
        Ok(())
    }

    fn find(&self, container: &str) -> Option<ContainerInfo> {
        self.containers
            .lock()
            .unwrap()
            .values()
            .find(|c| c.name == container || c.id == container)
            .cloned()
    }

    fn owned(&self, container: &str) -> Result<Option<ContainerInfo>, RuntimeError> {
        let found = self.find(container);
        if let Some(info) = &found {
            check_owner(self.hive(), info)?;
        }
        Ok(found)
    }

    fn set_running(&self, name: &str, running: bool) {
        if let Some(c) = self.containers.lock().unwrap().get_mut(name) {
            c.running = running;
            c.status = if running { "running" } else { "exited" }.into();
        }
    }
}

impl ContainerRuntime for FakeRuntime {
    fn hive(&self) -> &HiveName {
        self.hive.as_ref().expect("FakeRuntime::new sets the hive")
    }

    async fn ping(&self) -> Result<(), RuntimeError> {
        self.enter("ping", "")
    }

    async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError> {
        self.enter("image_exists", image)?;
        Ok(self.images.lock().unwrap().contains(image))
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        self.enter("image_id", image)?;
        Ok(self
            .images
            .lock()
            .unwrap()
            .contains(image)
            .then(|| format!("sha256:{image}")))
    }

    async fn remove_image(&self, image_id: &str) -> Result<bool, RuntimeError> {
        self.enter("remove_image", image_id)?;
        let name = image_id.trim_start_matches("sha256:");
        self.images.lock().unwrap().remove(name);
        Ok(true)
    }

    async fn image_digest(&self, image_id: &str) -> Result<Option<String>, RuntimeError> {
        self.enter("image_digest", image_id)?;
        Ok(None)
    }

    async fn pull(&self, image: &str, progress: ProgressFn<'_>) -> Result<(), RuntimeError> {
        self.enter("pull", image)?;
        if !self.registry.lock().unwrap().contains(image) {
            return Err(RuntimeError::NoSuchImage {
                image: image.into(),
                message: "manifest unknown".into(),
            });
        }
        progress(&format!("{image}: Pulling"));
        progress(&format!("{image}: Pull complete"));
        self.images.lock().unwrap().insert(image.into());
        Ok(())
    }

    async fn build(
        &self,
        request: &BuildRequest<'_>,
        progress: ProgressFn<'_>,
    ) -> Result<(), RuntimeError> {
        let &BuildRequest {
            context,
            dockerfile,
            tag,
            ..
        } = request;
        self.enter("build", tag)?;
        if !context.join(dockerfile).is_file() {
            return Err(RuntimeError::Build {
                tag: tag.into(),
                message: format!("no {dockerfile} in {}", context.display()),
            });
        }
        progress("Step 1/1");
        self.images.lock().unwrap().insert(tag.into());
        Ok(())
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        self.enter("create", &spec.name)?;
        if !self.images.lock().unwrap().contains(&spec.image) {
            return Err(RuntimeError::NoSuchImage {
                image: spec.image.clone(),
                message: "no such image".into(),
            });
        }
        let mut containers = self.containers.lock().unwrap();
        if containers.contains_key(&spec.name) {
            return Err(RuntimeError::NameTaken {
                name: spec.name.clone(),
                message: "Conflict".into(),
            });
        }
        let id = format!("c{}", self.next_id.fetch_add(1, Ordering::SeqCst) + 1);
        containers.insert(
            spec.name.clone(),
            ContainerInfo {
                id: id.clone(),
                name: spec.name.clone(),
                image: spec.image.clone(),
                image_id: format!("sha256:{}", spec.image),
                running: false,
                status: "created".into(),
                health: None,
                labels: spec.labels.clone(),
                stop_grace_secs: spec.stop_grace_secs,
                failing_streak: None,
            },
        );
        self.created.lock().unwrap().push(spec.clone());
        Ok(id)
    }

    async fn start(&self, container: &str) -> Result<(), RuntimeError> {
        self.enter("start", container)?;
        let info = self
            .owned(container)?
            .ok_or_else(|| RuntimeError::NoSuchContainer {
                container: container.into(),
            })?;
        self.set_running(&info.name, true);
        Ok(())
    }

    async fn stop(&self, container: &str, _timeout: Duration) -> Result<(), RuntimeError> {
        self.enter("stop", container)?;
        if let Some(info) = self.owned(container)? {
            self.set_running(&info.name, false);
        }
        Ok(())
    }

    async fn remove(&self, container: &str) -> Result<(), RuntimeError> {
        self.enter("remove", container)?;
        if let Some(info) = self.owned(container)? {
            self.containers.lock().unwrap().remove(&info.name);
        }
        Ok(())
    }

    async fn inspect(&self, container: &str) -> Result<Option<ContainerInfo>, RuntimeError> {
        self.enter("inspect", container)?;
        Ok(self.find(container))
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        self.enter("list", "")?;
        let hive = self.hive().as_str();
        Ok(self
            .containers
            .lock()
            .unwrap()
            .values()
            .filter(|c| c.owner() == Some(hive))
            .cloned()
            .collect())
    }

    /// A fake container prints nothing: an empty stream, and no ended run.
    async fn logs(
        &self,
        container: &str,
        request: &super::logs::LogRequest,
    ) -> Result<Option<super::logs::LogStream>, RuntimeError> {
        use futures_util::StreamExt;
        self.enter("logs", container)?;
        self.owned(container)?
            .ok_or_else(|| RuntimeError::NoSuchContainer {
                container: container.to_string(),
            })?;
        Ok((!request.previous).then(|| futures_util::stream::empty().boxed()))
    }
}

impl ObjectRuntime for FakeRuntime {
    async fn ensure_object(
        &self,
        kind: ObjectKind,
        name: &ObjectName,
    ) -> Result<String, RuntimeError> {
        let docker_name = object_name(self.hive(), name.as_str());
        self.enter("ensure_object", &docker_name)?;
        let mut objects = self.objects.lock().unwrap();
        let entry = objects
            .entry((kind, docker_name.clone()))
            .or_insert_with(|| ObjectInfo {
                kind,
                docker_name: docker_name.clone(),
                labels: object_labels(self.hive(), kind, name),
            });
        check_object_owner(self.hive(), entry)?;
        Ok(docker_name)
    }

    async fn list_objects(&self, kind: ObjectKind) -> Result<Vec<ObjectInfo>, RuntimeError> {
        self.enter("list_objects", kind.as_str())?;
        let hive = self.hive().as_str();
        let objects = self.objects.lock().unwrap();
        Ok(objects
            .values()
            .filter(|o| o.kind == kind && o.owner() == Some(hive))
            .cloned()
            .collect())
    }

    async fn remove_object(
        &self,
        kind: ObjectKind,
        docker_name: &str,
    ) -> Result<bool, RuntimeError> {
        self.enter("remove_object", docker_name)?;
        let key = (kind, docker_name.to_string());
        let mut objects = self.objects.lock().unwrap();
        let Some(info) = objects.get(&key) else {
            return Ok(true);
        };
        check_object_owner(self.hive(), info)?;
        if self.objects_in_use.lock().unwrap().contains(docker_name) {
            return Ok(false);
        }
        objects.remove(&key);
        Ok(true)
    }
}
