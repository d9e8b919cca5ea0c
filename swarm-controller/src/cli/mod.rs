//! Command line entry point: parse arguments, load the config, run one verb,
//! return the exit code (0 ok, 1 runtime failure, 2 usage, 64 invalid
//! config). Everything a verb does lives in the library modules; this file
//! only wires them to arguments and output.

pub mod declare;
mod early;
mod events;
mod history;
mod logs;
mod maintenance;
mod status;
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use swarm_queue_client::{out, outln};
use swarm_queue_client::{AgentName, HiveName};
use tokio::sync::watch;

use self::declare::{DeclareArgs, RollbackArgs, RolloutVerb};
use self::early::EarlyRead;
use self::events::{CredentialDelete, CredentialPut, DeployArgs};
use self::history::EventsArgs;
use self::logs::LogsArgs;
use self::maintenance::MaintenanceCommand;
use self::support::CONNECT_WAIT;
use crate::config::Config;
use crate::{nats, serve};
use swarm_queue_client::cli::shutdown_signal;

pub use status::widen_stdout_pipe;
pub use swarm_queue_client::cli::{print_json, EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, EXIT_USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "swarm-controller",
    version,
    about = "The hyperhive swarm controller: fleet status, declarations, deploys, credentials, dashboard",
    long_about = "The hyperhive swarm controller.\n\n\
        It keeps no state of its own: the roster comes from its config file, and everything \
        else is read from and written to NATS (the hyperhive-status, hyperhive-wanted and \
        hyperhive-credentials buckets). Several controllers can run at once.\n\n\
        Freshness of a hive is the age of its status entry by the KV entry's own timestamp \
        (fresh, stale, unknown, unrostered, stopped, offline; maintenance while an operator's \
        hold is in force). Convergence compares the declared \
        revision with what the hive reports (published, progressing, converged, degraded, \
        failed, unknown).\n\n\
        Exit codes: 0 ok, 1 runtime failure, 2 usage, 64 invalid config (also: a verb that \
        needs NATS with no server configured, nats-config with a key missing).\n\n\
        Memory: blocks under 1 KiB come from mimalloc, larger ones from the C library; \
        HYPERHIVE_ALLOCATOR=system takes every block from the C library.",
    after_help = "Examples:\n  \
        swarm-controller --check-config /etc/hyperhive/controller.toml\n  \
        swarm-controller --config controller.toml status --json\n  \
        swarm-controller --config controller.toml declare swarm.toml --dry-run\n  \
        swarm-controller --config controller.toml deploy alpha mail-bot\n  \
        swarm-controller --config controller.toml credential put alpha mail-bot smtp --from-file smtp.pw\n  \
        swarm-controller --config controller.toml credential delete alpha mail-bot smtp\n  \
        swarm-controller --config controller.toml serve\n  \
        swarm-controller --config roster.toml nats-config > accounts.conf"
)]
struct Cli {
    /// The controller's config file (TOML): roster, [nats], stale_after_secs, http_listen, …
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "HYPERHIVE_CONTROLLER_CONFIG"
    )]
    config: Option<PathBuf>,
    /// NATS server URL(s), comma-separated; replaces the config's [nats] url and servers.
    #[arg(long, global = true, value_name = "URL", env = "HYPERHIVE_NATS_URL")]
    nats_url: Option<String>,
    /// Check FILE without connecting: print every problem and exit 64, or exit 0.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// Log as JSON lines on stderr instead of text (for journald and log
    /// shippers); RUST_LOG sets the level as usual.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show every hive: freshness with age, convergence with its reason, and a fleet summary.
    Status {
        /// Print the JSON document ({"hives": [...], "summary": {...}}) instead of a table:
        /// indented on a terminal, on one line into a pipe or a file (`jq .` indents it).
        #[arg(long)]
        json: bool,
        /// Keep running and print again on every change (from a KV watch). With --json,
        /// one JSON document per line.
        #[arg(long)]
        watch: bool,
    },
    /// List the rostered hives, their labels, and the swarm file's groups
    /// that select each one.
    Roster {
        /// The swarm file whose groups to show; defaults to the config's swarm_file.
        #[arg(long, value_name = "FILE")]
        swarm_file: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Declare an earlier value of a hive's declaration again, as a new
    /// revision: the one before the current by default, or --to REVISION
    /// (the wanted bucket keeps the last 10). Shows the same diff as declare.
    Rollback(RollbackArgs),
    /// Publish a swarm file: show each hive's diff, then write the changed declarations.
    Declare(DeclareArgs),
    /// The staged rollout recorded in hyperhive-rollouts.
    Rollout {
        #[command(subcommand)]
        action: RolloutCommand,
    },
    /// Maintenance holds (hyperhive-maintenance): a hive down on purpose
    /// shows `maintenance`, needs no attention, and rollouts skip it.
    Maintenance {
        #[command(subcommand)]
        action: MaintenanceCommand,
    },
    /// Ask a hive to (re)deploy one agent; prints the queued job id.
    Deploy {
        hive: HiveName,
        agent: AgentName,
        /// Seconds to wait for the hive's reply; no reply means "unknown", not "failed".
        #[arg(long, default_value_t = 10)]
        timeout_secs: u64,
        #[arg(long)]
        json: bool,
    },
    /// Print an agent's output, read from its hive over NATS: stdout lines
    /// on stdout, stderr lines on stderr. Exit 0 at the log's end, 1 when
    /// the hive refuses (it says why), 3 when the hive is offline or falls
    /// silent (the rest is unknown).
    Logs(LogsArgs),
    /// Read hyperhive-events: agents' lifecycle (started, exited with its
    /// code, OOM, created, rebuilt, retired, job failed, credential
    /// delivered) and every operator action with who ran it, oldest first.
    Events(EventsArgs),
    /// Sealed credentials for agents.
    Credential {
        #[command(subcommand)]
        action: CredentialCommand,
    },
    /// Tell every hive that the knowledge repository changed.
    KnowledgeChanged,
    /// Run the dashboard, the JSON API and the forge webhook.
    Serve {
        /// Listen address; overrides the config's http_listen.
        #[arg(long, value_name = "ADDR")]
        http_listen: Option<SocketAddr>,
        /// A listener of the webhook's own (POST /hooks/forge only); overrides the
        /// config's webhook_listen. The http_listen address then no longer answers it.
        #[arg(long, value_name = "ADDR")]
        webhook_listen: Option<SocketAddr>,
    },
    /// Print nats-server's `accounts` block for the roster: the buckets
    /// (JetStream) and the controller ([controller] nkey) in account
    /// HYPERHIVE, and each hive ([hives.<name>] nkey) in an account of its
    /// own, named like the hive, that reaches only its own keys and subjects
    /// through imports; a hive at a leaf-node site is there as its leaf
    /// link ([leaf_sites.<site>.links]). Needs only the roster; connects to
    /// nothing.
    NatsConfig {
        /// Print the same permissions as JSON.
        #[arg(long)]
        json: bool,
        /// Print instead the config of leaf-node site SITE's server: its
        /// hives' accounts and one leaf remote per hive, the hub's URL and
        /// each link seed read from variables.
        #[arg(long, value_name = "SITE", conflicts_with_all = ["json", "check"])]
        site: Option<swarm_queue_client::LeafSiteName>,
        /// Instead of printing, connect to NATS and check the existing
        /// buckets' settings: exit 1 and name each unsafe setting (for
        /// example deny_purge off on a bucket an older version made).
        #[arg(long, conflicts_with = "json")]
        check: bool,
        /// With --check: first update each bucket made by an older version
        /// (deny_delete and deny_purge on, roll-ups off, …), then check. It
        /// cannot be undone: nats-server never turns deny_purge off again.
        #[arg(long, requires = "check")]
        fix: bool,
    },
    /// Print the public user nkey (U…) of the seed in FILE, creating the
    /// seed (mode 0600) when there is none: an identity for the controller
    /// or a hive without the `nk` tool. Connects to nothing.
    Nkey {
        #[arg(value_name = "FILE")]
        seed_file: PathBuf,
    },
}

