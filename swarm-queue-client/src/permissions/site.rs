//! What the server of a leaf-node site runs: each of its hives in an
//! account of its own (its user, with its grants, which this server
//! checks), and one leaf remote per hive, bound to that account and
//! signing with the hive's link seed ([`super::leaf`]). No buckets'
//! account and no import: a site hive reaches nothing at the site but its
//! own link, and through it only its own account at the hub.

use std::fmt::Write as _;

use super::{accounts, authorization, Account, RosterError, RosterHive, RosterLeafSite};
use crate::names::{HiveName, LeafSiteName};

/// The variable the rendered remotes read the hub's leafnode URL from.
pub const HUB_URL_VARIABLE: &str = "HYPERHIVE_HUB_LEAF_URL";

/// The variable hive `hive`'s remote reads its link seed from:
/// `HYPERHIVE_LEAF_SEED_<HIVE>`, upper case with `-` as `_` (a hive name
/// holds no `_`, so two hives never share one).
pub fn seed_variable(hive: &HiveName) -> String {
    format!(
        "HYPERHIVE_LEAF_SEED_{}",
        hive.as_str().to_uppercase().replace('-', "_")
    )
}

/// The accounts and leaf remotes of one site's server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteConfig {
    pub site: LeafSiteName,
    /// One per hive at the site, by name: its user only.
    pub accounts: Vec<Account>,
    /// The hives at the site, by name: one leaf remote each.
    pub hives: Vec<HiveName>,
}

/// The config of site `site`'s server, after checking the whole roster as
/// [`authorization`] does.
pub fn site_config(
    controller_nkey: &str,
    hives: &[RosterHive],
    sites: &[RosterLeafSite],
    site: &LeafSiteName,
) -> Result<SiteConfig, RosterError> {
    authorization(controller_nkey, hives, sites)?;
    let entry = sites
        .iter()
        .find(|s| s.site == *site)
        .ok_or_else(|| RosterError::UnknownSite(site.clone()))?;
    let mut accounts = Vec::with_capacity(entry.links.len());
    for (hive, _) in &entry.links {
        // `authorization` checked each is on the roster with a domain.
        let Some(roster) = hives.iter().find(|h| h.hive == *hive) else {
            continue;
        };
        let user = accounts::hive_user(hive, roster.nkey.clone(), &roster.api()?);
        let mut account = accounts::hive_account(hive, user);
        account.imports.clear();
        account.exports.clear();
        accounts.push(account);
    }
    accounts.sort_by(|a, b| a.name.cmp(&b.name));
    let mut at_site: Vec<HiveName> = entry.links.iter().map(|(h, _)| h.clone()).collect();
    at_site.sort();
    Ok(SiteConfig {
        site: site.clone(),
        accounts,
        hives: at_site,
    })
}

impl SiteConfig {
    /// The nats-server config text: the hives' accounts and a `leafnodes`
    /// block with one remote per hive. The hub's URL and each link's seed
    /// are variable references (`$HYPERHIVE_HUB_LEAF_URL`,
    /// [`seed_variable`]), from the server's environment or set above this
    /// text in the same file (nats-server does not pass a variable into an
    /// included file); `nats-server -t` refuses the config while one is
    /// unset.
    pub fn to_server_config(&self) -> String {
        let mut out = format!(
            "# hyperhive: the server of leaf-node site {}. Each hive is in an account of its\n\
             # own and joins the hub through its own leaf link, bound to that account here\n\
             # and at the hub, so it reaches only its own keys and subjects there.\n\
             # Generated from the roster by `swarm-controller nats-config --site {}`.\n\
             # Set ${HUB_URL_VARIABLE} to the hub's leafnode URL (nats-leaf://…) and each\n\
             # $HYPERHIVE_LEAF_SEED_… to that hive's link seed (SU…) in the server's\n\
             # environment (a variable set in a file that includes this one is not seen\n\
             # here), or above this text in the same file.\n",
            self.site, self.site
        );
        out.push_str("accounts {\n");
        for account in &self.accounts {
            super::render::render_account(&mut out, account);
        }
        out.push_str("}\nleafnodes {\n  remotes: [\n");
        for hive in &self.hives {
            let _ = writeln!(
                out,
                "    # hive {hive}'s link: at the hub, a user of account {hive}\n    \
                 {{ urls: [${HUB_URL_VARIABLE}], account: {}, nkey: ${} }}",
                super::render::quote(hive.as_str()),
                seed_variable(hive)
            );
        }
        out.push_str("  ]\n}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> String {
        nkeys::KeyPair::new_user().public_key()
    }

    fn hive(name: &str, domain: Option<&str>) -> RosterHive {
        RosterHive {
            hive: HiveName::new(name).unwrap(),
            nkey: key(),
            jetstream_domain: domain.map(str::to_string),
        }
    }

    /// The site's config holds only its own hives, each with its user and
    /// its remote, and no import, export or buckets' account.
    #[test]
    fn a_site_holds_its_hives_and_their_links_only() {
        let hives = vec![
            hive("my-hive", Some("hub")),
            hive("alpha", Some("hub")),
            hive("beta", None),
        ];
        let edge = LeafSiteName::new("edge").unwrap();
        let links = ["my-hive", "alpha"]
            .iter()
            .map(|h| (HiveName::new(*h).unwrap(), key()))
            .collect();
        let sites = vec![RosterLeafSite {
            site: edge.clone(),
            links,
        }];
        let config = site_config(&key(), &hives, &sites, &edge).unwrap();
        let names: Vec<&str> = config.accounts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["alpha", "my-hive"]);
        for a in &config.accounts {
            assert!(a.imports.is_empty() && a.exports.is_empty() && !a.jetstream);
            assert_eq!(a.users.len(), 1);
            assert_eq!(a.users[0].role.to_string(), format!("hive {}", a.name));
        }
        let text = config.to_server_config();
        assert!(
            text.contains(
                "{ urls: [$HYPERHIVE_HUB_LEAF_URL], account: \"my-hive\", nkey: $HYPERHIVE_LEAF_SEED_MY_HIVE }"
            ),
            "{text}"
        );
        assert!(
            !text.contains("beta") && !text.contains("HYPERHIVE\""),
            "{text}"
        );

        let dock = LeafSiteName::new("dock").unwrap();
        let err = site_config(&key(), &hives, &sites, &dock).unwrap_err();
        assert_eq!(
            err.to_string(),
            "leaf site dock is not in the roster (no [leaf_sites.dock])"
        );
    }
}
