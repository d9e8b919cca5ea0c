//! Spec hashes are a contract: a hive compares the hash of the declared
//! spec with the one on its container's label, and rebuilds on any
//! difference. A build that hashes a spec differently rebuilds every agent
//! of the fleet the moment it is installed. So the hash of each of these
//! specs (one per field, and all fields together) is pinned here.

use swarm_queue_client::{
    AccountName, AgentSpec, BuildSpec, HealthSpec, ObjectName, OnCredentialChange, Power,
    VolumeSpec,
};

fn base() -> AgentSpec {
    AgentSpec {
        image: Some("registry.example/bot:1.4".into()),
        ..Default::default()
    }
}

/// Each spec with what it sets.
fn specs() -> Vec<(&'static str, AgentSpec)> {
    let spec2 = AgentSpec {
        image: None,
        build: Some(BuildSpec {
            context: "https://git.example/bot.git".into(),
            git_ref: Some("v1.4".into()),
            dockerfile: Some("docker/Dockerfile".into()),
        }),
        command: Some(vec!["/bin/bot".into(), "--serve".into()]),
        env: [
            ("LOG".to_string(), "debug".to_string()),
            ("MODE".to_string(), "".to_string()),
        ]
        .into(),
        power: Some(Power::Down),
        memory_mb: Some(256),
        cpus: Some(1.5),
        credentials: vec![
            AccountName::new("smtp").unwrap(),
            AccountName::new("imap").unwrap(),
        ],
        health: Some(HealthSpec {
            command: vec!["/bin/bot".into(), "--check".into()],
            interval_secs: Some(10),
            timeout_secs: Some(3),
            retries: Some(4),
            start_period_secs: Some(20),
        }),
        min_running_secs: Some(30),
        ..Default::default()
    };
    let all = AgentSpec {
        user: Some("1000:1000".into()),
        stop_grace_secs: Some(120),
        ports: vec!["8080:80/tcp".into(), "127.0.0.1:5353:53/udp".into()],
        volumes: vec![
            VolumeSpec {
                name: Some(ObjectName::new("cache").unwrap()),
                host: None,
                target: "/cache".into(),
                rw: None,
            },
            VolumeSpec {
                name: None,
                host: Some("/srv/data/bot".into()),
                target: "/data".into(),
                rw: Some(true),
            },
        ],
        network: Some(ObjectName::new("none").unwrap()),
        restart_on_unhealthy: Some(3),
        on_credential_change: Some(OnCredentialChange::Restart),
        ..spec2.clone()
    };
    vec![
        ("image", base()),
        (
            "build",
            AgentSpec {
                image: None,
                build: all.build.clone(),
                ..Default::default()
            },
        ),
        (
            "command",
            AgentSpec {
                command: all.command.clone(),
                ..base()
            },
        ),
        (
            "env",
            AgentSpec {
                env: all.env.clone(),
                ..base()
            },
        ),
        (
            "power",
            AgentSpec {
                power: Some(Power::Down),
                ..base()
            },
        ),
        (
            "memory_mb",
            AgentSpec {
                memory_mb: Some(256),
                ..base()
            },
        ),
        (
            "cpus",
            AgentSpec {
                cpus: Some(1.5),
                ..base()
            },
        ),
        (
            "credentials",
            AgentSpec {
                credentials: all.credentials.clone(),
                ..base()
            },
        ),
        (
            "health",
            AgentSpec {
                health: all.health.clone(),
                ..base()
            },
        ),
        (
            "min_running_secs",
            AgentSpec {
                min_running_secs: Some(30),
                ..base()
            },
        ),
        (
            "user",
            AgentSpec {
                user: all.user.clone(),
                ..base()
            },
        ),
        (
            "stop_grace_secs",
            AgentSpec {
                stop_grace_secs: all.stop_grace_secs,
                ..base()
            },
        ),
        (
            "ports",
            AgentSpec {
                ports: all.ports.clone(),
                ..base()
            },
        ),
        (
            "volumes",
            AgentSpec {
                volumes: all.volumes.clone(),
                ..base()
            },
        ),
        (
            "network",
            AgentSpec {
                network: all.network.clone(),
                ..base()
            },
        ),
        (
            "restart_on_unhealthy",
            AgentSpec {
                restart_on_unhealthy: Some(3),
                ..base()
            },
        ),
        (
            "on_credential_change",
            AgentSpec {
                on_credential_change: Some(OnCredentialChange::Restart),
                ..base()
            },
        ),
        // Every field of agent spec 2 (the release before spec 3): its
        // hash is what it was then.
        ("all of spec 2", spec2),
        ("all", all),
    ]
}