impl Command {
    /// Whether the verb talks to NATS (and so needs a server configured).
    fn needs_nats(&self) -> bool {
        !matches!(
            self,
            Command::Roster { .. }
                | Command::NatsConfig { check: false, .. }
                | Command::Nkey { .. }
                | Command::Credential {
                    action: CredentialCommand::Xkey
                }
        )
    }
}

#[derive(Debug, Subcommand)]
enum RolloutCommand {
    /// Show the rollout: wave k of n, each hive's step, a halt's reason.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Continue a halted rollout (its failed hives are asked to deploy again
    /// and judged again), or take over a running one whose controller
    /// stopped writing for longer than lease_secs.
    Resume,
    /// Stop the rollout and declare each written hive's previous revision
    /// again (from the wanted bucket's history, as rollback does).
    Abort,
}

impl From<RolloutCommand> for RolloutVerb {
    fn from(action: RolloutCommand) -> Self {
        match action {
            RolloutCommand::Status { json } => RolloutVerb::Status { json },
            RolloutCommand::Resume => RolloutVerb::Resume,
            RolloutCommand::Abort => RolloutVerb::Abort,
        }
    }
}

#[derive(Debug, Subcommand)]
enum CredentialCommand {
    /// Seal a secret to the hive's xkey, store it, and notify the hive.
    Put(CredentialPut),
    /// Delete a stored credential (a delete marker in the bucket) and
    /// notify the hive, which removes the agent's file; a hive that misses
    /// the notice removes it at its next boot. An agent with
    /// on_credential_change = "restart" is restarted.
    Delete(CredentialDelete),
    /// Print the controller's public xkey (creating its seed file if there is
    /// none): the value every hive lists in trusted_controller_xkeys.
    Xkey,
}

