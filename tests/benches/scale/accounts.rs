//! What an account per hive costs nats-server (`-- --accounts`; N = 10,000,
//! `--quick`: N = 200; `--n` picks N).
//!
//! `swarm-controller nats-config` renders an `accounts { }` block: the
//! buckets' account (JetStream, the controller, 7 exports, one deploy
//! import per hive) and one account per hive (its nkey user with its
//! permissions, 7 imports, 1 export). The baseline, measured in the same
//! run, is what it rendered before accounts: the same N nkey users with
//! the same permissions ([`hive_permissions`], [`controller_permissions`])
//! in one `authorization { users = [...] }` block of the global account.
//!
//! For each form, one after the other, nothing else running on the server:
//!
//! 1. the config text's size and the time to render it;
//! 2. `nats-server -t` on it (parse and check only): wall and CPU time;
//! 3. a server started with it (`-js`, a store dir, a free loopback port)
//!    until its log says "Server is ready": wall time, the server's CPU
//!    time then, and its `VmRSS` (per hive: above an empty server's,
//!    started first);
//! 4. [`CLIENTS`] hives ([`QUICK_CLIENTS`] in the short form) spread over
//!    the roster connect with their own nkey seeds and put their status
//!    once each, 64 at a time, after the
//!    controller made the status bucket: in the accounts form each put
//!    crosses the hive's service import into the buckets' account and the
//!    ack comes back through it;
//! 5. a reload (SIGHUP, as `nats-server --signal reload` sends) with one hive
//!    added to the roster, from the server's own "Trapped "hangup" signal"
//!    log line to its "Reloaded server configuration", both by the server's
//!    own time stamps, and the server's CPU time meanwhile; then its
//!    `VmRSS` and `VmHWM`. Meanwhile one hive
//!    puts its status every [`PROBE_EVERY`]: the longest put shows how
//!    long the reload holds up traffic, and a put the server refuses
//!    meanwhile is counted (the hive's publisher would retry it);
//! 6. the same hives put their status again over the connections they
//!    hold (a put that fails fails the bench), and how many of them had to
//!    reconnect across the reload; the hive the reload added connects and
//!    puts its status (it can only once the reload took effect). In the
//!    accounts form, with nats-server 2.15.1, that put gets no responders:
//!    the service imports of an account a reload creates reach no
//!    JetStream until the config is reloaded once more (or the server
//!    restarts). The bench then reloads the same config again, times
//!    that, and the put must get through.
//!
//! CPU times are the figures to compare across runs: on a machine shared
//! with other builds the wall times move with the load (a start at 10,000
//! accounts took 9 s at one moment and 133 s at another), the CPU time
//! much less. It prints a table and a `FIGURES: accounts` line with every
//! figure of both forms and their ratios.
//!
//! Every server, seed and temp dir is the harness's and goes on drop.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use hyperhive_tests::identity::{connect_as, Identity};
use hyperhive_tests::{log_time, nats, wait_until, NatsServer};
use swarm_queue_client::direct::put_own;
use swarm_queue_client::permissions::{
    authorization, controller_permissions, hive_permissions, JsApi, Role, RosterHive, User,
};
use swarm_queue_client::subjects::{hive_connection_name, CONTROLLER_CONNECTION_NAME};
use swarm_queue_client::{open_or_create, Bucket, BucketSettings, Connection, HiveName};

use crate::measure::{children_cpu_time, cpu_time, pct, proc_kib};

/// Hives that connect and put their status, spread over the roster.
pub const CLIENTS: usize = 200;
/// The same in the short form, which runs in the dev profile (a debug
/// build signs its nkey nonces slowly).
pub const QUICK_CLIENTS: usize = 20;
/// Hives connecting at the same time.
const PARALLEL: usize = 64;
/// Longest wait for a start or a reload (2 minutes were seen for a start
/// with 10,000 accounts on 2 loaded cores).
const LOAD_LIMIT: Duration = Duration::from_secs(600);
const RELOADED: &str = "Reloaded server configuration";
const TRAPPED: &str = "Trapped \"hangup\" signal";
/// How often the probe hive puts its status during a reload.
const PROBE_EVERY: Duration = Duration::from_millis(5);

