//! One real hive on a nats-server started with the accounts
//! `swarm-controller nats-config` renders (the hive and `beta` on the
//! roster), the hive trusting a controller xkey made here, and the
//! controller's config for that roster: for tests of what crosses NATS
//! between the controller's binary and a hive.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::hive::LocalHive;
use crate::identity::SecuredNats;

/// Fields drop in order: the hive (and its containers, its image) before
/// the server.
pub struct SecuredHive {
    pub local: LocalHive,
    pub name: String,
    /// Holds the controller's config and xkey seed.
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub s: SecuredNats,
}

impl SecuredHive {
    /// `hive_extra` goes into the hive's config, `tables` (TOML tables) at
    /// the end of the controller's.
    pub async fn start(test: &str, hive_extra: &str, tables: &str) -> SecuredHive {
        let name = crate::unique_name(test);
        let s = SecuredNats::start_generated(&[&name, "beta"]);
        let _ = s.controller_with_buckets().await;
        let url = s.server.url();
        let dir = tempfile::Builder::new()
            .prefix("hhtest-secured-")
            .tempdir()
            .unwrap();
        let xkey = swarm_queue_client::credentials::XKey::new();
        let seed = dir.path().join("controller.xkey");
        std::fs::write(&seed, xkey.seed().unwrap()).unwrap();
        std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o600)).unwrap();
        let hive_extra = format!(
            "{hive_extra}\ntrusted_controller_xkeys = [\"{}\"]\n{}",
            xkey.public_key(),
            s.hive(&name).nats_toml(&url)
        );
        let local = LocalHive::start_named(name.clone(), test, &hive_extra).await;
        let config = dir.path().join("controller.toml");
        let text = format!(
            "xkey_seed_file = {:?}\n{}[hives.{name}]\n[hives.beta]\n{tables}\n",
            seed.display().to_string(),
            s.controller.nats_toml(&url)
        );
        std::fs::write(&config, text).unwrap();
        SecuredHive {
            local,
            name,
            dir,
            config,
            s,
        }
    }

    /// Deploy `agent` running `sh -c script` through the hive's socket,
    /// until its job is done.
    pub async fn deploy(&self, agent: &str, script: &str) {
        let spec = serde_json::json!({
            "image": self.local.image.reference,
            "command": ["sh", "-c", script],
        });
        let job = self.local.api.deploy(agent, spec).await;
        self.local
            .api
            .done(job, std::time::Duration::from_secs(60))
            .await;
    }

    /// `swarm-controller --config … <args>`, to run or spawn.
    pub fn controller(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(crate::controller_bin());
        cmd.arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("HYPERHIVE_NATS_URL")
            .env("RUST_LOG", "warn");
        cmd
    }

    /// `swarm-controller --config … <args>`: (exit code, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.controller(args).output().await.unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
