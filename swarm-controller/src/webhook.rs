//! Forge push webhooks (Gitea, Forgejo, GitHub): who sent it, and what it
//! asks for. Pure functions; `serve` does the publishing.
//!
//! **Authentication.** Every forge signs the raw body with HMAC-SHA256 and
//! the shared secret: GitHub in `X-Hub-Signature-256: sha256=<hex>`, Gitea in
//! `X-Gitea-Signature: <hex>`, Forgejo in `X-Forgejo-Signature: <hex>`.
//! The signature is checked in constant time (`hmac`'s `verify_slice`)
//! before the body is parsed at all. A missing or wrong signature is refused
//! and nothing is published.
//!
//! **What is not signed.** The signature covers the body only: the event
//! and delivery-id headers are not signed. So a delivery must name its
//! event (none is refused, never read as a push) and its delivery id (none
//! is refused: a replay could not be told from a new delivery), and a push
//! body must carry `ref` and `after` (a signed body of another event does
//! not pass for a push). `serve` acts on each delivery id once, and on each
//! commit once per agent, through the `hyperhive-deliveries` bucket.
//!
//! **What a push means.** A push to `knowledge_repo` is a knowledge event.
//! A push to an agent's repository is a deploy request for that agent on
//! every hive whose current declaration builds it from that repository:
//!
//! - *repository match*: the agent's `build.context`, normalised (scheme,
//!   `user@`, a trailing `.git` and `/` removed, `host:path` read as
//!   `host/path`, case ignored), equals one of the push's clone URLs
//!   (`clone_url`, `ssh_url`, `html_url`) normalised the same way, or its
//!   last two path segments equal the repository's `full_name`. Substrings
//!   never match: `org/bot` is not `org/bot-v2`.
//! - *ref match*: when `build.ref` is set, the push must be to that branch or
//!   tag (`main` and `refs/heads/main` both work); when it is not set, the
//!   push must be to the repository's default branch. A push to any other
//!   branch changes nothing the agent is built from.
//!
//! Agents declared with an `image` only are never deployed by a push.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use swarm_queue_client::{AgentName, BuildSpec, HiveName};

/// Which forge signed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    GitHub,
    Gitea,
    Forgejo,
}

/// Why a webhook was refused before anything was published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no signature header (X-Hub-Signature-256, X-Gitea-Signature or X-Forgejo-Signature)")]
    Missing,
    #[error("the {header} header is not hex{prefix}")]
    Malformed {
        header: &'static str,
        prefix: &'static str,
    },
    #[error("the {header} signature does not match the body and the shared secret")]
    Mismatch { header: &'static str },
}

const SIGNATURE_HEADERS: [(&str, Forge, &str); 3] = [
    ("x-hub-signature-256", Forge::GitHub, "sha256="),
    ("x-gitea-signature", Forge::Gitea, ""),
    ("x-forgejo-signature", Forge::Forgejo, ""),
];

/// Why the webhook's shared secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is empty", path.display())]
    Empty { path: std::path::PathBuf },
}

/// A `knowledge_repo` that names no repository.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a repository: give its full name (\"org/knowledge\") or clone URL")]
pub struct NotARepository(pub String);

/// A webhook body that is not a push payload.
#[derive(Debug, thiserror::Error)]
pub enum NotAPush {
    #[error("not a push payload: {0}")]
    Json(#[source] serde_json::Error),
    #[error("not a push payload: after = {0:?} is not a commit id (40 or 64 hex digits)")]
    Commit(String),
}

/// Read the shared secret; surrounding white space (a trailing newline) is
/// not part of it.
pub fn read_secret(path: &std::path::Path) -> Result<Vec<u8>, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(SecretError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(secret.as_bytes().to_vec())
}

/// A forge repository name (`owner/name`) or clone URL.
pub fn check_repo_name(repo: &str) -> Result<(), NotARepository> {
    let n = normalize_repo(repo);
    if n.is_empty() || repo.chars().any(char::is_whitespace) || !n.contains('/') {
        return Err(NotARepository(repo.to_string()));
    }
    Ok(())
}

/// Check the body's signature. `header` looks a header up by lower-case name.
pub fn verify_signature<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
    secret: &[u8],
) -> Result<Forge, SignatureError> {
    let (name, forge, prefix, value) = SIGNATURE_HEADERS
        .iter()
        .find_map(|(name, forge, prefix)| header(name).map(|v| (*name, *forge, *prefix, v)))
        .ok_or(SignatureError::Missing)?;
    let malformed = SignatureError::Malformed {
        header: name,
        prefix: if prefix.is_empty() {
            ""
        } else {
            " after \"sha256=\""
        },
    };
    let hex_sig = value.trim().strip_prefix(prefix).ok_or(malformed.clone())?;
    let sig = hex::decode(hex_sig).map_err(|_| malformed)?;
    // An HMAC takes a key of any length; this cannot fail.
    let mut mac = <Hmac<Sha256>>::new_from_slice(secret)
        .map_err(|_| SignatureError::Mismatch { header: name })?;
    mac.update(body);
    mac.verify_slice(&sig)
        .map_err(|_| SignatureError::Mismatch { header: name })?;
    Ok(forge)
}

