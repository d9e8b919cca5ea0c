//! NATS accounts and per-identity permissions: who may publish and
//! subscribe to what.
//!
//! Each hive connects as its own nkey user and the controller as another.
//! This module turns the roster (hive name -> public user nkey, plus the
//! controller's key) into the nats-server `accounts { … }` block (the
//! accounts themselves in [`accounts`]), and within each account the users'
//! permissions, so that a hive reaches only what is its own:
//!
//! - it writes only its own status key, reads only its own wanted key and
//!   its own credential keys (by direct get), and holds no consumer;
//! - it subscribes only to its own deploy, credential and logs subjects, its own
//!   key subjects (doorbells), the knowledge subject and its own reply inbox;
//! - it publishes nothing else but its answers to deploy and logs requests, under
//!   its own answer prefix (`hyperhive.hive.<hive>.answer.>`).
//!
//! The controller is the only identity that creates buckets, declares,
//! seals credentials and publishes events.
//!
//! It lives in the contract crate because every line is a subject, bucket or
//! key format. Each grant carries the reason it exists; the rendered config
//! prints it as a comment and `docs/security.md` explains each one.
//!
//! What a hive sends (see [`crate::direct`]; checked against nats-server
//! 2.15.1 by `tests/tests/isolation_*.rs`):
//!
//! | operation | subject |
//! |---|---|
//! | doorbell (core NATS subscribe) | `$KV.hyperhive-wanted.<hive>`, `$KV.hyperhive-credentials.<hive>.>` |
//! | read a key ([`KeyReader::last`]) | `$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>` |
//! | put its status ([`put_own`]) | publish to `$KV.hyperhive-status.<hive>`, the ack comes to the inbox |
//!
//! A hive on a leaf-node site (`[hives.<name>] jetstream_domain` in the
//! roster, the same as its own `[nats] jetstream_domain`) sends the last two
//! to `$JS.<domain>.API.DIRECT.GET.…` and `$JS.<domain>.API.$KV.…`; its
//! grants name exactly those ([`JsApi`]), checked by the site's server.
//!
//! The controller opens buckets (`$JS.API.STREAM.INFO`), creates them, and
//! reads each with one ordered consumer (`Store::watch*`, unnamed create).
//!
//! [`KeyReader::last`]: crate::direct::KeyReader::last
//! [`put_own`]: crate::direct::put_own
//!
//! Invariant: no hive grant contains another hive's name or a wildcard in
//! the position of a hive name (tested below).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::buckets::Bucket;
use crate::names::{HiveName, LeafSiteName};
use crate::subjects::{
    all_credential_subjects, all_deploy_answers, all_deploy_subjects, all_logs_subjects,
    controller_inbox_prefix, deploy_answer_prefix, hive_inbox_prefix, HiveSubjects, KNOWLEDGE,
};

pub mod accounts;
pub mod js_api;
pub mod leaf;
mod render;
pub mod site;

pub use accounts::{Account, Export, Flow, Import, BUCKETS_ACCOUNT};
pub use js_api::{JsApi, NotOneToken};
pub use leaf::{link_permissions, RosterLeafSite};
pub use site::SiteConfig;

/// One allowed subject and why it is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub subject: String,
    /// One line for the rendered config's comment and the docs.
    pub why: String,
}

pub(crate) fn grant(subject: impl Into<String>, why: impl Into<String>) -> Grant {
    Grant {
        subject: subject.into(),
        why: why.into(),
    }
}

/// What one identity may publish and subscribe to. Anything not listed is
/// refused by the server with a permissions violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Permissions {
    pub publish: Vec<Grant>,
    pub subscribe: Vec<Grant>,
    /// May publish to the reply subject of a request it received (once per
    /// request), whatever that subject is.
    pub allow_responses: bool,
}

