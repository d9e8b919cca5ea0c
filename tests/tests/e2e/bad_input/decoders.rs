//! The payload decoders: every payload the wire carries, refused by name.

use super::*;

#[test]
fn every_payload_decoder_refuses_bad_input_by_name() {
    let truncated_decl = valid_declaration("local/a:1");
    let truncated_decl = &truncated_decl[..truncated_decl.len() / 2];
    let mut cases: Vec<(String, String, Vec<&str>)> = vec![
        // (case, error, what the error must say)
        (
            "oversized declaration".into(),
            decode_err::<Declaration>(&oversized_json(1)),
            vec!["declaration", "over the 524288-byte limit"],
        ),
        (
            "oversized deploy request".into(),
            decode_err::<DeployRequest>(&oversized_json(1)),
            vec!["deploy request", "over the"],
        ),
        (
            "oversized credential notice".into(),
            decode_err::<CredentialNotice>(&oversized_json(1)),
            vec!["credential notice", "over the"],
        ),
        (
            "oversized deploy reply".into(),
            DeployReply::decode(&oversized_json(1))
                .unwrap_err()
                .to_string(),
            vec!["deploy reply", "over the"],
        ),
        (
            "truncated declaration".into(),
            decode_err::<Declaration>(truncated_decl),
            vec!["declaration is not valid", "EOF"],
        ),
        (
            "truncated hive status".into(),
            decode_err::<HiveStatus>(br#"{"schema":1,"hive":"alpha","ready":tr"#),
            vec!["hive status", "not valid"],
        ),
        (
            "truncated envelope".into(),
            decode_err::<CredentialEnvelope>(br#"{"schema":1,"sender":"X"#),
            vec!["credential envelope", "EOF"],
        ),
        (
            "newer schema that does not fit".into(),
            decode_err::<Declaration>(br#"{"schema":2,"agents":["a"]}"#),
            vec!["schema 2, newer than schema 1"],
        ),
        (
            "schema 0".into(),
            decode_err::<DeployRequest>(br#"{"schema":0,"agent":"a"}"#),
            vec!["schema 0"],
        ),
        (
            "missing schema".into(),
            decode_err::<CredentialNotice>(br#"{"agent":"a","account":"b"}"#),
            vec!["missing field `schema`"],
        ),
        (
            "envelope from something that is not an xkey".into(),
            decode_err::<CredentialEnvelope>(br#"{"schema":1,"sender":"UABC","sealed":"00"}"#),
            vec!["not a public xkey"],
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        cases.push((
            format!("deploy request for agent {bad:?}"),
            decode_err::<DeployRequest>(format!(r#"{{"schema":1,"agent":{json}}}"#).as_bytes()),
            vec!["invalid agent name", why],
        ));
        cases.push((
            format!("credential notice for account {bad:?}"),
            decode_err::<CredentialNotice>(
                format!(r#"{{"schema":1,"agent":"a","account":{json}}}"#).as_bytes(),
            ),
            vec!["invalid credential account name", why],
        ));
        cases.push((
            format!("declaration of agent {bad:?}"),
            decode_err::<Declaration>(
                format!(r#"{{"schema":1,"agents":{{{json}:{{"image":"x"}}}}}}"#).as_bytes(),
            ),
            vec!["invalid agent name", why],
        ));
        cases.push((
            format!("status of hive {bad:?}"),
            decode_err::<HiveStatus>(
                format!(r#"{{"schema":1,"hive":{json},"ready":true,"state":"ok"}}"#).as_bytes(),
            ),
            vec!["invalid hive name", why],
        ));
    }
    let mut failures = Vec::new();
    for (case, error, wants) in &cases {
        for want in wants {
            if !error.contains(want) {
                failures.push(format!("{case}: {error:?} does not say {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // A newer schema whose fields still fit is read, with a warning.
    let newer = decode::<DeployRequest>(br#"{"schema":2,"agent":"a","priority":9}"#).unwrap();
    assert!(
        newer.warnings[0].contains("newer than schema 1"),
        "{newer:?}"
    );
    // An oversized error is bounded by the limit, not by the input.
    assert!(matches!(
        decode::<Declaration>(&oversized_json(1)),
        Err(DecodeError::TooLarge { .. })
    ));
}
