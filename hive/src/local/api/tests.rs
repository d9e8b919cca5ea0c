//! The API served on a real loopback socket and a real Unix socket, with
//! the operator verbs as its client (on the Unix socket); the container
//! runtime is the in-memory fake.

use std::sync::atomic::Ordering;

use swarm_queue_client::HiveName;

use super::*;
use crate::agents::jobs::{db_path, JobState};
use crate::agents::runtime::fake::FakeRuntime;
use crate::agents::worker::{self, WorkerConfig, WorkerDeps};
use crate::local::ops;
use crate::shutdown::{self, ShutdownTrigger};

const HIVE: &str = "alpha";

struct Server {
    _dir: tempfile::TempDir,
    base: String,
    /// The same router on a Unix socket, as the daemon serves it.
    socket: std::path::PathBuf,
    http: reqwest::Client,
    state: ApiState<FakeRuntime>,
    _stop: ShutdownTrigger,
}

fn declared_spec() -> AgentSpec {
    AgentSpec {
        image: Some("local/declared:1".into()),
        ..Default::default()
    }
}

async fn serve(with_worker: bool) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open(&db_path(dir.path())).unwrap();
    let runtime = Arc::new(FakeRuntime::new(HIVE).with_registry(&["local/declared:1"]));
    let state = ApiState {
        state_dir: dir.path().to_path_buf(),
        store: store.clone(),
        runtime: Arc::clone(&runtime),
        hive: HiveName::new(HIVE).unwrap(),
        wake: Arc::new(Notify::new()),
        declared: Arc::new(|agent: &AgentName| {
            (agent.as_str() == "declared").then(|| (declared_spec(), Some(9)))
        }),
    };
    let (stop, shutdown) = shutdown::channel();
    if with_worker {
        let deps = WorkerDeps {
            store,
            runtime,
            hive: state.hive.clone(),
            state_dir: dir.path().to_path_buf(),
            wake: Arc::clone(&state.wake),
            board: None,
            extra_binds: vec![],
            config: WorkerConfig::default(),
            events: None,
        };
        tokio::spawn(worker::run(deps, shutdown.clone()));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(state.clone());
    let socket = dir.path().join("hive.sock");
    let unix = crate::local::access::bind_socket(&socket, None).unwrap();
    tokio::spawn(crate::local::access::serve_socket(
        unix,
        app.clone(),
        shutdown.clone(),
    ));
    let mut done = shutdown;
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { done.wait().await })
            .await
            .unwrap();
    });
    Server {
        _dir: dir,
        base,
        socket,
        http: reqwest::Client::new(),
        state,
        _stop: stop,
    }
}

impl Server {
    /// The operator verbs' client, on the socket.
    fn client(&self) -> crate::local::client::ApiClient {
        crate::local::client::ApiClient::new(crate::local::client::Endpoint::Socket(
            self.socket.clone(),
        ))
    }

    async fn post(&self, path: &str, body: &str) -> (u16, serde_json::Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }
}

fn error_of(v: &serde_json::Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {v}"))
}

#[tokio::test]
async fn deploys_use_the_declared_spec_and_coalesce_while_pending() {
    let s = serve(false).await;
    let (code, body) = s.post("/api/v1/agents/declared/deploy", "").await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["kind"], "first_deploy");
    assert_eq!(body["coalesced"], false);
    let job = body["job"].as_i64().unwrap();
    let (code, body) = s.post("/api/v1/agents/declared/deploy", "{}").await;
    assert_eq!(code, 202);
    assert_eq!(
        (body["job"].as_i64(), &body["coalesced"]),
        (Some(job), &true.into())
    );

    let (code, body) = s.get(&format!("/api/v1/jobs/{job}")).await;
    assert_eq!(code, 200);
    assert_eq!(body["agent"], "declared");
    assert_eq!(body["nodes"].as_array().unwrap().len(), 6);
    let (_, body) = s.get("/api/v1/jobs?all=true&agent=declared").await;
    assert_eq!(body["jobs"].as_array().unwrap().len(), 1);

    let (code, body) = s.get("/api/v1/agents").await;
    assert_eq!(code, 200);
    let row = &body["agents"][0];
    assert_eq!(row["agent"], "declared");
    assert_eq!(row["wanted"], "up", "power seeded with the queued deploy");
    assert_eq!(row["observed"], "missing");
    assert_eq!(row["last_job"]["kind"], "first_deploy");
    assert_eq!(row["last_job"]["state"], "pending");
}