/// Who a user is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Controller,
    Hive(HiveName),
    /// The leaf-node link of one hive at a site ([`leaf`]).
    LeafLink {
        site: LeafSiteName,
        hive: HiveName,
    },
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Controller => f.write_str("controller"),
            Role::Hive(h) => write!(f, "hive {h}"),
            Role::LeafLink { site, hive } => write!(f, "leaf link of hive {hive} at site {site}"),
        }
    }
}

/// `{"role": "controller"}`, `{"role": "hive", "hive": "alpha"}`,
/// `{"role": "leaf_link", "leaf_site": "edge", "hive": "alpha"}` (flattened
/// into a user).
impl Serialize for Role {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        match self {
            Role::Controller => map.serialize_entry("role", "controller")?,
            Role::Hive(h) => {
                map.serialize_entry("role", "hive")?;
                map.serialize_entry("hive", h.as_str())?;
            }
            Role::LeafLink { site, hive } => {
                map.serialize_entry("role", "leaf_link")?;
                map.serialize_entry("leaf_site", site.as_str())?;
                map.serialize_entry("hive", hive.as_str())?;
            }
        }
        map.end()
    }
}

/// One nkey user of the generated authorization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    #[serde(flatten)]
    pub role: Role,
    /// Public user nkey (`U…`).
    pub nkey: String,
    pub permissions: Permissions,
}

/// The accounts of a whole roster: [`BUCKETS_ACCOUNT`] (the buckets and
/// the controller) first, then one per hive, by name. See [`accounts`] for
/// why the account, not the permissions, is the boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Authorization {
    pub accounts: Vec<Account>,
}

impl Authorization {
    /// Every user of every account, the controller first.
    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.accounts.iter().flat_map(|a| a.users.iter())
    }
}

/// The roster cannot be turned into an authorization.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RosterError {
    #[error("the nkey of the {role} ({key:?}) is not a public user nkey: it must start with U, as printed by `nk -gen user -pubout`")]
    NotUserKey { role: String, key: String },
    #[error("the {first} and the {second} have the same nkey {key}; every identity needs its own")]
    SharedKey {
        first: String,
        second: String,
        key: String,
    },
    #[error("hive {0} is listed twice")]
    DuplicateHive(HiveName),
    #[error("hive {hive}: jetstream_domain: {problem}")]
    BadDomain {
        hive: HiveName,
        problem: NotOneToken,
    },
    #[error("leaf site {0} is not in the roster (no [leaf_sites.{0}])")]
    UnknownSite(LeafSiteName),
    #[error("leaf site {0} is listed twice")]
    DuplicateSite(LeafSiteName),
    #[error("leaf site {site} lists hive {hive}, which is not on the roster")]
    UnknownSiteHive { site: LeafSiteName, hive: HiveName },
    #[error(
        "leaf site {site} lists hive {hive}, which has no jetstream_domain in the roster; a hive \
         on a leaf-node site reaches the buckets through the hub's domain: give it \
         `jetstream_domain = \"<hub domain>\"` under [hives.{hive}]"
    )]
    SiteHiveWithoutDomain { site: LeafSiteName, hive: HiveName },
    #[error(
        "hive {hive} is listed by leaf sites {first} and {second}; a hive connects to one site"
    )]
    HiveAtTwoSites {
        hive: HiveName,
        first: LeafSiteName,
        second: LeafSiteName,
    },
}

fn check_user_key(role: &Role, key: &str) -> Result<(), RosterError> {
    if is_user_public_key(key) {
        Ok(())
    } else {
        Err(RosterError::NotUserKey {
            role: role.to_string(),
            key: shown_key(key),
        })
    }
}

/// Whether `key` is a public user nkey as nats-server takes one: `U…`,
/// its base32 and its checksum intact. Not whether its 32 bytes are a
/// point of the curve: nats-server does not ask that either (a key that
/// is not one only never signs in), and asking cost 5 us a key, 50 ms for
/// each read of a roster of 10,000 hives.
pub fn is_user_public_key(key: &str) -> bool {
    key.starts_with('U') && nkeys::from_public_key(key).is_ok()
}

