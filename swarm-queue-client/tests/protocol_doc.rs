//! Keeps `docs/protocol.md` true to this crate.
//!
//! The document is the reference operators and other clients work from, so
//! every example and every number in it is checked here against the crate's
//! own decoders and constants. The conventions the document follows:
//!
//! - A fenced block tagged ```` ```json <payload> ```` is an example of that
//!   payload, where `<payload>` is one of `declaration`, `status`,
//!   `deploy-request`, `deploy-reply`, `logs-request`, `log-frame`,
//!   `logs-ack`, `event`, `credential-notice`,
//!   `credential-envelope`. It must decode through [`decode`] (or
//!   [`DeployReply::decode`]) with no warning. A third word changes what is
//!   expected: `newer` means it must decode *with* a warning, `refused`
//!   means it must fail to decode.
//! - A ```` ```text warning ```` or ```` ```text error ```` block right after
//!   a `newer` or `refused` example holds the exact warning or error text.
//! - Every ```` ```json ```` block must carry a payload tag, so no example
//!   escapes this test; every payload must have at least one example that
//!   decodes.
//! - A ```` ```text name-error ```` block is the exact error for the name
//!   it quotes (`invalid agent name "Mail.Bot": …`).
//! - A ```` ```toml nats-config ```` block is a config file whose `[nats]`
//!   table is parsed as [`NatsConfig`] and must pass its `check()`.
//! - A table right after an HTML comment `<!-- checked: NAME -->` is
//!   checked: `reference` (subjects, buckets and keys against the crate's
//!   items), `bounds` (each number against its constant), `bucket-defaults`
//!   (history, storage, replicas, max value size and the config table name).
//!   New public names in `buckets.rs`/`subjects.rs` and new constants in
//!   `limits.rs` fail this test until the document (and the maps below)
//!   cover them.
//!
//! Every failure names the line of `docs/protocol.md` it is about.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use swarm_queue_client::buckets::{
    CREDENTIALS_BUCKET, CURRENT_ROLLOUT_KEY, DELIVERIES_BUCKET, MAINTENANCE_BUCKET,
    ROLLOUTS_BUCKET, STATUS_BUCKET, WANTED_BUCKET,
};
use swarm_queue_client::credentials::CredentialEnvelope;
use swarm_queue_client::limits::*;
use swarm_queue_client::names::{MAX_NAME_LEN, NAME_RULE};
use swarm_queue_client::subjects::{self, HiveSubjects};
use swarm_queue_client::*;

const DOC: &str = "docs/protocol.md";

const PAYLOADS: &[&str] = &[
    "declaration",
    "status",
    "deploy-request",
    "deploy-reply",
    "logs-request",
    "log-frame",
    "logs-ack",
    "event",
    "credential-notice",
    "credential-envelope",
];

fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

fn crate_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn doc_text() -> String {
    let path = repo_file(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// One fenced code block.
#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// Words of the info string (`json`, `declaration`, `refused`).
    info: Vec<String>,
    body: String,
}

fn blocks(doc: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some(Block {
                        line: i + 1,
                        info: info.split_whitespace().map(str::to_string).collect(),
                        body: String::new(),
                    });
                }
            }
            Some(block) => {
                if trimmed.trim_end() == "```" {
                    out.extend(open.take());
                } else {
                    block.body.push_str(line);
                    block.body.push('\n');
                }
            }
        }
    }
    if let Some(b) = open {
        panic!("{DOC}:{}: code block is never closed", b.line);
    }
    out
}

/// One row of a checked table: its line and its cells.
type Row = (usize, Vec<String>);