/// Each N in turn; `clients` hives of each connect.
pub async fn bench(ns: &[usize], clients: usize) {
    println!(
        "accounts: 1 nats-server, {} build, {}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        hyperhive_tests::machine()
    );
    for &n in ns {
        run(n, clients.min(n)).await;
    }
}

async fn run(n: usize, clients: usize) {
    let empty_kib = {
        let empty = NatsServer::start();
        proc_kib(empty.pid().expect("the empty server runs"), "VmRSS:")
    };
    let roster = Roster::new(n, clients);
    let baseline = cost(Form::OneAccount, &roster, empty_kib).await;
    let accounts = cost(Form::AccountPerHive, &roster, empty_kib).await;
    println!();
    println!(
        "| N = {n}, {clients} hives connect | {} | {} | ratio |",
        Form::OneAccount.label(),
        Form::AccountPerHive.label()
    );
    println!("|---|---:|---:|---:|");
    let mut line = format!(
        "FIGURES: accounts n={n} clients={clients} empty_rss_mib={:.1}",
        empty_kib as f64 / 1024.0
    );
    for (key, label, read) in FIGURES {
        let (a, b) = (read(&accounts), read(&baseline));
        let _ = write!(
            line,
            " accounts_{key}={} baseline_{key}={}",
            number(a),
            number(b)
        );
        // No ratio for a count that is 0 in the baseline (reconnects), nor
        // for a figure one form does not have (NaN).
        let ratio = (b != 0.0 && (a / b).is_finite()).then(|| format!("{:.2}", a / b));
        if let Some(r) = &ratio {
            let _ = write!(line, " {key}_ratio={r}");
        }
        let cell = |x: f64| {
            if x.is_nan() {
                "—".to_string()
            } else {
                number(x)
            }
        };
        let ratio = ratio.map_or("—".to_string(), |r| format!("{r}×"));
        println!("| {label} | {} | {} | {ratio} |", cell(b), cell(a));
    }
    println!("{line}");
}

/// One form's figures.
struct Cost {
    bytes: usize,
    render: Duration,
    /// `nats-server -t`: wall and CPU time.
    check: (Duration, Duration),
    /// The start until ready: wall, and the server's CPU time then.
    start: (Duration, Duration),
    rss_kib: u64,
    kib_per_hive: f64,
    /// All clients connected and put once, and each one's time (ms).
    connect: Duration,
    per_client_ms: Vec<f64>,
    /// The reload by the server's log, and the CPU time it used meanwhile.
    reload: (Duration, Duration),
    /// The probe's puts during the reload (ms), and how many of them the
    /// server refused.
    probe_ms: Vec<f64>,
    probe_refused: usize,
    reload_rss_kib: u64,
    peak_kib: u64,
    /// Clients that reconnected across the reload.
    reconnects: usize,
    added: Added,
}

/// The hive the reload added.
struct Added {
    /// Its connect and first put after the reload (ms), when that put
    /// got through.
    first_put_ms: Option<f64>,
    /// When it did not: a second reload of the same config, by the
    /// server's log, after which its put must get through.
    second_reload: Option<Duration>,
}

type Read = fn(&Cost) -> f64;

