//! Per-hive values in a swarm file: a value no hive or group sets, a
//! placeholder of an unknown form and a value that makes a spec invalid,
//! each refused by the real `swarm-controller` in `declare --dry-run` and
//! in `--check-config`, naming the hive, the group and the placeholder (or
//! the line). Nothing needs a server: the file is refused before the
//! controller connects.

use super::*;

/// (case, swarm file, what the error must say).
const CASES: &[(&str, &str, &[&str])] = &[
    (
        "a value hive beta does not set",
        "[groups.web]\nselect = { role = \"web\" }\n[groups.web.agents.api]\n\
         image = \"local/api:1\"\nenv = { REGION = \"${values.region}\" }\n\n\
         [hives.alpha.values]\nregion = \"eu\"\n",
        &[
            "hive beta: group web, agent api, env.REGION uses ${values.region}, which hive beta \
             does not set and group web has no default for (line 3); add region to \
             [hives.beta.values] or [groups.web.values]",
        ],
    ),
    (
        "a placeholder of an unknown form",
        "[groups.web]\nselect = {}\n[groups.web.agents.api]\nimage = \"local/api:1\"\n\
         env = { REGION = \"${region}\" }\n",
        &[
            "line 3: groups.web.agents.api.env.REGION: `${region}` is not a placeholder",
            "${values.NAME}",
            "$${ is a literal ${",
        ],
    ),
    (
        "an unterminated placeholder",
        "[hives.alpha.values]\nregion = \"eu\"\n[hives.alpha.agents.api]\n\
         image = \"local/api:1\"\ncommand = [\"api\", \"--region=${values.region\"]\n",
        &["line 3: hives.alpha.agents.api.command[1]: `${values.region` has no closing }"],
    ),
    (
        "a value that is no image reference",
        "[groups.web]\nselect = {}\nvalues = { tag = \"1 beta\" }\n\
         [groups.web.agents.api]\nimage = \"local/api:${values.tag}\"\n\n\
         [hives.alpha.values]\ntag = \"1\"\n",
        &[
            "hive beta: group web (line 4), agent api, with its values: agents.api.image \
             \"local/api:1 beta\" is not an image reference",
        ],
    ),
];

#[test]
fn the_controller_refuses_missing_values_and_bad_placeholders_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, (case, text, wants)) in CASES.iter().enumerate() {
        let swarm = dir.path().join(format!("swarm-{i}.toml"));
        std::fs::write(&swarm, text).unwrap();
        // The config that names the file is refused whole (64); `declare`
        // is given the file by a config that does not name it (exit 1).
        let roster = "[nats]\nurl = \"nats://127.0.0.1:1\"\n\n\
             [hives.alpha]\nlabels = { role = \"db\" }\n\
             [hives.beta]\nlabels = { role = \"web\" }\n";
        let plain = dir.path().join(format!("controller-{i}.toml"));
        std::fs::write(&plain, roster).unwrap();
        let config = dir.path().join(format!("controller-{i}-file.toml"));
        let named = format!("swarm_file = {:?}\n{roster}", swarm.display().to_string());
        std::fs::write(&config, named).unwrap();
        let declare = Command::new(hyperhive_tests::controller_bin())
            .arg("--config")
            .arg(&plain)
            .args(["declare", "--dry-run"])
            .arg(&swarm)
            .env_remove("HYPERHIVE_NATS_URL")
            .output()
            .unwrap();
        let check = Command::new(hyperhive_tests::controller_bin())
            .arg("--check-config")
            .arg(&config)
            .output()
            .unwrap();
        for (how, out, code) in [
            ("declare --dry-run", &declare, 1),
            ("--check-config", &check, 64),
        ] {
            let said = said(out);
            if out.status.code() != Some(code) {
                failures.push(format!(
                    "{case}, {how}: exit {:?}, not {code}: {said}",
                    out.status.code()
                ));
            }
            for want in *wants {
                if !said.contains(want) {
                    failures.push(format!("{case}, {how}: {said:?} does not say {want:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    println!(
        "{} swarm files refused twice each, naming the value",
        CASES.len()
    );
}
