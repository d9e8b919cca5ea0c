//! What happens to this hive's agents, into `hyperhive-events`: created,
//! started, exited (with its code), OOM-killed, removed, rebuilt, retired,
//! a job failed. Each goes to `hyperhive.events.hive.<hive>.<agent>.<kind>`,
//! the only part of the stream this hive may publish to.
//!
//! Best effort, and never in the way: [`EventSink::emit`] queues (at most
//! [`QUEUE`] events, then drops and counts), and one task publishes them in
//! order on the swarm connection. While NATS is unreachable the client
//! keeps what it can and the rest is dropped: the stream is a history for
//! people, never evidence the hive or the controller acts on (the status
//! and the job store are). No event carries an agent's output or a secret.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use swarm_queue_client::event_stream::{hive_event_subject, Event};
use swarm_queue_client::{AgentName, HiveName};
use tokio::sync::{mpsc, Mutex};

use crate::shutdown::Shutdown;

/// The most events queued for publishing.
pub const QUEUE: usize = 1024;

type Queued = (String, Vec<u8>);

/// Where the hive's parts report what happened; cheap to clone.
#[derive(Clone, Debug)]
pub struct EventSink {
    hive: HiveName,
    tx: mpsc::Sender<Queued>,
    dropped: Arc<AtomicU64>,
}

/// The queue [`run`] publishes from (kept across restarts of that task).
#[derive(Clone, Debug)]
pub struct EventQueue(Arc<Mutex<mpsc::Receiver<Queued>>>);

impl EventSink {
    pub fn new(hive: HiveName) -> (EventSink, EventQueue) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let sink = EventSink {
            hive,
            tx,
            dropped: Arc::default(),
        };
        (sink, EventQueue(Arc::new(Mutex::new(rx))))
    }

    /// Queue `event` about `agent` (its hive and agent filled in).
    pub fn emit(&self, agent: &AgentName, mut event: Event) {
        event.hive = Some(self.hive.clone());
        event.agent = Some(agent.clone());
        let subject = hive_event_subject(&self.hive, Some(agent), &event.kind);
        if self.tx.try_send((subject, event.encode())).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(hive = %self.hive, dropped = n, "event queue full (or no publisher): event dropped");
        }
    }

    /// How many events were dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventQueue {
    /// The events queued now and not yet published, taken off the queue
    /// (for tests, and a look without NATS).
    pub async fn take_queued(&self) -> Vec<Event> {
        let mut rx = self.0.lock().await;
        let mut out = Vec::new();
        while let Ok((_, payload)) = rx.try_recv() {
            out.extend(Event::decode(&payload).ok());
        }
        out
    }

    /// The next event queued, waiting for it (for tests and benches that
    /// wait on what the hive does instead of polling its store); `None`
    /// once every sink is gone.
    pub async fn next(&self) -> Option<Event> {
        let mut rx = self.0.lock().await;
        while let Some((_, payload)) = rx.recv().await {
            if let Ok(event) = Event::decode(&payload) {
                return Some(event);
            }
        }
        None
    }
}

/// Publish the queued events, in order, until shutdown.
pub async fn run(client: async_nats::Client, queue: EventQueue, mut shutdown: Shutdown) {
    let mut rx = queue.0.lock().await;
    loop {
        let next = tokio::select! {
            _ = shutdown.wait() => break,
            next = rx.recv() => next,
        };
        let Some((subject, payload)) = next else {
            break;
        };
        if let Err(e) = client.publish(subject, payload.into()).await {
            tracing::debug!(error = %e, "an event was not published");
        }
    }
}
