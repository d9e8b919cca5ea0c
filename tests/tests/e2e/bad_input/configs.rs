//! The hive's config file (through the real `hive --check-config`) and
//! both daemons' interval bounds.

use super::*;

#[test]
fn the_hive_config_refuses_bad_names_and_seed_files() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_seed = dir.path().join("not-a-seed");
    std::fs::write(&not_a_seed, "SAsomething-that-is-not-a-user-seed\n").unwrap();
    let mut cases: Vec<(String, String, Vec<String>)> = BAD_NAMES
        .iter()
        .map(|(bad, why)| {
            (
                format!("name {bad:?}"),
                format!("name = {bad:?}\n"),
                vec![
                    format!("{bad:?}"),
                    why.to_string(),
                    "invalid hive name".into(),
                ],
            )
        })
        .collect();
    cases.push((
        "nkey seed file that holds no user seed".into(),
        format!(
            "name = \"alpha\"\n[nats]\nurl = \"nats://127.0.0.1:4222\"\nnkey_seed_file = {:?}\n",
            not_a_seed.display().to_string()
        ),
        vec!["nkey_seed_file".into(), "user seed".into()],
    ));
    let open_token = dir.path().join("open.token");
    std::fs::write(&open_token, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&open_token, std::fs::Permissions::from_mode(0o640)).unwrap();
    cases.push((
        "API token file group can read".into(),
        format!("api_token_file = {:?}\n", open_token.display().to_string()),
        vec![format!(
            "api_token_file {} has mode 0640",
            open_token.display()
        )],
    ));
    cases.push((
        "relative build root".into(),
        "build_roots = [\"srv/ctx\"]\n".into(),
        vec!["build_roots: \"srv/ctx\" must be an absolute path".into()],
    ));
    cases.push((
        "a zero context cap".into(),
        "build_context_max_bytes = 0\n".into(),
        vec!["build_context_max_bytes = 0".into()],
    ));
    cases.push((
        "truncated config".into(),
        "name = \"alpha\"\n[nats\n".into(),
        vec!["hive.toml".into()],
    ));
    for (case, text, wants) in cases {
        let path = dir.path().join("hive.toml");
        std::fs::write(&path, &text).unwrap();
        let out = Command::new(hive_bin())
            .arg("--check-config")
            .arg(&path)
            .output()
            .unwrap();
        let said = said(&out);
        assert_eq!(out.status.code(), Some(64), "{case}: {said}");
        for want in &wants {
            assert!(
                said.contains(want.as_str()),
                "{case}: {said:?} does not say {want:?}"
            );
        }
        assert!(
            !said.contains("SAsomething"),
            "{case}: the seed file was echoed: {said}"
        );
    }
}

/// Intervals past their upper bounds, in both configs: exit 64 naming the
/// field, so no `Instant + Duration` in the daemons can overflow; and an
/// `http_allowed_hosts` entry that is no plain host name.
#[test]
fn both_configs_refuse_intervals_past_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let huge = i64::MAX;
    let cases = [
        (
            hive_bin(),
            "publish_interval_secs = 3601\n".to_string(),
            "publish_interval_secs = 3601: it must be at most 3600",
        ),
        (
            hive_bin(),
            format!("reconcile_interval_secs = {huge}\n"),
            "reconcile_interval_secs",
        ),
        (
            hive_bin(),
            "orphan_grace_secs = 2592001\n".to_string(),
            "orphan_grace_secs = 2592001: it must be at most 2592000",
        ),
        (
            hyperhive_tests::controller_bin(),
            format!("stale_after_secs = {huge}\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n"),
            "stale_after_secs = 9223372036854775807: it must be at most 604800",
        ),
        (
            hive_bin(),
            "http_allowed_hosts = [\"metrics.internal:9100\"]\n".to_string(),
            "http_allowed_hosts entry \"metrics.internal:9100\" is not a host name",
        ),
        (
            hyperhive_tests::controller_bin(),
            "http_allowed_hosts = [\"*.example\"]\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n"
                .to_string(),
            "http_allowed_hosts entry \"*.example\" is not a host name",
        ),
    ];
    for (bin, text, want) in cases {
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &text).unwrap();
        let out = Command::new(&bin)
            .arg("--check-config")
            .arg(&path)
            .output()
            .unwrap();
        let said = said(&out);
        assert_eq!(out.status.code(), Some(64), "{text}: {said}");
        assert!(
            said.contains(want),
            "{text}: {said:?} does not say {want:?}"
        );
    }
}

/// `HYPERHIVE_ALLOCATOR` names one of the controller's two allocators; any
/// other value is a usage error that names it, before anything is done.
#[test]
fn the_controller_takes_either_allocator_and_refuses_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = offline_controller_config(dir.path());
    let check = |choice: Option<&str>| {
        let mut cmd = Command::new(hyperhive_tests::controller_bin());
        cmd.arg("--check-config").arg(&path);
        match choice {
            Some(c) => cmd.env("HYPERHIVE_ALLOCATOR", c),
            None => cmd.env_remove("HYPERHIVE_ALLOCATOR"),
        };
        cmd.output().unwrap()
    };
    for choice in [None, Some("split"), Some("system")] {
        let out = check(choice);
        assert_eq!(out.status.code(), Some(0), "{choice:?}: {}", said(&out));
    }
    for bad in ["mimalloc", "System", ""] {
        let out = check(Some(bad));
        let said = said(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {said}");
        assert!(
            said.contains(&format!("HYPERHIVE_ALLOCATOR={bad:?}")) && said.contains("\"system\""),
            "{bad:?}: {said:?}"
        );
    }
}