/// The rows (after header and separator) of the table that follows
/// `<!-- checked: name -->`, each with at least `min_cells` cells.
fn checked_table(doc: &str, name: &str, min_cells: usize) -> Vec<Row> {
    let marker = format!("<!-- checked: {name} -->");
    let lines: Vec<&str> = doc.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == marker)
        .unwrap_or_else(|| panic!("{DOC} has no table marked {marker}"));
    let mut rows = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        let line = line.trim();
        if !line.starts_with('|') {
            break;
        }
        let row = cells(line);
        assert!(
            row.len() >= min_cells,
            "{DOC}:{}: a row of table {name} needs at least {min_cells} cells",
            i + 1
        );
        rows.push((i + 1, row));
    }
    assert!(
        rows.len() > 2,
        "{DOC}:{}: table {name} has no rows",
        start + 1
    );
    // Header and the |---| separator.
    rows.drain(..2);
    rows
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The first `code span` of a cell, or the cell itself.
fn code(cell: &str) -> String {
    let mut parts = cell.split('`');
    match (parts.next(), parts.next()) {
        (Some(_), Some(inside)) => inside.to_string(),
        _ => cell.to_string(),
    }
}

fn fail_all(what: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{what}: {} problem(s):\n  - {}",
        failures.len(),
        failures.join("\n  - ")
    );
}

// ---------------------------------------------------------------------------
// JSON examples

/// What decoding one example gave.
enum Outcome {
    Decoded { warnings: Vec<String> },
    Refused { error: String },
}

fn decode_example(payload: &str, bytes: &[u8]) -> Option<Outcome> {
    fn outcome<T>(r: Result<Decoded<T>, DecodeError>) -> Outcome {
        match r {
            Ok(d) => Outcome::Decoded {
                warnings: d.warnings,
            },
            Err(e) => Outcome::Refused {
                error: e.to_string(),
            },
        }
    }
    /// A payload with no schema, decoded on its own.
    fn plain<T>(r: Result<T, DecodeError>) -> Outcome {
        match r {
            Ok(_) => Outcome::Decoded {
                warnings: Vec::new(),
            },
            Err(e) => Outcome::Refused {
                error: e.to_string(),
            },
        }
    }
    Some(match payload {
        "declaration" => outcome(decode::<Declaration>(bytes)),
        "status" => outcome(decode::<HiveStatus>(bytes)),
        "deploy-request" => outcome(decode::<DeployRequest>(bytes)),
        "credential-notice" => outcome(decode::<CredentialNotice>(bytes)),
        "credential-envelope" => outcome(decode::<CredentialEnvelope>(bytes)),
        "deploy-reply" => plain(DeployReply::decode(bytes)),
        "logs-request" => outcome(decode::<LogsRequest>(bytes)),
        "log-frame" => plain(LogFrame::decode(bytes)),
        "logs-ack" => plain(LogsAck::decode(bytes)),
        "event" => plain(swarm_queue_client::event_stream::Event::decode(bytes)),
        _ => return None,
    })
}

