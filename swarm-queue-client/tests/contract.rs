//! Unit tests of every payload rule and bound, the largest valid payloads,
//! and decoders fed arbitrary bytes.

use std::collections::BTreeMap;

use proptest::prelude::*;
use swarm_queue_client::limits::*;
use swarm_queue_client::payload::sanitize_message;
use swarm_queue_client::*;

fn agent(n: &str) -> AgentName {
    AgentName::new(n).unwrap()
}

fn spec(image: &str) -> AgentSpec {
    AgentSpec {
        image: Some(image.into()),
        ..Default::default()
    }
}

#[test]
fn design_example_declaration_decodes() {
    let json = br#"{
      "schema": 1,
      "agents": {
        "mail-bot": {
          "image": "local/mail-bot:1.4",
          "command": ["mail-bot", "--serve"],
          "env": { "LOG": "info" },
          "power": "up",
          "memory_mb": 256,
          "cpus": 0.5,
          "credentials": ["smtp"]
        }
      }
    }"#;
    let d = decode::<Declaration>(json).unwrap();
    assert!(d.warnings.is_empty());
    let s = &d.value.agents[&agent("mail-bot")];
    assert_eq!(s.memory_mb, Some(256));
    assert_eq!(s.credentials[0].as_str(), "smtp");
}

#[test]
fn design_example_status_decodes() {
    let json = br#"{
      "schema": 1, "hive": "alpha", "ready": true, "state": "ok",
      "warnings": [{ "key": "swarm_status_publish", "level": "warn", "message": "..." }],
      "converged_revision": 17,
      "agents": { "mail-bot": { "wanted": "up", "observed": "running", "spec": "sha256:ab",
                  "last_job": { "id": 42, "kind": "first_deploy", "state": "done" } } },
      "xkey": "XABC", "version": "0.1.0"
    }"#;
    let r = decode::<HiveStatus>(json).unwrap().value;
    assert_eq!(r.converged_revision, Some(17));
    assert_eq!(r.state, HiveState::Ok);
}

