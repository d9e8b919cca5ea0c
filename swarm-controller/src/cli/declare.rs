//! The declaring verbs of the command line: `roster` (with each hive's
//! groups), `declare` (at once or `--rollout`), `rollback` and `rollout
//! status | resume | abort`. Like `cli/mod.rs`, this only wires the library to
//! arguments and output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::bail;
use swarm_queue_client::event_stream::Event;
use swarm_queue_client::HiveName;
use swarm_queue_client::{out, outln};
use time::OffsetDateTime;

use crate::capability;
use swarm_queue_client::cli::{print_json, EXIT_FAILURE, EXIT_OK, EXIT_USAGE};

use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::groups::{self, Resolved};
use crate::rollout::drive::{Deps, Ended};
use crate::rollout::report::status_json;
use crate::rollout::state::Rollout;
use crate::rollout::{store, verbs};
use crate::roster::Labels;
use crate::swarm_file::SwarmFile;
use crate::{audit, declare, nats};

/// `roster [--json]`: every rostered hive, its labels and the groups of the
/// swarm file that select it (when the config names one or `--swarm-file`).
pub fn roster_cmd(config: &Config, swarm_file: Option<PathBuf>, json: bool) -> anyhow::Result<i32> {
    let swarm = match swarm_file.or_else(|| config.swarm_file.clone()) {
        Some(p) => Some(SwarmFile::load(&p)?),
        None => None,
    };
    let groups_of = |labels: &Labels| -> Vec<String> {
        swarm
            .as_ref()
            .map(|f| groups::groups_of(f, labels))
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    if json {
        let hives: Vec<_> = config
            .hives
            .iter()
            .map(|(name, e)| {
                serde_json::json!({
                    "name": name, "labels": e.labels, "nkey": e.nkey, "groups": groups_of(&e.labels)
                })
            })
            .collect();
        print_json(&serde_json::json!({ "hives": hives }))?;
    } else {
        for (name, e) in &config.hives {
            let labels: Vec<String> = e.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut line = format!("{name}\t{}", labels.join(" "));
            let groups = groups_of(&e.labels);
            if !groups.is_empty() {
                line.push_str(&format!("\tgroups: {}", groups.join(", ")));
            }
            outln!("{line}");
        }
    }
    Ok(EXIT_OK)
}

/// How `declare` was asked to run (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct DeclareArgs {
    /// The swarm file (TOML); defaults to the config's swarm_file.
    pub file: Option<PathBuf>,
    /// Show the diff and where each agent comes from (hive table or
    /// group), and publish nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the changed hives in the waves of the file's [rollout],
    /// each only after the one before converged (state in hyperhive-rollouts).
    #[arg(long, conflicts_with = "json")]
    pub rollout: bool,
    #[arg(long)]
    pub json: bool,
    /// Write agent fields even to hives whose status says their build does
    /// not know them (such a hive leaves the agent as it is, and says so).
    #[arg(long)]
    pub force: bool,
}