/// The hashes this release computes. Never edit one to make the test pass:
/// a changed hash rebuilds every agent with that spec on upgrade.
const PINNED: &[(&str, &str)] = &[
    (
        "image",
        "sha256:ed157a0fcfa83bc890a1af1fa9077b51e7d78fb3ac76578183dc0c4a068a0413",
    ),
    (
        "build",
        "sha256:52f6190c77b00683149591139ad1e5289127019f18684b2573a773007f997009",
    ),
    (
        "command",
        "sha256:95ffd667e4cdb55adb2bf141e28cdbbeba849b0f0c0b0173ea25f78372866932",
    ),
    (
        "env",
        "sha256:7332ee8a1f1975008b78326dfb372725e93cc923b726611a6157070c69db62c7",
    ),
    (
        "power",
        "sha256:ed157a0fcfa83bc890a1af1fa9077b51e7d78fb3ac76578183dc0c4a068a0413",
    ),
    (
        "memory_mb",
        "sha256:02a37f89c7ced1d68eb004fbf5ab45a271add051b79d632ce71fda9cbe6fbdc7",
    ),
    (
        "cpus",
        "sha256:11b289e5c983df6895dba0c80902cc9aa76871fbba937afa60642d62bde199ae",
    ),
    (
        "credentials",
        "sha256:113006590c4517778768313c6aa7178f0706840f70748ea383c0f41d47fa6e10",
    ),
    (
        "health",
        "sha256:9f66a7cd356c146c43ddbf1add405539b2b3b40fb20e4cf8d385e21d1c7b8313",
    ),
    (
        "min_running_secs",
        "sha256:ed157a0fcfa83bc890a1af1fa9077b51e7d78fb3ac76578183dc0c4a068a0413",
    ),
    (
        "user",
        "sha256:061b6030b3bb0d67a6743a9aa1ccf678d24fefaabe794df897337cfa0b1a8b60",
    ),
    (
        "stop_grace_secs",
        "sha256:2520b0c13afa53f0d36e717558e484f5ed40e6030dc354ef982ccd6b185829a4",
    ),
    (
        "ports",
        "sha256:6dd14f70d4544ddf302fa09bfbae9dc89d15a8e4f1306298ff38d3b353486087",
    ),
    (
        "volumes",
        "sha256:f0fcbdacafd61bfb2802d1d9b7737c4bcd4a16c871270b9d0adbb3acf2e52a34",
    ),
    (
        "network",
        "sha256:1cb33e4d77bf2497b53df0869b9c1adf30663a66b4abbbebe25de260f4139730",
    ),
    (
        "restart_on_unhealthy",
        "sha256:ed157a0fcfa83bc890a1af1fa9077b51e7d78fb3ac76578183dc0c4a068a0413",
    ),
    (
        "on_credential_change",
        "sha256:ed157a0fcfa83bc890a1af1fa9077b51e7d78fb3ac76578183dc0c4a068a0413",
    ),
    (
        "all of spec 2",
        "sha256:5b4b7f6d6f71f5bc4a76bb91c73a6981ab782de38d4c7ae3cae9a75181a873e3",
    ),
    (
        "all",
        "sha256:9cfdf8ba6b9fb11b1fe226d6b34c05b5d7262b2c30039821cefd4ac87e9b5e60",
    ),
];

#[test]
fn spec_hashes_are_what_they_were() {
    let got: Vec<(&str, String)> = specs()
        .into_iter()
        .map(|(what, spec)| (what, spec.spec_hash()))
        .collect();
    for (what, hash) in &got {
        println!("    (\"{what}\", \"{hash}\"),");
    }
    assert_eq!(got.len(), PINNED.len(), "a spec without a pinned hash");
    // Power, min_running_secs, restart_on_unhealthy and
    // on_credential_change are not hashed: a start, a stop or a change of
    // judgement is no rebuild.
    let hash_of = |w: &str| &got.iter().find(|(what, _)| *what == w).unwrap().1;
    assert_eq!(hash_of("power"), hash_of("image"));
    assert_eq!(hash_of("min_running_secs"), hash_of("image"));
    assert_eq!(hash_of("restart_on_unhealthy"), hash_of("image"));
    assert_eq!(hash_of("on_credential_change"), hash_of("image"));
    for ((what, hash), (pinned_what, pinned)) in got.iter().zip(PINNED) {
        assert_eq!(what, pinned_what);
        assert_eq!(
            hash, pinned,
            "the spec hash of a spec with {what} changed: installing this build would \
             rebuild every agent whose spec sets {what}, on every hive at once. Keep the \
             hash as it was (hash a new field only when it is set)"
        );
    }
}

/// What `write_sha256_text` writes, `read_sha256_text` reads back; any
/// other text (a changed digit, uppercase, a prefix or length off) is none.
#[test]
fn a_sha256_text_reads_back_as_its_digest_and_nothing_else_does() {
    use swarm_queue_client::payload::{read_sha256_text, write_sha256_text};
    for seed in 0u8..=255 {
        let digest: [u8; 32] =
            std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8 * 7));
        let mut text = String::new();
        write_sha256_text(&digest, &mut text).unwrap();
        assert_eq!(read_sha256_text(&text), Some(digest), "{text}");
        assert_eq!(read_sha256_text(&text.to_uppercase()), None);
        assert_eq!(
            read_sha256_text(&text.replacen("sha256:", "sha512:", 1)),
            None
        );
        assert_eq!(read_sha256_text(&text[..text.len() - 1]), None);
        assert_eq!(read_sha256_text(&format!("{text}0")), None);
        assert_eq!(
            read_sha256_text(&format!("{}g", &text[..text.len() - 1])),
            None
        );
    }
}
