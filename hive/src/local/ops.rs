//! # The operator verbs
//!
//! `hive agents`, `jobs`, `job`, `logs`, `deploy`, `rebuild`, `start`,
//! `stop`, `retire` and `purge`: a thin client of the operator API
//! ([`crate::local::api`]) on the hive's Unix socket (or, when remote writes
//! are on, its TCP address with a bearer token; see [`crate::local::client`]).
//! Listings print tables for people and JSON with `--json`; verbs print the
//! queued job, and with `--wait` follow it node by node (pull and build
//! progress included) until it finishes.
//!
//! Exit codes: 0 ok, 1 when the hive refuses, the job fails or the API
//! cannot be reached (the message says which and what to do).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use serde::de::DeserializeOwned;
use serde::Serialize;
use swarm_queue_client::cli::{EXIT_FAILURE, EXIT_OK};
use swarm_queue_client::{out, outln};
use swarm_queue_client::{AgentName, AgentSpec};

use crate::agents::jobs::{JobId, JobState, JobView, NodeState};
use crate::local::api::{
    AgentsView, DeployBody, ErrorBody, JobsView, PurgeBody, Queued, RebuildBody,
};
use crate::local::client::{Answer, ApiClient, ClientError};

/// The operator verbs, flattened into `hive`'s top-level commands.
#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum Command {
    /// Agents on this hive: wanted power, observed state, image, spec and last job.
    Agents,
    /// Jobs with their node states and errors: unfinished ones and the
    /// most recent finished ones, or every stored job with --all.
    Jobs {
        /// Every stored job (finished jobs are pruned after a week).
        #[arg(long)]
        all: bool,
        /// Only this agent's jobs.
        #[arg(long)]
        agent: Option<AgentName>,
    },
    /// The images this hive pulled or built, and why each is held (the
    /// current and previous of each agent are kept; others go at the next
    /// cleanup after a rebuild or retire).
    Images,
    /// What an agent's container printed (stdout and stderr, from Docker's
    /// log, capped by container_log_max_mb x container_log_files). With
    /// --json, one JSON object a line: source, time, line.
    Logs(logs::LogsArgs),
    /// One job: its nodes, their states, errors and progress.
    Job {
        /// The job id, as `hive jobs` shows it.
        id: JobId,
    },
    /// Deploy an agent: a first deploy, or a rebuild when it is already
    /// installed. The spec comes from this hive's declaration unless --spec
    /// gives one.
    Deploy {
        agent: AgentName,
        /// A JSON file with the agent's spec (the same shape as one entry
        /// of a declaration's `agents`).
        #[arg(long, value_name = "FILE")]
        spec: Option<PathBuf>,
        /// When already installed: resolve the image again (pull the tag,
        /// or fetch and rebuild the build context).
        #[arg(long)]
        relock: bool,
        /// Follow the job until it finishes; exit 1 if it fails.
        #[arg(long)]
        wait: bool,
    },
    /// Replace an agent's container with a fresh one from its spec; the
    /// state directory is kept.
    Rebuild {
        agent: AgentName,
        /// Resolve the image again: pull the tag, or fetch and rebuild the
        /// build context.
        #[arg(long)]
        relock: bool,
        #[arg(long)]
        wait: bool,
    },
    /// Set an agent's power intent to up and start it.
    Start {
        agent: AgentName,
        #[arg(long)]
        wait: bool,
    },
    /// Set an agent's power intent to down and stop it.
    Stop {
        agent: AgentName,
        #[arg(long)]
        wait: bool,
    },
    /// Stop and remove an agent's container; its state directory is kept.
    Retire {
        agent: AgentName,
        #[arg(long)]
        wait: bool,
    },
    /// Retire an agent and delete its state directory. The only verb that
    /// deletes an agent's data; needs --yes.
    Purge {
        agent: AgentName,
        /// Confirm that the agent's data is to be deleted.
        #[arg(long)]
        yes: bool,
        #[arg(long)]
        wait: bool,
    },
}

mod logs;

/// Why a verb failed, for the one line printed on stderr.
#[derive(Debug, thiserror::Error)]
enum OpsError {
    #[error(
        "cannot reach the hive's operator API at {api}: {reason}. Is `hive run` running there? \
         (set --api or HYPERHIVE_API)"
    )]
    Unreachable { api: String, reason: String },
    #[error("{0}")]
    Refused(String),
    #[error("the hive at {api} answered {what} with something unreadable: {reason}")]
    BadAnswer {
        api: String,
        what: String,
        reason: String,
    },
    #[error("cannot read the spec file {path}: {reason}")]
    SpecFile { path: PathBuf, reason: String },
    #[error("{0}")]
    JobFailed(String),
}

struct Client {
    api: ApiClient,
}

