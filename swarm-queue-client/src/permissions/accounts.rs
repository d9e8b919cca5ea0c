//! The NATS accounts of a fleet: one for the buckets and the controller,
//! one per hive.
//!
//! Why accounts, and not only permissions: nats-server checks what a client
//! publishes and subscribes to, never the *reply subject* it attaches. The
//! server's own JetStream client publishes its answers (a put's ack, a
//! direct get's 404 or 408, an API error) to that reply subject, with no
//! permissions of its own. In one shared account, a hive that aims the reply
//! of its own status put at `$KV.hyperhive-wanted.beta` writes into beta's
//! declaration, and one aimed at `$JS.API.STREAM.PURGE.KV_…` purges a bucket.
//!
//! Across an account boundary the server rewrites the reply: a request that
//! crosses a *service import* reaches the buckets' account with a reply
//! subject of the server's own making (`_R_.…`), and the answer is delivered
//! back into the requester's account, to the reply it chose there. A hive's
//! account holds nothing but its own imports, so whatever reply it chooses,
//! the answer can land only on its own keys. Doorbells, notices, deploy
//! requests and the knowledge event reach it as *stream imports*. A deploy
//! request's reply subject is under the hive's own answer prefix
//! (`hyperhive.hive.<hive>.answer.<token>`), and the hive answers through a
//! service import of exactly that prefix: it can put an answer only where
//! the controller waits for *its* answers, and never reaches the
//! controller's inbox.
//!
//! Each export of the buckets' account that names a hive is bound to the
//! importing account by `account_token_position`: the token of the subject
//! where the hive name stands must equal the importing account's name. So
//! hive accounts are named exactly like their hive (hive names are
//! lowercase DNS labels), and the buckets' account is [`BUCKETS_ACCOUNT`]
//! (upper case, so it can never be a hive's name). The buckets' account has
//! the same exports and no import whatever the size of the fleet: each hive
//! adds only its own account.

use serde::Serialize;

use super::User;
use crate::buckets::Bucket;
use crate::names::HiveName;
use crate::permissions::JsApi;
use crate::presence::{
    CONNECT_EVENTS, CONNZ_EXPORT, CONNZ_REQUEST, DISCONNECT_EVENTS, SYSTEM_ACCOUNT,
};
use crate::subjects::{deploy_answer_prefix, HiveSubjects, KNOWLEDGE};

/// The account that holds the buckets (JetStream) and the controller.
pub const BUCKETS_ACCOUNT: &str = "HYPERHIVE";

/// Whether an export or import is a service (requests, with the reply
/// rewritten at the boundary) or a stream (messages one way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flow {
    Service,
    Stream,
}

impl Flow {
    fn word(self) -> &'static str {
        match self {
            Flow::Service => "service",
            Flow::Stream => "stream",
        }
    }
}

/// What an account offers to others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Export {
    pub flow: Flow,
    pub subject: String,
    /// 1-based token of `subject` that must equal the importing account's
    /// name (a `*` in the subject).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_token_position: Option<usize>,
    /// The only accounts that may import it; empty: any account of this
    /// config.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accounts: Vec<String>,
    /// A service every server answers (`response_type: stream`): without
    /// it the server passes on the first reply only, and the rest of a
    /// cluster's answers are dropped.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream_replies: bool,
    pub why: String,
}

/// What an account takes from another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Import {
    pub flow: Flow,
    /// The exporting account.
    pub account: String,
    /// The subject in the exporting account.
    pub subject: String,
    /// The importing account's own name for it, when not the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub why: String,
}

/// One account of the generated config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    pub name: String,
    /// Who the account is for, for the rendered comment.
    pub about: String,
    pub jetstream: bool,
    pub users: Vec<User>,
    pub exports: Vec<Export>,
    pub imports: Vec<Import>,
}

/// `subject` with a `*` where the hive name stands, and that token's
/// position: what [`BUCKETS_ACCOUNT`] exports for every hive at once.
fn per_hive(flow: Flow, subject: String, why: &str) -> Export {
    let position = subject.split('.').position(|t| t == "*").map(|i| i + 1);
    Export {
        flow,
        subject,
        account_token_position: position,
        accounts: Vec::new(),
        stream_replies: false,
        why: why.to_string(),
    }
}

/// The services of the buckets' account that each hive uses. A hive on a
/// leaf-node site sends the hub's `$JS.<domain>.API.…` forms; the hub maps
/// them to these in the hive's account, where its link lands
/// ([`super::leaf`]), before the account's imports see them.
fn bucket_services() -> Vec<Export> {
    let api = JsApi::local();
    vec![
        per_hive(
            Flow::Service,
            api.put(Bucket::Status, "*"),
            "each hive puts its own status key (the key is the importing account's name)",
        ),
        per_hive(
            Flow::Service,
            api.direct_get(Bucket::Wanted, "*"),
            "each hive reads its own declaration by direct get",
        ),
        per_hive(
            Flow::Service,
            api.direct_get(Bucket::Credentials, "*.>"),
            "each hive reads its own sealed credentials by direct get",
        ),
    ]
}

