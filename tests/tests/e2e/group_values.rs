//! Per-hive values in a group, end to end: six rostered hives, one group
//! whose agent uses `${values.region}` in its image, a command argument and
//! an env value, and three different regions (two hives each: `eu` and
//! `us` from the hives' own `[hives.X.values]`, `ap` from the group's
//! default). The real `swarm-controller declare` writes to a real
//! nats-server; every hive's key in `hyperhive-wanted` is then read with
//! nats-py, a client this project did not write, and must hold plain,
//! substituted strings. `declare --dry-run --json` names each value's
//! source and line. No hive runs: the declaration is what is tested.

use crate::controller_support::{run_controller, Env};
use hyperhive_tests::foreign;
use serde_json::json;

const SWARM: &str = r#"[groups.web]
select = { role = "web" }
values = { region = "ap" }
[groups.web.agents.api]
image = "registry.${values.region}.example/api:1"
command = ["api", "--region=${values.region}", "--literal=$${values.region}"]
env = { REGION = "${values.region}", MODE = "serve" }

[hives.web-0]
values = { region = "eu" }
[hives.web-0.agents.tool]
image = "local/tool:1"
env = { AT = "${values.region}" }

[hives.web-1.values]
region = "eu"

[hives.web-2.values]
region = "us"

[hives.web-3.values]
region = "us"
"#;

/// Each hive, its region and where the region comes from (`from`, group,
/// line), as `--dry-run --json` must say.
const WANT: [(&str, &str, &str, u64); 6] = [
    ("web-0", "eu", "hive", 10),
    ("web-1", "eu", "hive", 16),
    ("web-2", "us", "hive", 19),
    ("web-3", "us", "hive", 22),
    ("web-4", "ap", "group", 3),
    ("web-5", "ap", "group", 3),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hives_get_three_regions_substituted_and_a_foreign_client_reads_them() {
    let env = Env::new(&[], "").await;
    let swarm = env.write("swarm.toml", SWARM);
    let mut config = format!(
        "swarm_file = {:?}\n[nats]\nurl = {:?}\n",
        swarm.display().to_string(),
        env.nats.url()
    );
    for (hive, ..) in WANT {
        config.push_str(&format!("[hives.{hive}]\nlabels = {{ role = \"web\" }}\n"));
    }
    std::fs::write(&env.config, config).unwrap();

    let check = run_controller(None, &["--check-config", &env.config.display().to_string()]).await;
    assert_eq!(check.code, 0, "{check:?}");

    let r = env.run(&["declare", "--dry-run", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let plans = r.json()["hives"].as_array().unwrap().clone();
    assert_eq!(plans.len(), 6, "{plans:#?}");
    for ((hive, region, from, line), plan) in WANT.iter().zip(&plans) {
        assert_eq!(plan["hive"], *hive, "{plan:#}");
        let mut want = json!({
            "value": region, "from": from, "line": line,
            "in": ["image", "command[1]", "env.REGION"],
        });
        if *from == "group" {
            want["group"] = json!("web");
        }
        assert_eq!(plan["values"]["api"]["region"], want, "{hive}: {plan:#}");
        assert_eq!(
            plan["sources"]["api"],
            json!({"from": "group", "group": "web", "line": 4})
        );
    }
    assert_eq!(
        plans[0]["values"]["tool"]["region"],
        json!({"value": "eu", "from": "hive", "line": 10, "in": ["env.AT"]})
    );
    println!("declare --dry-run --json, web-4:\n{:#}", plans[4]);

    let r = env.run(&["declare", "--dry-run"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    println!("declare --dry-run:\n{}", r.stdout);
    for want in [
        "web-2: agents from\n    api: group web (line 4)\n        region = \"us\" from the \
         hive's values (line 19), in image, command[1], env.REGION\n",
        "web-5: agents from\n    api: group web (line 4)\n        region = \"ap\" from group \
         web's default (line 3), in image, command[1], env.REGION\n",
        "    tool: its own table (line 11)\n        region = \"eu\" from the hive's values \
         (line 10), in env.AT\n",
    ] {
        assert!(r.stdout.contains(want), "{want}\nnot in\n{}", r.stdout);
    }

    let r = env.run(&["declare"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let url = env.nats.url();
    let read = tokio::task::spawn_blocking(move || {
        WANT.map(|(hive, ..)| foreign::kv_get(&url, "hyperhive-wanted", hive))
    })
    .await
    .unwrap();
    for ((hive, region, ..), stored) in WANT.iter().zip(read) {
        let (revision, doc) = stored.unwrap_or_else(|| panic!("{hive} has no declaration"));
        println!("nats-py read hyperhive-wanted/{hive} at revision {revision}: {doc}");
        let api = &doc["agents"]["api"];
        assert_eq!(
            api["image"],
            format!("registry.{region}.example/api:1"),
            "{hive}"
        );
        assert_eq!(
            api["command"],
            json!([
                "api",
                format!("--region={region}"),
                "--literal=${values.region}"
            ]),
            "{hive}"
        );
        assert_eq!(
            api["env"],
            json!({"REGION": region, "MODE": "serve"}),
            "{hive}"
        );
        let tool = &doc["agents"]["tool"];
        if *hive == "web-0" {
            assert_eq!(tool["env"], json!({"AT": "eu"}));
        } else {
            assert!(tool.is_null(), "{hive}: {doc}");
        }
        assert_eq!(
            doc.to_string().matches("${values.").count(),
            1,
            "{hive}: only the escaped literal may remain: {doc}"
        );
    }
}
