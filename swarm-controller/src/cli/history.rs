//! `swarm-controller events [--follow] [--hive H] [--agent A] [--since D]
//! [--json]`: read `hyperhive-events`, the agents' lifecycle and the
//! operators' actions, oldest first; with `--follow`, keep printing new
//! ones. Each line is stamped with the time the server stored the event
//! (no event carries a time of its own).

use async_nats::jetstream::consumer::{push::OrderedConfig, DeliverPolicy};
use futures_util::StreamExt;
use serde::Serialize;
use swarm_queue_client::event_stream::{all_audit_events, hive_events, Event};
use swarm_queue_client::outln;
use swarm_queue_client::payload::parse_age;
use swarm_queue_client::{AgentName, HiveName};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use swarm_queue_client::cli::EXIT_OK;

use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::{audit, nats};

#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    /// Keep printing new events as they are stored, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only this hive's events, and the operator actions that touched it.
    #[arg(long, value_name = "HIVE")]
    pub hive: Option<HiveName>,
    /// Only this agent's events (on any hive, or on --hive), and the
    /// operator actions on it.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<AgentName>,
    /// Only events from this long ago on: `90s`, `10m`, `2h`, `1d`.
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub since: Option<u64>,
    /// One JSON object a line: {"time", "seq", "subject", "event"}.
    #[arg(long)]
    pub json: bool,
}

/// One event as `--json` prints it.
#[derive(Serialize)]
struct Row<'a> {
    time: String,
    seq: u64,
    subject: &'a str,
    event: &'a Event,
}

/// The subjects to read: a hive's or an agent's own, and the audit events
/// (sorted out by [`wanted`]).
fn filters(args: &EventsArgs) -> Vec<String> {
    let own = match (&args.hive, &args.agent) {
        (None, None) => return Vec::new(),
        (Some(h), None) => hive_events(h),
        (Some(h), Some(a)) => format!("hyperhive.events.hive.{h}.{a}.>"),
        (None, Some(a)) => format!("hyperhive.events.hive.*.{a}.>"),
    };
    vec![own, all_audit_events()]
}

/// Whether an event passes `--hive` and `--agent` (an operator action
/// that names more hives than it lists may have touched any).
fn wanted(args: &EventsArgs, e: &Event) -> bool {
    let hive_ok = args.hive.as_ref().is_none_or(|h| {
        e.hive.as_ref() == Some(h)
            || e.hives.contains(h)
            || e.hive_count.is_some_and(|n| n as usize > e.hives.len())
    });
    let agent_ok = args
        .agent
        .as_ref()
        .is_none_or(|a| e.agent.as_ref() == Some(a));
    hive_ok && agent_ok
}

pub(crate) async fn events_cmd(config: &Config, args: EventsArgs) -> anyhow::Result<i32> {
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let js = conn.jetstream();
    let stream = audit::open(&js, &config.events)
        .await
        .map_err(anyhow::Error::msg)?;
    let deliver_policy = match args.since {
        Some(age) => DeliverPolicy::ByStartTime {
            start_time: OffsetDateTime::now_utc() - time::Duration::seconds(age as i64),
        },
        None => DeliverPolicy::All,
    };
    let mut consumer = stream
        .create_consumer(OrderedConfig {
            deliver_subject: conn.client.new_inbox(),
            filter_subjects: filters(&args),
            deliver_policy,
            ..Default::default()
        })
        .await?;
    let pending = consumer.info().await?.num_pending;
    if pending == 0 && !args.follow {
        return Ok(EXIT_OK);
    }
    let mut messages = consumer.messages().await?;
    while let Some(msg) = messages.next().await {
        let msg = msg?;
        let info = msg.info().map_err(|e| anyhow::anyhow!("{e}"))?;
        let (seq, left, stamp) = (info.stream_sequence, info.pending, info.published);
        if let Ok(event) = Event::decode(&msg.payload) {
            if wanted(&args, &event) {
                print_event(&event, seq, msg.subject.as_str(), stamp, args.json)?;
            }
        }
        // `events --follow | head`: nobody reads any more.
        if swarm_queue_client::cli::reader_gone() {
            break;
        }
        if left == 0 && !args.follow {
            break;
        }
    }
    Ok(EXIT_OK)
}

fn print_event(
    e: &Event,
    seq: u64,
    subject: &str,
    at: OffsetDateTime,
    json: bool,
) -> anyhow::Result<()> {
    let time = at.format(&Rfc3339).unwrap_or_default();
    if json {
        let row = Row {
            time,
            seq,
            subject,
            event: e,
        };
        outln!("{}", serde_json::to_string(&row)?);
        return Ok(());
    }
    let mut line = format!("{time} ");
    match (&e.hive, &e.by) {
        (Some(h), _) => {
            let agent = e.agent.as_ref().map_or("-", AgentName::as_str);
            line.push_str(&format!("{h}/{agent} {}", e.kind));
        }
        (None, by) => {
            line.push_str(&format!(
                "audit {} by {}",
                e.kind,
                by.as_deref().unwrap_or("?")
            ));
            if !e.hives.is_empty() {
                let names: Vec<&str> = e.hives.iter().map(HiveName::as_str).collect();
                let more = e
                    .hive_count
                    .unwrap_or(0)
                    .saturating_sub(e.hives.len() as u64);
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                line.push_str(&format!(" [{}{more}]", names.join(", ")));
            }
            if let Some(a) = &e.agent {
                line.push_str(&format!(" agent {a}"));
            }
        }
    }
    if let Some(code) = e.exit_code {
        line.push_str(&format!(" code {code}"));
    }
    if !e.message.is_empty() {
        line.push_str(&format!(": {}", e.message));
    }
    outln!("{line}");
    Ok(())
}
