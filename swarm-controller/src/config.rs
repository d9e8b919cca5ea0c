//! The controller's config file: the roster and everything the verbs and the
//! HTTP server need.
//!
//! The file is TOML. Unknown keys are refused with the key named, so a typo
//! is an error instead of a silently ignored setting. [`Config::load`]
//! reports **every** problem it can find without connecting (the roster
//! entries are checked one by one, paths are checked on disk, the swarm file
//! is parsed against the roster), which is what `--check-config` prints.
//! Relative paths are resolved against the directory of the config file, so
//! a config and its secrets can move together.
//!
//! ```toml
//! stale_after_secs = 120
//! attention_progressing_secs = 600
//! http_listen = "127.0.0.1:7380"
//! webhook_listen = "0.0.0.0:7381"
//! sse_max_clients = 64
//! log_tails_max = 8
//! xkey_seed_file = "controller.xkey"
//! webhook_secret_file = "webhook.secret"
//! knowledge_repo = "org/knowledge"
//! swarm_file = "swarm.toml"
//!
//! [nats]
//! url = "nats://127.0.0.1:4222"
//!
//! [hives.alpha]
//! labels = { site = "basement" }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use swarm_queue_client::event_stream::EventsSettings;

use serde::{Deserialize, Serialize};
use swarm_queue_client::{HiveName, LeafSiteName, NatsConfig};
use toml::Spanned;

pub use crate::roster::{Roster, RosterEntry};
use crate::swarm_file::SwarmFile;
use crate::toml_lines::{describe_toml_error, Lines};

/// Default threshold after which a still-progressing declaration needs
/// attention: long enough for a large image pull and a build.
pub const DEFAULT_PROGRESSING_ATTENTION: Duration = Duration::from_secs(600);

/// Default `stale_after_secs`: twice the hive's 60 s publish interval, so one
/// late or lost publish does not make a hive look stale.
pub const DEFAULT_STALE_AFTER_SECS: u64 = 120;
/// The largest `stale_after_secs`: a week. Hives publish at least hourly,
/// and the bound keeps every `Instant + Duration` far from overflowing.
pub const MAX_STALE_AFTER_SECS: u64 = 7 * 86_400;
/// Default `http_listen`: loopback, so the dashboard and webhook are not
/// exposed until an operator chooses to.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:7380";
/// Default `sse_max_clients`: open event streams (dashboard pages) one
/// `serve` holds at once; each holds a task, a socket and a broadcast slot.
pub const DEFAULT_SSE_MAX_CLIENTS: usize = 64;
/// The largest `sse_max_clients`.
pub const MAX_SSE_MAX_CLIENTS: usize = 10_000;
/// Default `log_tails_max`: agents' logs followed from the hive page at
/// once; each holds a NATS subscription and a stream on its hive.
pub const DEFAULT_LOG_TAILS_MAX: usize = 8;
/// The largest `log_tails_max`.
pub const MAX_LOG_TAILS_MAX: usize = 1000;
/// Longest label key or value, so a roster cannot bloat every status row.
const MAX_LABEL_LEN: usize = 63;

/// One `[leaf_sites.<name>]` table: a site server that joins the hub as a
/// leaf node, with one leaf link per hive that connects to it. Only
/// `nats-config` reads it: at the hub, each link becomes the user of its
/// hive's account, which may carry that hive's traffic and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafSiteEntry {
    /// The hives at this site (each on the roster, with its
    /// `jetstream_domain`), each with the public user nkey (`U…`) its own
    /// leaf link signs with (the site's remote for that hive holds the
    /// seed): `[leaf_sites.<name>.links] alpha = "U…"`.
    #[serde(default)]
    pub links: BTreeMap<HiveName, String>,
}

/// The leaf-node sites, by name.
pub type LeafSites = BTreeMap<LeafSiteName, LeafSiteEntry>;

/// The `[controller]` table: the controller's own identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerEntry {
    /// The controller's public NATS user nkey (`U…`), for `nats-config`.
    #[serde(default)]
    pub nkey: Option<String>,
}

/// The loaded, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the file was read from (for messages).
    pub path: PathBuf,
    /// A status entry older than this is `stale`.
    pub stale_after: Duration,
    /// A hive still progressing this long after its declaration needs
    /// attention (the dashboard lists it with the failed and stale ones).
    pub attention_progressing: Duration,
    /// Where `serve` listens.
    pub http_listen: SocketAddr,
    /// A listener of the webhook's own (only `POST /hooks/forge`); when
    /// set, `http_listen` no longer answers the webhook, so a forge can
    /// reach the one without the dashboard and `/api/*`.
    pub webhook_listen: Option<SocketAddr>,
    /// Most event streams (`/api/events`) open at once; past it, 503.
    pub sse_max_clients: usize,
    /// Most log tails (`/api/hive/{name}/agents/{agent}/logs`) open at
    /// once, over all hives; past it, 503.
    pub log_tails_max: usize,
    /// Names besides IP literals, `localhost` and this machine's own name
    /// that the dashboard answers to (the DNS-rebinding guard,
    /// [`swarm_queue_client::http_host`]), for a proxy that keeps its own
    /// `Host`.
    pub http_allowed_hosts: Vec<String>,
    /// The controller's xkey seed, used to seal credentials. Created with
    /// mode 0600 on first use when missing.
    pub xkey_seed_file: Option<PathBuf>,
    /// The shared secret forge webhooks are signed with.
    pub webhook_secret_file: Option<PathBuf>,
    /// Forge repository (`owner/name`) whose pushes are knowledge events.
    pub knowledge_repo: Option<String>,
    /// Default swarm file for `declare`.
    pub swarm_file: Option<PathBuf>,
    pub nats: NatsConfig,
    pub controller: ControllerEntry,
    pub hives: Roster,
    pub leaf_sites: LeafSites,
    /// The `hyperhive-events` stream's limits (`[events]`).
    pub events: EventsSettings,
}