/// The signature a forge would send, for tests and for operators checking a
/// setup by hand: lower-case hex of HMAC-SHA256(secret, body).
pub fn sign(body: &[u8], secret: &[u8]) -> String {
    // HMAC accepts a key of any length, so this cannot fail.
    let mut mac =
        <Hmac<Sha256>>::new_from_slice(secret).expect("an HMAC takes a key of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The headers a forge names its event in, in the order they are read.
pub const EVENT_HEADERS: [&str; 4] = [
    "x-github-event",
    "x-gitea-event",
    "x-forgejo-event",
    "x-gogs-event",
];

/// The headers a forge gives its delivery's unique id in.
pub const DELIVERY_HEADERS: [&str; 4] = [
    "x-github-delivery",
    "x-gitea-delivery",
    "x-forgejo-delivery",
    "x-gogs-delivery",
];

/// The event name a forge gives in its `X-*-Event` header, if any.
pub fn event_name<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
    EVENT_HEADERS.iter().find_map(|h| header(h))
}

/// The delivery id a forge gives in its `X-*-Delivery` header, if any.
pub fn delivery_id<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
    DELIVERY_HEADERS.iter().find_map(|h| header(h))
}

/// The part of a push payload the controller uses. The three forges share
/// these field names; each is required.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Push {
    /// The branch or tag pushed (`refs/heads/main`).
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The commit the ref points at after the push; all zeros when the
    /// push deleted the ref.
    pub after: String,
    pub repository: Repository,
}