/// Every figure: its `FIGURES` key, its table label, how to read it.
const FIGURES: [(&str, &str, Read); 22] = [
    ("text_mib", "config text, MiB", |c| c.bytes as f64 / MIB),
    ("render_ms", "render, ms", |c| ms(c.render)),
    ("check_s", "`nats-server -t`, s", |c| {
        c.check.0.as_secs_f64()
    }),
    ("check_cpu_s", "`nats-server -t`, CPU s", |c| {
        c.check.1.as_secs_f64()
    }),
    ("start_s", "start until ready, s", |c| {
        c.start.0.as_secs_f64()
    }),
    ("start_cpu_s", "start until ready, server CPU s", |c| {
        c.start.1.as_secs_f64()
    }),
    ("rss_mib", "RSS after start, MiB", |c| {
        c.rss_kib as f64 / 1024.0
    }),
    (
        "kib_per_hive",
        "RSS above an empty server, KiB per hive",
        |c| c.kib_per_hive,
    ),
    ("connect_s", "clients: connect + first put, all, s", |c| {
        c.connect.as_secs_f64()
    }),
    (
        "put_p50_ms",
        "one client: connect + first put p50, ms",
        |c| pct(&c.per_client_ms, 0.5),
    ),
    (
        "put_p99_ms",
        "one client: connect + first put p99, ms",
        |c| pct(&c.per_client_ms, 0.99),
    ),
    ("reload_s", "reload (one hive added), s", |c| {
        c.reload.0.as_secs_f64()
    }),
    ("reload_cpu_s", "reload, server CPU s", |c| {
        c.reload.1.as_secs_f64()
    }),
    (
        "reload_put_max_ms",
        "longest put during the reload, ms",
        |c| c.probe_ms.iter().copied().fold(0.0, f64::max),
    ),
    (
        "reload_puts",
        "puts during the reload (one every 5 ms)",
        |c| c.probe_ms.len() as f64,
    ),
    (
        "reload_puts_refused",
        "of those, refused (the hive's publisher retries them)",
        |c| c.probe_refused as f64,
    ),
    ("reload_rss_mib", "RSS after the reload, MiB", |c| {
        c.reload_rss_kib as f64 / 1024.0
    }),
    ("peak_mib", "peak RSS (VmHWM), MiB", |c| {
        c.peak_kib as f64 / 1024.0
    }),
    (
        "reconnects",
        "clients that reconnected across the reload",
        |c| c.reconnects as f64,
    ),
    (
        "added_put_ok",
        "the added hive's first put after the reload got through (1 yes, 0 no)",
        |c| f64::from(u8::from(c.added.first_put_ms.is_some())),
    ),
    (
        "added_put_ms",
        "the added hive: connect + first put, ms",
        |c| c.added.first_put_ms.unwrap_or(f64::NAN),
    ),
    (
        "second_reload_s",
        "a second reload, after which the added hive's put got through, s",
        |c| c.added.second_reload.map_or(f64::NAN, |d| d.as_secs_f64()),
    ),
];

const MIB: f64 = 1024.0 * 1024.0;