/// How `rollback` was asked to run (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    pub hive: HiveName,
    /// The revision of hyperhive-wanted/<hive> to restore.
    #[arg(long, value_name = "REVISION")]
    pub to: Option<u64>,
    /// Show the diff and publish nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub async fn declare_cmd(config: &Config, args: DeclareArgs) -> anyhow::Result<i32> {
    let Some(path) = args.file.or_else(|| config.swarm_file.clone()) else {
        eprintln!("swarm-controller declare: give a swarm file, or set swarm_file in the config");
        return Ok(EXIT_USAGE);
    };
    let (swarm, hives) = load_swarm(config, &path)?;
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let mut plans = declare::plan(&conn.client, &buckets.wanted, &hives).await?;
    let checked = capability::check_plans(&buckets.status, &plans).await;
    for hive in &checked.unchecked {
        eprintln!(
            "swarm-controller declare: hive {hive} has not reported: its agent fields were not checked"
        );
    }
    if !checked.refusals.is_empty() {
        for r in &checked.refusals {
            eprintln!("swarm-controller declare: {r}");
        }
        if !args.force && !args.dry_run {
            let event = declared_event("declare", &plans, &path);
            let said = format!(
                "refused: {} agent(s) with fields their hive does not know",
                checked.refusals.len()
            );
            audit::record(&conn.client, &config.events, event.said(said)).await;
            eprintln!("swarm-controller declare: nothing published");
            return Ok(EXIT_FAILURE);
        }
    }
    if args.rollout && !args.dry_run {
        let me = crate::audit::instance_id();
        let deps = deps(config, &conn.client, &buckets, &me);
        out!("{}", declare::describe(&plans));
        let settings = swarm.rollout.clone().unwrap_or_default();
        let ended = verbs::start(&deps, path.display().to_string(), settings, &plans).await;
        let event = declared_event("rollout_start", &plans, &path);
        audit::record(&conn.client, &config.events, event.said(outcome_of(&ended))).await;
        return Ok(ended_code(&ended?));
    }
    if !args.dry_run {
        let published = declare::publish(&conn.client, &buckets.wanted, &mut plans).await;
        let event = declared_event("declare", &plans, &path);
        audit::record(
            &conn.client,
            &config.events,
            event.said(outcome_of(&published)),
        )
        .await;
        published?;
    }
    if args.json {
        print_json(&serde_json::json!({ "dry_run": args.dry_run, "hives": plans }))?;
        return Ok(EXIT_OK);
    }
    out!("{}", declare::describe(&plans));
    if args.dry_run {
        out!("{}", declare::describe_sources(&plans));
    }
    let untouched: Vec<String> = config
        .hives
        .keys()
        .filter(|h| !hives.contains_key(*h))
        .map(|h| h.to_string())
        .collect();
    if !untouched.is_empty() {
        outln!(
            "not in the swarm file, left as they are: {}",
            untouched.join(", ")
        );
    }
    Ok(EXIT_OK)
}

pub async fn rollback_cmd(config: &Config, args: RollbackArgs) -> anyhow::Result<i32> {
    let RollbackArgs {
        hive,
        to,
        dry_run,
        json,
    } = args;
    if !config.hives.contains_key(&hive) {
        bail!("hive {hive} is not on the roster of this controller's config");
    }
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let (restored, plan) = crate::rollback::plan(&conn.client, &buckets.wanted, &hive, to).await?;
    let mut plans = vec![plan];
    if !dry_run {
        let published = declare::publish(&conn.client, &buckets.wanted, &mut plans).await;
        let mut event = Event::new("rollback").touching(std::slice::from_ref(&hive));
        event.revision = Some(restored);
        let said = format!(
            "to the declaration of revision {restored}: {}",
            plans[0].outcome
        );
        let said = if published.is_ok() {
            said
        } else {
            outcome_of(&published)
        };
        audit::record(&conn.client, &config.events, event.said(said)).await;
        published?;
    }
    if json {
        print_json(&serde_json::json!({
            "dry_run": dry_run, "restored_revision": restored, "hives": plans
        }))?;
    } else {
        outln!("rolling hive {hive} back to the declaration of revision {restored}");
        out!("{}", declare::describe(&plans));
    }
    Ok(EXIT_OK)
}

/// Which rollout verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutVerb {
    Status { json: bool },
    Resume,
    Abort,
}

pub async fn rollout_cmd(config: &Config, verb: RolloutVerb) -> anyhow::Result<i32> {
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let me = crate::audit::instance_id();
    let deps = deps(config, &conn.client, &buckets, &me);
    match verb {
        RolloutVerb::Status { json } => {
            let stored = store::read(&buckets.rollouts).await?;
            let now = OffsetDateTime::now_utc();
            if json {
                print_json(&status_json(stored.as_ref(), now))?;
            } else {
                match &stored {
                    Some(s) => out!("{}", status_text(&s.rollout)),
                    None => outln!("no rollout recorded in hyperhive-rollouts"),
                }
            }
            Ok(EXIT_OK)
        }
        RolloutVerb::Resume => {
            let ended = verbs::resume(&deps).await;
            let event = Event::new("rollout_resume").said(outcome_of(&ended));
            audit::record(&conn.client, &config.events, event).await;
            match ended {
                Ok(ended) => Ok(ended_code(&ended)),
                Err(e) => {
                    eprintln!("swarm-controller: {e}");
                    Ok(EXIT_FAILURE)
                }
            }
        }
        RolloutVerb::Abort => {
            let aborted = verbs::abort(&deps).await;
            let said = match &aborted {
                Ok(r) => r.line(),
                Err(e) => format!("failed: {e}"),
            };
            audit::record(
                &conn.client,
                &config.events,
                Event::new("rollout_abort").said(said),
            )
            .await;
            outln!("{}", aborted?.line());
            Ok(EXIT_OK)
        }
    }
}