/// The exports of the buckets' account: each hive's own keys and subjects,
/// bound by name to the hive's account, and the knowledge event for all.
fn bucket_exports() -> Vec<Export> {
    let mut out = bucket_services();
    out.extend([
        per_hive(
            Flow::Stream,
            Bucket::Wanted.key_subject("*"),
            "doorbell: a write of a hive's declaration, to that hive",
        ),
        per_hive(
            Flow::Stream,
            Bucket::Credentials.key_subject("*.>"),
            "doorbell: a write of a hive's sealed credential, to that hive",
        ),
        per_hive(
            Flow::Stream,
            crate::subjects::all_credential_subjects(),
            "a hive's credential notices, to that hive",
        ),
        per_hive(
            Flow::Stream,
            crate::subjects::all_deploy_subjects(),
            "a hive's deploy requests, to that hive (the reply subject is under its answer prefix)",
        ),
        per_hive(
            Flow::Stream,
            crate::subjects::all_logs_subjects(),
            "a hive's log requests and the readers' acks, to that hive",
        ),
        per_hive(
            Flow::Service,
            crate::event_stream::all_hive_events(),
            "each hive publishes its own agents' events, under its own prefix only",
        ),
        per_hive(
            Flow::Service,
            crate::subjects::all_deploy_answers(),
            "each hive answers a deploy or logs request under its own answer prefix only",
        ),
        Export {
            flow: Flow::Stream,
            subject: KNOWLEDGE.to_string(),
            account_token_position: None,
            accounts: Vec::new(),
            stream_replies: false,
            why: "the knowledge repo changed, to every hive".to_string(),
        },
    ]);
    out
}

/// The buckets' account: JetStream, the controller, the exports above and
/// the server's connection events and list from the system account. It
/// imports nothing per hive: everything a hive does reaches it through that
/// hive's imports, so it stays the same whatever the size of the fleet (an
/// import per hive here made nats-server's config load grow with the
/// square of the fleet: docs/benchmarks-scale.md, "NATS accounts at fleet
/// size").
pub fn buckets_account(controller: User) -> Account {
    let imports = presence_imports();
    Account {
        name: BUCKETS_ACCOUNT.to_string(),
        about: "the buckets (JetStream) and the controller".to_string(),
        jetstream: true,
        users: vec![controller],
        exports: bucket_exports(),
        imports,
    }
}

/// The system account, defined so that it exports the server's connect
/// and disconnect events and its connection list to the buckets' account
/// only (see [`crate::presence`]): the controller learns within a moment
/// that a hive's connection closed. It has no users. nats-server takes an
/// account named `$SYS` as its system account when `system_account` is
/// not set.
pub fn system_account() -> Account {
    let only_buckets = |flow: Flow, subject: &str, why: &str| Export {
        flow,
        subject: subject.to_string(),
        account_token_position: None,
        accounts: vec![BUCKETS_ACCOUNT.to_string()],
        stream_replies: false,
        why: why.to_string(),
    };
    Account {
        name: SYSTEM_ACCOUNT.to_string(),
        about: "the server's system account: its connection events, to the controller only"
            .to_string(),
        jetstream: false,
        users: Vec::new(),
        exports: vec![
            only_buckets(
                Flow::Stream,
                CONNECT_EVENTS,
                "a client connected (the account token names its hive)",
            ),
            only_buckets(
                Flow::Stream,
                DISCONNECT_EVENTS,
                "a client's connection closed",
            ),
            // Every server of a cluster answers the list; a singleton
            // service would pass on the first answer only, and the hives
            // on the other servers would look offline.
            Export {
                stream_replies: true,
                ..only_buckets(
                    Flow::Service,
                    CONNZ_EXPORT,
                    "the open connections, every server's, read when the controller starts",
                )
            },
        ],
        imports: Vec::new(),
    }
}

/// What the buckets' account imports of the system account's exports.
fn presence_imports() -> Vec<Import> {
    let from_system = |flow: Flow, subject: &str, why: &str| Import {
        flow,
        account: SYSTEM_ACCOUNT.to_string(),
        subject: subject.to_string(),
        to: None,
        why: why.to_string(),
    };
    let connz = Import {
        to: Some(CONNZ_REQUEST.to_string()),
        ..from_system(
            Flow::Service,
            CONNZ_EXPORT,
            "the controller reads who is connected when it starts, as hyperhive.connz",
        )
    };
    vec![
        from_system(
            Flow::Stream,
            CONNECT_EVENTS,
            "the controller hears a hive connect",
        ),
        from_system(
            Flow::Stream,
            DISCONNECT_EVENTS,
            "the controller hears a hive's connection close",
        ),
        connz,
    ]
}