/// A count as a whole number, anything else with 3 decimals; `none` for a
/// figure the form does not have.
fn number(x: f64) -> String {
    if x.is_nan() {
        "none".to_string()
    } else if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn cost(form: Form, roster: &Roster, empty_kib: u64) -> Cost {
    let t = Instant::now();
    let text = form.render(roster, Roster::hives);
    let render = t.elapsed();
    let check = check(&text);
    let t = Instant::now();
    let server = NatsServer::start_with_ready_within(Some(&text), &[], LOAD_LIMIT);
    let start_wall = t.elapsed();
    let pid = server.pid().expect("the server runs");
    let start = (start_wall, cpu_time(pid));
    let rss_kib = proc_kib(pid, "VmRSS:");
    let controller = connect_as(
        &server.url(),
        &roster.controller,
        CONTROLLER_CONNECTION_NAME,
    )
    .await;
    let status = BucketSettings::default_for(Bucket::Status);
    open_or_create(&controller.jetstream(), Bucket::Status, &status)
        .await
        .expect("the controller makes the status bucket");
    let t = Instant::now();
    let (clients, per_client_ms) = connect_clients(&server.url(), roster).await;
    let connect = t.elapsed();
    let probe = Probe::start(&clients[0]);
    let cpu_before = cpu_time(pid);
    let reload_wall = reload(&server, &form.render(roster, Roster::grown)).await;
    let reload = (reload_wall, cpu_time(pid).saturating_sub(cpu_before));
    let (probe_ms, probe_refused) = probe.stop().await;
    let reload_rss_kib = proc_kib(pid, "VmRSS:");
    let peak_kib = proc_kib(pid, "VmHWM:");
    let reconnects = put_again(&clients).await;
    let added = join_added(&server, roster, &form.render(roster, Roster::grown)).await;
    Cost {
        bytes: text.len(),
        render,
        check,
        start,
        rss_kib,
        kib_per_hive: rss_kib.saturating_sub(empty_kib) as f64 / roster.hives().len() as f64,
        connect,
        per_client_ms,
        reload,
        probe_ms,
        probe_refused,
        reload_rss_kib,
        peak_kib,
        reconnects,
        added,
    }
}

/// The hive the reload added connects and puts its status. If that put
/// gets no answer (nats-server 2.15.1 wires the service imports of an
/// account that a reload creates to no JetStream: no responders), reload
/// the same config once more; after that it must get through.
async fn join_added(server: &NatsServer, roster: &Roster, grown: &str) -> Added {
    let (hive, id) = &roster.added;
    let t = Instant::now();
    let conn = connect_hive(&server.url(), hive, id).await;
    let value = format!("{{\"bench\":\"accounts\",\"hive\":\"{hive}\"}}");
    let first = put_own(
        &conn.jetstream(),
        Bucket::Status,
        hive.as_str(),
        value.into(),
    )
    .await;
    let Err(e) = first else {
        return Added {
            first_put_ms: Some(ms(t.elapsed())),
            second_reload: None,
        };
    };
    eprintln!(
        "accounts: hive {hive}, added by the reload, cannot put its status ({e}); \
         reloading the same config once more"
    );
    let second = reload(server, grown).await;
    put_status(&conn, hive).await;
    Added {
        first_put_ms: None,
        second_reload: Some(second),
    }
}

/// The controller and N hives, with their public keys; the hives that
/// connect hold seeds, the rest only a public key.
struct Roster {
    controller: Identity,
    /// All N hives and the one the reload adds, last.
    entries: Vec<(HiveName, String)>,
    clients: Vec<(HiveName, Identity)>,
    /// The hive the reload adds, with its seed.
    added: (HiveName, Identity),
}

impl Roster {
    fn new(n: usize, m: usize) -> Roster {
        let connected: Vec<usize> = (0..m).map(|i| i * n / m).collect();
        let mut entries = Vec::with_capacity(n + 1);
        let mut clients = Vec::with_capacity(m);
        let name = |i: usize| HiveName::new(format!("sim{i:05}")).expect("a valid hive name");
        let mut keys = public_keys(n).into_iter();
        for i in 0..n {
            let hive = name(i);
            let mut key = keys.next().expect("one key per hive");
            if connected.contains(&i) {
                let id = Identity::new_user();
                key = id.public.clone();
                clients.push((hive.clone(), id));
            }
            entries.push((hive, key));
        }
        let added = (name(n), Identity::new_user());
        entries.push((added.0.clone(), added.1.public.clone()));
        Roster {
            controller: Identity::new_user(),
            entries,
            clients,
            added,
        }
    }

    /// The N hives of the start.
    fn hives(&self) -> &[(HiveName, String)] {
        &self.entries[..self.entries.len() - 1]
    }

    /// The same and one more: the roster the reload loads.
    fn grown(&self) -> &[(HiveName, String)] {
        &self.entries
    }
}

/// `n` new public user nkeys, made on every core: a debug build (the short
/// form) takes about 20 ms a key.
fn public_keys(n: usize) -> Vec<String> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let share = n.div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let count = share.min(n.saturating_sub(t * share));
                scope.spawn(move || {
                    (0..count)
                        .map(|_| nkeys::KeyPair::new_user().public_key())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a key-making thread"))
            .collect()
    })
}

/// The two ways to give the same users their permissions.
#[derive(Clone, Copy)]
enum Form {
    /// Before accounts: every user in the global account.
    OneAccount,
    /// `swarm-controller nats-config` now.
    AccountPerHive,
}