/// `key` as an error message may show it: a seed pasted by mistake is not
/// echoed back into a log or a terminal, and a long value is cut.
pub fn shown_key(key: &str) -> String {
    if key.starts_with('S') {
        "S… (a seed, not shown; give the public key)".to_string()
    } else {
        key.chars().take(80).collect()
    }
}

/// The permissions of one hive: its own keys by direct get, a doorbell
/// subscription on each of its own key subjects, a put of its own status.
/// No stream info (with a subject filter it lists every key of a bucket),
/// no consumer of any kind (server state per hive), no bucket creation.
///
/// `api` is where its JetStream requests go: [`JsApi::local`], or the hub's
/// domain for a hive on a leaf-node site (`[nats] jetstream_domain`), whose
/// direct gets and status put the server it connects to sees as
/// `$JS.<domain>.API.…`. It gets those forms only: the site's own
/// JetStream (`$JS.API`) is nothing of a hive's.
pub fn hive_permissions(hive: &HiveName, api: &JsApi) -> Permissions {
    let status = Bucket::Status;
    let wanted = Bucket::Wanted;
    let creds = Bucket::Credentials;
    let own_creds = format!("{hive}.>");
    let subjects = HiveSubjects::new(hive);
    let across = match api.domain_name() {
        Some(d) => format!(" (through JetStream domain {d})"),
        None => String::new(),
    };
    let publish = vec![
        grant(
            api.put(status, hive.as_str()),
            format!("put its own status, and nothing else in the status bucket{across}"),
        ),
        grant(
            api.direct_get(wanted, hive.as_str()),
            format!(
                "read its own declaration (after a doorbell, at boot, on reconnect, on a timer){across}"
            ),
        ),
        grant(
            api.direct_get(creds, &own_creds),
            format!(
                "read one of its own sealed credentials (after a doorbell or a notice, at boot){across}"
            ),
        ),
        grant(
            format!("{}.>", deploy_answer_prefix(hive)),
            "answer a deploy or logs request (its reply subject is under this prefix)",
        ),
        grant(
            crate::event_stream::hive_events(hive),
            "publish its own agents' lifecycle events into hyperhive-events, under its own prefix only",
        ),
    ];
    let subscribe = vec![
        grant(KNOWLEDGE, "hear that the knowledge repo changed"),
        grant(subjects.deploy, "its own deploy requests"),
        grant(subjects.credential, "its own credential notices"),
        grant(
            subjects.logs,
            "its own log requests and their readers' acks (the frames go out under its answer prefix)",
        ),
        grant(
            wanted.key_subject(hive.as_str()),
            "doorbell: a write of its own declaration (then it reads the key)",
        ),
        grant(
            creds.key_subject(&own_creds),
            "doorbell: a write of one of its own credentials (then it reads the key)",
        ),
        grant(
            format!("{}.>", hive_inbox_prefix(hive)),
            "its own reply inbox: JetStream answers and its status put's ack",
        ),
    ];
    Permissions {
        publish,
        subscribe,
        allow_responses: false,
    }
}

/// What the controller may ask of bucket `b`'s JetStream API: open,
/// create and fix it, read any key, and watch or list it.
fn bucket_api_grants(b: Bucket) -> Vec<Grant> {
    let stream = b.stream_name();
    let name = b.name();
    vec![
            grant(js_api::stream_info(b), format!("open {name}")),
            grant(
                js_api::stream_create(b),
                format!("create {name} (only the controller creates buckets)"),
            ),
            grant(
                format!("$JS.API.STREAM.UPDATE.{stream}"),
                format!("turn on deny_delete and deny_purge of an older {name} (`nats-config --check --fix`)"),
            ),
            grant(
                js_api::direct_get(b, ">"),
                format!("read any key of {name}"),
            ),
            grant(
                format!("$JS.API.DIRECT.GET.{stream}"),
                format!("read {name} by revision"),
            ),
            grant(
                format!("$JS.API.STREAM.MSG.GET.{stream}"),
                format!("read {name} by revision, older servers' form"),
            ),
            grant(
                js_api::consumer_create_unnamed(b),
                format!("watch or list all of {name} (unnamed consumer)"),
            ),
            grant(
                format!("{}.>", js_api::consumer_create_unnamed(b)),
                format!("watch or list {name} (named consumer)"),
            ),
            grant(
                js_api::consumer_info(b, "*"),
                format!("follow a watch or history read of {name}"),
            ),
            grant(
                js_api::consumer_delete(b, "*"),
                format!("clean up its own consumers on {name}"),
            ),
    ]
}

