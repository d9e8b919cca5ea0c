//! A full state dir: the hive says so (status warning `jobs`, level
//! error, not ready), does not claim a declaration it cannot record, leaves
//! its SQLite file intact (`PRAGMA integrity_check` is `ok`), and converges
//! by itself once space returns.
//!
//! The state dir is a 2 MiB tmpfs mounted by the test (unmounted on drop),
//! filled with a file until the kernel says no space is left.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(45);

/// A small tmpfs, unmounted (lazily, in case something still holds it) on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("hhtest-tmpfs-")
            .tempdir()
            .unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(status.success(), "mount a tmpfs (the tests run as root)");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Write zeros to `path` until the file system is full; the bytes written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    let mut n = 0;
    while f.write_all(&block).is_ok() {
        n += block.len() as u64;
    }
    let _ = f.sync_all();
    n
}

fn integrity(db: &PathBuf) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('PRAGMA integrity_check').fetchone()[0])")
        .arg(db)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn jobs_warning(r: &Value) -> Option<Value> {
    r["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["key"] == "jobs")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_state_dir_is_reported_without_corruption_and_recovers() {
    let _slot = crate::one_slot().await;
    let nats = NatsServer::start();
    let image = TestImage::busybox("f-disk");
    let hive_name = unique_name("f-disk");
    let _containers = ContainerGuard::new(&hive_name);
    let tmpfs = Tmpfs::mount("2m");
    let mut hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        nats_url: Some(&nats.url()),
        extra: "reconcile_interval_secs = 1",
        state_dir: Some(tmpfs.path()),
        ..Default::default()
    });
    let kv = Swarm::connect(&nats.url()).await;
    let decl = |agents: Value| json!({ "schema": 1, "agents": agents }).to_string();
    let agent = |v: &str| json!({ "image": image.reference, "command": ["/bin/sleep", "3600"], "env": { "V": v } });
    let r1 = kv
        .declare(&hive_name, &decl(json!({ "a": agent("1") })))
        .await;
    kv.converged(&hive_name, r1, T).await;

    let filler = tmpfs.path().join("filler");
    let filled = fill(&filler);
    let full = Instant::now();
    // New agents: each needs new rows, more than any slack the file has.
    let mut agents = serde_json::Map::new();
    for i in 0..4 {
        agents.insert(format!("b{i}"), agent("2"));
    }
    let r2 = kv.declare(&hive_name, &decl(Value::Object(agents))).await;
    let warning = wait_until(T, "the jobs warning", || async {
        let (code, r) = hive.ready().await;
        (code != 200 && r["ready"] == false)
            .then(|| jobs_warning(&r))
            .flatten()
    })
    .await;
    let reported = full.elapsed();
    assert_eq!(warning["level"], "error", "{warning}");
    let message = warning["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("full"),
        "the reason says the disk is full: {message}"
    );
    let (_, s) = kv.status(&hive_name).await.expect("status while full");
    assert!(s["converged_revision"].as_u64() < Some(r2), "{s}");

    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    wait_until(T, "the jobs warning cleared", || async {
        let (_, r) = hive.ready().await;
        jobs_warning(&r).is_none().then_some(())
    })
    .await;
    let cleared = freed.elapsed();
    let s = kv.converged(&hive_name, r2, T).await;
    let converged = freed.elapsed();
    assert_eq!(s["agents"]["b3"]["observed"], "running", "{s}");
    hive.daemon.kill();
    let check = integrity(&tmpfs.path().join("hive.db"));
    assert_eq!(check, "ok");
    println!(
        "FIGURES: faults_disk_full tmpfs=2MiB filler_bytes={filled} full_to_jobs_warning_ms={} freed_to_cleared_ms={} freed_to_converged_ms={} integrity_check={check} message={message:?}",
        reported.as_millis(),
        cleared.as_millis(),
        converged.as_millis()
    );
}
