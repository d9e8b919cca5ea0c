//! # swarm-controller: the hyperhive swarm's control plane
//!
//! The controller holds no state of its own. Its roster comes from its
//! config file; everything else it reads from, and writes to, NATS: the
//! hives' status in `hyperhive-status`, the declarations in
//! `hyperhive-wanted`, sealed secrets in `hyperhive-credentials`. Any
//! number of controllers can run at once and agree, because they all read
//! the same buckets and their only writes (declarations) are
//! compare-and-set.
//!
//! The parts:
//! - [`roster`]: the hives this controller knows (at the bottom: it imports
//!   nothing of the controller); [`config`]: the config file and
//!   `--check-config`, its roster read by `roster_toml` straight from the
//!   TOML parser's events; [`age`]: time as the controller shows it (an
//!   age, Unix milliseconds).
//! - [`evaluate`]: the pure heart: freshness and convergence of one hive
//!   from its KV entries and the reader's clock, with table-driven tests.
//! - [`fleet`]: every hive's entries and rows, updated one KV entry at a
//!   time, with the fleet summary and the stale deadlines.
//! - [`nats`]: the one connection, the buckets, and the KV watch that
//!   feeds the fleet.
//! - [`presence`]: which hives have an open NATS connection, from the
//!   server's connect and disconnect events, so a dead hive shows
//!   `offline` at once.
//! - [`view`]: the filters, order, paging and "needs attention" ranking of
//!   `/api/status`, `status --json` and the dashboard (pure).
//! - [`render`]: the JSON report and the status table.
//! - [`swarm_file`], [`groups`] and [`declare`]: parsing a swarm file,
//!   merging each hive's table with the groups that select it, and
//!   publishing each hive's declaration; `toml_lines` gives both TOML
//!   files' errors their line numbers; [`values`] the `${values.NAME}`
//!   placeholders a hive's values fill in.
//! - [`rollout`]: staged rollouts in waves, their state in
//!   `hyperhive-rollouts` (compare-and-set), and the rollout verbs;
//!   [`rollout_settings`] the swarm file's `[rollout]` table, which the
//!   swarm file reads from below; [`cas`]: the compare-and-set write every
//!   bucket write goes through.
//! - [`maintenance`]: maintenance holds in `hyperhive-maintenance`
//!   (compare-and-set, ended by their TTL from the server's timestamp).
//! - [`deploy`], [`credential`], [`knowledge`]: the event verbs; [`logs`]: an
//!   agent's output from its hive, with flow control.
//! - [`webhook`]: forge push signatures and what a push means (pure).
//! - The two faces, on top, neither importing the other:
//!   [`serve`], the dashboard, JSON API and webhook over HTTP ([`live`]
//!   decides what each open page is sent, pure); and [`cli`], the command
//!   line (`main.rs` only names the allocator and calls [`cli::main`]), a file per group of verbs
//!   under `cli/` (`declare`, `events`, `status`, `history`, `logs`,
//!   `maintenance`) and `cli/support.rs` for what they share (the NATS
//!   wait). What both show is in the layers below.
//! - [`nats_config`]: the nkey users and authorization blocks of a swarm
//!   with per-hive NATS identities (see `docs/security.md`).
//! - [`rollback`]: an earlier declaration from the wanted bucket's history,
//!   declared again; [`capability`]: the agent fields each hive's build
//!   knows, so no declaration sets one a hive would ignore.
//! - [`audit`]: one `hyperhive-events` event per operator verb;
//!   [`nkey_file`]: the `nkey` verb's user seed and public key.
//! - [`alloc`]: the binary's allocator (small blocks from mimalloc, the
//!   rest from the C library), `#[global_allocator]` in `main.rs`.

pub mod age;
pub mod alloc;
pub mod audit;
pub mod capability;
pub mod cas;
pub mod cli;
pub mod config;
pub mod credential;
pub mod declare;
pub mod deploy;
pub mod evaluate;
pub mod fleet;
pub mod groups;
pub mod knowledge;
pub mod live;
pub mod logs;
pub mod maintenance;
pub mod nats;
pub mod nats_config;
pub mod nkey_file;
pub mod presence;
pub mod render;
pub mod rollback;
pub mod rollout;
pub mod rollout_settings;
pub mod roster;
mod roster_toml;
pub mod serve;
pub mod swarm_file;
mod toml_lines;
pub mod values;
pub mod view;
pub mod webhook;
