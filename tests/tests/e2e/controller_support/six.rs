//! Six real hives with roster labels, for the rollout tests: one
//! nats-server, the machine's dockerd, one tiny busybox image shared by all
//! hives, a controller config whose roster labels each hive `role` (`web`
//! or `db`) and `n` (its index), and swarm files that declare group `web`.

use std::time::Duration;

use futures_util::StreamExt;
use hyperhive_tests::docker::docker;
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::swarm::{SwarmSpec, TestSwarm};
use hyperhive_tests::{controller_bin, Daemon};

use super::{run_controller, Run};

/// How long a hive may take to converge.
pub const T: Duration = Duration::from_secs(90);

/// Waves of one hive, then up to half, then the rest (1, 2, 3 of six
/// changed hives), each given two minutes to converge and held converged
/// for 2 s (not the default 30 s: these tests are about the waves).
pub const WAVES: &str = "[rollout]\nwaves = [\"1\", \"50%\", \"100%\"]\n\
     wait_converged_secs = 120\nmin_converged_secs = 2\n";

/// Six hives; `web(i)` says whether hive `i` is labelled `role = "web"`.
pub struct Six {
    pub swarm: TestSwarm,
    pub kv: Swarm,
    pub dir: tempfile::TempDir,
}

impl Six {
    pub async fn start(test: &str, web: impl Fn(usize) -> bool) -> Six {
        Six::start_n(test, 6, web).await
    }

    /// The same with `hives` hives.
    pub async fn start_n(test: &str, hives: usize, web: impl Fn(usize) -> bool) -> Six {
        let swarm = TestSwarm::start(SwarmSpec {
            test,
            hives,
            ..Default::default()
        })
        .await;
        // The roster again, with labels: groups select by them.
        let mut text = format!("stale_after_secs = 10\n[nats]\nurl = {:?}\n", swarm.url);
        for (i, n) in swarm.names.iter().enumerate() {
            let role = if web(i) { "web" } else { "db" };
            text.push_str(&format!(
                "[hives.{n:?}]\nlabels = {{ role = \"{role}\", n = \"{i}\" }}\n"
            ));
        }
        std::fs::write(&swarm.controller_config, text).unwrap();
        let kv = swarm.connect().await;
        let dir = tempfile::Builder::new()
            .prefix("hhtest-rollout-")
            .tempdir()
            .unwrap();
        Six { swarm, kv, dir }
    }

    pub async fn run(&self, args: &[&str]) -> Run {
        run_controller(Some(&self.swarm.controller_config), args).await
    }

    /// A swarm file named `name` in the test's directory: group `web` runs
    /// agent `a` from `image` with `V=version`. Its path.
    pub fn file(&self, name: &str, image: &str, version: &str, rollout: &str) -> String {
        self.file_running(name, image, version, &["/bin/sleep", "3600"], rollout)
    }

    /// The same, agent `a` running `command`.
    pub fn file_running(
        &self,
        name: &str,
        image: &str,
        version: &str,
        command: &[&str],
        rollout: &str,
    ) -> String {
        // `{image:?}`, `{command:?}`: TOML basic strings, quotes escaped.
        let text = format!(
            "[groups.web]\nselect = {{ role = \"web\" }}\n\n\
             [groups.web.agents.a]\nimage = {image:?}\ncommand = {command:?}\n\
             env = {{ V = \"{version}\" }}\n\n{rollout}"
        );
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// `declare <file> --rollout` as a background process logging to
    /// `<log>` in the test's directory (to kill it, or to watch it drive).
    pub fn spawn_rollout(&self, file: &str, log: &str) -> Daemon {
        let cfg = self.swarm.controller_config.display().to_string();
        Daemon::spawn(
            &controller_bin(),
            &["--config", &cfg, "declare", file, "--rollout"],
            &[],
            &self.dir.path().join(log),
        )
    }

    /// The KV revision of `hyperhive-wanted/<hive>` (None: no key).
    pub async fn wanted_revision(&self, hive: &str) -> Option<u64> {
        let store = self.kv.js.get_key_value("hyperhive-wanted").await.unwrap();
        store.entry(hive).await.unwrap().map(|e| e.revision)
    }

    /// How many values `hyperhive-wanted/<hive>` has had (its kept history).
    pub async fn writes(&self, hive: &str) -> usize {
        let store = self.kv.js.get_key_value("hyperhive-wanted").await.unwrap();
        match store.history(hive).await {
            Ok(h) => h.count().await,
            Err(_) => 0,
        }
    }

    /// `rollout status --json` (null before any rollout).
    pub async fn rollout(&self) -> serde_json::Value {
        let r = self.run(&["rollout", "status", "--json"]).await;
        assert_eq!(r.code, 0, "{r:?}");
        r.json()
    }

    /// Declare `file` at once and wait for every selected hive to converge.
    pub async fn declare_converged(&self, file: &str, selected: &[usize]) {
        let r = self.run(&["declare", file]).await;
        assert_eq!(r.code, 0, "{r:?}");
        for i in selected {
            let n = &self.swarm.names[*i];
            let rev = self.wanted_revision(n).await.expect("declared");
            self.kv.converged(n, rev, T).await;
        }
    }
}

/// The `V` env value of hive `hive`'s agent `a`.
pub fn version(hive: &str) -> String {
    docker(&[
        "inspect",
        "--format",
        "{{range .Config.Env}}{{println .}}{{end}}",
        &format!("hyperhive.{hive}.a"),
    ])
    .lines()
    .find_map(|l| l.strip_prefix("V=").map(str::to_string))
    .unwrap_or_default()
}
