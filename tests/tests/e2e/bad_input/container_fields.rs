//! The agent fields of spec 3 that shape a container, each bad value
//! refused by name: by the payload decoder every hive reads a declaration
//! with, and by the real `swarm-controller` reading a swarm file (with the
//! agent's line), before anything is written.

use super::*;

/// Each agent's extra fields, and what the refusal must say.
const CASES: &[(&str, &str, &[&str])] = &[
    (
        "user",
        r#""user":"root; rm""#,
        &["agents.web.user", "USER:GROUP"],
    ),
    (
        "user",
        r#""user":"1000:""#,
        &["agents.web.user", "\"1000:\""],
    ),
    (
        "stop_grace_secs",
        r#""stop_grace_secs":3601"#,
        &["agents.web.stop_grace_secs is 3601", "0 to 3600"],
    ),
    (
        "ports",
        r#""ports":["8080"]"#,
        &["agents.web.ports[0]", "\"8080\"", "HOST:CONTAINER"],
    ),
    (
        "ports",
        r#""ports":["70000:80"]"#,
        &["agents.web.ports[0]", "\"70000:80\""],
    ),
    (
        "ports",
        r#""ports":["8080:80/sctp"]"#,
        &["agents.web.ports[0]", "/tcp|/udp"],
    ),
    (
        "ports",
        r#""ports":["localhost:8080:80"]"#,
        &["agents.web.ports[0]", "localhost"],
    ),
    (
        "ports",
        r#""ports":["8080:80","8080:81"]"#,
        &["agents.web.ports", "8080/tcp twice"],
    ),
    (
        "network",
        r#""network":"host""#,
        &["agents.web.network", "\"host\"", "never"],
    ),
    (
        "network",
        r#""network":"Bridge""#,
        &["volume or network name", "upper-case"],
    ),
    (
        "restart_on_unhealthy",
        r#""restart_on_unhealthy":0"#,
        &["agents.web.restart_on_unhealthy = 0", "between 1 and 100"],
    ),
    (
        "volumes",
        r#""volumes":[{"target":"/x"}]"#,
        &["agents.web.volumes[0]", "exactly one of name"],
    ),
    (
        "volumes",
        r#""volumes":[{"name":"c","host":"/srv/c","target":"/x"}]"#,
        &["exactly one of name"],
    ),
    (
        "volumes",
        r#""volumes":[{"name":"c","target":"data"}]"#,
        &["agents.web.volumes[0].target", "absolute path"],
    ),
    (
        "volumes",
        r#""volumes":[{"name":"c","target":"/state/x"}]"#,
        &["volumes[0].target", "/state"],
    ),
    (
        "volumes",
        r#""volumes":[{"host":"/srv/../etc","target":"/x"}]"#,
        &["volumes[0].host", "'..'"],
    ),
    (
        "volumes",
        r#""volumes":[{"name":"c","target":"/x","mode":"rw"}]"#,
        &["unknown field `mode`"],
    ),
];

#[test]
fn a_declaration_with_a_bad_container_field_is_refused_naming_field_and_value() {
    for (field, extra, wants) in CASES {
        let bytes = format!(r#"{{"schema":1,"agents":{{"web":{{"image":"x",{extra}}}}}}}"#);
        let error = decode_err::<Declaration>(bytes.as_bytes());
        for want in *wants {
            assert!(
                error.contains(want),
                "{field} {extra}: {error:?} does not say {want:?}"
            );
        }
    }
    // A host port published by two agents of one declaration names both.
    let error = decode_err::<Declaration>(
        br#"{"schema":1,"agents":{"api":{"image":"x","ports":["8080:80"]},"web":{"image":"x","ports":["127.0.0.1:8080:8080/tcp"]}}}"#,
    );
    assert!(
        error.contains("host port 8080/tcp is published by both agent api and agent web"),
        "{error}"
    );
    // The good forms decode.
    decode::<Declaration>(
        br#"{"schema":1,"agents":{"web":{"image":"x","user":"1000:1000","stop_grace_secs":0,"ports":["8080:80","[::1]:53:53/udp"],"network":"none","restart_on_unhealthy":3,"volumes":[{"name":"cache","target":"/cache"},{"host":"/srv/data","target":"/data","rw":true}]}}}"#,
    )
    .unwrap();
}

/// `declare --dry-run` of a swarm file holding `text`.
fn dry_run(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = offline_controller_config(dir.path());
    let swarm = dir.path().join("swarm.toml");
    std::fs::write(&swarm, text).unwrap();
    let swarm = swarm.display().to_string();
    let (code, text) = controller(&config, &["declare", "--dry-run", &swarm]);
    println!("{text}");
    (code, text)
}

#[test]
fn a_swarm_file_with_bad_container_fields_is_refused_with_each_line() {
    let (code, text) = dry_run(
        "[hives.alpha.agents.web]\nimage = \"local/x:1\"\nports = [\"8080:80\"]\n\n\
         [hives.alpha.agents.api]\nimage = \"local/x:1\"\nports = [\"8080:81\"]\n",
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("host port 8080/tcp is published by both agent api and agent web"),
        "{text}"
    );
    let (code, text) = dry_run(
        "[hives.alpha.agents.web]\nimage = \"local/x:1\"\nstop_grace_secs = 7200\n\n\
         [hives.alpha.agents.api]\nimage = \"local/x:1\"\nnetwork = \"host\"\n",
    );
    assert_eq!(code, Some(1), "{text}");
    for want in [
        "line 1: hives.alpha.agents.web.stop_grace_secs is 7200; it must be 0 to 3600",
        "line 5: hives.alpha.agents.api.network is \"host\"",
    ] {
        assert!(text.contains(want), "{text}");
    }
}