#[test]
fn every_json_example_decodes_as_the_doc_says() {
    let doc = doc_text();
    let blocks = blocks(&doc);
    let mut failures = Vec::new();
    let mut decoded_kinds = BTreeSet::new();
    // The text a following `text warning` / `text error` block must equal.
    let mut expect_next: Option<(&str, String)> = None;

    for block in &blocks {
        let at = format!("{DOC}:{}", block.line);
        let words: Vec<&str> = block.info.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["text", kind @ ("warning" | "error")] => {
                match expect_next.take() {
                    Some((want_kind, text)) if want_kind == *kind => {
                        if block.body.trim() != text.trim() {
                            failures.push(format!(
                                "{at}: the {kind} text differs from what the crate says:\n      doc:   {}\n      crate: {}",
                                block.body.trim(),
                                text.trim()
                            ));
                        }
                    }
                    _ => failures.push(format!(
                        "{at}: a `text {kind}` block must follow a json example marked {}",
                        if *kind == "warning" {
                            "`newer`"
                        } else {
                            "`refused`"
                        }
                    )),
                }
                continue;
            }
            ["json", rest @ ..] => {
                expect_next = None;
                let (payload, expect) = match rest {
                    [p] => (*p, "decodes"),
                    [p, e @ ("newer" | "refused")] => (*p, *e),
                    _ => {
                        failures.push(format!(
                            "{at}: a json block needs an info string `json <payload> [newer|refused]` \
                             with <payload> one of {PAYLOADS:?}; found {:?}",
                            block.info
                        ));
                        continue;
                    }
                };
                let Some(outcome) = decode_example(payload, block.body.as_bytes()) else {
                    failures.push(format!(
                        "{at}: unknown payload {payload:?}; use one of {PAYLOADS:?}"
                    ));
                    continue;
                };
                match (expect, outcome) {
                    ("decodes", Outcome::Decoded { warnings }) if warnings.is_empty() => {
                        decoded_kinds.insert(payload);
                    }
                    ("decodes", Outcome::Decoded { warnings }) => failures.push(format!(
                        "{at}: {payload} example decodes with warnings {warnings:?}; mark it `newer` or fix it"
                    )),
                    ("newer", Outcome::Decoded { warnings }) if !warnings.is_empty() => {
                        expect_next = Some(("warning", warnings.join("\n")));
                    }
                    ("newer", Outcome::Decoded { .. }) => failures.push(format!(
                        "{at}: {payload} example marked `newer` decodes without a warning"
                    )),
                    ("refused", Outcome::Refused { error }) => {
                        expect_next = Some(("error", error));
                    }
                    ("refused", Outcome::Decoded { .. }) => failures.push(format!(
                        "{at}: {payload} example marked `refused` decodes"
                    )),
                    (_, Outcome::Refused { error }) => failures.push(format!(
                        "{at}: {payload} example does not decode: {error}"
                    )),
                    (other, _) => unreachable!("expectation {other} is one of three"),
                }
            }
            _ => expect_next = None,
        }
    }

    for kind in PAYLOADS {
        if !decoded_kinds.contains(kind) {
            failures.push(format!("{DOC} has no `json {kind}` example that decodes"));
        }
    }
    fail_all("JSON examples in docs/protocol.md", failures);
}

/// The status examples quote the spec hash of the first declaration
/// example; the hash must be what the crate computes.
#[test]
fn status_examples_quote_the_declared_spec_hash() {
    let doc = doc_text();
    let blocks = blocks(&doc);
    let tagged = |payload: &'static str| {
        blocks
            .iter()
            .filter(move |b| b.info.len() == 2 && b.info[0] == "json" && b.info[1] == payload)
    };
    let first = tagged("declaration")
        .next()
        .unwrap_or_else(|| panic!("{DOC} has no declaration example"));
    let declaration = decode::<Declaration>(first.body.as_bytes())
        .unwrap_or_else(|e| panic!("{DOC}:{}: {e}", first.line))
        .value;
    let mut failures = Vec::new();
    let mut compared = 0;
    for block in tagged("status") {
        let Ok(hive_status) = decode::<HiveStatus>(block.body.as_bytes()) else {
            continue; // reported by every_json_example_decodes_as_the_doc_says
        };
        for (agent, status) in &hive_status.value.agents {
            let Some(spec) = declaration.agents.get(agent) else {
                continue;
            };
            let hash = spec.spec_hash();
            for (field, value) in [
                ("spec", &status.spec),
                ("declared_spec", &status.declared_spec),
            ] {
                if let Some(value) = value {
                    compared += 1;
                    if value != &hash {
                        failures.push(format!(
                            "{DOC}:{}: agents.{agent}.{field} is {value}, but the spec hash of {agent} in the declaration at line {} is {hash}",
                            block.line, first.line
                        ));
                    }
                }
            }
        }
    }
    assert!(
        compared > 0,
        "no status example quotes a declared agent's spec hash"
    );
    fail_all("spec hashes in docs/protocol.md", failures);
}

// ---------------------------------------------------------------------------
// TOML examples

#[derive(serde::Deserialize)]
struct ConfigFile {
    nats: NatsConfig,
}