/// An import of `subject` from the buckets' account.
fn from_buckets(flow: Flow, subject: String, why: &str) -> Import {
    Import {
        flow,
        account: BUCKETS_ACCOUNT.to_string(),
        subject,
        to: None,
        why: why.to_string(),
    }
}

/// Hive `hive`'s account: its user (the hive, or its leaf link for a hive
/// on a leaf-node site) and what it imports of its own. It exports
/// nothing.
pub fn hive_account(hive: &HiveName, user: User) -> Account {
    let h = hive.as_str();
    let api = JsApi::local();
    let own_creds = format!("{h}.>");
    let subjects = HiveSubjects::new(hive);
    let service = |subject: String, why: &str| from_buckets(Flow::Service, subject, why);
    let stream = |subject: String, why: &str| from_buckets(Flow::Stream, subject, why);
    let imports = vec![
        service(api.put(Bucket::Status, h), "put its own status"),
        service(
            api.direct_get(Bucket::Wanted, h),
            "read its own declaration",
        ),
        service(
            api.direct_get(Bucket::Credentials, &own_creds),
            "read its own sealed credentials",
        ),
        stream(
            Bucket::Wanted.key_subject(h),
            "doorbell: a write of its own declaration",
        ),
        stream(
            Bucket::Credentials.key_subject(&own_creds),
            "doorbell: a write of one of its own credentials",
        ),
        stream(subjects.credential.clone(), "its own credential notices"),
        stream(subjects.deploy.clone(), "its own deploy requests"),
        stream(
            subjects.logs.clone(),
            "its own log requests and their readers' acks",
        ),
        service(
            format!("{}.>", deploy_answer_prefix(hive)),
            "answer a deploy or logs request (its frames), under its own answer prefix",
        ),
        stream(KNOWLEDGE.to_string(), "the knowledge repo changed"),
        service(
            crate::event_stream::hive_events(hive),
            "publish its own agents' events",
        ),
    ];
    let exports = Vec::new();
    Account {
        name: h.to_string(),
        about: format!("hive {h}"),
        jetstream: false,
        users: vec![user],
        exports,
        imports,
    }
}

impl Export {
    /// The `{ service: "…", … }` entry of the rendered config.
    pub(super) fn render(&self) -> String {
        let mut out = format!(
            "{{ {}: {}",
            self.flow.word(),
            super::render::quote(&self.subject)
        );
        if let Some(p) = self.account_token_position {
            out.push_str(&format!(", account_token_position: {p}"));
        }
        if !self.accounts.is_empty() {
            let names: Vec<String> = self
                .accounts
                .iter()
                .map(|a| super::render::quote(a))
                .collect();
            out.push_str(&format!(", accounts: [{}]", names.join(", ")));
        }
        if self.stream_replies {
            out.push_str(", response_type: stream");
        }
        out.push_str(" }");
        out
    }
}

impl Import {
    /// The `{ service: { account: …, subject: … } }` entry.
    pub(super) fn render(&self) -> String {
        let quote = super::render::quote;
        let to = match &self.to {
            Some(t) => format!(", to: {}", quote(t)),
            None => String::new(),
        };
        format!(
            "{{ {}: {{ account: {}, subject: {} }}{to} }}",
            self.flow.word(),
            quote(&self.account),
            quote(&self.subject)
        )
    }
}