/// What the controller may ask of the events stream: open and create it
/// with its limits (and update them), publish its audit events, and read
/// it (`events`, the dashboard) with consumers of its own.
fn events_grants() -> Vec<Grant> {
    let s = crate::event_stream::EVENTS_STREAM;
    vec![
        grant(format!("$JS.API.STREAM.INFO.{s}"), format!("open {s}")),
        grant(
            format!("$JS.API.STREAM.CREATE.{s}"),
            format!("create {s} with its limits (only the controller does)"),
        ),
        grant(
            format!("$JS.API.STREAM.UPDATE.{s}"),
            format!("apply changed [events] limits to {s}"),
        ),
        grant(
            format!("$JS.API.CONSUMER.CREATE.{s}"),
            format!("read {s} (`events`, the dashboard)"),
        ),
        grant(
            format!("$JS.API.CONSUMER.CREATE.{s}.>"),
            format!("read {s} with a filter"),
        ),
        grant(
            format!("$JS.API.CONSUMER.INFO.{s}.*"),
            format!("follow a read of {s}"),
        ),
        grant(
            format!("$JS.API.CONSUMER.DELETE.{s}.*"),
            format!("clean up its own consumers on {s}"),
        ),
        grant(
            crate::event_stream::all_audit_events(),
            "record every operator action, with who did it",
        ),
    ]
}

/// The permissions of the controller: everything hyperhive needs of the
/// buckets (the hives' three and its own rollouts, deliveries and
/// maintenance buckets) and the event
/// subjects, and nothing outside them.
pub fn controller_permissions() -> Permissions {
    let mut publish = vec![grant(
        "$JS.API.INFO",
        "JetStream account info (what `nats` tooling and health checks ask first)",
    )];
    for b in Bucket::ALL {
        publish.extend(bucket_api_grants(b));
    }
    publish.extend(events_grants());
    publish.extend([
        grant(
            Bucket::Wanted.key_subject(">"),
            "declare: put (or delete) any hive's declaration",
        ),
        grant(
            Bucket::Credentials.key_subject(">"),
            "store sealed credentials for any hive",
        ),
        grant(
            Bucket::Rollouts.key_subject(">"),
            "record a staged rollout's state (compare-and-set); no hive has any grant on it",
        ),
        grant(
            Bucket::Deliveries.key_subject(">"),
            "record a webhook delivery once and an agent's deployed commit; no hive has any grant on it",
        ),
        grant(
            Bucket::Maintenance.key_subject(">"),
            "put a hive in maintenance or end it (compare-and-set); no hive has any grant on it",
        ),
        grant(KNOWLEDGE, "announce a knowledge repo change"),
        grant(all_deploy_subjects(), "ask any hive to deploy an agent"),
        grant(
            all_logs_subjects(),
            "ask any hive for an agent's logs, and acknowledge the frames it reads",
        ),
        grant(
            all_credential_subjects(),
            "tell any hive a credential is waiting",
        ),
        connz_grant(),
    ]);
    Permissions {
        publish,
        subscribe: controller_subscriptions(),
        allow_responses: false,
    }
}

/// The controller's grant to ask for the connection list, under the name
/// the buckets' account imports the system account's export
/// ([`crate::presence`]).
fn connz_grant() -> Grant {
    grant(
        crate::presence::CONNZ_REQUEST,
        "read who is connected when it starts (the system account's export, imported under this name)",
    )
}