/// The rollout line, then each wave with each hive's step.
pub fn status_text(r: &Rollout) -> String {
    let mut out = format!("{}\n", r.line());
    for (i, wave) in r.waves.iter().enumerate() {
        let hives: Vec<String> = wave
            .iter()
            .filter_map(|h| {
                let t = r.hives.get(h)?;
                let rev = t
                    .written_revision
                    .map(|r| format!(" rev {r}"))
                    .unwrap_or_default();
                let why = t
                    .reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                Some(format!("{h} {}{rev}{why}", t.step.as_str()))
            })
            .collect();
        out.push_str(&format!("  wave {}: {}\n", i + 1, hives.join("; ")));
    }
    out
}

/// The swarm file, merged with the roster's labels.
fn load_swarm(
    config: &Config,
    path: &Path,
) -> anyhow::Result<(SwarmFile, BTreeMap<HiveName, Resolved>)> {
    let swarm = SwarmFile::load(path)?;
    match groups::resolve(&swarm, &config.hives) {
        Ok(hives) => Ok((swarm, hives)),
        Err(problems) => bail!(
            "swarm file {} is refused:\n  - {}",
            path.display(),
            problems.join("\n  - ")
        ),
    }
}

fn print_line(line: &str) {
    outln!("{line}");
}

/// What the rollout verbs need, with progress printed to stdout.
fn deps<'a>(
    config: &'a Config,
    client: &'a async_nats::Client,
    buckets: &'a nats::Buckets,
    me: &'a str,
) -> Deps<'a> {
    Deps {
        client,
        buckets,
        roster: &config.hives,
        stale_after: config.stale_after,
        me,
        report: &print_line,
    }
}

/// The exit code of a driven rollout, after printing how it ended.
fn ended_code(ended: &Ended) -> i32 {
    match ended {
        Ended::Completed => EXIT_OK,
        Ended::Halted { hive, reason } => {
            let who = hive
                .as_ref()
                .map(|h| format!("hive {h} "))
                .unwrap_or_default();
            outln!("rollout halted: {who}{reason}");
            outln!("fix the cause, then `rollout resume`; or `rollout abort` to restore the written hives");
            EXIT_FAILURE
        }
        Ended::Lost { line } => {
            outln!("stopped driving: another controller holds the rollout now: {line}");
            EXIT_FAILURE
        }
    }
}

/// The audit event of a declare (or a rollout's start): the hives whose
/// declaration it changes, the swarm file.
fn declared_event(kind: &str, plans: &[declare::HivePlan], path: &std::path::Path) -> Event {
    let changed: Vec<HiveName> = plans
        .iter()
        .filter(|p| p.changed)
        .map(|p| p.hive.clone())
        .collect();
    let outcomes: Vec<String> = plans
        .iter()
        .filter(|p| p.changed)
        .take(8)
        .map(|p| format!("{}: {}", p.hive, p.outcome))
        .collect();
    Event::new(kind).touching(&changed).said(format!(
        "{}: {} of {} hives changed; {}",
        path.display(),
        changed.len(),
        plans.len(),
        outcomes.join("; ")
    ))
}

/// How a verb ended, for its audit event.
fn outcome_of<T, E: std::fmt::Display>(r: &Result<T, E>) -> String {
    match r {
        Ok(_) => "done".to_string(),
        Err(e) => format!("failed: {e}"),
    }
}