impl Push {
    /// Whether the push deleted its ref (`after` is all zeros).
    pub fn deletes_ref(&self) -> bool {
        self.after.bytes().all(|b| b == b'0')
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Repository {
    pub full_name: String,
    #[serde(default)]
    pub clone_url: Option<String>,
    #[serde(default)]
    pub ssh_url: Option<String>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub default_branch: Option<String>,
}

/// Parse a push payload (already authenticated).
pub fn parse_push(body: &[u8]) -> Result<Push, NotAPush> {
    let push: Push = serde_json::from_slice(body).map_err(NotAPush::Json)?;
    let hex = push.after.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex || !matches!(push.after.len(), 40 | 64) {
        return Err(NotAPush::Commit(push.after));
    }
    Ok(push)
}

/// `https://user@Forge.example/Org/Bot.git/` -> `forge.example/org/bot`;
/// `git@forge:org/bot.git` -> `forge/org/bot`; `org/bot` stays `org/bot`.
pub fn normalize_repo(s: &str) -> String {
    let mut s = s.trim().to_ascii_lowercase();
    if let Some(i) = s.find("://") {
        s = s[i + 3..].to_string();
    } else if let Some((head, tail)) = s.split_once(':') {
        // scp-like `git@host:org/repo`
        if !head.contains('/') {
            s = format!("{head}/{tail}");
        }
    }
    if let Some(at) = s.find('@') {
        if !s[..at].contains('/') {
            s = s[at + 1..].to_string();
        }
    }
    let mut s = s.trim_end_matches('/').to_string();
    if let Some(stripped) = s.strip_suffix(".git") {
        s = stripped.trim_end_matches('/').to_string();
    }
    s
}

/// Whether a repository named in config or a declaration (`org/bot` or a
/// clone URL) is the repository a push is about.
pub fn repo_matches(named: &str, push: &Push) -> bool {
    let named = normalize_repo(named);
    if named.is_empty() {
        return false;
    }
    let repo = &push.repository;
    let urls = [&repo.clone_url, &repo.ssh_url, &repo.html_url];
    if urls
        .iter()
        .filter_map(|u| u.as_deref())
        .any(|u| normalize_repo(u) == named)
    {
        return true;
    }
    last_two_segments(&named) == normalize_repo(&repo.full_name)
}

/// Whether a push touches the ref an agent is built from.
pub fn ref_matches(build: &BuildSpec, push: &Push) -> bool {
    let pushed = push.git_ref.as_str();
    let short = pushed
        .strip_prefix("refs/heads/")
        .or_else(|| pushed.strip_prefix("refs/tags/"))
        .unwrap_or(pushed);
    match build.git_ref.as_deref() {
        Some(wanted) => wanted == pushed || wanted == short,
        None => match push.repository.default_branch.as_deref() {
            Some(default) => pushed == format!("refs/heads/{default}"),
            None => true,
        },
    }
}

/// What a push asks the controller to publish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub knowledge: bool,
    pub deploys: Vec<(HiveName, AgentName)>,
}

/// Decide what to publish for `push`, given the knowledge repo and every
/// built agent of every hive's current declaration (hive, agent, build).
pub fn plan<'a>(
    push: &Push,
    knowledge_repo: Option<&str>,
    builds: impl Iterator<Item = (&'a str, &'a AgentName, &'a BuildSpec)>,
) -> Plan {
    let knowledge = knowledge_repo.is_some_and(|k| repo_matches(k, push));
    let deploys = builds
        .filter(|(_, _, build)| repo_matches(&build.context, push) && ref_matches(build, push))
        .filter_map(|(hive, agent, _)| Some((HiveName::new(hive).ok()?, agent.clone())))
        .collect();
    Plan { knowledge, deploys }
}

fn last_two_segments(path: &str) -> &str {
    match path.rmatch_indices('/').nth(1) {
        Some((i, _)) => &path[i + 1..],
        None => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::{AgentSpec, Declaration};

    fn headers<'a>(pairs: &'a [(&'static str, String)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    #[test]
    fn signatures_of_each_forge() {
        let body = br#"{"ref":"refs/heads/main"}"#;
        let secret = b"s3cret";
        let sig = sign(body, secret);
        let cases = [
            (
                "x-hub-signature-256",
                format!("sha256={sig}"),
                Forge::GitHub,
            ),
            ("x-gitea-signature", sig.clone(), Forge::Gitea),
            ("x-forgejo-signature", sig.clone(), Forge::Forgejo),
        ];
        for (h, v, forge) in cases {
            let pairs = [(h, v)];
            assert_eq!(verify_signature(headers(&pairs), body, secret), Ok(forge));
            assert!(matches!(
                verify_signature(headers(&pairs), b"tampered", secret),
                Err(SignatureError::Mismatch { .. })
            ));
            assert!(matches!(
                verify_signature(headers(&pairs), body, b"other secret"),
                Err(SignatureError::Mismatch { .. })
            ));
        }
    }

    #[test]
    fn missing_and_malformed_signatures() {
        assert_eq!(
            verify_signature(headers(&[]), b"x", b"k"),
            Err(SignatureError::Missing)
        );
        let no_prefix = [("x-hub-signature-256", sign(b"x", b"k"))];
        assert!(matches!(
            verify_signature(headers(&no_prefix), b"x", b"k"),
            Err(SignatureError::Malformed { .. })
        ));
        let not_hex = [("x-gitea-signature", "zz".to_string())];
        assert!(matches!(
            verify_signature(headers(&not_hex), b"x", b"k"),
            Err(SignatureError::Malformed { .. })
        ));
        let short = [("x-gitea-signature", "abcd".to_string())];
        assert!(matches!(
            verify_signature(headers(&short), b"x", b"k"),
            Err(SignatureError::Mismatch { .. })
        ));
    }

    fn push(full_name: &str, git_ref: &str) -> Push {
        Push {
            git_ref: git_ref.into(),
            after: "a".repeat(40),
            repository: Repository {
                full_name: full_name.into(),
                clone_url: Some(format!("https://forge.example/{full_name}.git")),
                ssh_url: Some(format!("git@forge.example:{full_name}.git")),
                html_url: Some(format!("https://forge.example/{full_name}")),
                default_branch: Some("main".into()),
            },
        }
    }

    #[test]
    fn repository_matching_rule() {
        let p = push("Org/Bot", "refs/heads/main");
        for yes in [
            "org/bot",
            "https://forge.example/org/bot.git",
            "https://deploy@forge.example/Org/Bot/",
            "git@forge.example:org/bot.git",
            "ssh://git@forge.example/org/bot",
            "https://mirror.example/org/bot.git",
        ] {
            assert!(repo_matches(yes, &p), "{yes} should match");
        }
        for no in [
            "org/bot-v2",
            "other/bot",
            "bot",
            "",
            "https://forge.example/org/bot/sub",
        ] {
            assert!(!repo_matches(no, &p), "{no} should not match");
        }
    }

    #[test]
    fn ref_matching_rule() {
        let build = |r: Option<&str>| BuildSpec {
            context: "org/bot".into(),
            git_ref: r.map(str::to_string),
            dockerfile: None,
        };
        assert!(ref_matches(
            &build(None),
            &push("org/bot", "refs/heads/main")
        ));
        assert!(!ref_matches(
            &build(None),
            &push("org/bot", "refs/heads/topic")
        ));
        assert!(ref_matches(
            &build(Some("topic")),
            &push("org/bot", "refs/heads/topic")
        ));
        assert!(ref_matches(
            &build(Some("refs/heads/topic")),
            &push("org/bot", "refs/heads/topic")
        ));
        assert!(ref_matches(
            &build(Some("v1.0")),
            &push("org/bot", "refs/tags/v1.0")
        ));
        assert!(!ref_matches(
            &build(Some("v1.0")),
            &push("org/bot", "refs/heads/main")
        ));
    }

    #[test]
    fn plan_picks_knowledge_and_every_declaring_hive() {
        let built = |context: &str| AgentSpec {
            build: Some(BuildSpec {
                context: context.into(),
                git_ref: None,
                dockerfile: None,
            }),
            ..Default::default()
        };
        let image = AgentSpec {
            image: Some("org/bot:1".into()),
            ..Default::default()
        };
        let a = AgentName::new("bot").unwrap();
        let alpha =
            Declaration::new([(a.clone(), built("https://forge.example/org/bot.git"))].into());
        let beta = Declaration::new([(a.clone(), built("org/bot"))].into());
        let gamma = Declaration::new([(a.clone(), image)].into());
        let delta = Declaration::new([(a.clone(), built("org/other"))].into());
        let decls = [
            ("alpha", &alpha),
            ("beta", &beta),
            ("gamma", &gamma),
            ("delta", &delta),
        ];
        let builds = || {
            decls.into_iter().flat_map(|(hive, d)| {
                d.agents
                    .iter()
                    .filter_map(move |(agent, spec)| Some((hive, agent, spec.build.as_ref()?)))
            })
        };
        let p = plan(
            &push("org/bot", "refs/heads/main"),
            Some("org/knowledge"),
            builds(),
        );
        assert!(!p.knowledge);
        let hives: Vec<&str> = p.deploys.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hives, ["alpha", "beta"]);
        let k = plan(
            &push("org/knowledge", "refs/heads/main"),
            Some("org/knowledge"),
            builds(),
        );
        assert!(k.knowledge && k.deploys.is_empty());
    }

    #[test]
    fn push_payloads_parse_and_junk_is_refused() {
        let github = br#"{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567",
            "repository":{"full_name":"org/bot",
            "clone_url":"https://github.com/org/bot.git","default_branch":"main","id":1},"pusher":{}}"#;
        let p = parse_push(github).unwrap();
        assert_eq!(p.repository.full_name, "org/bot");
        assert!(!p.deletes_ref());
        assert!(parse_push(b"{}")
            .unwrap_err()
            .to_string()
            .contains("missing field `ref`"));
        let no_after = br#"{"ref":"refs/heads/main","repository":{"full_name":"org/bot"}}"#;
        assert!(parse_push(no_after)
            .unwrap_err()
            .to_string()
            .contains("missing field `after`"));
        let bad_after = br#"{"ref":"x","after":"HEAD","repository":{"full_name":"org/bot"}}"#;
        assert_eq!(
            parse_push(bad_after).unwrap_err().to_string(),
            "not a push payload: after = \"HEAD\" is not a commit id (40 or 64 hex digits)"
        );
        let deleted = format!(
            r#"{{"ref":"x","after":"{}","repository":{{"full_name":"org/bot"}}}}"#,
            "0".repeat(40)
        );
        assert!(parse_push(deleted.as_bytes()).unwrap().deletes_ref());
        assert!(check_repo_name("org/knowledge").is_ok());
        assert!(check_repo_name("https://forge/org/knowledge.git").is_ok());
        assert!(check_repo_name("knowledge").is_err());
        assert!(check_repo_name("org /k").is_err());
    }
}
