//! Spec hashes are a contract: a hive compares the hash of the declared
//! spec with the one on its container's label, and rebuilds on any
//! difference. A build that hashes a spec differently rebuilds every agent
//! of the fleet the moment it is installed. So the hash of each of these
//! specs (one per field, and all fields together) is pinned here.

use swarm_queue_client::{AccountName, AgentSpec, BuildSpec, HealthSpec, Power};

fn base() -> AgentSpec {
    AgentSpec {
        image: Some("registry.example/bot:1.4".into()),
        ..Default::default()
    }
}

/// Each spec with what it sets.
fn specs() -> Vec<(&'static str, AgentSpec)> {
    let all = AgentSpec {
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
        unknown: Default::default(),
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
        "all",
        "sha256:5b4b7f6d6f71f5bc4a76bb91c73a6981ab782de38d4c7ae3cae9a75181a873e3",
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
    // Power and min_running_secs are not hashed: a start, a stop or a
    // change of judgement is no rebuild.
    let hash_of = |w: &str| &got.iter().find(|(what, _)| *what == w).unwrap().1;
    assert_eq!(hash_of("power"), hash_of("image"));
    assert_eq!(hash_of("min_running_secs"), hash_of("image"));
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
