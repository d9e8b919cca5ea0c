//! `swarm-controller maintenance on|off|list`: put hives in maintenance,
//! end it, and list the holds. A hive is named, or selected by roster
//! labels the way a swarm file's group selects hives (every `k=v` must be
//! among the hive's labels).

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use swarm_queue_client::event_stream::Event;
use swarm_queue_client::outln;
use swarm_queue_client::HiveName;
use time::OffsetDateTime;

use swarm_queue_client::cli::{print_json, EXIT_OK, EXIT_USAGE};

use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::maintenance::{self, store, Hold, HOLD_SCHEMA};
use crate::{audit, nats};

#[derive(Debug, Subcommand)]
pub(crate) enum MaintenanceCommand {
    /// Put a hive in maintenance: it shows `maintenance` (with the reason
    /// and the end) instead of stale or offline, needs no attention, and
    /// rollouts skip it. The hold ends by itself --ttl after the server
    /// stored it; `on` again restarts it.
    On(OnArgs),
    /// End a hive's maintenance (an expired hold is removed too).
    Off(Target),
    /// List every hold, in force or expired.
    List {
        #[arg(long)]
        json: bool,
    },
}

/// Which hives.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The hive (on the roster).
    #[arg(required_unless_present = "select", conflicts_with = "select")]
    hive: Option<HiveName>,
    /// Every rostered hive whose labels include K=V (repeat it: all must
    /// match, as a group's select).
    #[arg(long, value_name = "K=V")]
    select: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct OnArgs {
    #[command(flatten)]
    target: Target,
    /// How long the hold lasts: a whole number with s, m, h or d, 1s to 7d.
    #[arg(long, default_value = "2h")]
    ttl: String,
    /// Why, shown with the hive (at most 200 bytes).
    #[arg(long, default_value = "")]
    reason: String,
}

/// Run one `maintenance` verb.
pub(crate) async fn maintenance_cmd(
    config: &Config,
    command: MaintenanceCommand,
) -> anyhow::Result<i32> {
    let usage = |e: String| {
        eprintln!("swarm-controller: {e}");
        Ok(EXIT_USAGE)
    };
    let (hives, hold) = match &command {
        MaintenanceCommand::On(a) => {
            let ttl = match maintenance::parse_ttl(&a.ttl) {
                Ok(ttl) => ttl,
                Err(e) => return usage(e),
            };
            if let Err(e) = maintenance::check_reason(&a.reason) {
                return usage(e);
            }
            let hold = Hold {
                schema: HOLD_SCHEMA,
                reason: a.reason.clone(),
                ttl_secs: ttl.as_secs(),
                by: crate::audit::identity(),
            };
            (targets(config, &a.target), Some(hold))
        }
        MaintenanceCommand::Off(t) => (targets(config, t), None),
        MaintenanceCommand::List { .. } => (Ok(Vec::new()), None),
    };
    let hives = match hives {
        Ok(h) => h,
        Err(e) => return usage(e),
    };
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let bucket = &buckets.maintenance;
    let event = match (&command, &hold) {
        (MaintenanceCommand::On(_), Some(hold)) => Some(
            Event::new("maintenance_on").said(format!("for {} s: {}", hold.ttl_secs, hold.reason)),
        ),
        (MaintenanceCommand::Off(_), _) => Some(Event::new("maintenance_off")),
        _ => None,
    };
    if let Some(event) = event {
        audit::record(&conn.client, &config.events, event.touching(&hives)).await;
    }
    match (command, hold) {
        (MaintenanceCommand::On(_), Some(hold)) => {
            for hive in &hives {
                store::set(bucket, hive, &hold).await?;
                let now = OffsetDateTime::now_utc();
                let shown = store::entry(bucket, hive.as_str()).await?;
                match shown.and_then(|e| e.view(now)) {
                    Some(v) => outln!("{hive}: in maintenance {}", v.line()),
                    None => outln!("{hive}: in maintenance"),
                }
            }
        }
        (MaintenanceCommand::Off(_), _) => {
            let now = OffsetDateTime::now_utc();
            for hive in &hives {
                match store::clear(bucket, hive).await?.and_then(|e| e.view(now)) {
                    Some(v) => outln!("{hive}: maintenance ended (it was {})", v.line()),
                    None => outln!("{hive}: not in maintenance"),
                }
            }
        }
        (MaintenanceCommand::List { json }, _) => list(bucket, json).await?,
        (MaintenanceCommand::On(_), None) => {}
    }
    Ok(EXIT_OK)
}

/// `maintenance list`: each hold with its state at the reader's clock.
async fn list(bucket: &async_nats::jetstream::kv::Store, json: bool) -> anyhow::Result<()> {
    let now = OffsetDateTime::now_utc();
    let holds = store::read_all(bucket).await?;
    if json {
        let rows: Vec<serde_json::Value> = holds
            .iter()
            .map(|(hive, e)| match (e.view(now), &e.hold) {
                (Some(v), _) => {
                    let mut row = serde_json::json!({ "hive": hive });
                    if let (Some(m), Ok(serde_json::Value::Object(v))) =
                        (row.as_object_mut(), serde_json::to_value(&v))
                    {
                        m.extend(v);
                    }
                    row
                }
                (None, Err(problem)) => serde_json::json!({ "hive": hive, "problem": problem }),
                (None, Ok(_)) => serde_json::json!({ "hive": hive }),
            })
            .collect();
        print_json(&serde_json::json!({ "holds": rows }))?;
        return Ok(());
    }
    if holds.is_empty() {
        outln!("no hive is in maintenance");
    }
    for (hive, e) in &holds {
        match (e.view(now), &e.hold) {
            (Some(v), _) => {
                let state = if v.active { "active" } else { "expired" };
                outln!("{hive}  {state}  {}", v.line());
            }
            (None, Err(problem)) => outln!("{hive}  unreadable  {problem}"),
            (None, Ok(_)) => outln!("{hive}  unreadable"),
        }
    }
    Ok(())
}

/// The hives a target names: the one hive (it must be on the roster), or
/// every rostered hive the labels select (at least one).
fn targets(config: &Config, t: &Target) -> Result<Vec<HiveName>, String> {
    if let Some(hive) = &t.hive {
        if !config.hives.contains_key(hive) {
            return Err(format!("hive {hive} is not on this controller's roster"));
        }
        return Ok(vec![hive.clone()]);
    }
    let mut select = BTreeMap::new();
    for pair in &t.select {
        let Some((k, v)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(format!("--select {pair:?} is not K=V"));
        };
        select.insert(k.to_string(), v.to_string());
    }
    let hives: Vec<HiveName> = config
        .hives
        .iter()
        .filter(|(_, e)| select.iter().all(|(k, v)| e.labels.get(k) == Some(v)))
        .map(|(h, _)| h.clone())
        .collect();
    if hives.is_empty() {
        return Err(format!(
            "--select {} matches no hive on this controller's roster",
            t.select.join(" --select ")
        ));
    }
    Ok(hives)
}
