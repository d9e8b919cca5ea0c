//! `swarm-controller nats-config`: the nats-server authorization for the
//! roster, one nkey user per hive plus the controller's.
//!
//! What each identity may do is decided in the contract crate
//! ([`swarm_queue_client::permissions`]), next to the subjects it names;
//! this module only turns the roster into its input and says which hive
//! lacks a key. It connects to nothing.

use swarm_queue_client::permissions::{authorization, Authorization, RosterError};
use swarm_queue_client::HiveName;

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
/// nkey`); `hives` is each rostered hive with its `[hives.<name>] nkey`.
pub fn render(
    controller_nkey: &str,
    hives: &[(HiveName, Option<String>)],
) -> Result<String, NatsConfigError> {
    Ok(build(controller_nkey, hives)?.to_server_config())
}

/// The same authorization as JSON (`nats-config --json`).
pub fn render_json(
    controller_nkey: &str,
    hives: &[(HiveName, Option<String>)],
) -> Result<serde_json::Value, NatsConfigError> {
    Ok(build(controller_nkey, hives)?.to_json())
}

fn build(
    controller_nkey: &str,
    hives: &[(HiveName, Option<String>)],
) -> Result<Authorization, NatsConfigError> {
    let keyed = hives
        .iter()
        .map(|(hive, key)| match key {
            Some(k) => Ok((hive.clone(), k.trim().to_string())),
            None => Err(NatsConfigError::MissingHiveKey { hive: hive.clone() }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(authorization(controller_nkey.trim(), &keyed)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> String {
        nkeys::KeyPair::new_user().public_key()
    }

    #[test]
    fn renders_every_hive_and_names_a_missing_key() {
        let controller = key();
        let alpha = HiveName::new("alpha").unwrap();
        let beta = HiveName::new("beta").unwrap();
        let (ka, kb) = (key(), key());
        let text = render(
            &controller,
            &[
                (beta.clone(), Some(kb.clone())),
                (alpha.clone(), Some(ka.clone())),
            ],
        )
        .unwrap();
        for k in [&controller, &ka, &kb] {
            assert!(text.contains(k.as_str()), "{k} missing:\n{text}");
        }
        assert!(text.contains("# hive alpha") && text.contains("# hive beta"));
        let json = render_json(&controller, &[(alpha.clone(), Some(ka))]).unwrap();
        assert_eq!(json["users"].as_array().unwrap().len(), 2);

        let err = render(&controller, &[(alpha, Some(kb)), (beta, None)]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("hive beta has no nkey") && msg.contains("[hives.beta]"),
            "{msg}"
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
        let roster: toml::Value = toml::from_str(&block("```toml")).unwrap();
        let controller = roster["controller"]["nkey"].as_str().unwrap();
        let hives: Vec<(HiveName, Option<String>)> = roster["hives"]
            .as_table()
            .unwrap()
            .iter()
            .map(|(name, t)| {
                (
                    HiveName::new(name.clone()).unwrap(),
                    t["nkey"].as_str().map(str::to_string),
                )
            })
            .collect();
        let rendered = render(controller, &hives).unwrap();
        assert_eq!(
            block("```text").trim_end(),
            rendered.trim_end(),
            "regenerate the example in docs/security.md"
        );
    }
}
