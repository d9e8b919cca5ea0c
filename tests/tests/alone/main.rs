//! The end-to-end tests that never run beside the `e2e` ones, and at most
//! two at a time among themselves: faults (a private dockerd, a nats-server
//! stopped or a cluster node killed, a frozen or killed process, a full
//! disk), the truth oracle's seeded fault schedule, and the agents' log
//! streams (a firehose that keeps both cores busy, a follow whose latency
//! is printed). Each test takes its slots first: a fault test or the
//! oracle one of two ([`one_slot`]), a log-stream test both ([`alone`]).
//! Cargo runs this binary before or after the `e2e` one, never beside it.
//!
//! The oracle's module is `fault_oracle`, so that it sorts before
//! `faults_*` and `logs_nats`: libtest starts tests in name order, the
//! oracle's fixed schedule (about 250 s) then holds one slot while the
//! faults share the other, instead of starting last and running alone.
//!
//! Run one module with `cargo test -p hyperhive-tests --test alone MODULE::`.

mod agent_logs;
mod fault_oracle;
mod faults_cluster;
mod faults_controller_down;
mod faults_disk_full;
mod faults_dockerd;
mod faults_nats_restart;
mod faults_sigkill;
mod faults_sigstop;
mod logs_nats;

/// Two slots, one per core. A fault test or the oracle holds one, so two
/// of them may overlap (each mostly waits on its own servers, dockerds and
/// processes); a log-stream test holds both, since its firehose keeps both
/// cores busy and its follow prints a latency. A tokio semaphore, fair in
/// the order tests ask, so an async test waits without blocking a thread
/// and a failed test gives its slots back like any other.
static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Wait for one of the two slots, and hold it until the guard drops.
pub async fn one_slot() -> tokio::sync::SemaphorePermit<'static> {
    SLOTS.acquire().await.expect("the slots are never closed")
}

/// Wait until no other test of this binary runs, and keep it so until the
/// guard drops.
pub async fn alone() -> tokio::sync::SemaphorePermit<'static> {
    SLOTS
        .acquire_many(2)
        .await
        .expect("the slots are never closed")
}
