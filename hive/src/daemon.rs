//! `hive run`: opens the state, starts every task under one
//! [`Supervisor`], waits for shutdown and drains.
//!
//! [`run`] is a few named steps, in this order:
//! 1. [`open_state`]: state dir, job database (a damaged one stops the hive
//!    here), xkey, `StatusBoard`, the loopback listener (bound now, so
//!    `/health/ready` answers even when nothing else works), the saved
//!    declaration.
//! 2. [`connect_nats`]: the one NATS connection, or the warning saying why
//!    there is none.
//! 3. [`start_container_side`] (with a hive name): the job worker, the
//!    converger and the Docker event task, from [`crate::agents`]. They
//!    need no NATS: the converger starts from the declaration saved in
//!    `wanted.json`.
//! 4. [`start_nats_side`] (with a name and NATS): publisher, wanted,
//!    credentials, event listener, log server, from [`crate::bus`].
//! 5. [`start_local_side`]: knowledge, the HTTP server, the watchdog, from
//!    [`crate::local`].
//! 6. [`wait_and_drain`].
//!
//! Without a NATS URL or without a hive name the hive still runs locally and
//! says so in a status warning; "not configured" and "configured but
//! unreachable" are different warnings. Every task is supervised: one that
//! ends or panics is restarted with backoff and named in the status
//! meanwhile (see [`crate::supervisor`]).

use std::sync::Arc;
use std::time::Duration;

use swarm_queue_client::credentials::XKey;
use swarm_queue_client::http_host::HostRule;
use swarm_queue_client::{Bucket, Connection, HiveName, Level};
use tokio::sync::Notify;

use crate::agents::declared::{PlannedTx, WantedRx, WantedTx};
use crate::agents::jobs::JobStore;
use crate::agents::runtime::DockerRuntime;
use crate::agents::worker::WorkerConfig;
use crate::agents::{converger, docker_events, worker};
use crate::bus::deploy::Deployer;
use crate::bus::{credentials, events, publisher, wanted, xkey};
use crate::config::HiveConfig;
use crate::local::{access, api, http, knowledge, systemd};
use crate::shutdown::Shutdown;
use crate::status::{keys, StatusBoard};
use crate::supervisor::{Role, Supervisor};
use crate::{bus, fleet_events};

/// File under the state dir holding the HTTP listener's bound address.
pub const API_ADDR_FILE: &str = "api.addr";