#[test]
fn every_nats_config_example_parses_and_checks() {
    let doc = doc_text();
    let mut failures = Vec::new();
    let mut seen = 0;
    for block in blocks(&doc) {
        if block.info.first().map(String::as_str) != Some("toml") {
            continue;
        }
        let at = format!("{DOC}:{}", block.line);
        if block.info.get(1).map(String::as_str) != Some("nats-config") {
            failures.push(format!(
                "{at}: a toml block must be tagged `toml nats-config`; found {:?}",
                block.info
            ));
            continue;
        }
        seen += 1;
        match toml::from_str::<ConfigFile>(&block.body) {
            Err(e) => failures.push(format!("{at}: does not parse: {e}")),
            Ok(file) => {
                let problems = file.nats.check();
                if !problems.is_empty() {
                    failures.push(format!("{at}: check() reports {problems:?}"));
                }
            }
        }
    }
    assert!(seen > 0, "{DOC} has no `toml nats-config` example");
    fail_all("TOML examples in docs/protocol.md", failures);
}

// ---------------------------------------------------------------------------
// Reference table

/// What the crate builds for each "built by" item, with the document's
/// placeholders filled in.
fn built_by(item: &str) -> Option<String> {
    let hive = HiveName::new("alpha").expect("valid");
    let agent = AgentName::new("mail-bot").expect("valid");
    let account = AccountName::new("smtp").expect("valid");
    Some(match item {
        "buckets::STATUS_BUCKET" => STATUS_BUCKET.to_string(),
        "buckets::WANTED_BUCKET" => WANTED_BUCKET.to_string(),
        "buckets::CREDENTIALS_BUCKET" => CREDENTIALS_BUCKET.to_string(),
        "buckets::ROLLOUTS_BUCKET" => ROLLOUTS_BUCKET.to_string(),
        "buckets::CURRENT_ROLLOUT_KEY" => CURRENT_ROLLOUT_KEY.to_string(),
        "buckets::DELIVERIES_BUCKET" => DELIVERIES_BUCKET.to_string(),
        "buckets::MAINTENANCE_BUCKET" => MAINTENANCE_BUCKET.to_string(),
        "subjects::delivery_key" => subjects::delivery_key(DELIVERY_ID).expect("a UUID is a key"),
        "subjects::deployed_key" => subjects::deployed_key(&hive, &agent),
        "subjects::credential_key" => subjects::credential_key(&hive, &agent, &account),
        "subjects::credential_prefix_filter" => subjects::credential_prefix_filter(&hive),
        "subjects::KNOWLEDGE" => subjects::KNOWLEDGE.to_string(),
        "HiveSubjects::new(<hive>).deploy" => HiveSubjects::new(&hive).deploy,
        "HiveSubjects::new(<hive>).credential" => HiveSubjects::new(&hive).credential,
        "HiveSubjects::new(<hive>).logs_request" => HiveSubjects::new(&hive).logs_request,
        "HiveSubjects::new(<hive>).logs" => HiveSubjects::new(&hive).logs,
        "subjects::logs_ack_subject" => subjects::logs_ack_subject(&hive, "<token>"),
        "subjects::answer_token" => {
            let reply = subjects::deploy_answer_subject(&hive, "t1");
            assert_eq!(subjects::answer_token(&hive, &reply), Some("t1"));
            "<token>".to_string()
        }
        "subjects::all_logs_subjects()" => subjects::all_logs_subjects(),
        "subjects::all_deploy_subjects()" => subjects::all_deploy_subjects(),
        "subjects::all_credential_subjects()" => subjects::all_credential_subjects(),
        "subjects::all_deploy_answers()" => subjects::all_deploy_answers(),
        "subjects::deploy_answer_prefix" => subjects::deploy_answer_prefix(&hive),
        "subjects::deploy_answer_subject" => subjects::deploy_answer_subject(&hive, "<token>"),
        "subjects::hive_connection_name" => subjects::hive_connection_name(&hive),
        "subjects::CONTROLLER_CONNECTION_NAME" => subjects::CONTROLLER_CONNECTION_NAME.to_string(),
        "subjects::hive_inbox_prefix" => subjects::hive_inbox_prefix(&hive),
        "subjects::controller_inbox_prefix()" => subjects::controller_inbox_prefix(),
        "subjects::inbox_prefix(<connection name>)" => {
            subjects::inbox_prefix(&subjects::hive_connection_name(&hive))
        }
        _ => return None,
    })
}

/// What `<id>` (a forge's delivery id) stands for in the reference table.
const DELIVERY_ID: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