/// The permissions every hive user keeps inside its own account: the same
/// grants as before accounts existed, so a hive that is given another
/// identity's subjects still gets a violation, not silence.
pub fn hive_user(hive: &HiveName, nkey: String, api: &JsApi) -> User {
    User {
        role: super::Role::Hive(hive.clone()),
        nkey,
        permissions: super::hive_permissions(hive, api),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::{authorization, RosterHive};

    fn key() -> String {
        nkeys::KeyPair::new_user().public_key()
    }

    fn roster(domain: Option<&str>) -> Vec<Account> {
        let hives: Vec<RosterHive> = ["beta", "alpha"]
            .iter()
            .map(|h| RosterHive {
                hive: HiveName::new(*h).unwrap(),
                nkey: key(),
                jetstream_domain: domain.map(str::to_string),
            })
            .collect();
        authorization(&key(), &hives, &[]).unwrap().accounts
    }

    /// A hive's account imports only its own keys and subjects (and the
    /// knowledge event), all from the buckets' account, in the local forms
    /// whatever its domain; it has no
    /// JetStream of its own and exports its deploy service to the buckets'
    /// account only.
    #[test]
    fn a_hive_account_reaches_only_its_own() {
        for domain in [None, Some("hub")] {
            let accounts = roster(domain);
            let names: Vec<&str> = accounts.iter().map(|a| a.name.as_str()).collect();
            assert_eq!(names, [BUCKETS_ACCOUNT, "alpha", "beta", SYSTEM_ACCOUNT]);
            let alpha = &accounts[1];
            assert!(!alpha.jetstream);
            assert_eq!(alpha.users.len(), 1);
            for import in &alpha.imports {
                assert_eq!(import.account, BUCKETS_ACCOUNT, "{import:?}");
                let subject = import.subject.as_str();
                assert!(!subject.contains("beta"), "{import:?}");
                assert!(!subject.split('.').any(|t| t == "*"), "{import:?}");
                assert!(
                    subject.contains(".alpha") || subject == KNOWLEDGE,
                    "{import:?}"
                );
                // The hub maps a site hive's domain forms before the
                // imports see them: the imports are the local forms.
                assert!(!subject.starts_with("$JS.hub."), "{import:?}");
            }
            // It offers nothing to any other account.
            assert!(alpha.exports.is_empty(), "{:?}", alpha.exports);
            let subjects: Vec<&str> = alpha.imports.iter().map(|i| i.subject.as_str()).collect();
            assert!(subjects.contains(&"hyperhive.hive.alpha.deploy"));
            assert!(subjects.contains(&"hyperhive.hive.alpha.logs.>"));
            assert!(subjects.contains(&"hyperhive.hive.alpha.answer.>"));
        }
    }

    /// Every export of the buckets' account that names a hive is bound to
    /// the importing account by the hive-name token, so one account can
    /// import only the keys named like it; the buckets' account imports
    /// nothing, so it does not grow with the fleet.
    #[test]
    fn the_buckets_exports_bind_each_key_to_its_hive_account() {
        // alpha with domain hub, beta beside the buckets.
        let hives: Vec<RosterHive> = [("alpha", Some("hub")), ("beta", None)]
            .iter()
            .map(|(h, d)| RosterHive {
                hive: HiveName::new(*h).unwrap(),
                nkey: key(),
                jetstream_domain: d.map(str::to_string),
            })
            .collect();
        let accounts = authorization(&key(), &hives, &[]).unwrap().accounts;
        let buckets = &accounts[0];
        assert!(buckets.jetstream);
        assert_eq!(buckets.users.len(), 1);
        for e in &buckets.exports {
            assert!(e.accounts.is_empty(), "{e:?}");
            match e.account_token_position {
                Some(p) => {
                    assert_eq!(e.subject.split('.').nth(p - 1), Some("*"), "{e:?}")
                }
                None => assert_eq!(e.subject, KNOWLEDGE, "{e:?}"),
            }
        }
        let imports: Vec<&Import> = buckets
            .imports
            .iter()
            .filter(|i| i.account != SYSTEM_ACCOUNT)
            .collect();
        assert!(imports.is_empty(), "{imports:?}");
        // Every hive import matches one export of the buckets' account.
        for hive in &accounts[1..accounts.len() - 1] {
            for i in &hive.imports {
                let exported = buckets.exports.iter().any(|e| {
                    e.flow == i.flow
                        && e.subject.split('.').count() <= i.subject.split('.').count()
                        && e.subject
                            .split('.')
                            .zip(i.subject.split('.'))
                            .all(|(a, b)| a == b || a == "*" || a == ">")
                });
                assert!(exported, "{i:?} has no export");
            }
        }
    }

    /// The system account exports exactly the connect and disconnect events
    /// and the connection list, to the buckets' account only, and has no
    /// user; only the buckets' account imports them.
    #[test]
    fn the_system_account_gives_only_the_connection_events_to_the_buckets_account() {
        let accounts = roster(None);
        let system = accounts.last().unwrap();
        assert_eq!(system.name, SYSTEM_ACCOUNT);
        assert!(system.users.is_empty() && system.imports.is_empty());
        let exports: Vec<(&str, &[String])> = system
            .exports
            .iter()
            .map(|e| (e.subject.as_str(), e.accounts.as_slice()))
            .collect();
        let only = [BUCKETS_ACCOUNT.to_string()];
        assert_eq!(
            exports,
            [
                (CONNECT_EVENTS, &only[..]),
                (DISCONNECT_EVENTS, &only[..]),
                (CONNZ_EXPORT, &only[..])
            ]
        );
        for account in &accounts[1..] {
            assert!(
                account.imports.iter().all(|i| i.account != SYSTEM_ACCOUNT),
                "{account:?}"
            );
        }
        let from_system = accounts[0]
            .imports
            .iter()
            .filter(|i| i.account == SYSTEM_ACCOUNT)
            .count();
        assert_eq!(from_system, 3);
    }
}
