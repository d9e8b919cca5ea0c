//! Credential rotation's inputs: a bad `on_credential_change` in a
//! declaration (the payload decoder) and in a swarm file (the real
//! `swarm-controller`), and bad names given to `credential delete`. Each is
//! refused before anything is sent, naming the bad value.

use super::*;

/// A bad policy in a declaration payload, the form every hive reads.
#[test]
fn a_declaration_with_a_bad_on_credential_change_is_refused_naming_the_value() {
    let error = decode_err::<Declaration>(
        br#"{"schema":1,"agents":{"web":{"image":"x","on_credential_change":"sometimes"}}}"#,
    );
    for want in ["declaration", "sometimes", "none", "restart"] {
        assert!(error.contains(want), "{error:?} does not say {want:?}");
    }
    let good = decode::<Declaration>(
        br#"{"schema":1,"agents":{"web":{"image":"x","on_credential_change":"restart"}}}"#,
    )
    .unwrap();
    let spec = &good.value.agents[&AgentName::new("web").unwrap()];
    assert_eq!(
        spec.on_credential_change(),
        swarm_queue_client::OnCredentialChange::Restart
    );
}

/// A swarm file with a bad policy, and every bad name in every position of
/// `credential delete`, and a hive not on the roster. Nothing here needs a
/// server: each is refused before the controller connects (the config's
/// server does not exist).
#[test]
fn the_controller_refuses_a_bad_policy_and_bad_delete_names_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let config = offline_controller_config(dir.path());
    let swarm = dir.path().join("swarm.toml");
    std::fs::write(
        &swarm,
        "[hives.alpha.agents.web]\nimage = \"local/x:1\"\non_credential_change = \"sometimes\"\n",
    )
    .unwrap();
    let swarm = swarm.display().to_string();
    let mut cases: Vec<(String, Vec<String>, i32, Vec<String>)> = vec![(
        "swarm file with on_credential_change = \"sometimes\"".into(),
        vec!["roster".into(), "--swarm-file".into(), swarm],
        1,
        vec![
            "hives.alpha.agents.web".into(),
            "unknown variant `sometimes`".into(),
            "`none` or `restart`".into(),
        ],
    )];
    for (bad, why) in BAD_NAMES {
        for (position, what, label) in [
            (0, "hive", "<HIVE>"),
            (1, "agent", "<AGENT>"),
            (2, "credential account", "<ACCOUNT>"),
        ] {
            let mut names = vec!["alpha".to_string(), "web".into(), "smtp".into()];
            names[position] = bad.to_string();
            let mut args = vec!["credential".to_string(), "delete".into()];
            args.extend(names);
            cases.push((
                format!("credential delete with {what} {bad:?}"),
                args,
                2,
                vec![
                    format!("invalid value '{bad}' for '{label}'"),
                    format!("invalid {what} name {bad:?}"),
                    why.to_string(),
                ],
            ));
        }
    }
    cases.push((
        "credential delete for a hive not on the roster".into(),
        ["credential", "delete", "beta", "web", "smtp"]
            .map(String::from)
            .to_vec(),
        1,
        vec!["hive beta is not on the roster".into()],
    ));
    let mut failures = Vec::new();
    for (case, args, code, wants) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (got, said) = controller(&config, &args);
        if got != Some(*code) {
            failures.push(format!("{case}: exit {got:?}, not {code}: {said}"));
        }
        for want in wants {
            if !said.contains(want.as_str()) {
                failures.push(format!("{case}: {said:?} does not say {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    println!("{} cases refused, each naming the bad value", cases.len());
}
