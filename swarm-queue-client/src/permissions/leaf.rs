//! The leaf-node links of a site: one per hive at the site, each bound to
//! that hive's own account on both sides.
//!
//! At the site, hive `alpha`'s account holds its user (with its grants,
//! checked by the site server) and a leaf remote bound to it that signs
//! with alpha's link seed. At the hub, that seed's public key is a user of
//! account `alpha`, which holds only alpha's own imports. So whatever the
//! link sends lands in alpha's account at the hub, and a reply subject it
//! chooses is delivered there too: the account, not the permissions, is the
//! boundary on the link as it is for a hive beside the hub
//! ([`super::accounts`]).
//!
//! The hub adds its JetStream domain's mappings (`$JS.<hub>.API.$KV.>` to
//! `$KV.>`, `$JS.<hub>.API.DIRECT.>` to `$JS.API.DIRECT.>`) to the account
//! a leaf link binds (`server/leafnode.go`), so the domain-form requests a
//! site hive sends reach the hub's account as the local forms, which is
//! what that account imports from the buckets' account.
//!
//! nats-server applies the link user's permissions to the whole link, from
//! the site's side (the hub swaps them on accept and sends them to the site
//! in its INFO, and the site sends nothing they refuse): *publish* is what
//! the site may send into the hub, *subscribe* is what interest it may
//! declare there, so what the hub forwards to it ([`link_permissions`]).

use std::collections::BTreeMap;

use crate::names::{HiveName, LeafSiteName};
use crate::permissions::{
    grant, hive_permissions, JsApi, KeysSeen, Permissions, Role, RosterError, RosterHive, User,
};
use crate::subjects::{hive_inbox_prefix, HiveSubjects, KNOWLEDGE};

/// One leaf-node site of the roster, as the authorization needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterLeafSite {
    pub site: LeafSiteName,
    /// The hives that connect to this site's server, each with the public
    /// user nkey (`U…`) its own leaf link signs with.
    pub links: Vec<(HiveName, String)>,
}

/// What hive `hive`'s link may carry (`api`: the hub's domain, where its
/// JetStream requests go). To send: what the hive itself may send, its
/// three JetStream requests in the form the site sends them and its
/// answers to deploy and logs requests under its own answer prefix. To hear: its deploy requests,
/// credential notices, log requests and acks, the knowledge event and its own reply inbox (the hub's answers
/// to its JetStream requests). No doorbell: nats-server carries no `$KV.>`
/// across a link between JetStream domains, and site hives read their
/// declaration on a timer instead.
pub fn link_permissions(hive: &HiveName, api: &JsApi) -> Permissions {
    let publish = hive_permissions(hive, api).publish;
    let subjects = HiveSubjects::new(hive);
    let subscribe = vec![
        grant(subjects.deploy, "its deploy requests"),
        grant(subjects.credential, "its credential notices"),
        grant(subjects.logs, "its log requests and their readers' acks"),
        grant(KNOWLEDGE, "the knowledge repo changed"),
        grant(
            format!("{}.>", hive_inbox_prefix(hive)),
            "its own reply inbox: the hub's answers to its JetStream requests",
        ),
    ];
    Permissions {
        publish,
        subscribe,
        allow_responses: false,
    }
}