/// How long tasks get to finish after shutdown is requested.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot create state directory {path}")]
    StateDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    XKey(#[from] xkey::XKeyError),
    #[error(transparent)]
    Jobs(#[from] crate::agents::jobs::StoreError),
    #[error(transparent)]
    Socket(#[from] access::SocketError),
    #[error("cannot listen on {addr} for the probes and metrics")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Run the hive until `shutdown` fires.
pub async fn run(config: HiveConfig, shutdown: Shutdown) -> Result<(), DaemonError> {
    let state = open_state(&config).await?;
    // One saver of `wanted.json` for the daemon's life, however often the
    // wanted task and the converger start; it ends with the last sender.
    tokio::spawn(wanted::save_each(
        config.state_dir.clone(),
        state.wanted_rx.clone(),
        state.planned_tx.subscribe(),
    ));
    let mut tasks = Supervisor::new(state.board.clone(), shutdown.clone());
    let nats = connect_nats(&config, &state.board).await;
    let mut api_routes = None;
    if let Some(hive) = config.name.clone() {
        let containers = start_container_side(&config, &state, hive, &mut tasks);
        api_routes = Some(api::router(containers.api_state(&state, &config)));
        if let Some(conn) = &nats {
            start_nats_side(&config, &state, &containers, conn, &mut tasks);
        }
    }
    let probe_routes = http::probe_router(state.board.clone());
    let (tcp_routes, socket_routes) =
        access::routers(probe_routes, api_routes, config.api_token.clone());
    let tcp_routes = http::guard_host(
        tcp_routes,
        HostRule::for_this_machine(config.http_allowed_hosts.clone()),
    );
    start_local_side(&config, &state, tcp_routes, &mut tasks);
    let socket = Arc::clone(&state.socket);
    tasks.spawn("api_socket", Role::Auxiliary, move |shutdown| {
        let socket = socket.try_clone();
        let router = socket_routes.clone();
        async move { access::serve_socket(socket?, router, shutdown).await }
    });
    systemd::notify_ready();
    tracing::info!(
        hive = config.name.as_ref().map(|n| n.as_str()).unwrap_or("(unnamed)"),
        state_dir = %config.state_dir.display(),
        "hive running"
    );
    wait_and_drain(tasks, shutdown, nats).await;
    let _ = std::fs::remove_file(&config.api_socket);
    Ok(())
}

/// What every step shares: opened once, before any task starts.
struct State {
    store: JobStore,
    xkey: Arc<XKey>,
    board: Arc<StatusBoard>,
    /// The loopback listener; each start of the HTTP task serves a clone.
    listener: Arc<std::net::TcpListener>,
    /// The operator API's socket (0660, its group); each start of the
    /// socket task serves a clone.
    socket: Arc<std::os::unix::net::UnixListener>,
    /// The last valid declaration (from `wanted.json`, then from the swarm).
    /// The sender lives until shutdown, also without NATS.
    wanted_tx: WantedTx,
    wanted_rx: WantedRx,
    /// The declaration the converger last planned (for the saver).
    planned_tx: Arc<PlannedTx>,
    /// Wakes the knowledge task; `None` without `knowledge_repo`.
    knowledge: Option<Arc<Notify>>,
}

async fn open_state(config: &HiveConfig) -> Result<State, DaemonError> {
    std::fs::create_dir_all(&config.state_dir).map_err(|source| DaemonError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    // The job database first: a damaged one stops the hive before anything
    // else runs, with the file named and its bytes left as they were.
    let store = JobStore::open(&config.db_path())?;
    let xkey = xkey::load_or_create(&config.xkey_seed_file)?;
    let board = Arc::new(StatusBoard::new(
        config.name.clone(),
        Some(xkey.public_key()),
    ));
    let listen_error = |source| DaemonError::Listen {
        addr: config.http_listen,
        source,
    };
    let listener = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .and_then(|l| l.into_std())
        .map_err(listen_error)?;
    let addr = listener.local_addr().unwrap_or(config.http_listen);
    tracing::info!(%addr, remote_writes = config.api_token.is_some(), "HTTP listening (/health/ready, /health/live, /metrics)");
    let socket = access::bind_socket(&config.api_socket, config.api_socket_group.as_deref())?;
    tracing::info!(path = %config.api_socket.display(), group = config.api_socket_group.as_deref().unwrap_or("(the daemon's)"), "operator API listening on its Unix socket (mode 0660)");
    // Written so that tools (and tests) using `http_listen = "127.0.0.1:0"`
    // can find the port the kernel chose.
    let addr_file = config.state_dir.join(API_ADDR_FILE);
    if let Err(e) = std::fs::write(&addr_file, format!("{addr}\n")) {
        tracing::warn!(path = %addr_file.display(), error = %e, "cannot record the local API address");
    }
    let saved = wanted::unless_older(
        wanted::load_saved(&config.state_dir),
        store.blocking(|s| s.applied_revision()),
    )
    .map(Arc::new);
    let (wanted_tx, wanted_rx) = tokio::sync::watch::channel(saved);
    Ok(State {
        store,
        xkey: Arc::new(xkey),
        board,
        listener: Arc::new(listener),
        socket: Arc::new(socket),
        wanted_tx,
        wanted_rx,
        planned_tx: Arc::new(tokio::sync::watch::channel(None).0),
        knowledge: config.knowledge_repo.as_ref().map(|_| Arc::default()),
    })
}

/// The shared NATS connection, or `None` with a warning saying why.
async fn connect_nats(config: &HiveConfig, board: &StatusBoard) -> Option<Connection> {
    if config.name.is_none() {
        board.raise(
            keys::HIVE_NAME_MISSING,
            Level::Warn,
            "no hive name is configured: this hive does not publish its status or listen for \
             the swarm (set name, --name or HYPERHIVE_HIVE_NAME)",
        );
    }
    if !config.nats.is_configured() {
        board.raise(
            keys::NATS_NOT_CONFIGURED,
            Level::Warn,
            "no NATS server is configured: this hive runs alone and the swarm cannot see it \
             (set [nats] url, --nats-url or HYPERHIVE_NATS_URL)",
        );
        return None;
    }
    let name = config.name.as_ref()?;
    let jitter = swarm_queue_client::Jitter::new(config.jitter_percent);
    match swarm_queue_client::connect_with(&config.nats, &format!("hive-{name}"), jitter).await {
        Ok(conn) => Some(conn),
        Err(e) => {
            let msg = crate::error_chain(&e);
            tracing::error!(error = %msg, "cannot set up the NATS connection");
            board.raise(
                keys::NATS_UNREACHABLE,
                Level::Warn,
                format!("NATS is configured but cannot be used: {msg}"),
            );
            None
        }
    }
}

/// The container side's handles the other steps use.
struct ContainerSide {
    hive: HiveName,
    runtime: Arc<DockerRuntime>,
    /// Wakes the job worker after a job is queued.
    wake: Arc<Notify>,
    /// Wakes the converger when Docker reports a container event.
    docker_changed: Arc<Notify>,
    /// Agents' lifecycle events, published by the NATS side when it runs.
    events: fleet_events::EventSink,
    event_queue: fleet_events::EventQueue,
}

impl ContainerSide {
    fn api_state(&self, state: &State, config: &HiveConfig) -> api::ApiState<DockerRuntime> {
        let declared_rx = state.wanted_rx.clone();
        api::ApiState {
            state_dir: config.state_dir.clone(),
            store: state.store.clone(),
            runtime: Arc::clone(&self.runtime),
            hive: self.hive.clone(),
            wake: Arc::clone(&self.wake),
            declared: Arc::new(move |agent| {
                let wanted = declared_rx.borrow().clone()?;
                let spec = wanted.declaration.agents.get(agent)?.clone();
                Some((spec, Some(wanted.revision)))
            }),
        }
    }

    fn deployer(&self, state: &State) -> Deployer {
        Deployer {
            store: state.store.clone(),
            wake: Arc::clone(&self.wake),
            wanted: state.wanted_rx.clone(),
            hive: self.hive.clone(),
        }
    }
}

/// The job worker and the converger. Containers carry the hive's name, so
/// without one nothing is deployed and this step is skipped.
fn start_container_side(
    config: &HiveConfig,
    state: &State,
    hive: HiveName,
    tasks: &mut Supervisor,
) -> ContainerSide {
    let (events, event_queue) = fleet_events::EventSink::new(hive.clone());
    let side = ContainerSide {
        runtime: Arc::new(docker_runtime(config, &hive)),
        wake: Arc::default(),
        docker_changed: Arc::default(),
        hive,
        events,
        event_queue,
    };
    let extra_binds = match &config.knowledge_repo {
        Some(_) => vec![crate::agents::runtime::Bind {
            host: config.knowledge_dir(),
            container: swarm_queue_client::containers::KNOWLEDGE_MOUNT.to_string(),
            read_only: true,
        }],
        None => vec![],
    };
    let worker_deps = {
        let (store, runtime, hive) = (state.store.clone(), side.runtime.clone(), side.hive.clone());
        let (state_dir, wake, board) = (
            config.state_dir.clone(),
            side.wake.clone(),
            state.board.clone(),
        );
        let events = side.events.clone();
        let config = worker_config(config);
        move || worker::WorkerDeps {
            store: store.clone(),
            runtime: runtime.clone(),
            hive: hive.clone(),
            state_dir: state_dir.clone(),
            wake: wake.clone(),
            board: Some(board.clone()),
            extra_binds: extra_binds.clone(),
            config: config.clone(),
            events: Some(events.clone()),
        }
    };
    tasks.spawn("worker", Role::Essential, move |shutdown| {
        worker::run(worker_deps(), shutdown)
    });
    start_converger(config, state, &side, tasks);
    start_docker_events(config, state, &side, tasks);
    side
}

/// What the daemon's worker runs with: the defaults, the hive config's
/// build roots, container limits and host policy, and the test hooks.
fn worker_config(config: &HiveConfig) -> WorkerConfig {
    WorkerConfig {
        build_roots: config.build_roots.clone(),
        container_limits: config.container_limits,
        host: config.host.clone(),
        ..WorkerConfig::default()
    }
    .with_test_hooks()
}

/// The converger, which turns declarations into jobs (see `converger`).
fn start_converger(
    config: &HiveConfig,
    state: &State,
    side: &ContainerSide,
    tasks: &mut Supervisor,
) {
    let converger_deps = {
        let (store, runtime, hive) = (state.store.clone(), side.runtime.clone(), side.hive.clone());
        let (board, wake, wanted) = (
            state.board.clone(),
            side.wake.clone(),
            state.wanted_rx.clone(),
        );
        let (reconcile_interval, orphan_grace, retry_base) = (
            config.reconcile_interval,
            config.orphan_grace,
            config.agent_retry_base,
        );
        let (docker_changed, crash, planned) = (
            side.docker_changed.clone(),
            config.crash,
            state.planned_tx.clone(),
        );
        move || converger::ConvergerDeps {
            store: store.clone(),
            runtime: runtime.clone(),
            hive: hive.clone(),
            board: board.clone(),
            wake: wake.clone(),
            wanted: wanted.clone(),
            reconcile_interval,
            orphan_grace,
            retry_base,
            docker_changed: docker_changed.clone(),
            crash,
            planned: planned.clone(),
        }
    };
    tasks.spawn("converger", Role::Essential, move |shutdown| {
        converger::run(converger_deps(), shutdown)
    });
}

/// The Docker runtime as configured: host, context cap, registry logins.
fn docker_runtime(config: &HiveConfig, hive: &HiveName) -> DockerRuntime {
    let runtime = DockerRuntime::new(hive.clone(), config.docker_host.as_deref())
        .with_context_max_bytes(config.build_context_max_bytes);
    match &config.registry_auth_file {
        Some(path) => {
            let auth = crate::agents::runtime::registry_auth::RegistryAuth::new(path.clone());
            runtime.with_registry_auth(Arc::new(auth))
        }
        None => runtime,
    }
}

/// The task that follows Docker's events for this hive's containers and
/// wakes the converger (see [`docker_events`]).
fn start_docker_events(
    config: &HiveConfig,
    state: &State,
    side: &ContainerSide,
    tasks: &mut Supervisor,
) {
    let event_deps = {
        let (store, runtime, hive) = (state.store.clone(), side.runtime.clone(), side.hive.clone());
        let (docker_changed, crash) = (side.docker_changed.clone(), config.crash);
        let events = side.events.clone();
        move || docker_events::DockerEventDeps {
            store: store.clone(),
            runtime: runtime.clone(),
            hive: hive.clone(),
            docker_changed: docker_changed.clone(),
            crash,
            events: Some(events.clone()),
        }
    };
    tasks.spawn("docker_events", Role::Auxiliary, move |shutdown| {
        docker_events::run(event_deps(), shutdown)
    });
}

/// The tasks that talk to the swarm: publisher, wanted, credentials and
/// the event listener, all on the one connection.
fn start_nats_side(
    config: &HiveConfig,
    state: &State,
    side: &ContainerSide,
    conn: &Connection,
    tasks: &mut Supervisor,
) {
    let (hive, board) = (side.hive.clone(), state.board.clone());
    let publisher_deps = {
        let (conn, hive, board) = (conn.clone(), hive.clone(), board.clone());
        let (interval, bucket) = (
            config.publish_interval,
            config.nats.buckets.get(Bucket::Status),
        );
        move || publisher::PublisherDeps {
            nats: conn.clone(),
            board: board.clone(),
            hive: hive.clone(),
            interval,
            bucket: bucket.clone(),
        }
    };
    tasks.spawn("publisher", Role::Auxiliary, move |shutdown| {
        publisher::run(publisher_deps(), shutdown)
    });
    let wanted_deps = {
        let (conn, hive, board) = (conn.clone(), hive.clone(), board.clone());
        let bucket = config.nats.buckets.get(Bucket::Wanted);
        let tx = state.wanted_tx.clone();
        move || wanted::WantedDeps {
            nats: conn.clone(),
            hive: hive.clone(),
            board: board.clone(),
            bucket: bucket.clone(),
            tx: tx.clone(),
        }
    };
    tasks.spawn("wanted", Role::Essential, move |shutdown| {
        wanted::run(wanted_deps(), shutdown)
    });
    let credentials = credentials::Credentials::new(credentials::Opener {
        client: conn.client.clone(),
        js: conn.jetstream(),
        bucket: config.nats.buckets.get(Bucket::Credentials),
        hive: hive.clone(),
        xkey: state.xkey.clone(),
        trusted: Arc::new(config.trusted_controller_xkeys.clone()),
        agents_dir: config.agents_dir(),
        events: Some(side.events.clone()),
        on_change: Some(credentials::OnChange {
            store: state.store.clone(),
            wake: side.wake.clone(),
            wanted: state.wanted_rx.clone(),
        }),
    });
    let boot = credentials::BootDeps {
        nats: conn.clone(),
        hive: hive.clone(),
        board: board.clone(),
        credentials: credentials.clone(),
        wanted: state.wanted_rx.clone(),
    };
    tasks.spawn("credentials", Role::Auxiliary, move |shutdown| {
        credentials::run_boot_delivery(boot.clone(), shutdown)
    });
    let events = events::EventDeps {
        client: conn.client.clone(),
        hive,
        board,
        knowledge: state.knowledge.clone(),
        credentials,
        deploy: side.deployer(state),
    };
    tasks.spawn("events", Role::Essential, move |shutdown| {
        events::run(events.clone(), shutdown)
    });
    start_log_server(config, side, conn, tasks);
}

/// The agents' logs over NATS, to the controller, and the agents' events
/// into hyperhive-events (on the same connection).
fn start_log_server(
    config: &HiveConfig,
    side: &ContainerSide,
    conn: &Connection,
    tasks: &mut Supervisor,
) {
    let logs = bus::logs::LogServerDeps {
        client: conn.client.clone(),
        hive: side.hive.clone(),
        runtime: side.runtime.clone(),
        state_dir: config.state_dir.clone(),
    };
    tasks.spawn("logs", Role::Auxiliary, move |shutdown| {
        bus::logs::run(logs.clone(), shutdown)
    });
    let (client, queue) = (conn.client.clone(), side.event_queue.clone());
    tasks.spawn("fleet_events", Role::Auxiliary, move |shutdown| {
        fleet_events::run(client.clone(), queue.clone(), shutdown)
    });
}

/// Knowledge (when configured), the loopback HTTP server, the watchdog
/// (when systemd asks for one).
fn start_local_side(
    config: &HiveConfig,
    state: &State,
    router: axum::Router,
    tasks: &mut Supervisor,
) {
    if let (Some(repo), Some(trigger)) = (config.knowledge_repo.clone(), state.knowledge.clone()) {
        let deps = knowledge::KnowledgeDeps {
            repo,
            dir: config.knowledge_dir(),
            trigger,
            board: state.board.clone(),
        };
        tasks.spawn("knowledge", Role::Auxiliary, move |shutdown| {
            knowledge::run(deps.clone(), shutdown)
        });
    }
    let listener = Arc::clone(&state.listener);
    tasks.spawn("http", Role::Auxiliary, move |shutdown| {
        let listener = listener.try_clone();
        let router = router.clone();
        async move {
            let listener = tokio::net::TcpListener::from_std(listener?)?;
            http::serve(listener, router, shutdown).await;
            Ok::<(), std::io::Error>(())
        }
    });
    if let Some(interval) = systemd::watchdog_interval() {
        let board = tasks.board();
        tasks.spawn("watchdog", Role::Auxiliary, move |shutdown| {
            systemd::run_watchdog(interval, board.clone(), shutdown)
        });
    }
}

/// Wait for shutdown, give the tasks [`DRAIN_GRACE`] to finish (the
/// publisher puts its `stopped` status), then flush NATS.
async fn wait_and_drain(tasks: Supervisor, mut shutdown: Shutdown, nats: Option<Connection>) {
    shutdown.wait().await;
    systemd::notify_stopping();
    tracing::info!("shutting down");
    tasks.drain(DRAIN_GRACE).await;
    if let Some(conn) = nats {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.client.flush()).await;
    }
}
