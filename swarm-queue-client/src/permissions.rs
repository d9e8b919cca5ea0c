//! Per-identity NATS permissions: who may publish and subscribe to what.
//!
//! Each hive connects as its own nkey user and the controller as another.
//! This module turns the roster (hive name -> public user nkey, plus the
//! controller's key) into the nats-server `authorization { users = [...] }`
//! block, so that a hive reaches only what is its own:
//!
//! - it writes only its own status key, reads only its own wanted key and
//!   its own credential keys (by direct get), and holds no consumer;
//! - it subscribes only to its own deploy and credential subjects, its own
//!   key subjects (doorbells), the knowledge subject and its own reply inbox;
//! - it publishes nothing else, except replies to requests it received
//!   (`allow_responses`), which is how it answers a deploy request.
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
use crate::names::HiveName;
use crate::subjects::{
    all_credential_subjects, all_deploy_subjects, controller_inbox_prefix, hive_inbox_prefix,
    HiveSubjects, KNOWLEDGE,
};

pub mod js_api;
mod render;

pub use js_api::{JsApi, NotOneToken};

/// One allowed subject and why it is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub subject: String,
    /// One line for the rendered config's comment and the docs.
    pub why: String,
}

fn grant(subject: impl Into<String>, why: impl Into<String>) -> Grant {
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", content = "hive", rename_all = "lowercase")]
pub enum Role {
    Controller,
    Hive(HiveName),
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Controller => f.write_str("controller"),
            Role::Hive(h) => write!(f, "hive {h}"),
        }
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

/// The `authorization` block for a whole roster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Authorization {
    pub users: Vec<User>,
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
}

fn check_user_key(role: &Role, key: &str) -> Result<(), RosterError> {
    let valid = key.starts_with('U') && nkeys::KeyPair::from_public_key(key).is_ok();
    if valid {
        Ok(())
    } else {
        // A seed pasted by mistake must not be echoed back into a log.
        let shown = if key.starts_with('S') {
            "S… (a seed, not shown; give the public key)".to_string()
        } else {
            key.chars().take(80).collect()
        };
        Err(RosterError::NotUserKey {
            role: role.to_string(),
            key: shown,
        })
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
    ];
    let subscribe = vec![
        grant(KNOWLEDGE, "hear that the knowledge repo changed"),
        grant(subjects.deploy, "its own deploy requests"),
        grant(subjects.credential, "its own credential notices"),
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
        allow_responses: true,
    }
}

/// The permissions of the controller: everything hyperhive needs of the
/// buckets (the hives' three and its own `hyperhive-rollouts`) and the event
/// subjects, and nothing outside them.
pub fn controller_permissions() -> Permissions {
    let mut publish = vec![grant(
        "$JS.API.INFO",
        "JetStream account info (what `nats` tooling and health checks ask first)",
    )];
    for b in Bucket::ALL {
        let stream = b.stream_name();
        let name = b.name();
        publish.extend([
            grant(js_api::stream_info(b), format!("open {name}")),
            grant(
                js_api::stream_create(b),
                format!("create {name} (only the controller creates buckets)"),
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
        ]);
    }
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
        grant(KNOWLEDGE, "announce a knowledge repo change"),
        grant(all_deploy_subjects(), "ask any hive to deploy an agent"),
        grant(
            all_credential_subjects(),
            "tell any hive a credential is waiting",
        ),
    ]);
    let subscribe = vec![grant(
        format!("{}.>", controller_inbox_prefix()),
        "its own reply inbox: deploy replies, JetStream answers, watch deliveries",
    )];
    Permissions {
        publish,
        subscribe,
        allow_responses: false,
    }
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

