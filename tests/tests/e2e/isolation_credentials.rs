//! Credentials the agent cannot redirect. An agent's state dir is `/state`
//! in its container, read-write, and the hive (root on the host) writes
//! delivered credentials below it: a link the agent plants there is
//! resolved by the hive on the host.
//!
//! `a_link_planted_by_the_agent_never_redirects_a_credential` runs a real
//! `hive` process on the real dockerd with two busybox agents whose own
//! command plants a link at start, aimed at a host directory the test made
//! (the target is a host path: the hive resolves it): `web` replaces
//! `/state/credentials` with it, `mail` links `/state/credentials/smtp` to a
//! file in it. Then `swarm-controller credential put` for each. The host
//! directory keeps its listing, modes and contents (no secret, still 0755),
//! the status in `hyperhive-status` carries `credential_refused` naming both
//! agents and the paths, and the hive's log has the reason. The credentials
//! stay in the bucket: once the links are gone, a notice delivers each, and
//! each good delivery takes its agent out of the warning.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::controller_support::*;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::{unique_name, wait_until};
use swarm_queue_client::subjects::{credential_key, HiveSubjects};
use swarm_queue_client::{
    decode, encode, AccountName, AgentName, CredentialNotice, HiveName, HiveStatus,
};

/// What each agent runs at start: plant its link, say so, then idle.
fn plants(link: &str) -> String {
    format!("{link} && /bin/busybox touch /state/planted && exec /bin/sleep 3600")
}

fn swarm_file(hive: &str, image: &str, bait: &Path) -> String {
    let bait = bait.display();
    let web = plants(&format!(
        "/bin/busybox rm -rf /state/credentials && /bin/busybox ln -s {bait} /state/credentials"
    ));
    let mail = plants(&format!(
        "/bin/busybox mkdir -p /state/credentials && \
         /bin/busybox ln -sfn {bait}/keep /state/credentials/smtp"
    ));
    let mut text = String::new();
    for (agent, script) in [("web", web), ("mail", mail)] {
        text.push_str(&format!(
            "[hives.{hive}.agents.{agent}]\nimage = {image:?}\n\
             command = [\"/bin/sh\", \"-c\", {script:?}]\ncredentials = [\"smtp\"]\n\n"
        ));
    }
    text
}

/// Every entry of `dir` (itself as `.`) with its mode and content, or its
/// target for a link.
fn listing(dir: &Path) -> BTreeMap<String, (u32, String)> {
    let mut out = BTreeMap::new();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode();
    out.insert(".".to_string(), (mode(dir), String::new()));
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        let content = if meta.file_type().is_symlink() {
            std::fs::read_link(&p).unwrap().display().to_string()
        } else if meta.is_file() {
            String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
        } else {
            "(dir)".to_string()
        };
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        out.insert(name, (meta.permissions().mode(), content));
    }
    out
}

/// The `credential_refused` warning in the hive's last published status.
async fn refused_warning(env: &Env, hive: &str) -> Option<String> {
    let entry = env.status.entry(hive).await.ok().flatten()?;
    let hive_status = decode::<HiveStatus>(&entry.value).ok()?.value;
    hive_status
        .warnings
        .into_iter()
        .find(|w| w.key == "credential_refused")
        .map(|w| w.message)
}