/// At most two glibc malloc arenas, whatever the core count. Call it
/// first, while the process has one thread.
///
/// glibc gives each thread that allocates under contention an arena of
/// its own, up to eight per core, and keeps the pages each held at its
/// peak. A one-look `status` decodes on one thread per core while the
/// runtime's threads read, so at 10,000 hives the arenas, not the live
/// heap, set its peak: 56 MiB resident over a 29 MB heap peak, 47 MiB
/// with two arenas (`docs/benchmarks-controller.md`). Two keep the
/// decoding threads from queueing on one lock. `MALLOC_ARENA_MAX` in the
/// environment wins: glibc reads it itself, and this is skipped.
pub fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a glibc tunable, here before any
        // other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// `--check-config FILE`: every problem of the file, or how many hives
/// its roster has.
fn check_config(path: &Path, nats_url: Option<&str>) -> i32 {
    match Config::check_file(path, nats_url) {
        Ok(c) => {
            outln!(
                "{}: ok ({} rostered hive{})",
                path.display(),
                c.hives.len(),
                if c.hives.len() == 1 { "" } else { "s" }
            );
            EXIT_OK
        }
        Err(e) => {
            eprintln!("{e}");
            EXIT_CONFIG
        }
    }
}

/// Parse arguments, run, return the exit code (a failed write to
/// standard output turns success into failure,
/// [`swarm_queue_client::cli::settle`]).
pub fn main() -> i32 {
    swarm_queue_client::cli::settle(parse_and_run())
}

fn parse_and_run() -> i32 {
    cap_malloc_arenas();
    if let Some(problem) = crate::alloc::check_choice() {
        eprintln!("swarm-controller: {problem}");
        return EXIT_USAGE;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    EXIT_OK
                }
                _ => EXIT_USAGE,
            };
        }
    };

    if let Some(path) = &cli.check_config {
        return check_config(path, cli.nats_url.as_deref());
    }

    let Some(command) = cli.command else {
        eprintln!("swarm-controller: give a command (status, declare, deploy, …) or --check-config FILE; see --help");
        return EXIT_USAGE;
    };
    let Some(config_path) = &cli.config else {
        eprintln!("swarm-controller: --config FILE is required (or HYPERHIVE_CONTROLLER_CONFIG)");
        return EXIT_USAGE;
    };
    // `serve` is a daemon and logs what it does; a one-shot verb only what
    // went wrong.
    let default_level = match command {
        Command::Serve { .. } => "info",
        _ => "warn",
    };
    swarm_queue_client::cli::init_logging(default_level, cli.log_json);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("swarm-controller: cannot start the async runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    let (config, early) =
        match load_config(&runtime, config_path, cli.nats_url.as_deref(), &command) {
            Ok(loaded) => loaded,
            Err(code) => return code,
        };

    if command.needs_nats() {
        if let Some(problem) = config.nats_missing() {
            eprintln!("{problem}");
            return EXIT_CONFIG;
        }
    }

    match runtime.block_on(run(config, command, early)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("swarm-controller: {e:#}");
            EXIT_FAILURE
        }
    }
}