/// The config file could not be used. `problems` lists every one found.
#[derive(Debug, thiserror::Error)]
#[error("invalid config {path}:\n  - {}", problems.join("\n  - "))]
pub struct ConfigError {
    pub path: PathBuf,
    pub problems: Vec<String>,
}

impl Config {
    /// Read and check `path`. `nats_url` (from `--nats-url`) replaces the
    /// file's server list.
    pub fn load(path: &Path, nats_url: Option<&str>) -> Result<Config, ConfigError> {
        let text = Self::read(path)?;
        Self::parse(path, &text, nats_url).map_err(|problems| ConfigError {
            path: path.to_path_buf(),
            problems,
        })
    }

    /// The text of the config file at `path`, not yet checked.
    pub fn read(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            problems: vec![format!("cannot read {}: {e}", path.display())],
        })
    }

    /// Why the verbs that talk to NATS cannot run with this config, if so.
    /// (`nats-config` and `roster` need only the roster, so a roster-only
    /// file without `[nats]` is a valid config.)
    pub fn nats_missing(&self) -> Option<String> {
        (!self.nats.is_configured()).then(|| {
            format!(
                "{}: no NATS server: set [nats] url = \"nats://host:4222\" or pass --nats-url",
                self.path.display()
            )
        })
    }

    /// `--check-config`: every problem of the file, and a missing NATS
    /// server counts as one (every daemon verb needs it).
    pub fn check_file(path: &Path, nats_url: Option<&str>) -> Result<Config, ConfigError> {
        let config = Self::load(path, nats_url)?;
        match config.nats_missing() {
            Some(problem) => Err(ConfigError {
                path: path.to_path_buf(),
                problems: vec![problem],
            }),
            None => Ok(config),
        }
    }

    /// Parse and check config text; `path` locates relative paths.
    pub fn parse(path: &Path, text: &str, nats_url: Option<&str>) -> Result<Config, Vec<String>> {
        // The settings and the hive tables (by name), read by `read_split`
        // when it can.
        let (raw, tables) = read_split(text).map_or_else(|| read_whole(text), Ok)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: Option<PathBuf>| p.map(|p| base.join(p));
        let mut problems = Vec::new();

        problems.extend(check_timings(&raw));
        let http_listen = check_http(&raw, &mut problems);
        let webhook_listen = check_webhook_listen(&raw, http_listen, &mut problems);
        let nats = raw.nats.with_url(nats_url);
        problems.extend(nats.check());
        if let Some(nkey) = &raw.controller.nkey {
            if let Some(p) = check_user_nkey(nkey) {
                problems.push(format!("controller.{p}"));
            }
        }

        let xkey_seed_file = resolve(raw.xkey_seed_file);
        let webhook_secret_file = resolve(raw.webhook_secret_file);
        let knowledge_repo = raw.knowledge_repo.map(|r| r.trim().to_string());
        problems.extend(check_files(
            xkey_seed_file.as_deref(),
            webhook_secret_file.as_deref(),
            knowledge_repo.as_deref(),
        ));
        let hives = parse_roster(text, tables, &mut problems);
        problems.extend(check_leaf_sites(&raw.leaf_sites, &hives));
        problems.extend(raw.events.problems());
        let swarm_file = resolve(raw.swarm_file);
        if let Some(p) = &swarm_file {
            problems.extend(check_swarm_file(p, &hives));
        }

        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Config {
            path: path.to_path_buf(),
            stale_after: Duration::from_secs(raw.stale_after_secs),
            attention_progressing: Duration::from_secs(raw.attention_progressing_secs),
            // Checked above: a parse failure is a problem, and we returned.
            http_listen: http_listen.unwrap_or_else(|| ([127, 0, 0, 1], 7380).into()),
            webhook_listen,
            sse_max_clients: raw.sse_max_clients,
            log_tails_max: raw.log_tails_max,
            http_allowed_hosts: raw.http_allowed_hosts,
            xkey_seed_file,
            webhook_secret_file,
            knowledge_repo,
            swarm_file,
            nats,
            controller: raw.controller,
            hives,
            leaf_sites: raw.leaf_sites,
            events: raw.events,
        })
    }
}

