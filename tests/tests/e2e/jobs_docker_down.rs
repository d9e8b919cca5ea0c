//! Docker unreachable, then back; and a damaged job database at start.
//!
//! The machine's dockerd is never stopped (other tests share it). Instead
//! the hive is configured with `docker_host` pointing at a socket that does
//! not exist yet; "Docker comes back" is the test starting a small proxy on
//! that path that forwards to the real `/var/run/docker.sock`.

use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard, DockerSocketProxy, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::jobs::{node, JobApi};
use hyperhive_tests::{unique_name, wait_until};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_unreachable_is_a_clear_error_and_the_job_retries_once_it_is_back() {
    let hive_name = unique_name("docker-down");
    let image = TestImage::busybox("docker-down");
    let _containers = ContainerGuard::new(&hive_name);
    let sockets = tempfile::Builder::new()
        .prefix("hhtest-sock-")
        .tempdir()
        .unwrap();
    let socket = sockets.path().join("docker.sock");
    let extra = format!("docker_host = \"unix://{}\"", socket.display());
    let hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        extra: &extra,
        ..Default::default()
    });
    let api = hive.job_api().await;
    let job = api.deploy("a", json!({ "image": image.reference })).await;

    // The node that first needs Docker fails with an error naming the
    // socket, and waits to be retried.
    let failed_once = wait_until(T, "the image node's first failure", || async {
        let j = api.job(job).await?;
        let n = node(&j, "image").clone();
        (n["attempts"].as_u64()? >= 1 && n["state"] == "ready" && n["error"].is_string())
            .then_some(n)
    })
    .await;
    let error = failed_once["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "Docker is unreachable at unix://{}: the socket {} does not exist",
            socket.display(),
            socket.display()
        )),
        "{error}"
    );
    assert!(error.contains("Check that dockerd is running"), "{error}");
    assert!(failed_once["retry_at_ms"].is_u64(), "{failed_once:#}");
    assert_eq!(api.job(job).await.unwrap()["state"], "running");

    // The listing still answers, saying what it could not see.
    let (code, agents) = api.get("/api/v1/agents").await;
    assert_eq!(code, 200);
    assert_eq!(agents["agents"][0]["observed"], "unknown");
    assert!(agents["docker_error"]
        .as_str()
        .unwrap()
        .contains("Docker is unreachable"));

    // Docker comes back: the retry goes through and the job completes.
    let _proxy = DockerSocketProxy::start(&socket);
    let done = api.done(job, T).await;
    assert!(node(&done, "image")["attempts"].as_u64().unwrap() >= 2);
    let running = docker(&[
        "ps",
        "--filter",
        &format!("label=org.hyperhive.hive={hive_name}"),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(running, format!("hyperhive.{hive_name}.a"));
    let log = hive.daemon.log();
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_job_database_stops_the_hive_and_is_left_untouched() {
    let dir = tempfile::Builder::new()
        .prefix("hhtest-corrupt-")
        .tempdir()
        .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let db = state.join("hive.db");
    let config = dir.path().join("hive.toml");
    std::fs::write(
        &config,
        format!(
            "name = \"hhtest-corrupt\"\nstate_dir = {:?}\nhttp_listen = \"127.0.0.1:0\"\n",
            state.display().to_string()
        ),
    )
    .unwrap();
    let log = dir.path().join("hive.log");
    let spawn = || {
        hyperhive_tests::Daemon::spawn(
            &hyperhive_tests::hive_bin(),
            &["run", "--config", &config.display().to_string()],
            &[],
            &log,
        )
    };

    // Not a SQLite file at all; then a real one of ours whose first b-tree
    // page has an impossible page type.
    let garbage: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 31 + 7) as u8).collect();
    let mut damaged = sqlite_file_with_a_table(&dir.path().join("good.db"));
    let page_size = u16::from_be_bytes([damaged[16], damaged[17]]) as usize;
    damaged[page_size] = 0xA5;
    for (what, bytes) in [("garbage", garbage), ("damaged page", damaged)] {
        std::fs::write(&db, &bytes).unwrap();
        let _ = std::fs::remove_file(&log);
        let code = spawn().wait_exit();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(code, Some(1), "{what}: {text}");
        assert!(
            text.contains(&format!("the job database {} is damaged", db.display())),
            "{what}: {text}"
        );
        assert!(text.contains("left exactly as it was"), "{what}: {text}");
        assert_eq!(std::fs::read(&db).unwrap(), bytes, "{what}: bytes changed");
        assert!(
            !state.join("api.addr").exists(),
            "{what}: the hive got as far as serving"
        );
    }

    // Moved aside as the message says, the hive starts on a fresh file.
    std::fs::rename(&db, state.join("hive.db.damaged")).unwrap();
    let _hive = spawn();
    let addr = state.join("api.addr");
    let addr = wait_until(T, "the hive serving", || {
        let addr = addr.clone();
        async move {
            std::fs::read_to_string(&addr)
                .ok()
                .filter(|a| a.ends_with('\n'))
        }
    })
    .await;
    let _ = addr;
    let api = JobApi::new(&state.join("hive.sock").display().to_string());
    let (code, jobs) = api.get("/api/v1/jobs").await;
    assert_eq!(code, 200, "{jobs}");
    assert_eq!(jobs["jobs"], json!([]));
}

/// A real SQLite database marked as a hive's, with a few pages of rows.
fn sqlite_file_with_a_table(path: &std::path::Path) -> Vec<u8> {
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys\n\
             c=sqlite3.connect(sys.argv[1])\n\
             c.execute('PRAGMA application_id = 1751742053')\n\
             c.execute('CREATE TABLE t (x TEXT)')\n\
             c.executemany('INSERT INTO t VALUES (?)', [('row %d ' % i * 20,) for i in range(400)])\n\
             c.commit()\n",
        )
        .arg(path)
        .status()
        .expect("python3 with sqlite3");
    assert!(status.success());
    std::fs::read(path).unwrap()
}