#[tokio::test]
async fn bad_requests_name_the_agent_and_say_what_to_do() {
    let s = serve(false).await;
    let cases: Vec<(&str, &str, u16, Vec<&str>)> = vec![
        (
            "/api/v1/agents/Bad.Name/deploy",
            "",
            400,
            vec!["invalid agent name \"Bad.Name\"", "DNS label"],
        ),
        (
            "/api/v1/agents/ghost/deploy",
            "",
            404,
            vec![
                "agent ghost",
                "not installed",
                "hive deploy ghost --spec FILE",
            ],
        ),
        (
            "/api/v1/agents/ghost/deploy",
            r#"{"spec": {"env": {"A": "b"}}}"#,
            400,
            vec![
                "spec given for agent ghost is not valid",
                "neither image nor build",
            ],
        ),
        (
            "/api/v1/agents/ghost/deploy",
            "{not json",
            400,
            vec!["deploy request body is not valid"],
        ),
        (
            "/api/v1/agents/ghost/start",
            "",
            404,
            vec!["agent ghost is not installed", "hive deploy ghost"],
        ),
        (
            "/api/v1/agents/ghost/stop",
            "",
            404,
            vec!["agent ghost is not installed"],
        ),
        (
            "/api/v1/agents/ghost/retire",
            "",
            404,
            vec!["agent ghost is not installed"],
        ),
        (
            "/api/v1/agents/ghost/rebuild",
            r#"{"relock": true}"#,
            404,
            vec!["agent ghost is not installed"],
        ),
        (
            "/api/v1/agents/ghost/purge",
            "",
            400,
            vec![
                "deletes agent ghost's state directory",
                "hive purge ghost --yes",
            ],
        ),
    ];
    for (path, body, want_code, parts) in cases {
        let (code, answer) = s.post(path, body).await;
        assert_eq!(code, want_code, "{path} {body}: {answer}");
        let msg = error_of(&answer);
        for part in parts {
            assert!(msg.contains(part), "{path}: {part:?} missing from {msg}");
        }
    }
    let (code, answer) = s.get("/api/v1/jobs/abc").await;
    assert_eq!(code, 400);
    assert!(error_of(&answer).contains("invalid job id \"abc\""));
    let (code, answer) = s.get("/api/v1/jobs/999").await;
    assert_eq!(code, 404);
    assert!(error_of(&answer).contains("job 999 does not exist"));
    let (code, answer) = s.get("/api/v1/jobs?agent=UPPER").await;
    assert_eq!(code, 400);
    assert!(error_of(&answer).contains("invalid agent name \"UPPER\""));
}

