//! The end-to-end tests that run one at a time: faults (a private dockerd,
//! a nats-server stopped or a cluster node killed, a frozen or killed
//! process, a full disk), the truth oracle's seeded fault schedule, and
//! the agents' log streams (a firehose that keeps both cores busy, a
//! follow whose latency is printed). Each test takes [`alone`] first, so
//! no two of them overlap, and cargo runs this binary after or before the
//! `e2e` one, never beside it.
//!
//! Run one module with `cargo test -p hyperhive-tests --test alone MODULE::`.

mod agent_logs;
mod faults_cluster;
mod faults_controller_down;
mod faults_disk_full;
mod faults_dockerd;
mod faults_nats_restart;
mod faults_sigkill;
mod faults_sigstop;
mod logs_nats;
mod oracle;

/// Held for the whole of each test in this binary: one test at a time.
/// A tokio mutex, so an async test waits for it without blocking a thread;
/// a failed test releases it like any other (no poisoning).
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Wait until no other test of this binary runs, and keep it so until the
/// guard drops.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.lock().await
}
