//! Make fresh nkey users for a controller and some hives, and print the
//! authorization `nats-config` renders for them: a worked example, and a
//! quick way to get a test fleet's keys.
//!
//! `cargo run -p swarm-controller --example nats_config -- DIR alpha beta`
//! writes `DIR/<identity>.nk` (the seed, then the public key, mode 0600; the
//! files to hand to each daemon as `nats.nkey_seed_file`) and prints the
//! config on stdout.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use swarm_controller::config::{LeafSites, Roster, RosterEntry};
use swarm_controller::nats_config::render;
use swarm_queue_client::HiveName;

fn new_user(dir: &std::path::Path, who: &str) -> anyhow::Result<String> {
    let kp = nkeys::KeyPair::new_user();
    let path = dir.join(format!("{who}.nk"));
    std::fs::write(&path, format!("{}\n{}\n", kp.seed()?, kp.public_key()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    eprintln!("{who}: {} (seed in {})", kp.public_key(), path.display());
    Ok(kp.public_key())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: nats_config DIR HIVE..."))?,
    );
    std::fs::create_dir_all(&dir)?;
    let controller = new_user(&dir, "controller")?;
    let mut hives = Roster::new();
    for name in args {
        let hive = HiveName::new(name)?;
        let nkey = Some(new_user(&dir, hive.as_str())?);
        hives.insert(
            hive,
            RosterEntry {
                nkey,
                ..Default::default()
            },
        );
    }
    print!("{}", render(&controller, &hives, &LeafSites::new())?);
    Ok(())
}