fn fill_placeholders(pattern: &str) -> String {
    pattern
        .replace("<id>", DELIVERY_ID)
        .replace("<hive>", "alpha")
        .replace("<agent>", "mail-bot")
        .replace("<account>", "smtp")
}

/// Public names a source file defines at the top level (`pub const X`,
/// `pub fn x`, `pub async fn x`) and, when `fields` is set, public `String`
/// fields.
fn public_items(source: &str, fields: bool) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for line in source.lines() {
        if let Some(rest) = line
            .strip_prefix("pub const ")
            .or_else(|| line.strip_prefix("pub fn "))
            .or_else(|| line.strip_prefix("pub async fn "))
        {
            out.insert(ident(rest));
        } else if fields {
            if let Some(rest) = line.trim_start().strip_prefix("pub ") {
                if line.starts_with("    ") && rest.trim_end().ends_with(": String,") {
                    out.insert(ident(rest));
                }
            }
        }
    }
    out
}

fn tokens(item: &str) -> BTreeSet<String> {
    item.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn reference_table_matches_the_crate() {
    let doc = doc_text();
    let rows = checked_table(&doc, "reference", 3);
    let mut failures = Vec::new();
    let mut covered = BTreeSet::new();
    for (line, cells) in &rows {
        let at = format!("{DOC}:{line}");
        let documented = fill_placeholders(&code(&cells[1]));
        let item = code(&cells[2]);
        covered.extend(tokens(&item));
        match built_by(&item) {
            None => failures.push(format!(
                "{at}: {item:?} is not an item this test knows; add it to built_by()"
            )),
            Some(actual) if actual != documented => failures.push(format!(
                "{at}: the document says {item} is {:?} (with <hive>=alpha, <agent>=mail-bot, <account>=smtp), the crate builds {actual:?}",
                code(&cells[1])
            )),
            Some(_) => {}
        }
    }
    // Every name-building item of the crate has a row.
    let not_names = [
        "open_or_create",
        "create_bucket",
        "CREATE_TIMEOUT",
        "stream_config",
        "unsafe_settings",
        "check_buckets",
        "fixed_config",
        "fix_buckets",
        "parse_credential_key",
        // `deploy_answer_subject` (which has its row) with a fresh token.
        "fresh_deploy_answer",
        "DEFAULT_DELIVERIES_MAX_AGE_SECS",
        "DELIVERIES_MAX_AGE_BOUNDS",
    ];
    let mut items = public_items(&crate_file("src/buckets.rs"), false);
    items.extend(public_items(&crate_file("src/subjects.rs"), true));
    for item in items {
        if !not_names.contains(&item.as_str()) && !covered.contains(&item) {
            failures.push(format!(
                "the crate defines {item}, but the reference table of {DOC} has no row built by it"
            ));
        }
    }
    fail_all("reference table of docs/protocol.md", failures);
}

#[test]
fn name_rule_is_quoted() {
    let doc = doc_text();
    let regex = NAME_RULE
        .split("regex ")
        .nth(1)
        .and_then(|r| r.strip_suffix(')'))
        .expect("NAME_RULE ends with (regex …)");
    assert!(
        doc.contains(regex),
        "{DOC} does not quote the name rule {regex}"
    );
}

#[test]
fn name_error_examples_are_what_the_crate_says() {
    let doc = doc_text();
    let mut failures = Vec::new();
    let mut seen = 0;
    for block in blocks(&doc) {
        if block.info != ["text", "name-error"] {
            continue;
        }
        seen += 1;
        let at = format!("{DOC}:{}", block.line);
        let text = block.body.trim();
        // `invalid <kind> name "<value>": …`
        let mut quoted = text.splitn(3, '"');
        let (Some(head), Some(value)) = (quoted.next(), quoted.next()) else {
            failures.push(format!("{at}: no quoted name in {text:?}"));
            continue;
        };
        let actual = match head.trim() {
            "invalid hive name" => HiveName::new(value).err(),
            "invalid agent name" => AgentName::new(value).err(),
            "invalid credential account name" => AccountName::new(value).err(),
            other => {
                failures.push(format!("{at}: {other:?} is not a kind of name"));
                continue;
            }
        };
        match actual {
            None => failures.push(format!("{at}: {value:?} is a valid name")),
            Some(e) if e.to_string() != text => failures.push(format!(
                "{at}: the error differs from what the crate says:\n      doc:   {text}\n      crate: {e}"
            )),
            Some(_) => {}
        }
    }
    assert!(seen > 0, "{DOC} has no `text name-error` example");
    fail_all("name errors in docs/protocol.md", failures);
}

// ---------------------------------------------------------------------------
// Bounds table

fn bound(constant: &str) -> Option<f64> {
    Some(match constant {
        "names::MAX_NAME_LEN" => MAX_NAME_LEN as f64,
        "limits::SERVER_MAX_PAYLOAD" => SERVER_MAX_PAYLOAD as f64,
        "limits::MAX_VALUE_BYTES" => MAX_VALUE_BYTES as f64,
        "limits::SCHEMA_VERSION" => SCHEMA_VERSION as f64,
        "limits::MAX_AGENTS_PER_HIVE" => MAX_AGENTS_PER_HIVE as f64,
        "limits::MAX_IMAGE_LEN" => MAX_IMAGE_LEN as f64,
        "limits::MAX_COMMAND_ARGS" => MAX_COMMAND_ARGS as f64,
        "limits::MAX_ARG_LEN" => MAX_ARG_LEN as f64,
        "limits::MAX_HEALTH_ARGS" => MAX_HEALTH_ARGS as f64,
        "limits::MAX_HEALTH_ARG_LEN" => MAX_HEALTH_ARG_LEN as f64,
        "limits::MAX_ENV_VARS" => MAX_ENV_VARS as f64,
        "limits::MAX_ENV_KEY_LEN" => MAX_ENV_KEY_LEN as f64,
        "limits::MAX_ENV_VALUE_LEN" => MAX_ENV_VALUE_LEN as f64,
        "limits::MAX_CREDENTIALS_PER_AGENT" => MAX_CREDENTIALS_PER_AGENT as f64,
        "limits::MAX_BUILD_FIELD_LEN" => MAX_BUILD_FIELD_LEN as f64,
        "limits::MIN_MEMORY_MB" => MIN_MEMORY_MB as f64,
        "limits::MAX_MEMORY_MB" => MAX_MEMORY_MB as f64,
        "limits::MAX_CPUS" => MAX_CPUS,
        "limits::MAX_MIN_RUNNING_SECS" => MAX_MIN_RUNNING_SECS as f64,
        "limits::MAX_WARNINGS" => MAX_WARNINGS as f64,
        "limits::MAX_WARNING_KEY_LEN" => MAX_WARNING_KEY_LEN as f64,
        "limits::MAX_MESSAGE_LEN" => MAX_MESSAGE_LEN as f64,
        "limits::MAX_SHORT_LEN" => MAX_SHORT_LEN as f64,
        "limits::MAX_SECRET_BYTES" => MAX_SECRET_BYTES as f64,
        "limits::MAX_EXIT_COUNT" => f64::from(MAX_EXIT_COUNT),
        "limits::MAX_EXIT_SECS" => MAX_EXIT_SECS as f64,
        _ => return None,
    })
}

#[test]
fn bounds_table_matches_the_constants() {
    let doc = doc_text();
    let rows = checked_table(&doc, "bounds", 2);
    let mut failures = Vec::new();
    let mut documented: BTreeMap<String, usize> = BTreeMap::new();
    for (line, cells) in &rows {
        let at = format!("{DOC}:{line}");
        let constant = code(&cells[0]);
        if let Some(first) = documented.insert(constant.clone(), *line) {
            failures.push(format!(
                "{at}: {constant} is listed twice (also line {first})"
            ));
        }
        let value_text = code(&cells[1]);
        let Ok(value) = value_text.parse::<f64>() else {
            failures.push(format!(
                "{at}: value {value_text:?} of {constant} is not a plain number"
            ));
            continue;
        };
        match bound(&constant) {
            None => failures.push(format!(
                "{at}: {constant:?} is not a constant this test knows; add it to bound()"
            )),
            Some(actual) if actual != value => failures.push(format!(
                "{at}: the document says {constant} = {value_text}, the crate says {actual}"
            )),
            Some(_) => {}
        }
    }
    // Every constant of limits.rs (and the name length) is in the table.
    let mut constants: BTreeSet<String> = public_items(&crate_file("src/limits.rs"), false)
        .into_iter()
        .filter(|i| i.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|c| format!("limits::{c}"))
        .collect();
    constants.insert("names::MAX_NAME_LEN".into());
    for constant in constants {
        if !documented.contains_key(&constant) {
            failures.push(format!(
                "the crate defines {constant}, but the bounds table of {DOC} does not list it"
            ));
        }
    }
    fail_all("bounds table of docs/protocol.md", failures);
}

// ---------------------------------------------------------------------------
// Bucket defaults table

#[test]
fn bucket_defaults_table_matches_the_crate() {
    let doc = doc_text();
    let rows = checked_table(&doc, "bucket-defaults", 6);
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    let all = Bucket::ALL;
    for (line, cells) in &rows {
        let at = format!("{DOC}:{line}");
        let name = code(&cells[0]);
        let Some(bucket) = all.iter().copied().find(|b| b.name() == name) else {
            failures.push(format!("{at}: {name:?} is not a bucket of the crate"));
            continue;
        };
        seen.insert(name.clone());
        let defaults = BucketSettings::default_for(bucket);
        let storage = serde_json::to_value(defaults.storage).expect("storage serializes");
        let checks = [
            ("history", code(&cells[2]), defaults.history.to_string()),
            (
                "storage",
                code(&cells[3]),
                storage.as_str().unwrap_or_default().to_string(),
            ),
            ("replicas", code(&cells[4]), defaults.replicas.to_string()),
            (
                "max value size",
                code(&cells[5]),
                MAX_VALUE_BYTES.to_string(),
            ),
        ];
        for (field, doc_value, actual) in checks {
            if doc_value != actual {
                failures.push(format!(
                    "{at}: {name} {field} is {doc_value:?} in the document, {actual:?} in the crate"
                ));
            }
        }
        // The config table named in the document must set this bucket.
        let table = code(&cells[1]);
        let toml_text = format!("{table}\nhistory = 7\n");
        match toml::from_str::<ConfigFile>(&toml_text) {
            Err(e) => failures.push(format!("{at}: config table {table} does not parse: {e}")),
            Ok(file) => {
                for other in all {
                    let history = file.nats.buckets.get(other).history;
                    if (other == bucket) != (history == 7) {
                        failures.push(format!(
                            "{at}: config table {table} does not set exactly the settings of {name}"
                        ));
                        break;
                    }
                }
            }
        }
    }
    for bucket in all {
        if !seen.contains(bucket.name()) {
            failures.push(format!(
                "bucket-defaults table of {DOC} has no row for {}",
                bucket.name()
            ));
        }
    }
    fail_all("bucket-defaults table of docs/protocol.md", failures);
}

// ---------------------------------------------------------------------------
// The checker itself.

#[test]
fn block_and_table_parsers_work() {
    let text = "intro\n```json declaration refused\n{ }\n```\n\n<!-- checked: t -->\n| a | b |\n|---|---|\n| `x` | 1 |\n\nafter\n";
    let b = blocks(text);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].line, 2);
    assert_eq!(b[0].info, ["json", "declaration", "refused"]);
    assert_eq!(b[0].body, "{ }\n");
    let rows = checked_table(text, "t", 2);
    assert_eq!(rows, vec![(9, vec!["`x`".to_string(), "1".to_string()])]);
    assert_eq!(code("`hyperhive-status`"), "hyperhive-status");
    assert_eq!(code("plain"), "plain");
    let items = public_items(
        "pub const A: u8 = 1;\npub fn b() {}\nfn c() {}\n    pub d: String,\npub async fn e() {}\n",
        true,
    );
    assert_eq!(
        items,
        BTreeSet::from(["A".into(), "b".into(), "d".into(), "e".into()])
    );
}
