//! `hive logs AGENT [--follow] [--tail N] [--since DURATION] [--previous]`:
//! the agent's output from the API's `/api/v1/agents/{agent}/logs`, printed
//! as it arrives.

use std::io::Write;

use swarm_queue_client::AgentName;

use super::{Client, OpsError};
use crate::agents::runtime::logs::{LogLine, LogSource};
use crate::local::client::Answer;

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LogsArgs {
    pub agent: AgentName,
    /// Keep printing new lines as the agent writes them, until interrupted
    /// or the container goes.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only the last N lines (at most 100000).
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Only lines from this long ago on: `90s`, `10m`, `2h`, `1d`.
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub since: Option<u64>,
    /// The run that ended last (before the last restart or crash), or what
    /// the hive kept of the container it last replaced.
    #[arg(long, conflicts_with = "follow")]
    pub previous: bool,
}

pub use swarm_queue_client::payload::parse_age;

pub(super) async fn show(client: &Client, args: LogsArgs, json: bool) -> Result<i32, OpsError> {
    let mut query = vec![format!("follow={}", args.follow)];
    query.extend(args.tail.map(|n| format!("tail={n}")));
    if let Some(age) = args.since {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        query.push(format!("since={}", now.saturating_sub(age as i64)));
    }
    if args.previous {
        query.push("previous=true".into());
    }
    let path = format!("/api/v1/agents/{}/logs?{}", args.agent, query.join("&"));
    let mut pending: Vec<u8> = Vec::new();
    // Each piece of the answer is printed with one write and a flush, so a
    // follow shows a line as soon as it comes and a whole log is not a
    // write per line.
    let mut print = |chunk: &[u8]| {
        pending.extend_from_slice(chunk);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|b| *b == b'\n') {
            format_line(&pending[start..start + end], json, &mut out, &mut err);
            start += end + 1;
        }
        pending.drain(..start);
        let _ = std::io::stderr().write_all(&err);
        if !out.is_empty() {
            swarm_queue_client::cli::write_stdout(&out);
            // `hive logs AGENT --follow | head`: nobody reads any more,
            // and the log is all this verb does. A follow notices at the
            // agent's next line.
            if swarm_queue_client::cli::reader_gone() {
                std::process::exit(swarm_queue_client::cli::EXIT_OK);
            }
        }
    };
    let answer = client.api.get_streaming(&path, &mut print).await;
    // After a 200 the lines are printed; any other answer says why not.
    let answer = answer.map(|a| match a.status {
        200 => Answer {
            status: 200,
            body: hyper::body::Bytes::from_static(b"{}"),
        },
        _ => a,
    });
    client.decode::<serde_json::Value>(answer, &path)?;
    Ok(swarm_queue_client::cli::EXIT_OK)
}

/// One NDJSON line of the API, for `out` as it is with `--json`, as the
/// agent's text otherwise (stderr's lines for `err`). Blank lines are the
/// API's keep-alives.
fn format_line(raw: &[u8], json: bool, out: &mut Vec<u8>, err: &mut Vec<u8>) {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    if json {
        out.extend_from_slice(raw);
        out.push(b'\n');
        return;
    }
    match serde_json::from_slice::<LogLine>(raw) {
        Ok(l) if l.source == LogSource::Stderr => {
            err.extend_from_slice(l.line.as_bytes());
            err.push(b'\n');
        }
        Ok(l) => {
            out.extend_from_slice(l.line.as_bytes());
            out.push(b'\n');
        }
        // A broken stream ends with {"error": …}.
        Err(_) => {
            err.extend_from_slice(b"hive: ");
            err.extend_from_slice(raw);
            err.push(b'\n');
        }
    }
}
