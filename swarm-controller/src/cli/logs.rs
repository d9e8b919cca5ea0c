//! `swarm-controller logs HIVE AGENT [--follow] [--tail N] [--since D]
//! [--previous] [--json]`: an agent's output from its hive over NATS
//! ([`crate::logs`]), printed as it arrives: the agent's stdout lines on
//! stdout and its stderr lines on stderr, or with `--json` one line of
//! JSON each (`{"source", "time", "line"}`) on stdout.

use std::io::Write;

use anyhow::bail;
use swarm_queue_client::payload::{parse_age, LogLine, LogSource, LogsRequest, MAX_LOG_TAIL};
use swarm_queue_client::{AgentName, HiveName};

use swarm_queue_client::cli::{EXIT_FAILURE, EXIT_OK};

use super::support::CONNECT_WAIT;
use crate::config::Config;
use crate::logs::{self, LogsError};
use crate::nats;

/// Exit code when the hive is offline or fell silent: nothing is known of
/// the rest of the log.
pub const EXIT_UNKNOWN: i32 = 3;

#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    pub hive: HiveName,
    pub agent: AgentName,
    /// Keep printing new lines as the agent writes them, until interrupted
    /// or the container goes.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only the last N lines (at most 100000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=MAX_LOG_TAIL))]
    pub tail: Option<u64>,
    /// Only lines from this long ago on: `90s`, `10m`, `2h`, `1d`.
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub since: Option<u64>,
    /// The run that ended last (before the last restart or crash), or what
    /// the hive kept of the container it last replaced.
    #[arg(long, conflicts_with = "follow")]
    pub previous: bool,
    /// One JSON object a line: {"source": "stdout"|"stderr", "time", "line"}.
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 when the log ended, 1 when the hive refused (it says why), 3
/// when the hive is offline or fell silent.
pub(crate) async fn logs_cmd(config: &Config, args: LogsArgs) -> anyhow::Result<i32> {
    if !config.hives.contains_key(&args.hive) {
        bail!(
            "hive {} is not on the roster in {}",
            args.hive,
            config.path.display()
        );
    }
    let mut request = LogsRequest::new(args.agent.clone());
    request.follow = args.follow;
    request.tail = args.tail;
    request.previous = args.previous;
    request.since_unix = args.since.map(|age| {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        now.saturating_sub(age as i64)
    });
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let json = args.json;
    let ended = logs::stream(&conn.client, &args.hive, &request, |lines| {
        print_lines(lines, json)
    })
    .await;
    match ended {
        Ok(()) => Ok(EXIT_OK),
        Err(e) => {
            eprintln!("swarm-controller logs: {e}");
            Ok(match e {
                LogsError::Refused { .. } | LogsError::Gap { .. } => EXIT_FAILURE,
                LogsError::Undecodable { .. } => EXIT_FAILURE,
                _ => EXIT_UNKNOWN,
            })
        }
    }
}

/// One frame's lines, each output with one write and a flush.
fn print_lines(lines: &[LogLine], json: bool) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for l in lines {
        if json {
            let _ = serde_json::to_writer(&mut out, l);
            out.push(b'\n');
            continue;
        }
        let to = if l.source == LogSource::Stderr {
            &mut err
        } else {
            &mut out
        };
        to.extend_from_slice(l.line.as_bytes());
        to.push(b'\n');
    }
    if !err.is_empty() {
        let _ = std::io::stderr().write_all(&err);
    }
    if !out.is_empty() {
        swarm_queue_client::cli::write_stdout(&out);
        // `logs --follow | head`: nobody reads any more, and the log is
        // all this verb does.
        if swarm_queue_client::cli::reader_gone() {
            std::process::exit(EXIT_OK);
        }
    }
}