/// The file as written, before any check.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_stale_after")]
    stale_after_secs: u64,
    #[serde(default = "default_attention_progressing")]
    attention_progressing_secs: u64,
    #[serde(default)]
    http_listen: Option<String>,
    #[serde(default)]
    http_allowed_hosts: Vec<String>,
    #[serde(default)]
    webhook_listen: Option<String>,
    #[serde(default = "default_sse_max_clients")]
    sse_max_clients: usize,
    #[serde(default = "default_log_tails_max")]
    log_tails_max: usize,
    #[serde(default)]
    xkey_seed_file: Option<PathBuf>,
    #[serde(default)]
    webhook_secret_file: Option<PathBuf>,
    #[serde(default)]
    knowledge_repo: Option<String>,
    #[serde(default)]
    swarm_file: Option<PathBuf>,
    #[serde(default)]
    nats: NatsConfig,
    #[serde(default)]
    controller: ControllerEntry,
    /// Kept raw so that each hive table is checked on its own and every bad
    /// one is reported, not only the first; in the order the parser's own
    /// map gives them (by name), so the roster is built without a search.
    /// `None` when the file has no `hives` at all.
    #[serde(default, deserialize_with = "tables_in_order")]
    hives: Option<RawTables>,
    #[serde(default)]
    leaf_sites: LeafSites,
    #[serde(default)]
    events: EventsSettings,
}

fn default_stale_after() -> u64 {
    DEFAULT_STALE_AFTER_SECS
}

fn default_sse_max_clients() -> usize {
    DEFAULT_SSE_MAX_CLIENTS
}

fn default_log_tails_max() -> usize {
    DEFAULT_LOG_TAILS_MAX
}

fn default_attention_progressing() -> u64 {
    DEFAULT_PROGRESSING_ATTENTION.as_secs()
}

/// stale_after_secs and attention_progressing_secs within their bounds.
fn check_timings(raw: &RawConfig) -> Vec<String> {
    let mut problems = Vec::new();
    if raw.stale_after_secs == 0 {
        problems.push("stale_after_secs must be at least 1".to_string());
    } else if raw.stale_after_secs > MAX_STALE_AFTER_SECS {
        problems.push(format!(
            "stale_after_secs = {}: it must be at most {MAX_STALE_AFTER_SECS} (a week)",
            raw.stale_after_secs
        ));
    }
    // Bounded like stale_after: the deadline is the declaration's time
    // plus this, and a sum past the calendar would not be a time.
    if raw.attention_progressing_secs == 0 || raw.attention_progressing_secs > MAX_STALE_AFTER_SECS
    {
        problems.push(format!(
            "attention_progressing_secs = {}: it must be between 1 and {MAX_STALE_AFTER_SECS} (a week)",
            raw.attention_progressing_secs
        ));
    }
    problems
}

/// The listen address (`None`: it is a problem) and the allowed Host names.
fn check_http(raw: &RawConfig, problems: &mut Vec<String>) -> Option<SocketAddr> {
    let listen_text = raw.http_listen.as_deref().unwrap_or(DEFAULT_HTTP_LISTEN);
    let http_listen = match listen_text.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(e) => {
            problems.push(format!(
                "http_listen {listen_text:?} is not an address and port like \"127.0.0.1:7380\": {e}"
            ));
            None
        }
    };

    for name in &raw.http_allowed_hosts {
        if let Err(e) = swarm_queue_client::http_host::check_allowed_name(name) {
            problems.push(e.to_string());
        }
    }
    if !(1..=MAX_SSE_MAX_CLIENTS).contains(&raw.sse_max_clients) {
        problems.push(format!(
            "sse_max_clients = {}: it must be between 1 and {MAX_SSE_MAX_CLIENTS}",
            raw.sse_max_clients
        ));
    }
    if !(1..=MAX_LOG_TAILS_MAX).contains(&raw.log_tails_max) {
        problems.push(format!(
            "log_tails_max = {}: it must be between 1 and {MAX_LOG_TAILS_MAX}",
            raw.log_tails_max
        ));
    }
    http_listen
}

/// `webhook_listen`, if set: an address, and not the dashboard's own.
fn check_webhook_listen(
    raw: &RawConfig,
    http_listen: Option<SocketAddr>,
    problems: &mut Vec<String>,
) -> Option<SocketAddr> {
    let text = raw.webhook_listen.as_deref()?;
    match text.parse::<SocketAddr>() {
        Ok(a) if Some(a) == http_listen && a.port() != 0 => {
            problems.push(format!(
                "webhook_listen {text:?} is http_listen too: give the webhook a port of its own, \
                 or leave webhook_listen out to serve it on http_listen"
            ));
            None
        }
        Ok(a) => Some(a),
        Err(e) => {
            problems.push(format!(
                "webhook_listen {text:?} is not an address and port like \"0.0.0.0:7381\": {e}"
            ));
            None
        }
    }
}

/// The secret files are there and the knowledge repository is a name.
fn check_files(
    xkey_seed_file: Option<&Path>,
    webhook_secret_file: Option<&Path>,
    knowledge_repo: Option<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(p) = xkey_seed_file {
        problems.extend(crate::credential::check_seed_file(p));
    }
    // Only whether it is there: its content is checked when `serve`
    // starts (a build-time check may see an empty stand-in).
    if let Some(p) = webhook_secret_file {
        if !p.is_file() {
            problems.push(format!(
                "webhook_secret_file {} does not exist or is not a file",
                p.display()
            ));
        }
    }
    if let Some(repo) = knowledge_repo {
        if let Err(e) = crate::webhook::check_repo_name(repo) {
            problems.push(format!("knowledge_repo: {e}"));
        }
    }
    problems
}

/// The `[hives.*]` tables as the `toml` crate gives them, by name.
type RawTables = Vec<(String, Spanned<toml::Value>)>;

