//! The `hive` command line: `hive run` starts the daemon; the other verbs
//! talk to a running daemon's operator API on its Unix socket.
//!
//! Exit codes: 0 ok, 1 runtime failure, 2 usage, 64 invalid config.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use swarm_queue_client::outln;

use crate::config::{self, Overrides};

pub use swarm_queue_client::cli::{EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, EXIT_USAGE};

#[derive(Parser, Debug)]
#[command(
    name = "hive",
    version,
    about = "The hyperhive hive daemon: keeps this host's agents running and reports to the swarm",
    long_about = "The hyperhive hive daemon.\n\n\
        `hive run` keeps this host's containerised agents running in Docker, publishes its \
        status to the swarm's NATS KV bucket `hyperhive-status` under its own name, and \
        converges on its declaration in `hyperhive-wanted`. It keeps working when NATS, the \
        controller or Docker go away.\n\n\
        The other verbs talk to a running hive through its operator API: the Unix socket \
        <state>/hive.sock (mode 0660, group hyperhive), or --api.\n\n\
        Exit codes: 0 ok, 1 runtime failure, 2 usage error, 64 invalid configuration."
)]
struct Cli {
    /// Validate a config file without connecting to anything; print every
    /// problem and exit 64 if there is one.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,

    /// The hive's operator API: its Unix socket (a path, or `unix:PATH`),
    /// or `http://HOST:PORT` when the hive has remote writes enabled.
    #[arg(
        long,
        global = true,
        env = "HYPERHIVE_API",
        default_value = config::DEFAULT_API_SOCKET
    )]
    api: String,

    /// A file holding the bearer token for the API over TCP (the hive's
    /// `api_token_file`); not needed on the socket.
    #[arg(
        long,
        global = true,
        env = "HYPERHIVE_API_TOKEN_FILE",
        value_name = "FILE"
    )]
    api_token_file: Option<PathBuf>,

    /// Print JSON instead of tables (for scripts).
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the hive daemon.
    Run(RunArgs),
    /// Show this hive's status, as published (exit 1 when not ready).
    Status,
    #[command(flatten)]
    Ops(crate::local::ops::Command),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// TOML config file; flags and environment override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Hive name (a DNS label); also HYPERHIVE_HIVE_NAME.
    #[arg(long)]
    name: Option<String>,
    /// NATS server URL(s), comma-separated; also HYPERHIVE_NATS_URL.
    #[arg(long)]
    nats_url: Option<String>,
    /// State directory (SQLite, agent state, knowledge checkout).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Loopback address of the local API and health endpoints.
    #[arg(long)]
    http_listen: Option<String>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// Parse arguments, run, return the exit code (a failed write to
/// standard output turns success into failure,
/// [`swarm_queue_client::cli::settle`]).
pub fn main() -> i32 {
    swarm_queue_client::cli::settle(parse_and_run())
}

fn parse_and_run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
        }
    };
    if let Some(path) = &cli.check_config {
        return match config::load(Some(path), &Overrides::default(), |_| None) {
            Ok(c) => {
                outln!(
                    "{}: ok (hive {}, state dir {}, API socket {}, health on {})",
                    path.display(),
                    c.name.as_ref().map(|n| n.as_str()).unwrap_or("(unnamed)"),
                    c.state_dir.display(),
                    c.api_socket.display(),
                    c.http_listen
                );
                EXIT_OK
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                EXIT_CONFIG
            }
        };
    }
    let Some(command) = cli.command else {
        eprintln!("hive: a command is needed (try `hive --help`)");
        return EXIT_USAGE;
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hive: cannot start the async runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    let api = crate::local::client::ApiClient::new(crate::local::client::Endpoint::parse(&cli.api));
    let api = match &cli.api_token_file {
        None => api,
        Some(path) => match api.with_token_file(path) {
            Ok(api) => api,
            Err(e) => {
                eprintln!("hive: {}", crate::error_chain(&e));
                return EXIT_FAILURE;
            }
        },
    };
    match command {
        Command::Run(args) => {
            swarm_queue_client::cli::init_logging("info", args.log_json);
            let overrides = Overrides {
                name: args.name,
                nats_url: args.nats_url,
                state_dir: args.state_dir,
                http_listen: args.http_listen,
            };
            let config = match config::load(args.config.as_deref(), &overrides, env_var) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("hive: {e}");
                    return EXIT_CONFIG;
                }
            };
            runtime.block_on(run_until_signal(config))
        }
        Command::Status => runtime.block_on(status(&api, cli.json)),
        Command::Ops(cmd) => runtime.block_on(crate::local::ops::run(cmd, api, cli.json)),
    }
}

async fn run_until_signal(config: config::HiveConfig) -> i32 {
    let (trigger, shutdown) = crate::shutdown::channel();
    tokio::spawn(async move {
        swarm_queue_client::cli::shutdown_signal().await;
        trigger.trigger();
    });
    match crate::daemon::run(config, shutdown).await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!(error = %crate::error_chain(&e), "hive failed");
            eprintln!("hive: {}", crate::error_chain(&e));
            EXIT_FAILURE
        }
    }
}

async fn status(api: &crate::local::client::ApiClient, json: bool) -> i32 {
    let answer = match api.get("/health/ready").await {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "hive: cannot reach the hive at {}: {} (is `hive run` running? see --api)",
                api.endpoint,
                crate::error_chain(&e)
            );
            return EXIT_FAILURE;
        }
    };
    let body = String::from_utf8_lossy(&answer.body).to_string();
    let hive_status: swarm_queue_client::HiveStatus = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "hive: {} answered {} with something that is not a hive status document: {e}",
                api.endpoint, answer.status
            );
            return EXIT_FAILURE;
        }
    };
    if json {
        outln!("{body}");
    } else {
        outln!(
            "hive {}  ready: {}  state: {}  converged revision: {}",
            hive_status.hive,
            hive_status.ready,
            hive_status.state,
            hive_status
                .converged_revision
                .map(|r| r.to_string())
                .unwrap_or_else(|| "none".into())
        );
        for w in &hive_status.warnings {
            outln!("  {:?} {}: {}", w.level, w.key, w.message);
        }
    }
    if hive_status.ready {
        EXIT_OK
    } else {
        EXIT_FAILURE
    }
}
