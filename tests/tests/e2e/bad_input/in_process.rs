//! The nats-server's own limits, and the hive's deploy and credential
//! subjects and its wanted key through the hive's tasks run in-process,
//! connected as the hive under the generated per-hive permissions, so the
//! warnings and logs can be read one case at a time.

use super::*;

#[tokio::test]
async fn the_server_refuses_oversized_values_and_keeps_the_old_one() {
    let f = fixture().await;
    let rev = f
        .wanted
        .put("alpha", valid_declaration("local/a:1").into())
        .await
        .unwrap();
    let too_big = vec![b'x'; MAX_VALUE_BYTES + 1];
    let err = f.wanted.put("alpha", too_big.into()).await.unwrap_err();
    assert!(err.to_string().to_lowercase().contains("maximum"), "{err}");
    let kept = f.wanted.entry("alpha").await.unwrap().unwrap();
    assert_eq!(kept.revision, rev);
    // Over the server's own limit, the client refuses to send it at all.
    let huge = vec![b'x'; SERVER_MAX_PAYLOAD + 1];
    let err = f
        .ctl
        .client
        .publish(
            HiveSubjects::new(&HiveName::new("alpha").unwrap()).deploy,
            huge.into(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("payload"), "{err}");
    drop(f.hive);
}

#[tokio::test]
async fn the_hive_warns_on_bad_events_and_declarations_and_loses_nothing() {
    in_process_log();
    let f = fixture().await;
    let alpha = HiveName::new("alpha").unwrap();
    let agent = AgentName::new("mail-bot").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let state = tempfile::tempdir().unwrap();
    let board = Arc::new(StatusBoard::new(Some(alpha.clone()), None));
    let (trigger, shutdown) = hive::shutdown::channel();

    // The wanted task, with one valid declaration to start from.
    let good = f
        .wanted
        .put("alpha", valid_declaration("local/a:1").into())
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(None);
    let wanted_task = tokio::spawn(hive::bus::wanted::run(
        WantedDeps {
            nats: f.hive.clone(),
            hive: alpha.clone(),
            board: board.clone(),
            bucket: BucketSettings::default_for(Bucket::Wanted),
            tx,
        },
        shutdown.clone(),
    ));
    wait_until(T, "the first declaration", || {
        let r = current(&rx);
        async move { (r == Some(good)).then_some(()) }
    })
    .await;

    each_bad_declaration_warns_and_the_good_one_stays(&f.wanted, &board, &rx, good).await;
    let fixed = f
        .wanted
        .put("alpha", valid_declaration("local/a:2").into())
        .await
        .unwrap();
    wait_until(T, "the fixed declaration", || {
        let r = current(&rx);
        let clear = warning(&board, keys::WANTED).is_none();
        async move { (r == Some(fixed) && clear).then_some(()) }
    })
    .await;

    // The event listener, with the daemon's own deployer over a job store in
    // the temp dir: it refuses agents the declaration in force does not name.
    let deploy = Deployer {
        store: hive::agents::jobs::JobStore::open(&state.path().join("hive.db")).unwrap(),
        wake: Arc::default(),
        wanted: rx.clone(),
        hive: alpha.clone(),
    };
    let controller_xkey = XKey::new();
    let hive_xkey = Arc::new(XKey::new());
    let agents_dir = state.path().join("agents");
    let events = tokio::spawn(hive::bus::events::run(
        EventDeps {
            client: f.hive.client.clone(),
            hive: alpha.clone(),
            board: board.clone(),
            knowledge: None,
            credentials: Credentials::open(Deliverer::new(DelivererParts {
                client: f.hive.client.clone(),
                hive: alpha.clone(),
                xkey: hive_xkey.clone(),
                trusted: Arc::new(vec![controller_xkey.public_key()]),
                agents_dir: agents_dir.clone(),
            })),
            deploy,
        },
        shutdown.clone(),
    ));
    let subjects = HiveSubjects::new(&alpha);

    each_bad_deploy_is_refused_and_a_good_one_queued(&f.ctl, &agent).await;

    let notice = encode(&CredentialNotice::new(agent.clone(), account.clone())).unwrap();
    each_bad_notice_is_logged_and_a_missing_key_warns(&f.ctl, &board, &subjects, &notice).await;

    // Nothing lost: the key appears, a notice delivers it, the warning clears.
    let envelope = seal(b"s3cret", &controller_xkey, &hive_xkey.public_key()).unwrap();
    f.creds
        .put(
            credential_key(&alpha, &agent, &account),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();
    f.ctl
        .client
        .publish(subjects.credential.clone(), notice.into())
        .await
        .unwrap();
    let path = credential_path(&agents_dir, &agent, &account);
    wait_until(
        T,
        "the credential delivered and the warning cleared",
        || {
            let done = std::fs::read(&path).ok().as_deref() == Some(&b"s3cret"[..])
                && warning(&board, keys::CREDENTIALS).is_none();
            async move { done.then_some(()) }
        },
    )
    .await;

    // Both tasks are still running until asked to stop.
    assert!(!wanted_task.is_finished() && !events.is_finished());
    trigger.trigger();
    wanted_task.await.unwrap();
    events.await.unwrap().unwrap();
    let alpha_key = &f.s.hive("alpha").public;
    assert!(
        !f.s.violations().iter().any(|l| l.contains(alpha_key)),
        "{:#?}",
        f.s.violations()
    );
}

/// The revision of the declaration in force.
fn current(rx: &WantedRx) -> Option<u64> {
    rx.borrow().as_ref().map(|w| w.revision)
}

/// Bad declarations: each raises a warning naming its revision and why,
/// and the declaration in force (revision `good`) stays.
async fn each_bad_declaration_warns_and_the_good_one_stays(
    wanted: &kv::Store,
    board: &StatusBoard,
    rx: &WantedRx,
    good: u64,
) {
    let mut wanted_cases: Vec<(String, Vec<u8>, &str)> = vec![
        (
            "truncated".into(),
            b"{\"schema\":1,\"agents\":{\"mail-bot\":".to_vec(),
            "EOF",
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":3,"agents":[]}"#.to_vec(),
            "schema 3",
        ),
        (
            "no agents field".into(),
            br#"{"schema":1}"#.to_vec(),
            "agents",
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        wanted_cases.push((
            format!("agent {bad:?}"),
            format!(r#"{{"schema":1,"agents":{{{json}:{{"image":"x"}}}}}}"#).into_bytes(),
            why,
        ));
    }
    for (case, bytes, why) in &wanted_cases {
        let rev = wanted.put("alpha", bytes.clone().into()).await.unwrap();
        let message = wait_until(T, "the wanted warning", || {
            let w = warning(board, keys::WANTED).filter(|m| m.contains(&format!("revision {rev}")));
            async move { w }
        })
        .await;
        assert!(
            message.contains(why) && message.contains(&format!("revision {good}")),
            "{case}: {message}"
        );
        assert_eq!(
            current(rx),
            Some(good),
            "{case}: the valid declaration must stay"
        );
    }
}

/// Hive alpha's deploy subject: every bad request is answered with why,
/// and a good one for `agent` after them is queued.
async fn each_bad_deploy_is_refused_and_a_good_one_queued(ctl: &Connection, agent: &AgentName) {
    let mut deploy_cases: Vec<(String, Vec<u8>, String)> = vec![
        (
            "oversized".into(),
            oversized_json(1),
            "over the 524288-byte limit".into(),
        ),
        (
            "truncated".into(),
            br#"{"schema":1,"agent":"mail"#.to_vec(),
            "EOF".into(),
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":2,"agent":7}"#.to_vec(),
            "schema 2".into(),
        ),
        (
            "undeclared agent".into(),
            encode(&DeployRequest::new(AgentName::new("ghost").unwrap())).unwrap(),
            "agent ghost is not declared".into(),
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        deploy_cases.push((
            format!("agent {bad:?}"),
            format!(r#"{{"schema":1,"agent":{json}}}"#).into_bytes(),
            why.to_string(),
        ));
    }
    for (case, bytes, why) in &deploy_cases {
        match deploy_reply(ctl, "alpha", bytes.clone()).await {
            DeployReply::Refused { error } => {
                assert!(error.contains(why.as_str()), "{case}: {error}")
            }
            other => panic!("{case}: accepted: {other:?}"),
        }
    }
    let ok = deploy_reply(
        ctl,
        "alpha",
        encode(&DeployRequest::new(agent.clone())).unwrap(),
    )
    .await;
    assert_eq!(
        ok,
        DeployReply::Queued { job: 1 },
        "a good request after the bad ones"
    );
}

/// The credential subject: undecodable notices are logged (naming the bad
/// value) and ignored; the good `notice` after them, for a key that is not
/// in the bucket yet, raises a warning naming the key.
async fn each_bad_notice_is_logged_and_a_missing_key_warns(
    ctl: &Connection,
    board: &StatusBoard,
    subjects: &HiveSubjects,
    notice: &[u8],
) {
    let mut notice_cases: Vec<(String, Vec<u8>)> = vec![
        ("oversized".into(), oversized_json(1)),
        (
            "truncated".into(),
            br#"{"schema":1,"agent":"mail-bot","acc"#.to_vec(),
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":2,"agent":[]}"#.to_vec(),
        ),
    ];
    for (bad, _) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        notice_cases.push((
            format!("account {bad:?}"),
            format!(r#"{{"schema":1,"agent":"mail-bot","account":{json}}}"#).into_bytes(),
        ));
    }
    for (_, bytes) in &notice_cases {
        ctl.client
            .publish(subjects.credential.clone(), bytes.clone().into())
            .await
            .unwrap();
    }
    ctl.client
        .publish(subjects.credential.clone(), notice.to_vec().into())
        .await
        .unwrap();
    ctl.client.flush().await.unwrap();
    let missing = wait_until(T, "the missing-credential warning", || {
        let w = warning(board, keys::CREDENTIALS);
        async move { w }
    })
    .await;
    assert!(
        missing.contains("alpha.mail-bot.smtp")
            && missing.contains("not in the credentials bucket"),
        "{missing}"
    );
    let log = in_process_log_text();
    let ignored = log.matches("undecodable credential notice ignored").count();
    assert!(
        ignored >= notice_cases.len(),
        "{ignored} of {} logged:\n{log}",
        notice_cases.len()
    );
    for (bad, _) in BAD_NAMES {
        assert!(
            log.contains(&format!("{bad:?}").replace('"', "\\\"")) || log.contains(bad),
            "{bad} not named in the log"
        );
    }
}
