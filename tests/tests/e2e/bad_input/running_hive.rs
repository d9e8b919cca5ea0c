//! The hive's subjects and wanted key through a running `hive` process:
//! the real deploy function refuses an undeclared agent itself.

use super::*;

#[tokio::test]
async fn a_running_hive_refuses_bad_input_by_name_and_keeps_running() {
    let f = fixture().await;
    let url = f.s.server.url();
    let nats = f.s.hive("alpha").nats_toml(&url);
    let mut hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &nats,
        ..Default::default()
    });
    let alpha = HiveName::new("alpha").unwrap();
    let subjects = HiveSubjects::new(&alpha);
    let status = status_bucket(&f.ctl).await;
    let converged = |rev: u64| {
        let status = status.clone();
        async move {
            let e = status.entry("alpha").await.ok().flatten()?;
            let r = decode::<HiveStatus>(&e.value).ok()?.value;
            (r.converged_revision == Some(rev)).then_some(r)
        }
    };
    let empty = f
        .wanted
        .put("alpha", br#"{"schema":1,"agents":{}}"#.to_vec().into())
        .await
        .unwrap();
    wait_until(T, "the empty declaration applied", || converged(empty)).await;

    // Deploy subject.
    let mut cases: Vec<(String, Vec<u8>, String)> = vec![
        (
            "undeclared agent".into(),
            encode(&DeployRequest::new(AgentName::new("ghost").unwrap())).unwrap(),
            "agent ghost is not declared on hive alpha".into(),
        ),
        (
            "oversized".into(),
            oversized_json(1),
            "over the 524288-byte limit".into(),
        ),
        (
            "truncated".into(),
            br#"{"schema":1,"agent":"gh"#.to_vec(),
            "EOF".into(),
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":2,"agent":[1]}"#.to_vec(),
            "schema 2".into(),
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        cases.push((
            format!("agent {bad:?}"),
            format!(r#"{{"schema":1,"agent":{json}}}"#).into_bytes(),
            why.to_string(),
        ));
    }
    for (case, bytes, why) in &cases {
        match deploy_reply(&f.ctl, alpha.as_str(), bytes.clone()).await {
            DeployReply::Refused { error } => {
                assert!(error.contains(why.as_str()), "{case}: {error}")
            }
            other => panic!("{case}: accepted: {other:?}"),
        }
    }

    // Credential subject: a notice for a key that is not there.
    f.ctl
        .client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(
                AgentName::new("mail-bot").unwrap(),
                AccountName::new("smtp").unwrap(),
            ))
            .unwrap()
            .into(),
        )
        .await
        .unwrap();
    let (_, ready) = wait_until(T, "the missing-credential warning", || {
        let hive = &hive;
        async move {
            let (code, body) = hive.ready().await;
            body["warnings"]
                .to_string()
                .contains("alpha.mail-bot.smtp is not in the credentials bucket")
                .then_some((code, body))
        }
    })
    .await;
    assert!(
        ready["warnings"].to_string().contains("credential"),
        "{ready}"
    );

    // Wanted key: a declaration naming a bad agent is refused by revision;
    // the one in force stays.
    let bad = f
        .wanted
        .put(
            "alpha",
            br#"{"schema":1,"agents":{"mail.bot":{"image":"x"}}}"#
                .to_vec()
                .into(),
        )
        .await
        .unwrap();
    let (_, ready) = wait_until(T, "the wanted warning", || {
        let hive = &hive;
        async move {
            let (code, body) = hive.ready().await;
            body["warnings"]
                .to_string()
                .contains(&format!("revision {bad} is not valid"))
                .then_some((code, body))
        }
    })
    .await;
    assert!(
        ready["warnings"].to_string().contains("mail.bot"),
        "{ready}"
    );
    assert_eq!(ready["converged_revision"], empty, "{ready}");

    // Still running, and the next good declaration is taken.
    assert!(hive.daemon.is_running());
    let good = f
        .wanted
        .put("alpha", br#"{"schema":1,"agents":{}}"#.to_vec().into())
        .await
        .unwrap();
    wait_until(T, "the next good declaration", || converged(good)).await;
    let alpha_key = &f.s.hive("alpha").public;
    assert!(
        !f.s.violations().iter().any(|l| l.contains(alpha_key)),
        "{:#?}",
        f.s.violations()
    );
}