/// The config at `path`, checked, or the exit code once its problems are
/// printed; for a one-look status, with the read of the buckets begun
/// while the roster was read ([`EarlyRead`], stopped when the config
/// fails).
fn load_config(
    runtime: &tokio::runtime::Runtime,
    path: &Path,
    nats_url: Option<&str>,
    command: &Command,
) -> Result<(Config, Option<EarlyRead>), i32> {
    let text = Config::read(path).map_err(|e| {
        eprintln!("{e}");
        EXIT_CONFIG
    })?;
    let early = match command {
        Command::Status { watch: false, .. } => {
            early::nats_head(&text, nats_url).map(|nats| EarlyRead::start(runtime, nats))
        }
        _ => None,
    };
    match Config::parse(path, &text, nats_url) {
        Ok(config) => Ok((config, early)),
        Err(problems) => {
            drop(early);
            let path = path.to_path_buf();
            eprintln!("{}", crate::config::ConfigError { path, problems });
            Err(EXIT_CONFIG)
        }
    }
}

async fn run(config: Config, command: Command, early: Option<EarlyRead>) -> anyhow::Result<i32> {
    match command {
        Command::Roster { swarm_file, json } => declare::roster_cmd(&config, swarm_file, json),
        Command::Status { json, watch } => status::status_cmd(config, json, watch, early).await,
        Command::Declare(args) => declare::declare_cmd(&config, args).await,
        Command::Rollout { action } => declare::rollout_cmd(&config, action.into()).await,
        Command::Rollback(args) => declare::rollback_cmd(&config, args).await,
        Command::Maintenance { action } => maintenance::maintenance_cmd(&config, action).await,
        Command::Deploy {
            hive,
            agent,
            timeout_secs,
            json,
        } => {
            let args = DeployArgs {
                hive,
                agent,
                timeout: Duration::from_secs(timeout_secs),
                json,
            };
            events::deploy_cmd(&config, args).await
        }
        Command::Logs(args) => logs::logs_cmd(&config, args).await,
        Command::Events(args) => history::events_cmd(&config, args).await,
        Command::Credential {
            action: CredentialCommand::Xkey,
        } => events::xkey_cmd(&config),
        Command::Credential {
            action: CredentialCommand::Put(put),
        } => events::credential_put_cmd(&config, put).await,
        Command::Credential {
            action: CredentialCommand::Delete(args),
        } => events::credential_delete_cmd(&config, args).await,
        Command::KnowledgeChanged => events::knowledge_cmd(&config).await,
        Command::Serve {
            http_listen,
            webhook_listen,
        } => {
            let listen = ServeListen {
                http: http_listen,
                webhook: webhook_listen,
            };
            serve_cmd(&config, listen).await
        }
        Command::NatsConfig {
            check: true, fix, ..
        } => {
            let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
            if fix {
                if let Err(code) = bucket_fix_cmd(&conn).await {
                    return Ok(code);
                }
            }
            Ok(bucket_check_cmd(&conn).await)
        }
        Command::NatsConfig { json, site, .. } => Ok(nats_config_cmd(&config, json, site)),
        Command::Nkey { seed_file } => {
            outln!("{}", crate::nkey_file::public_key(&seed_file)?);
            Ok(EXIT_OK)
        }
    }
}