async fn notice(env: &Env, hive: &HiveName, agent: &str) {
    let notice = CredentialNotice::new(
        AgentName::new(agent).unwrap(),
        AccountName::new("smtp").unwrap(),
    );
    env.client
        .publish(
            HiveSubjects::new(hive).credential,
            encode(&notice).unwrap().into(),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_planted_by_the_agent_never_redirects_a_credential() {
    let hive = unique_name("credlink");
    let (env, controller) = Env::with_controller_xkey(&[&hive]).await;
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("credlink");
    // The host directory the agents aim at: what must stay as it is.
    let bait = tempfile::Builder::new()
        .prefix("hhtest-bait-")
        .tempdir()
        .unwrap();
    std::fs::write(bait.path().join("keep"), "host data").unwrap();
    std::fs::set_permissions(bait.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = listing(bait.path());

    let h = env.trusting_hive(&hive, &controller);
    let swarm = env.write(
        "swarm.toml",
        &swarm_file(&hive, &image.reference, bait.path()),
    );
    let r = env.run(&["declare", swarm.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    env.wait_row(&hive, "convergence converged", |r| {
        r["convergence"] == "converged"
    })
    .await;
    let agents = h.state_dir.join("agents");
    wait_until(T, "both agents to plant their links", || async {
        (agents.join("web/planted").exists() && agents.join("mail/planted").exists()).then_some(())
    })
    .await;
    let planted = [
        agents.join("web/credentials"),
        agents.join("mail/credentials/smtp"),
    ];
    for link in &planted {
        let meta = std::fs::symlink_metadata(link).unwrap();
        assert!(meta.file_type().is_symlink(), "{}", link.display());
    }

    // The operator puts a credential for each.
    for agent in ["web", "mail"] {
        let file = env.write(&format!("{agent}.pw"), &format!("secret-of-{agent}-7f3a"));
        let r = env
            .run(&[
                "credential",
                "put",
                &hive,
                agent,
                "smtp",
                "--from-file",
                file.to_str().unwrap(),
            ])
            .await;
        assert_eq!(r.code, 0, "{r:?}");
    }

    // The hive acts on both: a refusal naming both agents, or (the old
    // code) a write through the link into the host directory.
    let warning = wait_until(T, "the refusals in the published status", || async {
        if listing(bait.path()) != before {
            return Some(None);
        }
        refused_warning(&env, &hive)
            .await
            .filter(|m| m.contains("agent web") && m.contains("agent mail"))
            .map(Some)
    })
    .await;
    assert_eq!(
        listing(bait.path()),
        before,
        "the host directory changed: the hive followed the agent's link"
    );
    let mode = std::fs::metadata(bait.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    let warning = warning.expect("the refusal is published");
    println!("credential_refused: {warning}");
    for link in &planted {
        let at = format!("{} is a symbolic link", link.display());
        assert!(warning.contains(&at), "{warning}");
    }
    let log = h.daemon.log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("credential delivery refused"))
        .collect();
    for (agent, link) in ["web", "mail"].iter().zip(&planted) {
        assert!(
            refusals
                .iter()
                .any(|l| l.contains(&format!("agent={agent}"))
                    && l.contains("account=smtp")
                    && l.contains(&link.display().to_string())
                    && l.contains("symbolic link")),
            "no refusal of {agent} in the hive's log: {refusals:#?}"
        );
    }

    // Nothing lost: the credentials stay in the bucket, and once a link is
    // gone the next delivery writes that agent's and clears its refusal.
    let name = HiveName::new(hive.clone()).unwrap();
    for agent in ["web", "mail"] {
        let key = credential_key(
            &name,
            &AgentName::new(agent).unwrap(),
            &AccountName::new("smtp").unwrap(),
        );
        assert!(env.credentials.entry(key).await.unwrap().is_some());
    }
    for (agent, link) in ["web", "mail"].iter().zip(&planted) {
        std::fs::remove_file(link).unwrap();
        let delivered = agents.join(format!("{agent}/credentials/smtp"));
        let secret = format!("secret-of-{agent}-7f3a");
        wait_until(T, &format!("{agent}'s credential delivered"), || async {
            if std::fs::read_to_string(&delivered).ok().as_deref() == Some(secret.as_str()) {
                return Some(());
            }
            notice(&env, &name, agent).await;
            None
        })
        .await;
        let mode = std::fs::metadata(&delivered).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        wait_until(T, &format!("{agent} out of the warning"), || async {
            match refused_warning(&env, &hive).await {
                Some(m) if m.contains(&format!("agent {agent}")) => None,
                _ => Some(()),
            }
        })
        .await;
    }
    assert_eq!(refused_warning(&env, &hive).await, None);
    assert_eq!(listing(bait.path()), before);
    drop(image);
}
