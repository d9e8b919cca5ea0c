//! `swarm-controller nats-config`: the nats-server accounts for the
//! roster: the buckets and the controller in one, each hive in its own.
//!
//! What each identity may do is decided in the contract crate
//! ([`swarm_queue_client::permissions`]), next to the subjects it names;
//! this module only turns the roster into its input and says which hive
//! lacks a key. It connects to nothing.

use swarm_queue_client::permissions::{
    authorization, site::site_config, Authorization, RosterError, RosterHive, RosterLeafSite,
};
use swarm_queue_client::{HiveName, LeafSiteName};

use crate::config::{LeafSites, Roster};

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

/// The `accounts { … }` block for nats-server, with a comment on every
/// allowed subject, export and import. It sets no port, listen address or
/// JetStream settings: include it from the server's own config.
///
/// `controller_nkey` is the controller's public user nkey (`[controller]
/// nkey`); `hives` is the roster: each hive's `[hives.<name>] nkey`, and
/// its `jetstream_domain` when it sits on a leaf-node site (its grants then
/// name `$JS.<domain>.API.…`; the site's server enforces them). `sites`
/// are the `[leaf_sites.<name>]` tables: each hive's link becomes the user
/// of that hive's account, for the hub's `leafnodes` listener.
pub fn render(
    controller_nkey: &str,
    hives: &Roster,
    sites: &LeafSites,
) -> Result<String, NatsConfigError> {
    Ok(build(controller_nkey, hives, sites)?.to_server_config())
}

/// The same authorization as JSON (`nats-config --json`).
pub fn render_json(
    controller_nkey: &str,
    hives: &Roster,
    sites: &LeafSites,
) -> Result<serde_json::Value, NatsConfigError> {
    Ok(build(controller_nkey, hives, sites)?.to_json())
}

/// The config of leaf-node site `site`'s server (`nats-config --site`):
/// its hives' accounts and one leaf remote per hive.
pub fn render_site(
    controller_nkey: &str,
    hives: &Roster,
    sites: &LeafSites,
    site: &LeafSiteName,
) -> Result<String, NatsConfigError> {
    let (keyed, links) = inputs(hives, sites)?;
    Ok(site_config(controller_nkey.trim(), &keyed, &links, site)?.to_server_config())
}

fn build(
    controller_nkey: &str,
    hives: &Roster,
    sites: &LeafSites,
) -> Result<Authorization, NatsConfigError> {
    let (keyed, links) = inputs(hives, sites)?;
    Ok(authorization(controller_nkey.trim(), &keyed, &links)?)
}

fn inputs(
    hives: &Roster,
    sites: &LeafSites,
) -> Result<(Vec<RosterHive>, Vec<RosterLeafSite>), NatsConfigError> {
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
    let links = sites
        .iter()
        .map(|(site, entry)| RosterLeafSite {
            site: site.clone(),
            links: entry
                .links
                .iter()
                .map(|(hive, k)| (hive.clone(), k.trim().to_string()))
                .collect(),
        })
        .collect();
    Ok((keyed, links))
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
            &LeafSites::new(),
        )
        .unwrap();
        for k in [&controller, &ka, &kb] {
            assert!(text.contains(k.as_str()), "{k} missing:\n{text}");
        }
        assert!(text.contains("# hive alpha") && text.contains("# hive beta"));
        let json = render_json(
            &controller,
            &roster(&[("alpha", Some(&ka), None)]),
            &LeafSites::new(),
        )
        .unwrap();
        assert_eq!(json["accounts"].as_array().unwrap().len(), 3);

        let err = render(
            &controller,
            &roster(&[("alpha", Some(&kb), None), ("beta", None, None)]),
            &LeafSites::new(),
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
        let text = render(&key(), &hives, &LeafSites::new()).unwrap();
        for subject in [
            "\"$JS.hub.API.$KV.hyperhive-status.alpha\"",
            "\"$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.alpha\"",
            "\"$KV.hyperhive-status.beta\"",
            "\"$JS.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.beta\"",
        ] {
            assert!(text.contains(subject), "{subject} missing:\n{text}");
        }
        // Its account imports the local forms: the hub maps its link's
        // domain forms to them.
        assert!(
            text.contains("subject: \"$KV.hyperhive-status.alpha\""),
            "{text}"
        );
        assert!(
            !text.contains("$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.beta")
        );
        let bad = roster(&[("alpha", Some(&ka), Some("hub.eu"))]);
        let err = render(&key(), &bad, &LeafSites::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("hive alpha") && err.contains("hub.eu"),
            "{err}"
        );
    }

    /// `[leaf_sites.<name>.links]` renders each hive's link as the user of
    /// that hive's account with its hive's requests and subjects only, and
    /// `--site` the site's hives with one remote each; a site naming a hive
    /// off the roster, or one not in the roster, is refused by name.
    #[test]
    fn a_leaf_link_is_the_user_of_its_hives_account() {
        let (ka, kb, kl) = (key(), key(), key());
        let hives = roster(&[("alpha", Some(&ka), Some("hub")), ("beta", Some(&kb), None)]);
        let edge = LeafSiteName::new("edge").unwrap();
        let alpha = HiveName::new("alpha").unwrap();
        let mut sites = LeafSites::new();
        sites.insert(
            edge.clone(),
            crate::config::LeafSiteEntry {
                links: [(alpha.clone(), kl.clone())].into(),
            },
        );
        let json = render_json(&key(), &hives, &sites).unwrap();
        assert_eq!(json["accounts"][0]["users"].as_array().unwrap().len(), 1);
        let users = json["accounts"][1]["users"].as_array().unwrap();
        assert_eq!(json["accounts"][1]["name"], "alpha");
        assert_eq!(users.len(), 1);
        assert_eq!(users[0]["role"], "leaf_link");
        assert_eq!(users[0]["leaf_site"], "edge");
        assert_eq!(users[0]["hive"], "alpha");
        assert_eq!(users[0]["nkey"], kl.as_str());
        let text = render(&key(), &hives, &sites).unwrap();
        assert!(
            text.contains("# leaf link of hive alpha at site edge"),
            "{text}"
        );
        assert!(!text.contains(&ka), "alpha's own key is the site's: {text}");
        let link = users[0]["permissions"].to_string();
        assert!(
            link.contains("$JS.hub.API.$KV.hyperhive-status.alpha"),
            "{link}"
        );
        assert!(!link.contains("beta"), "{link}");
        let site = render_site(&key(), &hives, &sites, &edge).unwrap();
        assert!(site.contains(&ka) && !site.contains(&kl) && !site.contains(&kb));
        assert!(site.contains("nkey: $HYPERHIVE_LEAF_SEED_ALPHA"), "{site}");

        let dock = LeafSiteName::new("dock").unwrap();
        let err = render_site(&key(), &hives, &sites, &dock)
            .unwrap_err()
            .to_string();
        assert!(err.contains("leaf site dock is not in the roster"), "{err}");
        sites
            .get_mut(&edge)
            .unwrap()
            .links
            .insert(HiveName::new("zeta").unwrap(), key());
        let err = render(&key(), &hives, &sites).unwrap_err().to_string();
        assert!(err.contains("leaf site edge lists hive zeta"), "{err}");
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
            #[serde(default)]
            leaf_sites: LeafSites,
        }
        let example: Example = toml::from_str(&block("```toml")).unwrap();
        let controller = example.controller.nkey.expect("the controller's nkey");
        let rendered = render(&controller, &example.hives, &example.leaf_sites).unwrap();
        assert_eq!(
            block("```text").trim_end(),
            rendered.trim_end(),
            "regenerate the example in docs/security.md"
        );
    }
}
