//! Agents' logs over NATS, to the controller only: a request on
//! `hyperhive.hive.<hive>.logs.request`, the frames to its reply subject,
//! the reader's acks on `hyperhive.hive.<hive>.logs.ack.<token>`.
//!
//! - The reply subject must be this hive's answer prefix and one token
//!   (the only place the hive may publish an answer); that token names the
//!   stream's acks. Any other request is dropped with a warning.
//! - Flow control: at most [`LOG_WINDOW`] frames out ahead of the reader's
//!   last ack, each at most [`MAX_LOG_FRAME_BYTES`]. Docker's stream is
//!   read only as frames can go out, so a slow reader holds the hive to
//!   one window of memory, and a reader that stops acknowledging for
//!   [`LOG_ACK_TIMEOUT_SECS`] ends the stream (and the Docker read behind
//!   it). A quiet follow sends an empty frame every
//!   [`LOG_HEARTBEAT_SECS`], which the reader must ack too, so a reader
//!   that went away is let go within seconds.
//! - At most [`MAX_STREAMS`] streams at once; one more is answered with an
//!   error frame.
//!
//! Nothing here logs a line of an agent's output: it may hold the agent's
//! secrets, and goes to the reader who asked and nowhere else.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use swarm_queue_client::payload::{
    LogFrame, LogLine, LogsAck, LogsRequest, LOG_ACK_TIMEOUT_SECS, LOG_FRAME_OVERHEAD,
    LOG_HEARTBEAT_SECS, LOG_WINDOW, MAX_LOG_FRAME_BYTES, MAX_LOG_LINE_COST,
};
use swarm_queue_client::subjects::{answer_token, logs_ack_subject, HiveSubjects};
use swarm_queue_client::{decode, HiveName};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::agents::runtime::logs::{LogRequest, LogStream};
use crate::agents::runtime::{ContainerRuntime, RuntimeError};
use crate::bus::events::{subscribe, SubscribeError};
use crate::shutdown::Shutdown;

/// The most log streams a hive serves at once.
pub const MAX_STREAMS: usize = 16;

const ACK_TIMEOUT: Duration = Duration::from_secs(LOG_ACK_TIMEOUT_SECS);
const HEARTBEAT: Duration = Duration::from_secs(LOG_HEARTBEAT_SECS);

pub struct LogServerDeps<R> {
    pub client: async_nats::Client,
    pub hive: HiveName,
    pub runtime: Arc<R>,
    pub state_dir: PathBuf,
}

impl<R> Clone for LogServerDeps<R> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            hive: self.hive.clone(),
            runtime: Arc::clone(&self.runtime),
            state_dir: self.state_dir.clone(),
        }
    }
}

/// Serve log requests until shutdown; the streams end with it.
pub async fn run<R: ContainerRuntime>(
    deps: LogServerDeps<R>,
    mut shutdown: Shutdown,
) -> Result<(), SubscribeError> {
    let subjects = HiveSubjects::new(&deps.hive);
    let mut sub = subscribe(&deps.client, subjects.logs.clone()).await?;
    let ack_prefix = logs_ack_subject(&deps.hive, "");
    // Each stream's acks, by its token; the tasks end with this set.
    let mut acks: HashMap<String, watch::Sender<u64>> = HashMap::new();
    let mut streams: JoinSet<String> = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            Some(done) = streams.join_next() => {
                match done {
                    Ok(token) => drop(acks.remove(&token)),
                    // A stream that panicked dropped its end of the acks.
                    Err(_) => acks.retain(|_, tx| !tx.is_closed()),
                }
            }
            Some(msg) = sub.next() => {
                if crate::bus::events::is_redirected(&deps.hive, &msg) {
                    continue;
                }
                if msg.subject.as_str() == subjects.logs_request {
                    on_request(&deps, msg, &mut acks, &mut streams);
                } else if let Some(token) = msg.subject.as_str().strip_prefix(&ack_prefix) {
                    if let (Some(tx), Ok(ack)) = (acks.get(token), LogsAck::decode(&msg.payload)) {
                        tx.send_if_modified(|seq| {
                            let newer = ack.seq > *seq;
                            *seq = (*seq).max(ack.seq);
                            newer
                        });
                    }
                }
            }
        }
    }
    let _ = sub.unsubscribe().await;
    Ok(())
}