/// What the controller subscribes to: its inbox, the hives' deploy
/// answers, and the two event subjects the system account exports to it
/// ([`crate::presence`]).
fn controller_subscriptions() -> Vec<Grant> {
    use crate::presence::{CONNECT_EVENTS, DISCONNECT_EVENTS};
    vec![
        grant(
            format!("{}.>", controller_inbox_prefix()),
            "its own reply inbox: JetStream answers, watch deliveries",
        ),
        grant(
            all_deploy_answers(),
            "the hives' answers to its deploy requests (each hive answers under its own prefix)",
        ),
        grant(
            CONNECT_EVENTS,
            "hear a hive connect (the system account's export)",
        ),
        grant(
            DISCONNECT_EVENTS,
            "hear a hive's connection close, to show it offline at once",
        ),
    ]
}

/// One hive of the roster, as the authorization needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterHive {
    pub hive: HiveName,
    /// Public user nkey (`U…`).
    pub nkey: String,
    /// The JetStream domain of the buckets when the hive reaches them
    /// through a leaf-node site: the same value as its own `[nats]
    /// jetstream_domain`. `None`: the hive connects to the buckets' servers.
    pub jetstream_domain: Option<String>,
}

/// Build the hub's accounts for a roster: the controller's public user
/// nkey, each hive's, and the link of each hive at a leaf-node site (the
/// user of that hive's account at the hub, in place of the hive's own,
/// which is a user of the site's server: [`site`]). Every key must be a valid
/// public user key and no two identities may share one; a hive's domain
/// must be one subject token; a site lists hives of the roster that have a
/// domain, each at one site only.
pub fn authorization(
    controller_nkey: &str,
    hives: &[RosterHive],
    sites: &[RosterLeafSite],
) -> Result<Authorization, RosterError> {
    let controller = Role::Controller;
    check_user_key(&controller, controller_nkey)?;
    let mut keys = KeysSeen(vec![(controller_nkey.to_string(), controller.to_string())]);
    let mut seen = BTreeSet::new();
    let mut sorted: Vec<&RosterHive> = hives.iter().collect();
    sorted.sort_by(|a, b| a.hive.cmp(&b.hive));
    for entry in &sorted {
        let hive = &entry.hive;
        if !seen.insert(hive.clone()) {
            return Err(RosterError::DuplicateHive(hive.clone()));
        }
        keys.claim(&Role::Hive(hive.clone()), &entry.nkey)?;
        entry.api()?;
    }
    let mut links = leaf::link_users(sites, &sorted, &mut keys)?;
    let mut hive_accounts = Vec::with_capacity(sorted.len());
    for entry in &sorted {
        let hive = &entry.hive;
        // A hive at a site connects to the site's server; at the hub, its
        // account holds its link instead.
        let user = match links.remove(hive) {
            Some(link) => link,
            None => accounts::hive_user(hive, entry.nkey.clone(), &entry.api()?),
        };
        hive_accounts.push(accounts::hive_account(hive, user));
    }
    let controller = User {
        role: controller,
        nkey: controller_nkey.to_string(),
        permissions: controller_permissions(),
    };
    let mut all = vec![accounts::buckets_account(controller)];
    all.extend(hive_accounts);
    all.push(accounts::system_account());
    Ok(Authorization { accounts: all })
}

impl RosterHive {
    /// Where its JetStream requests go: its domain, or the local API.
    pub(crate) fn api(&self) -> Result<JsApi, RosterError> {
        match &self.jetstream_domain {
            Some(d) => JsApi::domain(d).map_err(|problem| RosterError::BadDomain {
                hive: self.hive.clone(),
                problem,
            }),
            None => Ok(JsApi::local()),
        }
    }
}

/// The public keys given so far, each with whose it is.
pub(crate) struct KeysSeen(Vec<(String, String)>);