/// `nats-config --check`: every unsafe bucket setting on stderr, exit 1.
async fn bucket_check_cmd(conn: &swarm_queue_client::Connection) -> i32 {
    let js = conn.jetstream();
    match swarm_queue_client::buckets::check_buckets(&js).await {
        Ok(found) if found.is_empty() => {
            outln!(
                "buckets: ok (no setting lets a writer of one key reach another, or a message be erased)"
            );
            EXIT_OK
        }
        Ok(found) => {
            for f in &found {
                eprintln!("unsafe: {f}");
            }
            if found.iter().any(|f| f.fixed_in_place()) {
                eprintln!("`nats-config --check --fix` fixes these in place");
            }
            if !found.iter().all(|f| f.fixed_in_place()) {
                eprintln!(
                    "nats-server cannot turn allow_msg_schedules off: delete that bucket \
                     and let the controller make it again"
                );
            }
            EXIT_FAILURE
        }
        Err(e) => {
            eprintln!("{:#}", anyhow::Error::new(e));
            EXIT_FAILURE
        }
    }
}

/// `nats-config --check --fix`: update every bucket with a setting a
/// stream update can make safe, one line per bucket changed.
async fn bucket_fix_cmd(conn: &swarm_queue_client::Connection) -> Result<(), i32> {
    let js = conn.jetstream();
    match swarm_queue_client::buckets::fix_buckets(&js).await {
        Ok(fixed) => {
            for f in &fixed {
                outln!("fixed: {f}");
            }
            Ok(())
        }
        Err(e) => {
            eprintln!("{:#}", anyhow::Error::new(e));
            Err(EXIT_FAILURE)
        }
    }
}

fn nats_config_cmd(
    config: &Config,
    json: bool,
    site: Option<swarm_queue_client::LeafSiteName>,
) -> i32 {
    let Some(controller) = &config.controller.nkey else {
        eprintln!(
            "{}: no [controller] nkey; nats-config needs the controller's public user nkey \
             (nkey = \"U…\" under [controller])",
            config.path.display()
        );
        return EXIT_CONFIG;
    };
    let rendered = if let Some(site) = site {
        crate::nats_config::render_site(controller, &config.hives, &config.leaf_sites, &site)
    } else if json {
        crate::nats_config::render_json(controller, &config.hives, &config.leaf_sites)
            .map(|v| serde_json::to_string_pretty(&v).unwrap_or_default() + "\n")
    } else {
        crate::nats_config::render(controller, &config.hives, &config.leaf_sites)
    };
    match rendered {
        Ok(text) => {
            out!("{text}");
            EXIT_OK
        }
        Err(e) => {
            eprintln!("{}: {e}", config.path.display());
            EXIT_CONFIG
        }
    }
}

/// `serve`'s listen flags, each over its config setting.
struct ServeListen {
    http: Option<SocketAddr>,
    webhook: Option<SocketAddr>,
}

async fn serve_cmd(config: &Config, listen: ServeListen) -> anyhow::Result<i32> {
    let conn = nats::connect(&config.nats, CONNECT_WAIT).await?;
    let buckets = nats::open_buckets(&conn, &config.nats).await?;
    let (stop_tx, stop) = watch::channel(false);
    let mut config = config.clone();
    if let Some(w) = listen.webhook {
        config.webhook_listen = Some(w);
    }
    let http = listen.http.unwrap_or(config.http_listen);
    let server = serve::start(&config, conn.client.clone(), &buckets, http, stop).await?;
    outln!("listening on http://{}/", server.addr);
    if let Some(w) = server.webhook_addr {
        outln!("webhook listening on http://{w}/hooks/forge");
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    match tokio::time::timeout(Duration::from_secs(5), server.task).await {
        Ok(Ok(Ok(()))) => Ok(EXIT_OK),
        Ok(Ok(Err(e))) => Err(e.into()),
        Ok(Err(join)) => Err(anyhow::anyhow!("HTTP task failed: {join}")),
        Err(_) => {
            tracing::warn!("HTTP server did not stop within 5 s; exiting anyway");
            Ok(EXIT_OK)
        }
    }
}