/// The link users of `sites`, each with its hive (a user of that hive's
/// account at the hub). Each hive a site lists must be on the roster
/// (`hives`) with a JetStream domain, at one site only; each link key is
/// its own.
pub(super) fn link_users(
    sites: &[RosterLeafSite],
    hives: &[&RosterHive],
    keys: &mut KeysSeen,
) -> Result<BTreeMap<HiveName, User>, RosterError> {
    let mut sorted: Vec<&RosterLeafSite> = sites.iter().collect();
    sorted.sort_by(|a, b| a.site.cmp(&b.site));
    let mut placed: BTreeMap<&HiveName, &LeafSiteName> = BTreeMap::new();
    let mut users = BTreeMap::new();
    for (i, entry) in sorted.iter().enumerate() {
        let site = &entry.site;
        if i > 0 && sorted[i - 1].site == *site {
            return Err(RosterError::DuplicateSite(site.clone()));
        }
        for (hive, nkey) in &entry.links {
            let roster = hives.iter().find(|h| h.hive == *hive).ok_or_else(|| {
                RosterError::UnknownSiteHive {
                    site: site.clone(),
                    hive: hive.clone(),
                }
            })?;
            if roster.jetstream_domain.is_none() {
                return Err(RosterError::SiteHiveWithoutDomain {
                    site: site.clone(),
                    hive: hive.clone(),
                });
            }
            if let Some(first) = placed.insert(hive, site) {
                return Err(RosterError::HiveAtTwoSites {
                    hive: hive.clone(),
                    first: first.clone(),
                    second: site.clone(),
                });
            }
            let role = Role::LeafLink {
                site: site.clone(),
                hive: hive.clone(),
            };
            keys.claim(&role, nkey)?;
            let user = User {
                role,
                nkey: nkey.clone(),
                permissions: link_permissions(hive, &roster.api()?),
            };
            users.insert(hive.clone(), user);
        }
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_carries_its_own_hive_only() {
        let hub = JsApi::domain("hub").unwrap();
        let alpha = HiveName::new("alpha").unwrap();
        let p = link_permissions(&alpha, &hub);
        let publish: Vec<&str> = p.publish.iter().map(|g| g.subject.as_str()).collect();
        assert_eq!(publish.len(), 5);
        assert_eq!(publish[3], "hyperhive.hive.alpha.answer.>");
        assert_eq!(publish[4], "hyperhive.events.hive.alpha.>");
        for s in &publish[..3] {
            assert!(s.starts_with("$JS.hub.API."), "{s}");
            assert!(s.contains(".alpha"), "{s}");
        }
        let subscribe: Vec<&str> = p.subscribe.iter().map(|g| g.subject.as_str()).collect();
        assert_eq!(
            subscribe,
            [
                "hyperhive.hive.alpha.deploy",
                "hyperhive.hive.alpha.credential",
                "hyperhive.hive.alpha.logs.>",
                "hyperhive.knowledge",
                "_INBOX_hive-alpha.>",
            ]
        );
        for g in p.publish.iter().chain(&p.subscribe) {
            assert!(!g.subject.contains('*'), "{g:?}");
            assert!(!g.subject.starts_with("$JS.API"), "{g:?}");
            assert!(!g.subject.contains("swarm-controller"), "{g:?}");
        }
        assert!(!p.allow_responses);
    }

    fn key() -> String {
        nkeys::KeyPair::new_user().public_key()
    }

    fn site(name: &str, links: &[(&str, String)]) -> RosterLeafSite {
        RosterLeafSite {
            site: LeafSiteName::new(name).unwrap(),
            links: links
                .iter()
                .map(|(h, k)| (HiveName::new(*h).unwrap(), k.clone()))
                .collect(),
        }
    }

    /// A site hive's link is the only user of that hive's account at the
    /// hub; a site naming a hive off the roster, one without a domain, a
    /// hive at two sites, a site twice or a key another identity has is
    /// refused by name.
    #[test]
    fn a_link_is_the_user_of_its_hives_account() {
        use crate::permissions::{authorization, BUCKETS_ACCOUNT};
        let alpha_key = key();
        let hives = vec![
            RosterHive {
                hive: HiveName::new("alpha").unwrap(),
                nkey: alpha_key.clone(),
                jetstream_domain: Some("hub".into()),
            },
            RosterHive {
                hive: HiveName::new("beta").unwrap(),
                nkey: key(),
                jetstream_domain: None,
            },
        ];
        let link = key();
        let auth =
            authorization(&key(), &hives, &[site("edge", &[("alpha", link.clone())])]).unwrap();
        assert_eq!(auth.accounts[0].name, BUCKETS_ACCOUNT);
        assert_eq!(auth.accounts[0].users.len(), 1);
        let alpha = &auth.accounts[1];
        assert_eq!(alpha.name, "alpha");
        assert_eq!(alpha.users.len(), 1);
        assert_eq!(alpha.users[0].nkey, link);
        assert_eq!(
            alpha.users[0].role.to_string(),
            "leaf link of hive alpha at site edge"
        );
        assert_eq!(auth.users().count(), 3);

        let refused = |sites: Vec<RosterLeafSite>| {
            authorization(&key(), &hives, &sites)
                .unwrap_err()
                .to_string()
        };
        let err = refused(vec![site("edge", &[("zeta", key())])]);
        assert!(
            err.contains("leaf site edge lists hive zeta, which is not on the roster"),
            "{err}"
        );
        let err = refused(vec![site("edge", &[("beta", key())])]);
        assert!(
            err.contains("hive beta, which has no jetstream_domain"),
            "{err}"
        );
        let err = refused(vec![
            site("dock", &[("alpha", key())]),
            site("edge", &[("alpha", key())]),
        ]);
        assert!(
            err.contains("hive alpha is listed by leaf sites dock and edge"),
            "{err}"
        );
        let err = refused(vec![site("edge", &[]), site("edge", &[])]);
        assert!(err.contains("leaf site edge is listed twice"), "{err}");
        let err = refused(vec![site("edge", &[("alpha", alpha_key.clone())])]);
        assert!(
            err.contains(
                "hive alpha and the leaf link of hive alpha at site edge have the same nkey"
            ),
            "{err}"
        );
    }
}