/// Build the authorization for a roster: the controller's public user nkey
/// and each hive's. Every key must be a valid public user key and no two
/// identities may share one; a hive's domain must be one subject token.
pub fn authorization(
    controller_nkey: &str,
    hives: &[RosterHive],
) -> Result<Authorization, RosterError> {
    let mut users = Vec::with_capacity(hives.len() + 1);
    let controller = Role::Controller;
    check_user_key(&controller, controller_nkey)?;
    users.push(User {
        role: controller,
        nkey: controller_nkey.to_string(),
        permissions: controller_permissions(),
    });
    let mut seen = BTreeSet::new();
    let mut sorted: Vec<&RosterHive> = hives.iter().collect();
    sorted.sort_by(|a, b| a.hive.cmp(&b.hive));
    for entry in sorted {
        let RosterHive {
            hive,
            nkey: key,
            jetstream_domain,
        } = entry;
        if !seen.insert(hive.clone()) {
            return Err(RosterError::DuplicateHive(hive.clone()));
        }
        let role = Role::Hive(hive.clone());
        check_user_key(&role, key)?;
        if let Some(other) = users.iter().find(|u| &u.nkey == key) {
            return Err(RosterError::SharedKey {
                first: other.role.to_string(),
                second: role.to_string(),
                key: key.clone(),
            });
        }
        let api = match jetstream_domain {
            Some(d) => JsApi::domain(d).map_err(|problem| RosterError::BadDomain {
                hive: hive.clone(),
                problem,
            })?,
            None => JsApi::local(),
        };
        users.push(User {
            role,
            nkey: key.clone(),
            permissions: hive_permissions(hive, &api),
        });
    }
    Ok(Authorization { users })
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
        // The rollout state is the controllers' alone.
        for g in p.publish.iter().chain(&p.subscribe) {
            assert!(!g.subject.contains("hyperhive-rollouts"), "{g:?}");
        }
        assert!(!publish.iter().any(|s| s.starts_with("hyperhive.")));
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
            ]
        );
        let subscribe: Vec<&str> = p.subscribe.iter().map(|g| g.subject.as_str()).collect();
        assert!(subscribe.contains(&"$KV.hyperhive-wanted.alpha"));
        assert!(subscribe.contains(&"$KV.hyperhive-credentials.alpha.>"));
        assert!(!subscribe
            .iter()
            .any(|s| s.starts_with("$KV.hyperhive-status")));
        assert!(p.allow_responses);
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
            "$JS.API.DIRECT.GET.KV_hyperhive-rollouts.$KV.hyperhive-rollouts.>",
            "hyperhive.knowledge",
            "hyperhive.hive.*.deploy",
            "hyperhive.hive.*.credential",
            "$JS.API.STREAM.CREATE.KV_hyperhive-status",
        ] {
            assert!(publish.contains(&s), "{s} missing");
        }
        assert!(!publish
            .iter()
            .any(|s| s.starts_with("$KV.hyperhive-status")));
        assert_eq!(p.subscribe.len(), 1);
    }

    #[test]
    fn render_lists_every_user_sorted() {
        let (controller, hives) = roster();
        let auth = authorization(&controller, &hives).unwrap();
        let text = auth.to_server_config();
        let c = text.find(&controller).unwrap();
        let a = text.find(&hives[1].nkey).unwrap();
        let b = text.find(&hives[0].nkey).unwrap();
        assert!(c < a && a < b, "controller, then hives by name:\n{text}");
        assert!(text.contains("\"$KV.hyperhive-status.alpha\""));
        assert!(text.contains("allow_responses: true"));
        assert_eq!(text.matches("nkey:").count(), 3);
        let json = auth.to_json();
        assert_eq!(json["users"][1]["role"], "hive");
        assert_eq!(json["users"][1]["hive"], "alpha");
        assert_eq!(json["users"][0]["role"], "controller");
    }

    #[test]
    fn bad_rosters_are_refused_by_name() {
        let (controller, hives) = roster();
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let err = authorization(&seed, &hives).unwrap_err().to_string();
        assert!(err.contains("controller") && !err.contains(&seed), "{err}");
        let account = nkeys::KeyPair::new_account().public_key();
        let bad = vec![entry("alpha", account.clone())];
        let err = authorization(&controller, &bad).unwrap_err().to_string();
        assert!(
            err.contains("hive alpha") && err.contains(&account),
            "{err}"
        );
        let shared = vec![entry("alpha", controller.clone())];
        let err = authorization(&controller, &shared).unwrap_err().to_string();
        assert!(err.contains("same nkey"), "{err}");
        let twice = vec![hives[0].clone(), hives[0].clone()];
        assert!(matches!(
            authorization(&controller, &twice),
            Err(RosterError::DuplicateHive(_))
        ));
        let dotted = vec![RosterHive {
            jetstream_domain: Some("hub.eu".into()),
            ..entry("alpha", user_key())
        }];
        let err = authorization(&controller, &dotted).unwrap_err().to_string();
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
        assert!(hub.allow_responses);

        let (controller, mut hives) = roster();
        hives[1].jetstream_domain = Some("hub".into());
        let text = authorization(&controller, &hives)
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