impl Form {
    fn label(self) -> &'static str {
        match self {
            Form::OneAccount => "baseline: users in one account",
            Form::AccountPerHive => "an account per hive",
        }
    }

    fn render(self, roster: &Roster, which: fn(&Roster) -> &[(HiveName, String)]) -> String {
        let hives = which(roster);
        let controller = &roster.controller.public;
        match self {
            Form::OneAccount => one_account(controller, hives),
            Form::AccountPerHive => {
                let entries: Vec<RosterHive> = hives
                    .iter()
                    .map(|(hive, nkey)| RosterHive {
                        hive: hive.clone(),
                        nkey: nkey.clone(),
                        jetstream_domain: None,
                    })
                    .collect();
                authorization(controller, &entries, &[])
                    .expect("the bench's roster is valid")
                    .to_server_config()
            }
        }
    }
}

/// The users in one `authorization { users = [...] }` block, each grant
/// with its comment, laid out as `nats-config` printed it before accounts.
fn one_account(controller: &str, hives: &[(HiveName, String)]) -> String {
    let mut users = vec![User {
        role: Role::Controller,
        nkey: controller.to_string(),
        permissions: controller_permissions(),
    }];
    users.extend(hives.iter().map(|(hive, nkey)| User {
        role: Role::Hive(hive.clone()),
        nkey: nkey.clone(),
        permissions: hive_permissions(hive, &JsApi::local()),
    }));
    let mut out = String::from("authorization {\n  users = [\n");
    for user in &users {
        let p = &user.permissions;
        let _ = write!(
            out,
            "    # {}\n    {{\n      nkey: {:?}\n      permissions: {{\n",
            user.role, user.nkey
        );
        for (what, grants) in [("publish", &p.publish), ("subscribe", &p.subscribe)] {
            let width = grants.iter().map(|g| g.subject.len() + 2).max();
            let width = width.unwrap_or(0);
            let _ = writeln!(out, "        {what}: {{\n          allow: [");
            for g in grants {
                let quoted = format!("{:?}", g.subject);
                let _ = writeln!(out, "            {quoted:<width$}  # {}", g.why);
            }
            out.push_str("          ]\n        }\n");
        }
        if p.allow_responses {
            out.push_str("        allow_responses: true\n");
        }
        out.push_str("      }\n    }\n");
    }
    out.push_str("  ]\n}\n");
    out
}