impl KeysSeen {
    /// Check `key` is `role`'s own valid public user key and record it.
    pub(crate) fn claim(&mut self, role: &Role, key: &str) -> Result<(), RosterError> {
        check_user_key(role, key)?;
        if let Some((_, first)) = self.0.iter().find(|(k, _)| k == key) {
            return Err(RosterError::SharedKey {
                first: first.clone(),
                second: role.to_string(),
                key: key.to_string(),
            });
        }
        self.0.push((key.to_string(), role.to_string()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_key() -> String {
        nkeys::KeyPair::new_user().public_key()
    }

    fn entry(hive: &str, nkey: String) -> RosterHive {
        RosterHive {
            hive: HiveName::new(hive).unwrap(),
            nkey,
            jetstream_domain: None,
        }
    }

    fn roster() -> (String, Vec<RosterHive>) {
        (
            user_key(),
            vec![entry("beta", user_key()), entry("alpha", user_key())],
        )
    }

    #[test]
    fn a_user_key_is_u_with_its_checksum_intact() {
        let key = user_key();
        assert!(is_user_public_key(&key));
        let account = nkeys::KeyPair::new_account().public_key();
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        // One character changed: the checksum no longer matches.
        let mut typo = key.clone().into_bytes();
        typo[20] = if typo[20] == b'A' { b'B' } else { b'A' };
        let typo = String::from_utf8(typo).unwrap();
        for bad in [
            &account,
            &seed,
            &typo,
            &key[..55].to_string(),
            &String::new(),
        ] {
            assert!(!is_user_public_key(bad), "{bad} taken");
        }
        assert!(!shown_key(&seed).contains(&seed[2..]));
        assert_eq!(shown_key(&key), key);
    }

    #[test]
    fn hive_grants_name_only_that_hive() {
        let alpha = HiveName::new("alpha").unwrap();
        let p = hive_permissions(&alpha, &JsApi::local());
        for g in p.publish.iter().chain(&p.subscribe) {
            assert!(!g.subject.contains("beta"), "{g:?}");
            assert!(!g.subject.split('.').any(|t| t == "*"), "{g:?}");
            if g.subject.ends_with('>') {
                assert!(
                    g.subject.contains(".alpha.") || g.subject.starts_with("_INBOX_hive-alpha."),
                    "{g:?}"
                );
            }
        }
        let publish: Vec<&str> = p.publish.iter().map(|g| g.subject.as_str()).collect();
        assert!(publish.contains(&"$KV.hyperhive-status.alpha"));
        assert!(!publish
            .iter()
            .any(|s| s.starts_with("$KV.hyperhive-wanted")));
        // The rollout state and the webhook's deliveries are the controllers' alone.
        for g in p.publish.iter().chain(&p.subscribe) {
            assert!(!g.subject.contains("hyperhive-rollouts"), "{g:?}");
            assert!(!g.subject.contains("hyperhive-deliveries"), "{g:?}");
            assert!(!g.subject.contains("hyperhive-maintenance"), "{g:?}");
        }
        // Of the core subjects, only its own answer prefix and events.
        assert_eq!(
            publish
                .iter()
                .filter(|s| s.starts_with("hyperhive."))
                .collect::<Vec<_>>(),
            [
                &"hyperhive.hive.alpha.answer.>",
                &"hyperhive.events.hive.alpha.>"
            ]
        );
        assert!(!publish.iter().any(|s| s.contains("STREAM.CREATE")));
        // No stream info (it lists key names), no consumer of any kind.
        assert!(!publish.iter().any(|s| s.contains("STREAM.INFO")));
        assert!(!publish.iter().any(|s| s.contains("CONSUMER")));
        assert!(!publish.contains(&"$JS.API.INFO"));
        assert_eq!(
            publish,
            vec![
                "$KV.hyperhive-status.alpha",
                "$JS.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.alpha",
                "$JS.API.DIRECT.GET.KV_hyperhive-credentials.$KV.hyperhive-credentials.alpha.>",
                "hyperhive.hive.alpha.answer.>",
                "hyperhive.events.hive.alpha.>",
            ]
        );
        let subscribe: Vec<&str> = p.subscribe.iter().map(|g| g.subject.as_str()).collect();
        assert!(subscribe.contains(&"$KV.hyperhive-wanted.alpha"));
        assert!(subscribe.contains(&"$KV.hyperhive-credentials.alpha.>"));
        assert!(!subscribe
            .iter()
            .any(|s| s.starts_with("$KV.hyperhive-status")));
        // It answers under its own prefix, never to a reply it was sent.
        assert!(!p.allow_responses);
    }

    #[test]
    fn controller_grants_cover_events_and_declarations() {
        let p = controller_permissions();
        let publish: Vec<&str> = p.publish.iter().map(|g| g.subject.as_str()).collect();
        for s in [
            "$KV.hyperhive-wanted.>",
            "$KV.hyperhive-credentials.>",
            "$KV.hyperhive-rollouts.>",
            "$JS.API.STREAM.CREATE.KV_hyperhive-rollouts",
            "$KV.hyperhive-deliveries.>",
            "$JS.API.STREAM.CREATE.KV_hyperhive-deliveries",
            "$JS.API.DIRECT.GET.KV_hyperhive-deliveries.$KV.hyperhive-deliveries.>",
            "$JS.API.DIRECT.GET.KV_hyperhive-rollouts.$KV.hyperhive-rollouts.>",
            "$KV.hyperhive-maintenance.>",
            "$JS.API.STREAM.CREATE.KV_hyperhive-maintenance",
            "$JS.API.DIRECT.GET.KV_hyperhive-maintenance.$KV.hyperhive-maintenance.>",
            "hyperhive.knowledge",
            "hyperhive.hive.*.deploy",
            "hyperhive.hive.*.logs.>",
            "hyperhive.hive.*.credential",
            "$JS.API.STREAM.CREATE.KV_hyperhive-status",
            "$JS.API.STREAM.UPDATE.KV_hyperhive-wanted",
        ] {
            assert!(publish.contains(&s), "{s} missing");
        }
        assert!(!publish
            .iter()
            .any(|s| s.starts_with("$KV.hyperhive-status")));
        // Its inbox, the hives' deploy answers, and of the system account
        // exactly the two event subjects (and, to publish, the
        // connection-list request).
        let subscribe: Vec<&str> = p.subscribe.iter().map(|g| g.subject.as_str()).collect();
        assert_eq!(
            subscribe,
            [
                "_INBOX_swarm-controller.>",
                "hyperhive.hive.*.answer.>",
                "$SYS.ACCOUNT.*.CONNECT",
                "$SYS.ACCOUNT.*.DISCONNECT"
            ]
        );
        let system: Vec<&str> = publish
            .iter()
            .copied()
            .filter(|s| s.starts_with("$SYS"))
            .collect();
        assert!(system.is_empty(), "{system:?}");
        assert!(publish.contains(&crate::presence::CONNZ_REQUEST));
    }

    #[test]
    fn render_lists_every_user_sorted() {
        let (controller, hives) = roster();
        let auth = authorization(&controller, &hives, &[]).unwrap();
        let text = auth.to_server_config();
        let c = text.find(&controller).unwrap();
        let a = text.find(&hives[1].nkey).unwrap();
        let b = text.find(&hives[0].nkey).unwrap();
        assert!(c < a && a < b, "controller, then hives by name:\n{text}");
        assert!(text.contains("\"$KV.hyperhive-status.alpha\""));
        assert!(!text.contains("allow_responses"));
        assert_eq!(text.matches("nkey:").count(), 3);
        let accounts = text.find("accounts {").unwrap();
        let (h, a, b) = (
            text.find("\"HYPERHIVE\": {").unwrap(),
            text.find("\"alpha\": {").unwrap(),
            text.find("\"beta\": {").unwrap(),
        );
        assert!(accounts < h && h < a && a < b, "{text}");
        let json = auth.to_json();
        assert_eq!(json["accounts"][0]["name"], BUCKETS_ACCOUNT);
        assert_eq!(json["accounts"][0]["users"][0]["role"], "controller");
        assert_eq!(json["accounts"][1]["name"], "alpha");
        assert_eq!(json["accounts"][1]["users"][0]["role"], "hive");
        assert_eq!(json["accounts"][1]["users"][0]["hive"], "alpha");
        assert_eq!(json["accounts"][2]["name"], "beta");
    }

    #[test]
    fn bad_rosters_are_refused_by_name() {
        let (controller, hives) = roster();
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let err = authorization(&seed, &hives, &[]).unwrap_err().to_string();
        assert!(err.contains("controller") && !err.contains(&seed), "{err}");
        let account = nkeys::KeyPair::new_account().public_key();
        let bad = vec![entry("alpha", account.clone())];
        let err = authorization(&controller, &bad, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("hive alpha") && err.contains(&account),
            "{err}"
        );
        let shared = vec![entry("alpha", controller.clone())];
        let err = authorization(&controller, &shared, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("same nkey"), "{err}");
        let twice = vec![hives[0].clone(), hives[0].clone()];
        assert!(matches!(
            authorization(&controller, &twice, &[]),
            Err(RosterError::DuplicateHive(_))
        ));
        let dotted = vec![RosterHive {
            jetstream_domain: Some("hub.eu".into()),
            ..entry("alpha", user_key())
        }];
        let err = authorization(&controller, &dotted, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("hive alpha") && err.contains("\"hub.eu\""),
            "{err}"
        );
    }

    /// A hive on a leaf-node site gets the same grants, its JetStream ones
    /// under `$JS.<domain>.API` and nothing under the site's own `$JS.API`.
    #[test]
    fn a_hive_in_a_domain_gets_the_domain_forms_only() {
        let alpha = HiveName::new("alpha").unwrap();
        let local = hive_permissions(&alpha, &JsApi::local());
        let hub = hive_permissions(&alpha, &JsApi::domain("hub").unwrap());
        let publish: Vec<&str> = hub.publish.iter().map(|g| g.subject.as_str()).collect();
        assert_eq!(
            publish,
            vec![
                "$JS.hub.API.$KV.hyperhive-status.alpha",
                "$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.alpha",
                "$JS.hub.API.DIRECT.GET.KV_hyperhive-credentials.$KV.hyperhive-credentials.alpha.>",
                "hyperhive.hive.alpha.answer.>",
                "hyperhive.events.hive.alpha.>",
            ]
        );
        for g in hub.publish.iter().chain(&hub.subscribe) {
            assert!(
                !g.subject.contains("beta") && !g.subject.contains('*'),
                "{g:?}"
            );
            assert!(!g.subject.starts_with("$JS.API"), "{g:?}");
            assert!(
                !g.subject.contains("CONSUMER") && !g.subject.contains("STREAM."),
                "{g:?}"
            );
        }
        // Subscriptions are core NATS: the same in any domain.
        assert_eq!(hub.subscribe.len(), local.subscribe.len());
        for (h, l) in hub.subscribe.iter().zip(&local.subscribe) {
            assert_eq!(h.subject, l.subject);
        }
        assert!(!hub.allow_responses);

        let (controller, mut hives) = roster();
        hives[1].jetstream_domain = Some("hub".into());
        let text = authorization(&controller, &hives, &[])
            .unwrap()
            .to_server_config();
        assert!(
            text.contains("\"$JS.hub.API.$KV.hyperhive-status.alpha\""),
            "{text}"
        );
        assert!(text.contains("\"$KV.hyperhive-status.beta\""), "{text}");
        assert!(
            !text.contains("$JS.hub.API.DIRECT.GET.KV_hyperhive-wanted.$KV.hyperhive-wanted.beta")
        );
    }
}