/// A table's entries as a list, in the order they are given. At 10,000
/// hives, a map built here (and dropped again once the roster was built)
/// was a fifth of `--check-config`'s time.
fn tables_in_order<'de, D>(de: D) -> Result<Option<RawTables>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct InOrder;
    impl<'de> serde::de::Visitor<'de> for InOrder {
        type Value = RawTables;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a table of tables")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some(entry) = map.next_entry()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    de.deserialize_map(InOrder).map(Some)
}

/// One `[hives.*]` table: its name, where its header starts, and its
/// entry or why it is not one.
#[derive(Debug)]
struct HiveTable {
    name: String,
    at: usize,
    entry: Result<RosterEntry, String>,
}

/// A roster of the shape [`crate::roster_toml`] knows, read from the TOML
/// parser's events, and only the rest of the file through the `toml`
/// crate. `None` when the file is not of that shape, or its rest fails or
/// mentions `hives`: [`read_whole`] then reads it, so every message is the
/// `toml` crate's.
fn read_split(text: &str) -> Option<(RawConfig, Vec<HiveTable>)> {
    let split = crate::roster_toml::split(text)?;
    let raw @ RawConfig { hives: None, .. } = toml::from_str(&split.rest).ok()? else {
        return None;
    };
    let tables = split.hives.into_iter().map(|h| HiveTable {
        name: h.name,
        at: h.at,
        entry: Ok(h.entry),
    });
    Some((raw, tables.collect()))
}

/// The whole file through the `toml` crate, each hive table kept apart so
/// that every bad one is reported.
fn read_whole(text: &str) -> Result<(RawConfig, Vec<HiveTable>), Vec<String>> {
    let mut raw: RawConfig =
        toml::from_str(text).map_err(|e| vec![describe_toml_error(text, &e)])?;
    let tables = raw.hives.take().unwrap_or_default().into_iter();
    let tables = tables.map(|(name, value)| HiveTable {
        name,
        at: value.span().start,
        entry: RosterEntry::deserialize(value.into_inner()).map_err(|e| e.message().to_string()),
    });
    Ok((raw, tables.collect()))
}

/// The `[hives.*]` tables; each problem names its line.
fn parse_roster(text: &str, tables: Vec<HiveTable>, problems: &mut Vec<String>) -> Roster {
    // Collected, not inserted one by one: a map built from a list sorts it
    // (a single pass when it is in order already) and fills its nodes.
    let mut hives = Vec::with_capacity(tables.len());
    let lines = Lines::new(text);
    for HiveTable { name, at, entry } in tables {
        let line = lines.line(at);
        let name = match HiveName::new(name.as_str()) {
            Ok(n) => n,
            Err(e) => {
                problems.push(format!("line {line}: [hives.{name}]: {e}"));
                continue;
            }
        };
        match entry {
            Ok(entry) => {
                problems.extend(
                    check_roster_entry(&entry)
                        .into_iter()
                        .map(|p| format!("line {line}: hives.{name}.{p}")),
                );
                hives.push((name, entry));
            }
            Err(e) => problems.push(format!("line {line}: hives.{name}: {e}")),
        }
    }
    hives.into_iter().collect()
}

/// The swarm file loads and its groups resolve against the roster.
fn check_swarm_file(p: &Path, hives: &Roster) -> Vec<String> {
    match SwarmFile::load(p) {
        Ok(file) => crate::groups::resolve(&file, hives)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| format!("swarm_file: {p}"))
            .collect(),
        Err(e) => vec![format!("swarm_file: {e}")],
    }
}

fn check_roster_entry(entry: &RosterEntry) -> Vec<String> {
    let mut problems = Vec::new();
    for (k, v) in &entry.labels {
        if k.is_empty() || k.len() > MAX_LABEL_LEN || k.chars().any(char::is_control) {
            problems.push(format!(
                "labels: key {k:?} must be 1 to {MAX_LABEL_LEN} printable bytes"
            ));
        }
        if v.len() > MAX_LABEL_LEN || v.chars().any(char::is_control) {
            problems.push(format!(
                "labels.{k}: value {v:?} must be at most {MAX_LABEL_LEN} printable bytes"
            ));
        }
    }
    if let Some(nkey) = &entry.nkey {
        problems.extend(check_user_nkey(nkey));
    }
    if let Some(domain) = &entry.jetstream_domain {
        if let Err(e) = swarm_queue_client::connect::check_domain(domain) {
            problems.push(format!("jetstream_domain: {e}"));
        }
    }
    problems
}

/// Each link key is a public user key and each hive a site lists is on
/// the roster with a `jetstream_domain`, at this site only.
fn check_leaf_sites(sites: &LeafSites, hives: &Roster) -> Vec<String> {
    let mut problems = Vec::new();
    let mut placed: BTreeMap<&HiveName, &LeafSiteName> = BTreeMap::new();
    for (site, entry) in sites {
        for (hive, nkey) in &entry.links {
            let at = format!("leaf_sites.{site}.links.{hive}");
            if let Some(p) = check_user_nkey(nkey) {
                problems.push(format!("{at}: {p}"));
            }
            match hives.get(hive) {
                None => problems.push(format!(
                    "{at}: hive {hive} is not on the roster ([hives.{hive}])"
                )),
                Some(e) if e.jetstream_domain.is_none() => problems.push(format!(
                    "{at}: hive {hive} has no jetstream_domain under [hives.{hive}]; a hive on a \
                     leaf-node site reaches the buckets through the hub's domain"
                )),
                Some(_) => {}
            }
            if let Some(first) = placed.insert(hive, site) {
                problems.push(format!("{at}: hive {hive} is already at leaf site {first}"));
            }
        }
    }
    problems
}