/// `nats-server -t` on `text`: its wall time and CPU time.
fn check(text: &str) -> (Duration, Duration) {
    let dir = tempfile::Builder::new()
        .prefix("hhtest-accounts-")
        .tempdir()
        .expect("a temp dir for the config");
    let path = dir.path().join("server.conf");
    std::fs::write(&path, text).expect("write the config");
    let cpu = children_cpu_time();
    let t = Instant::now();
    let out = Command::new(nats::binary())
        .arg("-t")
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .expect("run nats-server -t");
    let wall = t.elapsed();
    assert!(
        out.status.success(),
        "nats-server -t refused the config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (wall, children_cpu_time().saturating_sub(cpu))
}

/// Connect every client hive with its own seed and put its status once;
/// the connections and each hive's time from connect to its put's ack
/// (the put waits for the connection: its ack is the proof of both).
async fn connect_clients(url: &str, roster: &Roster) -> (Vec<(HiveName, Connection)>, Vec<f64>) {
    let done: Vec<(HiveName, Connection, f64)> = futures_util::stream::iter(&roster.clients)
        .map(|(hive, id)| async move {
            let t = Instant::now();
            let conn = connect_hive(url, hive, id).await;
            put_status(&conn, hive).await;
            (hive.clone(), conn, ms(t.elapsed()))
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let times = done.iter().map(|d| d.2).collect();
    (done.into_iter().map(|(h, c, _)| (h, c)).collect(), times)
}

/// Connect as `hive` the way its daemon does; the connection comes up in
/// the background, and a put waits for it.
async fn connect_hive(url: &str, hive: &HiveName, id: &Identity) -> Connection {
    swarm_queue_client::connect(&id.nats_config(url), &hive_connection_name(hive))
        .await
        .unwrap_or_else(|e| panic!("connect hive {hive}: {e}"))
}

async fn put_status(conn: &Connection, hive: &HiveName) {
    try_put_status(conn, hive)
        .await
        .unwrap_or_else(|e| panic!("hive {hive} could not put its own status: {e}"));
}

async fn try_put_status(conn: &Connection, hive: &HiveName) -> Result<(), String> {
    let value = format!("{{\"bench\":\"accounts\",\"hive\":\"{hive}\"}}");
    put_own(
        &conn.jetstream(),
        Bucket::Status,
        hive.as_str(),
        value.into(),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// Each client puts its status again; how many had reconnected since
/// their first connect.
async fn put_again(clients: &[(HiveName, Connection)]) -> usize {
    futures_util::stream::iter(clients)
        .map(|(hive, conn)| async move {
            put_status(conn, hive).await;
            usize::from(*conn.connects.borrow() > 1)
        })
        .buffer_unordered(PARALLEL)
        .collect::<Vec<usize>>()
        .await
        .into_iter()
        .sum()
}

/// One hive putting its status every [`PROBE_EVERY`] until stopped. While
/// the server rebuilds its accounts a put can be refused (seen with
/// nats-server 2.15.1: "bucket does not exist" for an existing bucket);
/// the probe counts those and goes on, as the hive's publisher retries.
struct Probe {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<(Vec<f64>, usize)>,
}

impl Probe {
    fn start((hive, conn): &(HiveName, Connection)) -> Probe {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let (hive, conn) = (hive.clone(), conn.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_EVERY);
            // After a stalled put, the next one at once, then on the beat.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut times, mut refused) = (Vec::new(), 0);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => return (times, refused),
                }
                let t = Instant::now();
                if let Err(e) = try_put_status(&conn, &hive).await {
                    tracing::warn!(%hive, error = %e, "probe put refused during the reload");
                    refused += 1;
                }
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        });
        Probe { stop, task }
    }

    /// Each put's time (ms), and how many were refused.
    async fn stop(self) -> (Vec<f64>, usize) {
        let _ = self.stop.send(());
        self.task.await.expect("the probe hive's puts")
    }
}

/// Write `text` over the server's config and reload it (SIGHUP); the time
/// between the server's own log lines for the signal and the reload's end.
async fn reload(server: &NatsServer, text: &str) -> Duration {
    let file = server.config_file().expect("the server has a config file");
    std::fs::write(file, text).expect("rewrite the server's config");
    let before = server.log().matches(RELOADED).count();
    server.signal("HUP");
    let log = wait_until(LOAD_LIMIT, "the server to reload its config", || {
        let log = server.log();
        assert!(
            !log.contains("Failed to reload"),
            "the server refused the reload: {}",
            log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
        );
        let done = log.matches(RELOADED).count() > before;
        async move { done.then_some(log) }
    })
    .await;
    let (Some(trapped), Some(reloaded)) = (last_stamp(&log, TRAPPED), last_stamp(&log, RELOADED))
    else {
        panic!("no time stamps on the reload's log lines: {log}");
    };
    reloaded.duration_since(trapped).unwrap_or_default()
}

/// The time stamp of the last line of a nats-server log holding `needle`:
/// `[pid] 2026/12/01 16:27:37.580397 [INF] …`, local time, good only to
/// subtract from another line's.
fn last_stamp(log: &str, needle: &str) -> Option<SystemTime> {
    let line = log.lines().rev().find(|l| l.contains(needle))?;
    let mut fields = line.split_whitespace().skip(1);
    let (date, clock) = (fields.next()?, fields.next()?);
    log_time::line_time(&format!("{}T{clock}Z", date.replace('/', "-")))
}