/// Start the stream a request asks for, or answer why not.
fn on_request<R: ContainerRuntime>(
    deps: &LogServerDeps<R>,
    msg: async_nats::Message,
    acks: &mut HashMap<String, watch::Sender<u64>>,
    streams: &mut JoinSet<String>,
) {
    let hive = &deps.hive;
    let Some(reply) = msg.reply.clone() else {
        tracing::warn!(%hive, "a logs request without a reply subject ignored");
        return;
    };
    let Some(token) = answer_token(hive, reply.as_str()).map(str::to_string) else {
        tracing::warn!(%hive, reply = %reply, "a logs request whose reply is not under this hive's answer prefix ignored");
        return;
    };
    if acks.contains_key(&token) {
        tracing::warn!(%hive, %token, "a second logs request for a stream already open ignored");
        return;
    }
    let refuse = |error: String| {
        let (client, reply) = (deps.client.clone(), reply.clone());
        let frame = LogFrame {
            seq: 1,
            end: true,
            error: Some(error),
            ..Default::default()
        };
        tokio::spawn(async move {
            let _ = client.publish(reply, frame.encode().into()).await;
        });
    };
    if acks.len() >= MAX_STREAMS {
        refuse(format!(
            "hive {hive} is already serving {MAX_STREAMS} log streams; try again when one ends"
        ));
        return;
    }
    let request = match decode::<LogsRequest>(&msg.payload) {
        Ok(r) => r.value,
        Err(e) => {
            tracing::warn!(%hive, error = %e, "undecodable logs request refused");
            refuse(e.to_string());
            return;
        }
    };
    let (tx, rx) = watch::channel(0);
    acks.insert(token.clone(), tx);
    let deps = deps.clone();
    streams.spawn(async move {
        let agent = request.agent.clone();
        let ending = stream_logs(&deps, request, reply, rx).await;
        tracing::info!(hive = %deps.hive, %agent, %ending, "log stream ended");
        token
    });
}

/// Open the log and send it; how the stream ended.
async fn stream_logs<R: ContainerRuntime>(
    deps: &LogServerDeps<R>,
    request: LogsRequest,
    reply: async_nats::Subject,
    acks: watch::Receiver<u64>,
) -> String {
    let wanted = LogRequest::from(&request);
    let mut out = Sender {
        client: deps.client.clone(),
        reply,
        seq: 0,
        unacked: VecDeque::new(),
        last_sent: Instant::now(),
        acks,
    };
    let opened = crate::agents::agent_logs::open(
        &*deps.runtime,
        &deps.hive,
        &deps.state_dir,
        &request.agent,
        &wanted,
    )
    .await;
    match opened {
        Ok(lines) => out.pump(lines, request.follow).await,
        Err(e) => {
            let error = e.to_string();
            let _ = out.send(Vec::new(), true, Some(error.clone())).await;
            format!("refused: {error}")
        }
    }
}

/// One stream's sending side: the frames out and not yet acknowledged.
struct Sender {
    client: async_nats::Client,
    reply: async_nats::Subject,
    seq: u64,
    /// When each unacknowledged frame went out, oldest first.
    unacked: VecDeque<(u64, Instant)>,
    /// When the last frame went out (a quiet follow beats after it).
    last_sent: Instant,
    acks: watch::Receiver<u64>,
}

/// Why a stream stopped before its log ended.
#[derive(Debug, thiserror::Error)]
enum Stopped {
    /// The reader did not acknowledge within [`ACK_TIMEOUT`].
    #[error("reader gone: a frame was not acknowledged within {LOG_ACK_TIMEOUT_SECS} s")]
    ReaderGone,
    #[error("cannot publish a frame: {0}")]
    Publish(String),
}