fn check_user_nkey(nkey: &str) -> Option<String> {
    use swarm_queue_client::permissions::{is_user_public_key, shown_key};
    (!is_user_public_key(nkey)).then(|| {
        format!(
            "nkey {:?} is not a public user nkey (U… as printed by `nk -gen user -pubout`)",
            shown_key(nkey)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, Vec<String>> {
        Config::parse(Path::new("/nonexistent/controller.toml"), text, None)
    }

    const MINIMAL: &str = "[nats]\nurl = \"nats://127.0.0.1:4222\"\n";

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.stale_after, Duration::from_secs(120));
        assert_eq!(c.http_listen.to_string(), "127.0.0.1:7380");
        assert!(c.hives.is_empty());
    }

    #[test]
    fn roster_with_labels_and_nkey() {
        let nkey = nkeys::KeyPair::new_user().public_key();
        let text = format!(
            "stale_after_secs = 2\n{MINIMAL}\n[hives.alpha]\nlabels = {{ site = \"attic\" }}\n\
             nkey = \"{nkey}\"\n\n[hives.beta]\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.stale_after, Duration::from_secs(2));
        let alpha = &c.hives[&HiveName::new("alpha").unwrap()];
        assert_eq!(alpha.labels["site"], "attic");
        assert_eq!(alpha.nkey.as_deref(), Some(nkey.as_str()));
        assert!(c.hives.contains_key(&HiveName::new("beta").unwrap()));
    }

    #[test]
    fn hive_tables_in_any_form_and_order_make_one_roster() {
        // Tables out of order, a dotted key, an inline table, and a hive
        // table split around another table: each hive once, by name.
        let text = format!(
            "{MINIMAL}[hives.zeta]\nlabels = {{ rack = \"9\" }}\n[hives.alpha]\n\
             [events]\n[hives.mid]\n[hives.beta.labels]\nsite = \"attic\"\n"
        );
        let c = parse(&text).unwrap();
        let names: Vec<&str> = c.hives.keys().map(|h| h.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "mid", "zeta"]);
        assert_eq!(c.hives[&HiveName::new("zeta").unwrap()].labels["rack"], "9");
        assert_eq!(
            c.hives[&HiveName::new("beta").unwrap()].labels["site"],
            "attic"
        );
        let inline = parse(&format!(
            "hives = {{ b = {{}}, a = {{ nkey = \"Ubad\" }} }}\n{MINIMAL}"
        ));
        let err = inline.unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(err[0].contains("hives.a.nkey"), "{err:?}");
    }

    #[test]
    fn unknown_top_level_key_is_named_with_its_line() {
        let err = parse(&format!("{MINIMAL}stale_after = 3\n")).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(err[0].contains("stale_after"), "{err:?}");
        assert!(err[0].starts_with("line "), "{err:?}");
    }

    #[test]
    fn every_bad_hive_is_reported() {
        let text = format!(
            "{MINIMAL}[hives.Alpha]\n[hives.beta]\nlables = {{}}\n[hives.gamma]\nnkey = \"Uxyz\"\n"
        );
        let err = parse(&text).unwrap_err();
        assert_eq!(err.len(), 3, "{err:?}");
        assert!(err[0].contains("invalid hive name \"Alpha\""), "{err:?}");
        assert!(err[1].contains("lables"), "{err:?}");
        assert!(err[1].starts_with("line 4"), "{err:?}");
        assert!(err[2].contains("Uxyz"), "{err:?}");
    }

    #[test]
    fn stale_after_has_an_upper_bound_named_in_the_error() {
        let at = format!("stale_after_secs = {MAX_STALE_AFTER_SECS}\n{MINIMAL}");
        assert_eq!(
            parse(&at).unwrap().stale_after,
            Duration::from_secs(MAX_STALE_AFTER_SECS)
        );
        for past in [MAX_STALE_AFTER_SECS + 1, i64::MAX as u64] {
            let err = parse(&format!("stale_after_secs = {past}\n{MINIMAL}")).unwrap_err();
            assert!(
                err.iter().any(|p| p.contains(&format!(
                    "stale_after_secs = {past}: it must be at most {MAX_STALE_AFTER_SECS}"
                ))),
                "{err:?}"
            );
        }
    }

    #[test]
    fn attention_progressing_defaults_to_ten_minutes_and_is_bounded() {
        assert_eq!(
            parse(MINIMAL).unwrap().attention_progressing,
            Duration::from_secs(600)
        );
        let c = parse(&format!("attention_progressing_secs = 5\n{MINIMAL}")).unwrap();
        assert_eq!(c.attention_progressing, Duration::from_secs(5));
        for bad in [0, MAX_STALE_AFTER_SECS + 1, i64::MAX as u64] {
            let err = parse(&format!("attention_progressing_secs = {bad}\n{MINIMAL}")).unwrap_err();
            assert!(
                err.iter().any(|p| p.contains(&format!(
                    "attention_progressing_secs = {bad}: it must be between 1"
                ))),
                "{err:?}"
            );
        }
    }

    #[test]
    fn webhook_listen_and_sse_max_clients() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.webhook_listen, None);
        assert_eq!(c.sse_max_clients, 64);
        let c = parse(&format!(
            "webhook_listen = \"0.0.0.0:7381\"\nsse_max_clients = 2\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(c.webhook_listen.unwrap().to_string(), "0.0.0.0:7381");
        assert_eq!(c.sse_max_clients, 2);
        assert_eq!(parse(MINIMAL).unwrap().log_tails_max, 8);
        let err = parse(&format!("log_tails_max = 0\n{MINIMAL}")).unwrap_err();
        assert!(err[0].contains("log_tails_max = 0: it must be between 1 and 1000"));
        let err = parse(&format!(
            "webhook_listen = \"127.0.0.1:7380\"\nsse_max_clients = 0\n{MINIMAL}"
        ))
        .unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(err[0].contains("sse_max_clients = 0: it must be between 1 and 10000"));
        assert!(err[1].contains("webhook_listen \"127.0.0.1:7380\" is http_listen too"));
        let err = parse(&format!("webhook_listen = \"7381\"\n{MINIMAL}")).unwrap_err();
        assert!(
            err[0].contains("webhook_listen \"7381\" is not an address"),
            "{err:?}"
        );
    }

    #[test]
    fn several_problems_at_once() {
        let text = "stale_after_secs = 0\nhttp_listen = \"localhost\"\n\
                    webhook_secret_file = \"missing.secret\"\nknowledge_repo = \"not a repo\"\n";
        let err = parse(text).unwrap_err();
        let all = err.join("\n");
        for needle in [
            "stale_after_secs",
            "http_listen \"localhost\"",
            "missing.secret",
            "knowledge_repo",
        ] {
            assert!(all.contains(needle), "{needle}: {all}");
        }
    }

    #[test]
    fn a_roster_only_file_is_valid_but_cannot_reach_nats() {
        let nkey = nkeys::KeyPair::new_user().public_key();
        let c = parse(&format!(
            "[controller]\nnkey = \"{nkey}\"\n[hives.alpha]\nnkey = \"{nkey}\"\n"
        ))
        .unwrap();
        assert_eq!(c.controller.nkey.as_deref(), Some(nkey.as_str()));
        assert!(c.nats_missing().unwrap().contains("no NATS server"));
        let err = parse("[controller]\nnkey = \"Xnope\"\nextra = 1\n").unwrap_err();
        assert!(err[0].contains("extra"), "{err:?}");
        let err = parse("[controller]\nnkey = \"Xnope\"\n").unwrap_err();
        assert!(err[0].starts_with("controller.nkey \"Xnope\""), "{err:?}");
    }

    #[test]
    fn leaf_sites_name_hives_of_the_roster_with_a_domain() {
        let nkey = nkeys::KeyPair::new_user().public_key();
        let ok = format!(
            "[hives.alpha]\njetstream_domain = \"hub\"\n[leaf_sites.edge.links]\nalpha = \"{nkey}\"\n"
        );
        let c = parse(&ok).unwrap();
        let edge = &c.leaf_sites[&LeafSiteName::new("edge").unwrap()];
        let alpha = HiveName::new("alpha").unwrap();
        assert_eq!(edge.links.get(&alpha), Some(&nkey));
        let bad = format!(
            "[hives.alpha]\n[leaf_sites.edge.links]\nalpha = \"Unope\"\nzeta = \"{nkey}\"\n\
             [leaf_sites.dock.links]\nalpha = \"{nkey}\"\n"
        );
        let err = parse(&bad).unwrap_err().join("\n");
        for needle in [
            "leaf_sites.edge.links.alpha: nkey \"Unope\"",
            "hive alpha has no jetstream_domain",
            "leaf_sites.edge.links.zeta: hive zeta is not on the roster",
            "leaf_sites.edge.links.alpha: hive alpha is already at leaf site dock",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let err = parse("[leaf_sites.Edge]\n").unwrap_err().join("\n");
        assert!(err.contains("invalid leaf site name \"Edge\""), "{err}");
        let err = parse("[leaf_sites.edge]\nnkey = \"U\"\n")
            .unwrap_err()
            .join("\n");
        assert!(err.contains("nkey"), "{err}");
    }

    #[test]
    fn nats_url_flag_overrides_the_file() {
        let c = Config::parse(Path::new("c.toml"), "", Some("nats://10.0.0.1:4222")).unwrap();
        assert_eq!(c.nats.url.as_deref(), Some("nats://10.0.0.1:4222"));
    }

    #[test]
    fn relative_paths_follow_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hook.secret"), "s3cret\n").unwrap();
        let c = Config::parse(
            &dir.path().join("c.toml"),
            &format!("webhook_secret_file = \"hook.secret\"\n{MINIMAL}"),
            None,
        )
        .unwrap();
        assert_eq!(
            c.webhook_secret_file.unwrap(),
            dir.path().join("hook.secret")
        );
    }

    #[test]
    fn the_swarm_file_is_checked_against_the_roster() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("swarm.toml"),
            "[hives.alpha]\nagents = {}\n\n[hives.zeta]\nagents = {}\n",
        )
        .unwrap();
        let text = format!("swarm_file = \"swarm.toml\"\n{MINIMAL}[hives.alpha]\n");
        let err = Config::parse(&dir.path().join("c.toml"), &text, None).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(
            err[0].contains("swarm_file: line 4: hive zeta is not on the roster"),
            "{err:?}"
        );
        std::fs::write(
            dir.path().join("swarm.toml"),
            "[hives.alpha.agents.bot]\nimgae = 1\n",
        )
        .unwrap();
        let err = Config::parse(&dir.path().join("c.toml"), &text, None).unwrap_err();
        assert!(err[0].contains("unknown key `imgae`"), "{err:?}");
    }

    #[test]
    fn secret_files_are_checked_for_presence_only() {
        // What the NixOS modules' build-time check sees: empty stand-ins.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("xkey.seed"), "").unwrap();
        std::fs::write(dir.path().join("webhook-secret"), "").unwrap();
        let text = format!(
            "xkey_seed_file = \"xkey.seed\"\nwebhook_secret_file = \"webhook-secret\"\n{MINIMAL}"
        );
        Config::parse(&dir.path().join("c.toml"), &text, None).unwrap();
    }

    #[test]
    fn syntax_error_has_a_line() {
        let err = parse("[nats\nurl = 1").unwrap_err();
        assert!(err[0].starts_with("line 1"), "{err:?}");
    }

    /// Pieces of config files a roster is made of: hive headers and
    /// labels tables, the keys a hive table takes in each string form, and
    /// other settings.
    const ROSTER_PIECES: &[&str] = &[
        "[hives.a]\n",
        "[hives.b] # comment\n",
        "[ hives . a-1 ]\n",
        "[hives.a.labels]\n",
        "[hives.b.labels]\n",
        "site = \"x\"\n",
        "\"rack no\" = 'r1'\n",
        "[nats]\n",
        "[events]\n",
        "url = \"nats://127.0.0.1:4222\"\n",
        "nkey = \"UAT3B2C5HOTUSD4RQ3TLNMEEGEBKUGBZUR2P6UXWYOVGSB6U6AYX4YSP\"\n",
        "nkey = 'U-literal'\n",
        "nkey = \"\"\"\nU-multi\"\"\"\n",
        "nkey = \"\\u0055\\tx\"\n",
        "jetstream_domain = \"edge\"\n",
        "labels = { site = \"x\", \"rack no\" = 'r1' }\n",
        "labels = { site = \"x\", }\n",
        "labels = {\n  site = \"x\", # where\n  rack = \"y\"\n}\n",
        "labels = {}\n",
        "# a comment\n",
        "\n",
        "  \t\r\n",
    ];

    /// Pieces that make a file other than a roster of that shape: every
    /// other way to write a `hives` table or key, keys and values a hive
    /// table does not take, broken syntax.
    const OTHER_PIECES: &[&str] = &[
        "[hives.\"a\"]\n",
        "[hives.'b']\n",
        "[\"hives\".a]\n",
        "[hives.a.labels.x]\n",
        "[hives]\n",
        "[[hives]]\n",
        "[[hives.a]]\n",
        "[hives.a\n",
        "[leaf_sites.edge.links]\n",
        "stale_after_secs = 60\n",
        "hives = {}\n",
        "hives.c.nkey = \"UX\"\n",
        "knowledge_repo = \"\"\"\n[hives.z]\n\"\"\"\n",
        "http_allowed_hosts = [\n",
        "  [\"b\"],\n",
        "  \"a\",\n",
        "]\n",
        "labels = {\n",
        "}\n",
        "nkey = \"\\q\"\n",
        "nkey = 5\n",
        "\"nkey\" = \"U\"\n",
        "jetstream_domain = \"bad domain!\"\n",
        "labels = { site = \"x\", site = \"y\" }\n",
        "labels = { site = 1 }\n",
        "labels = { a.b = \"x\" }\n",
        "labels.site = \"x\"\n",
        "labels = { \"\" = \"x\" }\n",
        "other = \"x\"\n",
    ];

    /// Whenever the roster is read from the parser's events, the `toml`
    /// crate reads the same file to the same settings and the same hive
    /// tables, at the same places. 40,000 files of up to 13 pieces, three
    /// in four from a roster's, the same files on every run. A good share
    /// must be taken with a hive in them (1,365 are), and a good share of
    /// valid ones not (5,298), or the test would not be testing the split.
    /// Each file is also cut in two before every line that starts with
    /// `[` (a large file is read in pieces, by two threads): the two
    /// pieces read as the whole file does (17,887 cuts), or are refused,
    /// when the cut leaves a string or an array unclosed (707 such cuts of
    /// files the split takes); and cut before every such line at once, read
    /// by one thread and by two, it reads as the whole file does or not
    /// at all.
    #[test]
    fn the_split_read_agrees_with_the_whole_read() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |below: usize| {
            // xorshift64: enough to spread the pieces.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        // Taken with at least one hive table; valid as a whole.
        let (mut taken, mut valid, mut cuts, mut cuts_refused) = (0, 0, 0, 0);
        for _ in 0..40_000 {
            let len = next(14);
            let text: String = (0..len)
                .map(|_| match next(4) {
                    0 => OTHER_PIECES[next(OTHER_PIECES.len())],
                    _ => ROSTER_PIECES[next(ROSTER_PIECES.len())],
                })
                .collect();
            let whole = read_whole(&text);
            valid += usize::from(whole.is_ok());
            let uncut = format!("{:?}", crate::roster_toml::split_at(&text, &[], 1));
            let every: Vec<usize> = text.match_indices("\n[").map(|(at, _)| at + 1).collect();
            for &at in &every {
                // Cut anywhere a line starts with `[`: the same reading,
                // or none (the cut left a string or an array unclosed).
                match crate::roster_toml::split_at(&text, &[at], 2) {
                    Some(pieces) => {
                        cuts += 1;
                        assert_eq!(format!("{:?}", Some(pieces)), uncut, "at {at}: {text:?}");
                    }
                    None => cuts_refused += usize::from(uncut != "None"),
                }
            }
            // Cut before every such line at once, read by one thread and
            // by two: the same reading, or none.
            for threads in [1, 2] {
                if let Some(pieces) = crate::roster_toml::split_at(&text, &every, threads) {
                    assert_eq!(format!("{:?}", Some(pieces)), uncut, "{every:?}: {text:?}");
                }
            }
            if let Some(split) = read_split(&text) {
                taken += usize::from(!split.1.is_empty());
                let whole =
                    whole.unwrap_or_else(|e| panic!("taken, but refused whole: {text:?}: {e:?}"));
                assert_eq!(format!("{split:?}"), format!("{whole:?}"), "{text:?}");
            }
        }
        assert!(
            taken > 1_000 && valid - taken > 1_000 && cuts > 10_000 && cuts_refused > 100,
            "taken {taken}, valid {valid}; cut: read {cuts}, refused {cuts_refused}"
        );
    }

    #[test]
    fn a_seed_given_as_an_nkey_is_refused_and_not_shown() {
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        for text in [
            format!("{MINIMAL}[hives.a]\nnkey = \"{seed}\"\n"),
            format!("{MINIMAL}[controller]\nnkey = \"{seed}\"\n"),
        ] {
            let problems = parse(&text).unwrap_err();
            assert!(problems[0].contains("a seed, not shown"), "{problems:?}");
            assert!(
                !problems.iter().any(|p| p.contains(&seed[2..])),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn rosters_as_written_are_read_from_the_events() {
        let nkey = nkeys::KeyPair::new_user().public_key();
        let mut text = format!("{MINIMAL}[events]\n");
        for i in 0..300 {
            text.push_str(&format!("\n[hives.hive-{i:03}]\n"));
            if i % 2 == 0 {
                text.push_str(&format!(
                    "nkey = \"{nkey}\"\nlabels = {{ site = \"s{}\" }}\n",
                    i % 3
                ));
            }
        }
        let (_, split) = read_split(&text).expect("read from the events");
        let (_, whole) = read_whole(&text).expect("valid");
        assert_eq!(split.len(), 300);
        assert_eq!(format!("{split:?}"), format!("{whole:?}"));
        let c = parse(&text).expect("valid");
        assert_eq!(c.hives.len(), 300);
        assert_eq!(
            c.hives[&HiveName::new("hive-004").unwrap()].labels["site"],
            "s1"
        );
    }

    #[test]
    fn a_bad_hive_table_is_named_with_its_line_either_way() {
        // Read from the events: the entry's own check names the line.
        let taken = format!("{MINIMAL}\n[hives.ok]\n\n[hives.bad]\nnkey = \"Unot-a-key\"\n");
        assert!(read_split(&taken).is_some());
        let problems = parse(&taken).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("line 6: hives.bad.nkey")),
            "{problems:?}"
        );
        // Not of the shape: the toml crate's message, with its line.
        let whole = format!("{MINIMAL}\n[hives.ok]\n\n[hives.bad]\nnkey = 5\n");
        assert!(read_split(&whole).is_none());
        let problems = parse(&whole).unwrap_err();
        assert!(
            problems.iter().any(|p| p.starts_with("line 6: hives.bad:")),
            "{problems:?}"
        );
    }

    /// A roster large enough to be read by two threads names a bad table
    /// in either half by its line in the whole file.
    #[test]
    fn a_bad_hive_table_in_a_large_roster_is_named_with_its_line() {
        let nkey = nkeys::KeyPair::new_user().public_key();
        let mut text = String::from(MINIMAL);
        let mut hive = 0;
        while text.len() < 2 << 20 {
            text.push_str(&format!(
                "[hives.h{hive:05}]\nnkey = \"{nkey}\"\n[hives.h{hive:05}.labels]\nsite = \"s{}\"\n",
                hive % 7
            ));
            hive += 1;
        }
        let line_of = |name: &str| 1 + text[..text.find(name).unwrap()].matches('\n').count();
        let (early, late) = (format!("h{:05}", 3), format!("h{:05}", hive - 3));
        let bad = |text: &str, name: &str| {
            text.replacen(
                &format!("[hives.{name}]\nnkey = \"{nkey}\""),
                &format!("[hives.{name}]\nnkey = \"Unot-a-key\""),
                1,
            )
        };
        let text2 = bad(&bad(&text, &early), &late);
        assert!(read_split(&text2).is_some(), "read in pieces");
        let problems = parse(&text2).unwrap_err();
        for name in [&early, &late] {
            let want = format!(
                "line {}: hives.{name}.nkey",
                line_of(&format!("[hives.{name}]"))
            );
            assert!(
                problems.iter().any(|p| p.starts_with(&want)),
                "{want}: {problems:?}"
            );
        }
        assert_eq!(problems.len(), 2, "{problems:?}");
        let c = parse(&text).expect("valid");
        assert_eq!(c.hives.len(), hive);
        assert_eq!(
            c.hives[&HiveName::new(&late).unwrap()].labels["site"],
            format!("s{}", (hive - 3) % 7)
        );
    }
}
