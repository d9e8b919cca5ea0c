//! What the store keeps on disk: installed records and the cleanup
//! journal, refused files, schema migration, and a crash between finish
//! and claim.

use super::*;

#[test]
fn installed_records_and_cleanup_journal_round_trip() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let rec = InstalledAgent {
        agent: a.clone(),
        spec_hash: spec("local/x:1").spec_hash(),
        spec: spec("local/x:1"),
        image: "local/x:1".into(),
        revision: Some(42),
        updated_at_ms: 5,
    };
    store.record_installed(&rec).unwrap();
    assert_eq!(store.installed(&a).unwrap().as_ref(), Some(&rec));
    assert_eq!(store.installed_all().unwrap().len(), 1);
    store.seed_power(&a, Power::Up, 5).unwrap();
    store.forget_agent(&a).unwrap();
    assert_eq!(store.installed(&a).unwrap(), None);
    assert_eq!(store.power(&a).unwrap(), None);

    let action = CleanupAction::RemoveContainer {
        id: "abc".into(),
        name: "hyperhive.h.a".into(),
    };
    let id = store.journal_cleanup(&a, &action, 6).unwrap();
    let dir_id = store
        .journal_cleanup(
            &agent("b"),
            &CleanupAction::DeleteDir {
                path: "/x/agents/b".into(),
            },
            7,
        )
        .unwrap();
    store.cleanup_failed(id, "docker unreachable").unwrap();
    let pending = store.pending_cleanups(Some(&a)).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].action, action);
    assert_eq!(pending[0].attempts, 1);
    assert_eq!(pending[0].last_error.as_deref(), Some("docker unreachable"));
    assert_eq!(store.pending_cleanups(None).unwrap().len(), 2);
    store.cleanup_done(id).unwrap();
    store.cleanup_done(dir_id).unwrap();
    assert!(store.pending_cleanups(None).unwrap().is_empty());
}

#[test]
fn damaged_foreign_or_newer_files_are_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());

    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();
    let err = Store::open(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("left exactly as it was"), "{msg}");
    assert_eq!(std::fs::read(&path).unwrap(), garbage);

    // A real SQLite file of someone else's.
    std::fs::remove_file(&path).unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE photos (id INTEGER); INSERT INTO photos VALUES (1);")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("photos"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // Ours, but from a newer build.
    std::fs::remove_file(&path).unwrap();
    drop(Store::open(&path).unwrap());
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", schema::latest() + 1)
            .unwrap();
    }
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
    assert!(err
        .to_string()
        .contains(&format!("schema version {}", schema::latest() + 1)));

    // An empty file is an empty database: nothing to lose, so it is set up.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        Store::open(&path).unwrap().schema_version().unwrap(),
        schema::latest()
    );
}

#[test]
fn finishing_a_node_that_is_not_running_is_refused() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let q = store.enqueue(&a, JobRequest::Reconcile, 0).unwrap();
    let err = store.finish(q.job, 0, done(), &policy(), 1).unwrap_err();
    assert!(matches!(err, StoreError::NodeNotRunning { .. }), "{err}");
    let err = store
        .finish(JobId(999), 0, done(), &policy(), 1)
        .unwrap_err();
    assert!(matches!(err, StoreError::NoSuchJob { .. }), "{err}");
}

#[tokio::test]
async fn the_async_handle_runs_calls_off_the_runtime_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open(&db_path(dir.path())).unwrap();
    let q = store
        .enqueue(&agent("a"), JobRequest::Reconcile, 0)
        .await
        .unwrap();
    let job = store.job(q.job).await.unwrap();
    assert_eq!(job.kind, JobKind::Reconcile);
}

#[test]
fn an_older_schema_is_migrated_in_place_keeping_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    {
        // A file as the first release left it: migration 1 only, one job.
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(schema::MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "application_id", schema::APPLICATION_ID)
            .unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute(
            "INSERT INTO jobs (agent, kind, request, state, created_at_ms)
             VALUES ('a', 'reconcile', '{\"kind\":\"reconcile\"}', 'pending', 0)",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO nodes (job_id, seq, op, op_name, deps, state)
             VALUES (1, 0, '{\"op\":\"reconcile\"}', 'reconcile', '[]', 'ready')",
            [],
        )
        .unwrap();
    }
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), schema::latest());
    assert!(schema::latest() >= 2);
    let c = store.claim(1, None).unwrap().unwrap();
    assert_eq!(
        (c.job, c.op, c.agent.as_str()),
        (JobId(1), Op::Reconcile, "a")
    );
}

#[test]
fn finish_and_claim_chains_one_agent_and_survives_a_crash() {
    let (dir, mut store) = open();
    let (a, b) = (agent("a"), agent("b"));
    let queued = store
        .enqueue_all(
            vec![
                (a.clone(), first_deploy("local/x:1")),
                (b.clone(), first_deploy("local/x:1")),
            ],
            None,
            10,
        )
        .unwrap();
    assert_eq!(queued.len(), 2);
    assert!(
        store.power(&b).unwrap().is_some(),
        "seeded in the same transaction"
    );
    let mut claim = store.claim(10, None).unwrap().unwrap();
    assert_eq!(claim.agent, a);
    let mut ops = vec![claim.op.name().to_string()];
    loop {
        let done = Finished {
            job: claim.job,
            seq: claim.seq,
            agent: claim.agent.clone(),
            outcome: done(),
        };
        let (state, next) = store.finish_and_claim(done, &policy(), 10, None).unwrap();
        match next {
            Some(n) => {
                assert_eq!(n.agent, a, "only the same agent's next node");
                assert_eq!(state, None);
                ops.push(n.op.name().to_string());
                claim = n;
            }
            None => {
                assert_eq!(state, Some(JobState::Done));
                break;
            }
        }
        if ops.len() == 3 {
            // A crash right after a chained claim: the next node is
            // running on disk, and recovery makes it ready again.
            drop(store);
            store = Store::open(&db_path(dir.path())).unwrap();
            assert_eq!(store.recover().unwrap(), 1);
            claim = store.claim(10, None).unwrap().unwrap();
            assert_eq!((claim.agent.clone(), claim.seq), (a.clone(), 2));
        }
    }
    assert_eq!(ops.len(), 6, "{ops:?}");
    assert_eq!(store.claim(10, None).unwrap().unwrap().agent, b);
}