impl Client {
    fn decode<T: DeserializeOwned>(
        &self,
        answer: Result<Answer, ClientError>,
        what: &str,
    ) -> Result<T, OpsError> {
        let api = self.api.endpoint.to_string();
        let answer = answer.map_err(|e| OpsError::Unreachable {
            api: api.clone(),
            reason: crate::error_chain(&e),
        })?;
        if !(200..300).contains(&answer.status) {
            let message = serde_json::from_slice::<ErrorBody>(&answer.body)
                .map(|b| b.error)
                .unwrap_or_else(|_| {
                    format!(
                        "{}: {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body).trim()
                    )
                });
            return Err(OpsError::Refused(message));
        }
        serde_json::from_slice(&answer.body).map_err(|e| OpsError::BadAnswer {
            api,
            what: what.to_string(),
            reason: e.to_string(),
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, OpsError> {
        self.decode(self.api.get(path).await, path)
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, OpsError> {
        self.decode(self.api.post_json(path, body).await, path)
    }
}

/// Run one verb against the API; returns the exit code.
pub async fn run(cmd: Command, api: ApiClient, json: bool) -> i32 {
    match execute(cmd, api, json).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hive: {e}");
            EXIT_FAILURE
        }
    }
}

/// `--json`: the answer as the API gave it (plain data, always serializes).
fn print_json(value: &impl Serialize) {
    let _ = swarm_queue_client::cli::print_json(value);
}

async fn execute(cmd: Command, api: ApiClient, json: bool) -> Result<i32, OpsError> {
    let client = Client { api };
    let (agent, path, body, wait): (AgentName, &str, serde_json::Value, bool) = match cmd {
        Command::Images => return show_images(&client, json).await,
        Command::Logs(args) => return logs::show(&client, args, json).await,
        Command::Agents => {
            let view: AgentsView = client.get("/api/v1/agents").await?;
            if json {
                print_json(&view);
            } else {
                out!("{}", agents_table(&view));
            }
            return Ok(EXIT_OK);
        }
        Command::Jobs { all, agent } => return show_jobs(&client, all, agent, json).await,
        Command::Job { id } => {
            let job: JobView = client.get(&format!("/api/v1/jobs/{id}")).await?;
            if json {
                print_json(&job);
            } else {
                out!("{}", job_text(&job));
            }
            return Ok(EXIT_OK);
        }
        Command::Deploy {
            agent,
            spec,
            relock,
            wait,
        } => {
            let spec = spec.map(|p| read_spec(&p)).transpose()?;
            let body = DeployBody {
                spec,
                revision: None,
                relock,
            };
            (agent, "deploy", to_value(&body), wait)
        }
        Command::Rebuild {
            agent,
            relock,
            wait,
        } => (agent, "rebuild", to_value(&RebuildBody { relock }), wait),
        Command::Start { agent, wait } => (agent, "start", serde_json::json!({}), wait),
        Command::Stop { agent, wait } => (agent, "stop", serde_json::json!({}), wait),
        Command::Retire { agent, wait } => (agent, "retire", serde_json::json!({}), wait),
        Command::Purge { agent, yes, wait } => {
            (agent, "purge", to_value(&PurgeBody { confirm: yes }), wait)
        }
    };
    let queued: Queued = client
        .post(&format!("/api/v1/agents/{agent}/{path}"), &body)
        .await?;
    if wait {
        wait_for(&client, queued.job, json).await
    } else {
        print_queued(&queued, json);
        Ok(EXIT_OK)
    }
}

async fn show_images(client: &Client, json: bool) -> Result<i32, OpsError> {
    let view: crate::local::api::ImagesView = client.get("/api/v1/images").await?;
    if json {
        print_json(&view);
    } else if view.images.is_empty() {
        outln!("no images pulled or built by this hive");
    } else {
        for i in &view.images {
            let id = i.image_id.trim_start_matches("sha256:");
            outln!(
                "{}  {}  {} {}  {}",
                &id[..id.len().min(12)],
                i.agent,
                i.how,
                i.reference,
                i.why
            );
        }
    }
    Ok(EXIT_OK)
}

async fn show_jobs(
    client: &Client,
    all: bool,
    agent: Option<AgentName>,
    json: bool,
) -> Result<i32, OpsError> {
    let mut path = format!("/api/v1/jobs?all={all}");
    if let Some(a) = agent {
        path.push_str(&format!("&agent={a}"));
    }
    let view: JobsView = client.get(&path).await?;
    if json {
        print_json(&view);
    } else if view.jobs.is_empty() {
        outln!("no jobs");
    } else {
        for job in &view.jobs {
            out!("{}", job_text(job));
        }
    }
    Ok(EXIT_OK)
}

fn print_queued(queued: &Queued, json: bool) {
    if json {
        print_json(queued);
        return;
    }
    let how = if queued.coalesced {
        "joined the pending"
    } else {
        "queued"
    };
    outln!(
        "{how} job {} ({}) for agent {}; follow it with `hive job {}`",
        queued.job,
        queued.kind,
        queued.agent,
        queued.job
    );
}

/// Follow the job to its end; an error unless it is done.
async fn wait_for(client: &Client, job: JobId, json: bool) -> Result<i32, OpsError> {
    let job = follow(client, job, !json).await?;
    if json {
        print_json(&job);
    }
    match job.state {
        JobState::Done => Ok(EXIT_OK),
        _ => Err(OpsError::JobFailed(format!(
            "job {} ({}) for agent {} failed: {}",
            job.id,
            job.kind,
            job.agent,
            job.error.as_deref().unwrap_or("no error recorded")
        ))),
    }
}

fn to_value(body: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(body).unwrap_or_default()
}

fn read_spec(path: &PathBuf) -> Result<AgentSpec, OpsError> {
    let err = |reason: String| OpsError::SpecFile {
        path: path.clone(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| err(e.to_string()))
}

/// Poll the job and print each node change until it finishes.
async fn follow(client: &Client, job: JobId, print: bool) -> Result<JobView, OpsError> {
    let mut seen: BTreeMap<u32, String> = BTreeMap::new();
    let mut header = false;
    loop {
        let view: JobView = client.get(&format!("/api/v1/jobs/{job}")).await?;
        if print && !header {
            outln!("job {} ({}) for agent {}", view.id, view.kind, view.agent);
            header = true;
        }
        if print {
            let total = view.nodes.len();
            for node in &view.nodes {
                let line = node_line(node, total);
                if seen.get(&node.seq) != Some(&line) && node.state != NodeState::Pending {
                    outln!("{line}");
                    seen.insert(node.seq, line);
                }
            }
        }
        if view.state.is_finished() {
            if print {
                outln!("job {} {}", view.id, view.state);
            }
            return Ok(view);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn node_line(node: &crate::agents::jobs::NodeView, total: usize) -> String {
    let mut line = format!(
        "  [{}/{total}] {:<10} {:<8}",
        node.seq + 1,
        node.op,
        node.state.as_str()
    );
    if node.attempts > 1 {
        line.push_str(&format!(" (attempt {})", node.attempts));
    }
    if let Some(d) = &node.detail {
        line.push_str(&format!(" {d}"));
    }
    if let Some(e) = &node.error {
        line.push_str(&format!("\n        error: {e}"));
    }
    line
}

/// A job and its nodes, for people.
pub fn job_text(job: &JobView) -> String {
    let mut out = format!("job {} {} {} {}\n", job.id, job.kind, job.agent, job.state);
    if let Some(e) = &job.error {
        out.push_str(&format!("  error: {e}\n"));
    }
    for node in &job.nodes {
        out.push_str(&node_line(node, job.nodes.len()));
        out.push('\n');
    }
    out
}

fn short_spec(spec: &str) -> String {
    let hex = spec
        .strip_prefix(swarm_queue_client::payload::SPEC_HASH_PREFIX)
        .unwrap_or(spec);
    hex.chars().take(12).collect()
}

/// The agents listing, for people.
pub fn agents_table(view: &AgentsView) -> String {
    let mut rows = vec![[
        "AGENT".to_string(),
        "WANTED".into(),
        "OBSERVED".into(),
        "IMAGE".into(),
        "SPEC".into(),
        "LAST JOB".into(),
        "EXITS".into(),
    ]];
    for a in &view.agents {
        let spec = match (&a.spec, &a.container_spec) {
            (Some(s), Some(c)) if s != c => {
                format!("{} (container {})", short_spec(s), short_spec(c))
            }
            (Some(s), _) => short_spec(s),
            (None, Some(c)) => format!("(container {})", short_spec(c)),
            (None, None) => "-".into(),
        };
        let last = a
            .last_job
            .as_ref()
            .map(|j| format!("{} {} {}", j.id, j.kind, j.state))
            .unwrap_or_else(|| "-".into());
        rows.push([
            a.agent.to_string(),
            a.wanted
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            a.observed.to_string(),
            a.image.clone().unwrap_or_else(|| "-".into()),
            spec,
            last,
            a.exits.as_ref().map_or_else(|| "-".into(), exits_text),
        ]);
    }
    let mut out = table(&rows);
    if view.agents.is_empty() {
        out = format!("no agents on hive {}\n", view.hive);
    }
    if let Some(e) = &view.docker_error {
        out.push_str(&format!("observed state unknown: {e}\n"));
    }
    out
}

/// "3 (5 since the spec changed), OOM-killed": the last exit code, the
/// count, and whether Docker killed it for memory.
fn exits_text(e: &crate::local::api::AgentExits) -> String {
    if e.exits == 0 {
        return "-".into();
    }
    let code = e.last_code.map_or("?".into(), |c| c.to_string());
    let mut s = format!("{code} ({} since the spec changed)", e.exits);
    if e.oom_killed {
        s.push_str(", OOM-killed");
    }
    s
}

/// Left-aligned columns, two spaces apart.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