/// The lines of the frame being filled, and how the log ended when it did
/// (`Some(None)`: at its end; `Some(Some(e))`: broken off).
#[derive(Default)]
struct Batch {
    lines: Vec<LogLine>,
    size: usize,
    ended: Option<Option<String>>,
}

impl Batch {
    /// No room for a line more.
    fn full(&self) -> bool {
        LOG_FRAME_OVERHEAD + self.size + MAX_LOG_LINE_COST > MAX_LOG_FRAME_BYTES
    }

    /// Take in one item of the log.
    fn take_in(&mut self, item: Option<Result<LogLine, RuntimeError>>) {
        match item {
            Some(Ok(line)) => {
                let line = line.fit_frame();
                self.size += LogFrame::line_cost(&line);
                self.lines.push(line);
            }
            Some(Err(e)) => self.ended = Some(Some(crate::error_chain(&e))),
            None => self.ended = Some(None),
        }
    }
}

impl Sender {
    /// Send `lines` until they end, the reader goes, or NATS fails; how
    /// the stream ended. Lines are read while the window is full, up to one
    /// frame, so a fast log goes out in full frames and a slow reader stops
    /// the reading.
    async fn pump(&mut self, mut lines: LogStream, follow: bool) -> String {
        let mut batch = Batch::default();
        loop {
            self.settle();
            let room = (self.unacked.len() as u64) < LOG_WINDOW;
            if let Some(ended) = batch.ended.take() {
                let lines = std::mem::take(&mut batch.lines);
                if let Err(stopped) = self.send(lines, true, ended.clone()).await {
                    return stopped.to_string();
                }
                return ended.map_or("the log ended".into(), |e| format!("Docker: {e}"));
            }
            if self.deadline().is_some_and(|d| d <= Instant::now()) {
                return Stopped::ReaderGone.to_string();
            }
            let beat_due = follow && room && self.last_sent + HEARTBEAT <= Instant::now();
            if room && (!batch.lines.is_empty() || beat_due) {
                let lines = std::mem::take(&mut batch.lines);
                batch.size = 0;
                if let Err(stopped) = self.send(lines, false, None).await {
                    return stopped.to_string();
                }
                continue;
            }
            let far = Instant::now() + ACK_TIMEOUT;
            let beat = if follow {
                self.last_sent + HEARTBEAT
            } else {
                far
            };
            let until = self.deadline().map_or(beat, |d| d.min(beat));
            tokio::select! {
                // All three cancel-safe: a line not taken stays in the stream.
                item = lines.next(), if !batch.full() => {
                    batch.take_in(item);
                    // What Docker has already sent joins this frame.
                    while !batch.full() && batch.ended.is_none() {
                        match lines.next().now_or_never() {
                            Some(item) => batch.take_in(item),
                            None => break,
                        }
                    }
                }
                changed = self.acks.changed(), if !room => {
                    if changed.is_err() {
                        return Stopped::ReaderGone.to_string();
                    }
                }
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Forget the frames the reader has acknowledged.
    fn settle(&mut self) {
        let acked = *self.acks.borrow_and_update();
        while self.unacked.front().is_some_and(|(seq, _)| *seq <= acked) {
            self.unacked.pop_front();
        }
    }

    /// When the oldest unacknowledged frame's ack is due.
    fn deadline(&self) -> Option<Instant> {
        self.unacked.front().map(|(_, at)| *at + ACK_TIMEOUT)
    }

    async fn send(
        &mut self,
        lines: Vec<LogLine>,
        end: bool,
        error: Option<String>,
    ) -> Result<(), Stopped> {
        self.seq += 1;
        let frame = LogFrame {
            seq: self.seq,
            lines,
            end,
            error,
        };
        self.client
            .publish(self.reply.clone(), frame.encode().into())
            .await
            .map_err(|e| Stopped::Publish(e.to_string()))?;
        self.last_sent = Instant::now();
        self.unacked.push_back((self.seq, self.last_sent));
        Ok(())
    }
}
