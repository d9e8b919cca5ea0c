//! `swarm-controller nats-config`: the nats-server authorization for the
//! roster, one nkey user per hive plus the controller's.
//!
//! What each identity may do is decided in the contract crate
//! ([`swarm_queue_client::permissions`]), next to the subjects it names;
//! this module only turns the roster into its input and says which hive
//! lacks a key. It connects to nothing.

use swarm_queue_client::permissions::{authorization, Authorization, RosterError, RosterHive};
use swarm_queue_client::HiveName;

use crate::config::Roster;

/// The roster cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum NatsConfigError {
    #[error(
        "hive {hive} has no nkey in the roster; give it one with `nkey = \"U…\"` under \
         [hives.{hive}] (the public key printed by `nk -gen user -pubout`)"
    )]
    MissingHiveKey { hive: HiveName },
    #[error(transparent)]
    Roster(#[from] RosterError),
}

/// The `authorization { users = [...] }` block for nats-server, with a
/// comment on every allowed subject. It sets no port, listen address or
/// JetStream settings: include it from the server's own config.
///
/// `controller_nkey` is the controller's public user nkey (`[controller]
/// nkey`); `hives` is the roster: each hive's `[hives.<name>] nkey`, and
/// its `jetstream_domain` when it sits on a leaf-node site (its grants then
/// name `$JS.<domain>.API.…`; the site's server enforces them).
pub fn render(controller_nkey: &str, hives: &Roster) -> Result<String, NatsConfigError> {
    Ok(build(controller_nkey, hives)?.to_server_config())
}

/// The same authorization as JSON (`nats-config --json`).
pub fn render_json(
    controller_nkey: &str,
    hives: &Roster,
) -> Result<serde_json::Value, NatsConfigError> {
    Ok(build(controller_nkey, hives)?.to_json())
}

fn build(controller_nkey: &str, hives: &Roster) -> Result<Authorization, NatsConfigError> {
    let keyed = hives
        .iter()
        .map(|(hive, entry)| match &entry.nkey {
            Some(k) => Ok(RosterHive {
                hive: hive.clone(),
                nkey: k.trim().to_string(),
                jetstream_domain: entry.jetstream_domain.clone(),
            }),
            None => Err(NatsConfigError::MissingHiveKey { hive: hive.clone() }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(authorization(controller_nkey.trim(), &keyed)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RosterEntry;

    fn key() -> String {
        nkeys::KeyPair::new_user().public_key()
    }

    fn roster(hives: &[(&str, Option<&str>, Option<&str>)]) -> Roster {
        hives
            .iter()
            .map(|(name, nkey, domain)| {
                let entry = RosterEntry {
                    nkey: nkey.map(str::to_string),
                    jetstream_domain: domain.map(str::to_string),
                    ..Default::default()
                };
                (HiveName::new(*name).unwrap(), entry)
            })
            .collect()
    }

    #[test]
    fn renders_every_hive_and_names_a_missing_key() {
        let controller = key();
        let (ka, kb) = (key(), key());
        let text = render(
            &controller,
            &roster(&[("beta", Some(&kb), None), ("alpha", Some(&ka), None)]),
        )
        .unwrap();
        for k in [&controller, &ka, &kb] {
            assert!(text.contains(k.as_str()), "{k} missing:\n{text}");
        }
        assert!(text.contains("# hive alpha") && text.contains("# hive beta"));
        let json = render_json(&controller, &roster(&[("alpha", Some(&ka), None)])).unwrap();
        assert_eq!(json["users"].as_array().unwrap().len(), 2);

        let err = render(
            &controller,
            &roster(&[("alpha", Some(&kb), None), ("beta", None, None)]),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("hive beta has no nkey") && msg.contains("[hives.beta]"),
            "{msg}"
        );
    }

    /// `[hives.<name>] jetstream_domain` gives that hive, and only it, the
    /// `$JS.<domain>.API` forms.
    #[test]
    fn a_hive_on_a_leaf_site_gets_its_grants_in_the_hubs_domain() {
        let (ka, kb) = (key(), key());
        let hives = roster(&[("alpha", Some(&ka), Some("hub")), ("beta", Some(&kb), None)]);
        let text = render(&key(), &hives).unwrap();
        for subject in [
            "\"$JS.hub.API.$KV.hyperhive-status.alpha\"",
            "\"$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.alpha\"",
            "\"$KV.hyperhive-status.beta\"",
            "\"$JS.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.beta\"",
        ] {
            assert!(text.contains(subject), "{subject} missing:\n{text}");
        }
        assert!(!text.contains("\"$KV.hyperhive-status.alpha\""), "{text}");
        assert!(
            !text.contains("$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.beta")
        );
        let bad = roster(&[("alpha", Some(&ka), Some("hub.eu"))]);
        let err = render(&key(), &bad).unwrap_err().to_string();
        assert!(
            err.contains("hive alpha") && err.contains("hub.eu"),
            "{err}"
        );
    }

    /// The worked example in docs/security.md is exactly what `render`
    /// prints for the roster shown there.
    #[test]
    fn the_worked_example_in_the_docs_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let example = &doc[doc.find("## Worked example").expect("the example section")..];
        let block = |fence: &str| -> String {
            let start = example
                .find(fence)
                .unwrap_or_else(|| panic!("{fence} block"))
                + fence.len();
            let end = example[start..].find("\n```").unwrap() + start;
            example[start..end].trim_start_matches('\n').to_string()
        };
        #[derive(serde::Deserialize)]
        struct Example {
            controller: crate::config::ControllerEntry,
            hives: Roster,
        }
        let example: Example = toml::from_str(&block("```toml")).unwrap();
        let controller = example.controller.nkey.expect("the controller's nkey");
        let rendered = render(&controller, &example.hives).unwrap();
        assert_eq!(
            block("```text").trim_end(),
            rendered.trim_end(),
            "regenerate the example in docs/security.md"
        );
    }
}