#[tokio::test]
async fn an_explicit_spec_deploys_and_purge_with_confirmation_queues() {
    let s = serve(false).await;
    let (code, body) = s
        .post(
            "/api/v1/agents/adhoc/deploy",
            r#"{"spec": {"image": "local/adhoc:1", "power": "down"}}"#,
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let (_, agents) = s.get("/api/v1/agents").await;
    assert_eq!(agents["agents"][0]["wanted"], "down");
    let (code, body) = s
        .post("/api/v1/agents/adhoc/purge", r#"{"confirm": true}"#)
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["kind"], "purge");
}

#[tokio::test]
async fn agents_show_unknown_when_docker_cannot_be_asked() {
    let s = serve(false).await;
    s.post("/api/v1/agents/declared/deploy", "").await;
    s.state.runtime.unreachable.store(true, Ordering::SeqCst);
    let (code, body) = s.get("/api/v1/agents").await;
    assert_eq!(code, 200);
    assert_eq!(body["agents"][0]["observed"], "unknown");
    assert!(body["docker_error"]
        .as_str()
        .unwrap()
        .contains("Docker is unreachable"));
    let view: AgentsView = serde_json::from_value(body).unwrap();
    let table = ops::agents_table(&view);
    assert!(table.starts_with("AGENT"), "{table}");
    assert!(table.contains("declared  up      unknown"), "{table}");
    assert!(
        table.contains("observed state unknown: Docker is unreachable"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_verbs_drive_a_deploy_to_the_end() {
    let s = serve(true).await;
    let deploy = ops::Command::Deploy {
        agent: AgentName::new("declared").unwrap(),
        spec: None,
        relock: false,
        wait: true,
    };
    assert_eq!(ops::run(deploy, s.client(), false).await, 0);
    let c = s
        .state
        .runtime
        .container("hyperhive.alpha.declared")
        .unwrap();
    assert!(c.running);

    let stop = ops::Command::Stop {
        agent: AgentName::new("declared").unwrap(),
        wait: true,
    };
    assert_eq!(ops::run(stop, s.client(), true).await, 0);
    assert!(
        !s.state
            .runtime
            .container("hyperhive.alpha.declared")
            .unwrap()
            .running
    );

    for listing in [
        ops::Command::Agents,
        ops::Command::Jobs {
            all: true,
            agent: None,
        },
        ops::Command::Job { id: JobId(1) },
    ] {
        for json in [false, true] {
            assert_eq!(
                ops::run(listing.clone(), s.client(), json).await,
                0,
                "{listing:?}"
            );
        }
    }
    let view: JobView = serde_json::from_value(s.get("/api/v1/jobs/1").await.1).unwrap();
    assert_eq!(view.state, JobState::Done);
    let text = ops::job_text(&view);
    assert!(
        text.starts_with("job 1 first_deploy declared done"),
        "{text}"
    );
    assert!(
        text.contains("[3/6] image      done     pulled local/declared:1"),
        "{text}"
    );

    // A verb the hive refuses, a failing job, and an API nobody serves: exit 1.
    let refused = ops::Command::Start {
        agent: AgentName::new("ghost").unwrap(),
        wait: false,
    };
    assert_eq!(ops::run(refused, s.client(), false).await, 1);
    let spec_file = s._dir.path().join("spec.json");
    std::fs::write(&spec_file, r#"{"image": "local/not-in-registry:1"}"#).unwrap();
    let failing = ops::Command::Deploy {
        agent: AgentName::new("nothere").unwrap(),
        spec: Some(spec_file),
        relock: false,
        wait: true,
    };
    assert_eq!(ops::run(failing, s.client(), false).await, 1);
    let missing_spec = ops::Command::Deploy {
        agent: AgentName::new("x").unwrap(),
        spec: Some("/nonexistent/spec.json".into()),
        relock: false,
        wait: false,
    };
    assert_eq!(ops::run(missing_spec, s.client(), false).await, 1);
    let nobody = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}", nobody.local_addr().unwrap());
    drop(nobody);
    for dead in [dead, s._dir.path().join("no.sock").display().to_string()] {
        let client =
            crate::local::client::ApiClient::new(crate::local::client::Endpoint::parse(&dead));
        assert_eq!(ops::run(ops::Command::Agents, client, false).await, 1);
    }
}

#[tokio::test]
async fn agents_show_how_their_containers_ended() {
    let s = serve(false).await;
    s.post("/api/v1/agents/declared/deploy", "").await;
    let agent = AgentName::new("declared").unwrap();
    for finished in [2_000, 4_000] {
        let seen = crate::agents::jobs::ExitSeen {
            agent: agent.clone(),
            spec: Some("s1".into()),
            code: Some(137),
            oom_killed: true,
            started_ms: Some(finished - 1_000),
            finished_ms: finished,
        };
        s.state.store.record_exit(seen, 600_000).await.unwrap();
    }
    let (code, body) = s.get("/api/v1/agents").await;
    assert_eq!(code, 200);
    let exits = &body["agents"][0]["exits"];
    assert_eq!(exits["last_code"], 137, "{body}");
    assert_eq!(exits["exits"], 2, "{body}");
    assert_eq!(exits["oom_killed"], true, "{body}");
    assert!(exits["finished_secs_ago"].is_u64(), "{body}");
    let view: AgentsView = serde_json::from_value(body).unwrap();
    let table = ops::agents_table(&view);
    assert!(table.contains("EXITS"), "{table}");
    assert!(
        table.contains("137 (2 since the spec changed), OOM-killed"),
        "{table}"
    );
}