#[test]
fn unknown_fields_are_ignored() {
    let d = decode::<DeployRequest>(br#"{"schema":1,"agent":"x","future":{"a":1}}"#).unwrap();
    assert_eq!(d.value.agent.as_str(), "x");
}

#[test]
fn missing_required_fields_are_errors() {
    for (bytes, field) in [
        (&br#"{"agent":"x"}"#[..], "schema"),
        (br#"{"schema":1}"#, "agent"),
    ] {
        let e = decode::<DeployRequest>(bytes).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
        assert!(e.starts_with("deploy request"), "{e}");
    }
    // A declaration without `agents` is never "nothing is wanted".
    let e = decode::<Declaration>(br#"{"schema":1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("agents"), "{e}");
}

#[test]
fn explicit_empty_declaration_is_valid() {
    let d = decode::<Declaration>(br#"{"schema":1,"agents":{}}"#).unwrap();
    assert!(d.value.agents.is_empty());
}

#[test]
fn newer_schema_warns_or_says_it_is_newer() {
    let d = decode::<DeployRequest>(br#"{"schema":2,"agent":"x"}"#).unwrap();
    assert_eq!(d.warnings.len(), 1);
    assert!(d.warnings[0].contains("schema 2"), "{:?}", d.warnings);
    let e = decode::<DeployRequest>(br#"{"schema":3,"target":"x"}"#).unwrap_err();
    assert!(
        matches!(e, DecodeError::NewerSchema { found: 3, .. }),
        "{e}"
    );
    let e = decode::<DeployRequest>(br#"{"schema":0,"agent":"x"}"#).unwrap_err();
    assert!(matches!(e, DecodeError::ZeroSchema { .. }), "{e}");
}

#[test]
fn bad_names_in_payloads_are_refused_with_the_value() {
    let e = decode::<DeployRequest>(br#"{"schema":1,"agent":"a.b"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"a.b\""), "{e}");
    let e = decode::<Declaration>(br#"{"schema":1,"agents":{"Bad Name":{"image":"x"}}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Bad Name"), "{e}");
}

#[test]
fn agent_spec_rules() {
    let a = agent("a");
    let cases: Vec<(AgentSpec, &str)> = vec![
        (AgentSpec::default(), "neither image nor build"),
        (spec("has space"), "not an image reference"),
        (
            spec(&"i".repeat(MAX_IMAGE_LEN + 1)),
            "agents.a.image is 256 bytes",
        ),
        (
            AgentSpec {
                command: Some(vec!["x".into(); MAX_COMMAND_ARGS + 1]),
                ..spec("i")
            },
            "command has 33 entries",
        ),
        (
            AgentSpec {
                command: Some(vec!["a\u{0}b".into()]),
                ..spec("i")
            },
            "control character",
        ),
        (
            AgentSpec {
                env: [("1BAD".to_string(), "v".to_string())].into(),
                ..spec("i")
            },
            "not an environment variable name",
        ),
        (
            AgentSpec {
                env: [("K".to_string(), "v".repeat(MAX_ENV_VALUE_LEN + 1))].into(),
                ..spec("i")
            },
            "agents.a.env.K is 513 bytes",
        ),
        (
            AgentSpec {
                env: (0..=MAX_ENV_VARS)
                    .map(|i| (format!("K{i}"), "v".into()))
                    .collect(),
                ..spec("i")
            },
            "env has 33 entries",
        ),
        (
            AgentSpec {
                memory_mb: Some(1),
                ..spec("i")
            },
            "memory_mb is 1",
        ),
        (
            AgentSpec {
                cpus: Some(f64::NAN),
                ..spec("i")
            },
            "cpus is NaN",
        ),
        (
            AgentSpec {
                cpus: Some(0.0),
                ..spec("i")
            },
            "cpus is 0",
        ),
        (
            AgentSpec {
                credentials: (0..=MAX_CREDENTIALS_PER_AGENT)
                    .map(|i| AccountName::new(format!("c{i}")).unwrap())
                    .collect(),
                ..spec("i")
            },
            "credentials has 17 entries",
        ),
        (
            AgentSpec {
                image: None,
                build: Some(BuildSpec {
                    context: " ".into(),
                    git_ref: None,
                    dockerfile: None,
                }),
                ..Default::default()
            },
            "build.context is empty",
        ),
    ];
    for (s, want) in cases {
        let e = s.validate(&a).unwrap_err().to_string();
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
    let build_only = AgentSpec {
        image: None,
        build: Some(BuildSpec {
            context: "/srv/ctx".into(),
            git_ref: Some("main".into()),
            dockerfile: None,
        }),
        ..Default::default()
    };
    build_only.validate(&a).unwrap();
}

#[test]
fn an_agents_min_running_secs_is_bounded_like_the_hives() {
    let a = agent("web");
    for ok in [0, 3, MAX_MIN_RUNNING_SECS] {
        let s = AgentSpec {
            min_running_secs: Some(ok),
            ..spec("i")
        };
        s.validate(&a)
            .unwrap_or_else(|e| panic!("min_running_secs = {ok} refused: {e}"));
    }
    let too_long = AgentSpec {
        min_running_secs: Some(MAX_MIN_RUNNING_SECS + 1),
        ..spec("i")
    };
    let e = too_long.validate(&a).unwrap_err().to_string();
    assert_eq!(
        e,
        "agents.web.min_running_secs is 3601; it must be 0 to 3600"
    );
    let json = br#"{"schema":1,"agents":{"web":{"image":"i","min_running_secs":3}}}"#;
    let d = decode::<Declaration>(json).unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.value.agents[&a].min_running_secs, Some(3));
    let e = decode::<Declaration>(
        br#"{"schema":1,"agents":{"web":{"image":"i","min_running_secs":-1}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("integer `-1`, expected u64"), "{e}");
}

#[test]
fn unknown_agent_fields_are_named_in_a_warning_and_kept() {
    // What an older reader sees of a newer writer's field: a warning
    // naming it, never silence; and a re-write (a rollback) keeps it.
    let json = br#"{"schema":1,"agents":{"web":{"image":"i","gpus":2,"min_running_secs":3},"db":{"image":"d"}}}"#;
    let d = decode::<Declaration>(json).unwrap();
    assert_eq!(
        d.warnings,
        ["declaration has fields this build does not know, which it ignores: agents.web.gpus"]
    );
    let web = &d.value.agents[&agent("web")];
    assert_eq!(web.unknown["gpus"], 2);
    assert_eq!(
        web.spec_hash(),
        spec("i").spec_hash(),
        "unknown fields are not hashed"
    );
    let again = decode::<Declaration>(&encode(&d.value).unwrap()).unwrap();
    assert_eq!(again.value, d.value);
    assert_eq!(again.warnings, d.warnings);
    // Found by the fuzzer: a long number is read back as the same number.
    let json = br#"{"schema":1,"agents":{"db":{"image":"d","x":11111111110000000000008969439285850552547}}}"#;
    let d = decode::<Declaration>(json).unwrap().value;
    assert_eq!(
        decode::<Declaration>(&encode(&d).unwrap()).unwrap().value,
        d
    );

    let many: serde_json::Map<String, serde_json::Value> = (0..20)
        .map(|i| (format!("f{i:02}\u{7}"), serde_json::Value::from(i)))
        .chain([("image".to_string(), "i".into())])
        .collect();
    let json = serde_json::json!({ "schema": 1, "agents": { "web": many } }).to_string();
    let w = decode::<Declaration>(json.as_bytes()).unwrap().warnings;
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].ends_with("agents.web.f07? and 12 more"), "{w:?}");
    assert!(!w[0].contains("f08"), "{w:?}");
}

#[test]
fn too_many_agents_is_refused() {
    let agents: BTreeMap<_, _> = (0..=MAX_AGENTS_PER_HIVE)
        .map(|i| (agent(&format!("a{i}")), spec("img")))
        .collect();
    let e = encode(&Declaration::new(agents)).unwrap_err().to_string();
    assert!(
        e.contains(&format!("agents has {} entries", MAX_AGENTS_PER_HIVE + 1)),
        "{e}"
    );
}

#[test]
fn oversized_bytes_are_refused_before_parsing() {
    let big = vec![b' '; MAX_VALUE_BYTES + 1];
    let e = decode::<Declaration>(&big).unwrap_err();
    assert!(matches!(e, DecodeError::TooLarge { .. }), "{e}");
}

#[test]
fn spec_hash_ignores_power_and_tracks_everything_else() {
    let base = AgentSpec {
        env: [("A".to_string(), "1".to_string())].into(),
        ..spec("img:1")
    };
    let h = base.spec_hash();
    assert!(h.starts_with("sha256:") && h.len() == 71, "{h}");
    let powered = AgentSpec {
        power: Some(Power::Down),
        ..base.clone()
    };
    assert_eq!(powered.spec_hash(), h);
    let changed = AgentSpec {
        image: Some("img:2".into()),
        ..base.clone()
    };
    assert_ne!(changed.spec_hash(), h);
    let env_changed = AgentSpec {
        env: [("A".to_string(), "2".to_string())].into(),
        ..base
    };
    assert_ne!(env_changed.spec_hash(), h);
}

#[test]
fn spec_hash_leaves_out_min_running_secs_and_is_what_it_was_without_it() {
    // Pinned: the hash of `{"image":"img:1"}`, as every build before
    // `min_running_secs` computed it, so adding the field rebuilt nothing.
    let plain = spec("img:1");
    assert_eq!(
        plain.spec_hash(),
        "sha256:164002bcef1d769a57c2666ed29b4ff8facedda7ebe76cf3676f8d2f2785c14d"
    );
    let judged_longer = AgentSpec {
        min_running_secs: Some(60),
        ..plain.clone()
    };
    assert_eq!(judged_longer.spec_hash(), plain.spec_hash());
}

/// The worst-case character for JSON size: `"` escapes to two bytes.
fn worst(n: usize) -> String {
    "\"".repeat(n)
}

/// Every field of a `HiveStatus` at its bound, with the worst escaping.
fn largest_status() -> HiveStatus {
    let agents = (0..MAX_AGENTS_PER_HIVE)
        .map(|i| {
            let name = format!("{i:0>63}");
            (
                agent(&name),
                AgentStatus {
                    wanted: Power::Down,
                    observed: Observed::Missing,
                    spec: Some(worst(MAX_SHORT_LEN)),
                    declared_spec: Some(worst(MAX_SHORT_LEN)),
                    image_progress: Some(worst(MAX_SHORT_LEN)),
                    image_digest: Some(worst(MAX_SHORT_LEN)),
                    health: Some(worst(MAX_SHORT_LEN)),
                    last_job: Some(JobSummary {
                        id: u64::MAX,
                        kind: worst(MAX_SHORT_LEN),
                        state: worst(MAX_SHORT_LEN),
                        error: Some(worst(MAX_MESSAGE_LEN)),
                    }),
                    retry: Some(RetryStatus {
                        step: Some(worst(MAX_SHORT_LEN)),
                        attempts: u32::MAX,
                        next_try_in_secs: u64::MAX,
                        error: Some(worst(MAX_MESSAGE_LEN)),
                    }),
                    exits: Some(ExitReport {
                        code: Some(255),
                        oom: true,
                        count: MAX_EXIT_COUNT,
                        first: Some(MAX_EXIT_SECS),
                        since: Some(MAX_EXIT_SECS),
                        next_in: Some(MAX_EXIT_SECS),
                    }),
                    unsettled: Some(Unsettled::Unhealthy),
                },
            )
        })
        .collect();
    HiveStatus {
        schema: SCHEMA_VERSION,
        hive: HiveName::new("h".repeat(63)).unwrap(),
        ready: false,
        state: HiveState::Degraded,
        warnings: (0..MAX_WARNINGS)
            .map(|_| Warning {
                key: worst(MAX_WARNING_KEY_LEN),
                level: Level::Error,
                message: worst(MAX_MESSAGE_LEN),
            })
            .collect(),
        converged_revision: Some(u64::MAX),
        seen_revision: Some(u64::MAX),
        agents,
        xkey: Some(worst(MAX_SHORT_LEN)),
        version: worst(MAX_SHORT_LEN),
        agent_spec: Some(u32::MAX),
    }
}

#[test]
fn largest_valid_status_fits_server_payload() {
    // Every field of every one of MAX_AGENTS_PER_HIVE agents at its bound:
    // the hive publishes pretty JSON when it fits and compact otherwise
    // (`encode_pretty`), so the compact form is the one that must fit.
    let r = largest_status();
    assert_eq!(r.agents.len(), MAX_AGENTS_PER_HIVE);
    let compact = encode(&r).expect("the largest status is valid and fits");
    let published = encode_pretty(&r).expect("the largest status is valid");
    println!(
        "largest valid status: {} agents, {} bytes compact, {} as published (limit {MAX_VALUE_BYTES}, server {SERVER_MAX_PAYLOAD})",
        r.agents.len(),
        compact.len(),
        published.len()
    );
    assert!(compact.len() <= MAX_VALUE_BYTES);
    assert!(published.len() <= MAX_VALUE_BYTES);
    assert!(published.len() < SERVER_MAX_PAYLOAD);
    let back = decode::<HiveStatus>(&published).unwrap().value;
    assert_eq!(back, r);
}

/// Every per-field bound at its maximum, worst escaping, for `n` agents.
fn fat_spec() -> AgentSpec {
    AgentSpec {
        image: Some("i".repeat(MAX_IMAGE_LEN)),
        build: Some(BuildSpec {
            context: worst(MAX_BUILD_FIELD_LEN),
            git_ref: Some(worst(MAX_BUILD_FIELD_LEN)),
            dockerfile: Some(worst(MAX_BUILD_FIELD_LEN)),
        }),
        command: Some(vec![worst(MAX_ARG_LEN); MAX_COMMAND_ARGS]),
        env: (0..MAX_ENV_VARS)
            .map(|i| (format!("K{i:_>63}"), worst(MAX_ENV_VALUE_LEN)))
            .collect(),
        power: Some(Power::Down),
        memory_mb: Some(MAX_MEMORY_MB),
        cpus: Some(MAX_CPUS),
        credentials: (0..MAX_CREDENTIALS_PER_AGENT)
            .map(|i| AccountName::new(format!("{i:0>63}")).unwrap())
            .collect(),
        health: Some(HealthSpec {
            command: vec![worst(MAX_HEALTH_ARG_LEN); MAX_HEALTH_ARGS],
            interval_secs: Some(payload::MAX_HEALTH_SECS),
            timeout_secs: Some(payload::MAX_HEALTH_SECS),
            retries: Some(100),
            start_period_secs: Some(payload::MAX_HEALTH_SECS),
        }),
        min_running_secs: Some(MAX_MIN_RUNNING_SECS),
        user: Some("u".repeat(64)),
        stop_grace_secs: Some(payload::MAX_STOP_GRACE_SECS),
        // Ports are left out: a host port is one agent's, so the largest
        // declaration cannot give every agent the same ones.
        ports: Vec::new(),
        volumes: (0..16)
            .map(|i| swarm_queue_client::VolumeSpec {
                name: None,
                host: Some(format!("/{i:a>254}")),
                target: format!("/{i:b>254}"),
                rw: Some(true),
            })
            .collect(),
        network: Some(swarm_queue_client::ObjectName::new("n".repeat(63)).unwrap()),
        restart_on_unhealthy: Some(payload::MAX_UNHEALTHY_CHECKS),
        on_credential_change: Some(swarm_queue_client::OnCredentialChange::Restart),
        unknown: BTreeMap::new(),
    }
}

#[test]
fn largest_valid_declaration_fits_server_payload() {
    // With every field at its own bound, the maximum of agents would not fit: the
    // value-bytes bound is what limits a declaration, and it is enforced.
    let all: BTreeMap<_, _> = (0..MAX_AGENTS_PER_HIVE)
        .map(|i| (agent(&format!("{i:0>63}")), fat_spec()))
        .collect();
    let e = encode(&Declaration::new(all)).unwrap_err().to_string();
    assert!(e.contains("over the 524288-byte limit"), "{e}");

    // The largest that passes: add maximal agents while encode accepts.
    let mut agents = BTreeMap::new();
    let mut last_ok = 0;
    for i in 0..MAX_AGENTS_PER_HIVE {
        agents.insert(agent(&format!("{i:0>63}")), fat_spec());
        match encode(&Declaration::new(agents.clone())) {
            Ok(bytes) => last_ok = bytes.len(),
            Err(_) => break,
        }
    }
    println!(
        "largest valid declaration: {last_ok} bytes ({} maximal agents; limit {MAX_VALUE_BYTES}, server {SERVER_MAX_PAYLOAD})",
        agents.len() - 1
    );
    assert!(last_ok > MAX_VALUE_BYTES / 2);
    assert!(last_ok <= MAX_VALUE_BYTES);
    assert!(last_ok < SERVER_MAX_PAYLOAD);

    // And the maximum of small agents is fine.
    let small: BTreeMap<_, _> = (0..MAX_AGENTS_PER_HIVE)
        .map(|i| (agent(&format!("a{i}")), spec("registry.local/img:1")))
        .collect();
    encode(&Declaration::new(small)).unwrap();
}

/// A large agent as an operator would write one: a long registry path
/// pinned by digest, a command line, a dozen settings in the environment,
/// a few credentials, limits and a health check.
fn realistic_large_spec(i: usize) -> AgentSpec {
    AgentSpec {
        image: Some(format!(
            "registry.example.internal:5000/platform/agents/worker-{i}@sha256:{}",
            "0123456789abcdef".repeat(4)
        )),
        build: None,
        command: Some(
            [
                "/usr/local/bin/agent",
                "--config=/state/agent.toml",
                "--log-format=json",
                "--listen=0.0.0.0:8080",
                "--queue=hyperhive.work.agents.incoming",
                "--max-in-flight=64",
            ]
            .map(String::from)
            .to_vec(),
        ),
        env: (0..12)
            .map(|k| {
                (
                    format!("AGENT_SETTING_{k}"),
                    format!("value-{k}-for-agent-{i}-{}", "x".repeat(80)),
                )
            })
            .collect(),
        power: Some(Power::Up),
        memory_mb: Some(2048),
        cpus: Some(1.5),
        credentials: (0..4)
            .map(|k| AccountName::new(format!("account-{k}")).unwrap())
            .collect(),
        health: Some(HealthSpec {
            command: ["/bin/sh", "-c", "wget -q -O- http://127.0.0.1:8080/healthz"]
                .map(String::from)
                .to_vec(),
            interval_secs: Some(10),
            timeout_secs: Some(3),
            retries: Some(3),
            start_period_secs: Some(30),
        }),
        ..Default::default()
    }
}

#[test]
fn declaration_of_the_most_agents_fits_value_bound() {
    // The agent bound is usable: MAX_AGENTS_PER_HIVE realistic but large
    // agents with 63-byte names encode under the value bound, and one more
    // agent is refused by the count, not the size.
    let agents: BTreeMap<_, _> = (0..MAX_AGENTS_PER_HIVE)
        .map(|i| (agent(&format!("{i:0>63}")), realistic_large_spec(i)))
        .collect();
    let bytes = encode(&Declaration::new(agents.clone())).expect("fits the value bound");
    println!(
        "declaration of {MAX_AGENTS_PER_HIVE} realistic large agents: {} bytes ({} per agent; limit {MAX_VALUE_BYTES})",
        bytes.len(),
        bytes.len() / MAX_AGENTS_PER_HIVE
    );
    assert!(bytes.len() <= MAX_VALUE_BYTES);
    let back = decode::<Declaration>(&bytes).unwrap().value;
    assert_eq!(back.agents.len(), MAX_AGENTS_PER_HIVE);

    let mut more = agents;
    more.insert(agent("one-too-many"), realistic_large_spec(0));
    let e = encode(&Declaration::new(more)).unwrap_err().to_string();
    assert!(e.contains("entries"), "{e}");
}

#[test]
fn sanitize_makes_any_error_text_carriable() {
    let nasty = format!("line1\nline2\r\u{1b}[31m{}", "x".repeat(5000));
    let s = sanitize_message(&nasty);
    assert!(s.len() <= MAX_MESSAGE_LEN);
    assert!(!s.chars().any(char::is_control));
    Warning::new("k", Level::Warn, &nasty);
}

#[test]
fn deploy_reply_shapes() {
    assert_eq!(DeployReply::Queued { job: 42 }.encode(), br#"{"job":42}"#);
    let r = DeployReply::decode(br#"{"error":"no such agent"}"#).unwrap();
    assert_eq!(
        r,
        DeployReply::Refused {
            error: "no such agent".into()
        }
    );
    assert!(DeployReply::decode(b"{}").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoders_never_panic_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<Declaration>(&bytes);
        let _ = decode::<HiveStatus>(&bytes);
        let _ = decode::<DeployRequest>(&bytes);
        let _ = decode::<CredentialNotice>(&bytes);
        let _ = decode::<swarm_queue_client::credentials::CredentialEnvelope>(&bytes);
        let _ = DeployReply::decode(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_json_shaped_text(s in r#"\{("[a-z_]{1,8}":(-?[0-9]{1,20}|"[^"]{0,12}"|\[\]|\{\}|null|true|1e999),?){0,6}\}"#) {
        let _ = decode::<Declaration>(s.as_bytes());
        let _ = decode::<HiveStatus>(s.as_bytes());
        let _ = decode::<DeployRequest>(s.as_bytes());
    }

    #[test]
    fn names_accept_exactly_dns_labels(s in "[a-zA-Z0-9._*> -]{0,70}") {
        let ok = HiveName::new(s.clone()).is_ok();
        let b = s.as_bytes();
        let expect = !s.is_empty() && s.len() <= 63
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-' && b[b.len() - 1] != b'-';
        prop_assert_eq!(ok, expect);
    }
}

#[test]
fn agent_fields_name_every_field_of_the_spec_and_only_those() {
    // Every field set: what it writes is exactly AGENT_FIELDS. A field
    // added to AgentSpec without its name there (and AGENT_SPEC raised)
    // fails here: controllers would refuse it to every hive, or worse,
    // write it to hives that drop it.
    let full = AgentSpec {
        image: Some("i".into()),
        build: Some(swarm_queue_client::BuildSpec {
            context: "/srv/ctx".into(),
            git_ref: None,
            dockerfile: None,
        }),
        command: Some(vec!["run".into()]),
        env: [("A".to_string(), "1".to_string())].into(),
        power: Some(swarm_queue_client::Power::Up),
        memory_mb: Some(64),
        cpus: Some(0.5),
        credentials: vec![swarm_queue_client::AccountName::new("smtp").unwrap()],
        health: Some(swarm_queue_client::HealthSpec {
            command: vec!["true".into()],
            ..Default::default()
        }),
        min_running_secs: Some(3),
        user: Some("1000".into()),
        stop_grace_secs: Some(30),
        ports: vec!["8080:80".into()],
        volumes: vec![swarm_queue_client::VolumeSpec {
            name: Some(swarm_queue_client::ObjectName::new("cache").unwrap()),
            host: None,
            target: "/cache".into(),
            rw: None,
        }],
        network: Some(swarm_queue_client::ObjectName::new("none").unwrap()),
        restart_on_unhealthy: Some(3),
        on_credential_change: Some(swarm_queue_client::OnCredentialChange::Restart),
        unknown: Default::default(),
    };
    let mut set = full.set_fields();
    set.sort();
    let mut known: Vec<String> = swarm_queue_client::AGENT_FIELDS
        .iter()
        .map(|f| f.to_string())
        .collect();
    known.sort();
    assert_eq!(set, known);
    assert!(AgentSpec::default().set_fields().is_empty());
    // A hive that says nothing, or 1: the baseline; this build's or newer:
    // all of this build's fields.
    use swarm_queue_client::{agent_fields_of, AGENT_SPEC, BASELINE_AGENT_FIELDS};
    assert_eq!(agent_fields_of(None), BASELINE_AGENT_FIELDS);
    assert_eq!(agent_fields_of(Some(1)), BASELINE_AGENT_FIELDS);
    assert_eq!(agent_fields_of(Some(2)).last(), Some(&"min_running_secs"));
    assert_eq!(
        agent_fields_of(Some(2)).len(),
        BASELINE_AGENT_FIELDS.len() + 1
    );
    assert_eq!(
        agent_fields_of(Some(AGENT_SPEC)),
        swarm_queue_client::AGENT_FIELDS
    );
    assert_eq!(
        agent_fields_of(Some(AGENT_SPEC + 7)),
        swarm_queue_client::AGENT_FIELDS
    );
    assert!(!BASELINE_AGENT_FIELDS.contains(&"min_running_secs"));
    assert_eq!(BASELINE_AGENT_FIELDS.first(), Some(&"image"));
    assert_eq!(BASELINE_AGENT_FIELDS.last(), Some(&"health"));
}
