//! The controller's side of NATS: its one connection, the buckets, and the
//! [`Follower`] that reads the status, wanted and maintenance buckets into
//! a [`Fleet`].
//!
//! The follower is a KV watch *with history* on each bucket: it first
//! delivers the current value of every key, then every change as it
//! happens. So the one-shot `status`, `status --watch` and `serve` all read
//! the buckets through the same path, and an update costs one entry, never
//! a re-read of the bucket. It knows it has caught up with a bucket when
//! the server says nothing is pending (or the bucket was empty when the
//! watch started).
//!
//! A watch can yield an error (a missed heartbeat) and carry on: errors are
//! logged and the loop goes on. If a watch ends, it is recreated with
//! history, which re-reads that bucket once (the only full re-read).

use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use swarm_queue_client::buckets::BucketError;
use swarm_queue_client::{ensure_connected, open_or_create, Bucket, Connection, NatsConfig};

use crate::fleet::{Change, Decoded, Fleet, Source, Update};

/// The buckets the controller reads and writes.
#[derive(Clone, Debug)]
pub struct Buckets {
    pub status: kv::Store,
    pub wanted: kv::Store,
    pub credentials: kv::Store,
    /// The controllers' own: the staged rollout's state.
    pub rollouts: kv::Store,
    /// The controllers' own: webhook deliveries acted on, and the commit
    /// each agent was last deployed for by one.
    pub deliveries: kv::Store,
    /// The controllers' own: maintenance holds, by hive.
    pub maintenance: kv::Store,
}

#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    #[error(transparent)]
    Connect(#[from] swarm_queue_client::connect::ConnectError),
    #[error(transparent)]
    NotConnected(#[from] swarm_queue_client::NotConnected),
    #[error("NATS at {servers} did not answer within {waited:?}; is it running?")]
    Unreachable { servers: String, waited: Duration },
    #[error(transparent)]
    Bucket(#[from] BucketError),
    #[error("KV bucket {0} is not there (and was not made)")]
    BucketMissing(&'static str),
    #[error(
        "the buckets were read, but not the config that lays out the fleet they are read into"
    )]
    NotLaidOut,
    #[error("cannot watch bucket {bucket}: {reason}")]
    Watch {
        bucket: &'static str,
        reason: String,
    },
}

/// Connect (the process's one connection) and wait up to `wait` for it to
/// be up: the verbs are one-shot and must fail rather than hang when NATS
/// is down.
pub async fn connect(config: &NatsConfig, wait: Duration) -> Result<Connection, NatsError> {
    let conn = swarm_queue_client::connect(config, "swarm-controller").await?;
    let mut connects = conn.connects.clone();
    let up = tokio::time::timeout(wait, async {
        while ensure_connected(&conn.client).is_err() {
            if connects.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
    if up.is_err() || ensure_connected(&conn.client).is_err() {
        return Err(NatsError::Unreachable {
            servers: conn.servers.clone(),
            waited: wait,
        });
    }
    Ok(conn)
}

/// Open (or create) the six buckets, and warn (naming the setting) about
/// any bucket made with settings that let a writer of one key reach another
/// or a message be erased (`swarm_queue_client::buckets::unsafe_settings`),
/// saying how to fix it.
pub async fn open_buckets(conn: &Connection, config: &NatsConfig) -> Result<Buckets, NatsError> {
    open_six(conn, config, true).await
}

/// [`open_buckets`] without making any: [`NatsError::BucketMissing`] when
/// one is not there. For a read begun before its config is checked, which
/// must change nothing on the server for a config that then fails.
pub async fn open_existing_buckets(
    conn: &Connection,
    config: &NatsConfig,
) -> Result<Buckets, NatsError> {
    open_six(conn, config, false).await
}

async fn open_six(
    conn: &Connection,
    config: &NatsConfig,
    create: bool,
) -> Result<Buckets, NatsError> {
    ensure_connected(&conn.client)?;
    let js = conn.jetstream();
    let open = |bucket: Bucket| {
        let settings = config.buckets.get(bucket);
        let js = &js;
        async move {
            if create {
                return Ok(open_or_create(js, bucket, &settings).await?);
            }
            js.get_key_value(bucket.name()).await.map_err(|source| {
                if source.kind() == async_nats::jetstream::context::KeyValueErrorKind::GetBucket {
                    NatsError::BucketMissing(bucket.name())
                } else {
                    BucketError::Open {
                        bucket: bucket.name(),
                        source,
                    }
                    .into()
                }
            })
        }
    };
    // Asked for at once (six answers in about the time of one), and the
    // first failure in this order is the one reported, as when they were
    // asked for one by one.
    let (status, wanted, credentials, rollouts, deliveries, maintenance) = tokio::join!(
        open(Bucket::Status),
        open(Bucket::Wanted),
        open(Bucket::Credentials),
        open(Bucket::Rollouts),
        open(Bucket::Deliveries),
        open(Bucket::Maintenance),
    );
    let (status, wanted, credentials) = (status?, wanted?, credentials?);
    let (rollouts, deliveries, maintenance) = (rollouts?, deliveries?, maintenance?);
    for (bucket, store) in [
        (Bucket::Status, &status),
        (Bucket::Wanted, &wanted),
        (Bucket::Credentials, &credentials),
        (Bucket::Rollouts, &rollouts),
        (Bucket::Deliveries, &deliveries),
        (Bucket::Maintenance, &maintenance),
    ] {
        let config = &store.stream.cached_info().config;
        for unsafe_setting in swarm_queue_client::buckets::unsafe_settings(bucket, config) {
            let fix = if unsafe_setting.fixed_in_place() {
                "`swarm-controller nats-config --check --fix` fixes it"
            } else {
                "delete the bucket and let the controller make it again"
            };
            tracing::warn!(
                bucket = bucket.name(),
                setting = unsafe_setting.setting,
                "{unsafe_setting}; {fix}"
            );
        }
    }
    Ok(Buckets {
        status,
        wanted,
        credentials,
        rollouts,
        deliveries,
        maintenance,
    })
}

struct BucketWatch {
    source: Source,
    store: kv::Store,
    watch: kv::Watch,
    caught_up: bool,
}

impl BucketWatch {
    async fn start(source: Source, store: &kv::Store) -> Result<Self, NatsError> {
        let err = |reason: String| NatsError::Watch {
            bucket: match source {
                Source::Status => swarm_queue_client::buckets::STATUS_BUCKET,
                Source::Wanted => swarm_queue_client::buckets::WANTED_BUCKET,
                Source::Maintenance => swarm_queue_client::buckets::MAINTENANCE_BUCKET,
            },
            reason,
        };
        let store = store.clone();
        // Asked before the watch starts: a value put in between arrives as a
        // live update, which is just as good.
        let empty = store
            .status()
            .await
            .map_err(|e| err(e.to_string()))?
            .values()
            == 0;
        let watch = store
            .watch_with_history(">")
            .await
            .map_err(|e| err(e.to_string()))?;
        Ok(BucketWatch {
            source,
            store,
            watch,
            caught_up: empty,
        })
    }
}

impl BucketWatch {
    /// The next entry of this bucket. Cancel-safe, like [`Follower::next`].
    async fn next(&mut self) -> kv::Entry {
        loop {
            let item = self.watch.next().await;
            if let Some(entry) = self.take(item).await {
                return entry;
            }
        }
    }

    /// What the watch gave: its entry, or `None` after an error (logged,
    /// carried on) or its end (the watch is started again, until it is).
    async fn take(
        &mut self,
        item: Option<Result<kv::Entry, kv::WatcherError>>,
    ) -> Option<kv::Entry> {
        match item {
            Some(Ok(entry)) => {
                if entry.delta == 0 || entry.seen_current {
                    self.caught_up = true;
                }
                Some(entry)
            }
            Some(Err(e)) => {
                tracing::warn!(bucket = ?self.source, error = %e, "KV watch error; carrying on");
                None
            }
            None => {
                tracing::warn!(bucket = ?self.source, "KV watch ended; starting it again");
                loop {
                    match BucketWatch::start(self.source, &self.store).await {
                        Ok(fresh) => {
                            *self = fresh;
                            return None;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot restart the KV watch; retrying in 1 s");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            }
        }
    }
}

/// The three buckets' watches; see the module documentation.
pub struct Follower {
    status: BucketWatch,
    wanted: BucketWatch,
    maintenance: BucketWatch,
}

impl Follower {
    pub async fn start(buckets: &Buckets) -> Result<Self, NatsError> {
        Ok(Follower {
            status: BucketWatch::start(Source::Status, &buckets.status).await?,
            wanted: BucketWatch::start(Source::Wanted, &buckets.wanted).await?,
            maintenance: BucketWatch::start(Source::Maintenance, &buckets.maintenance).await?,
        })
    }

    /// Whether every bucket's current values have all been delivered.
    pub fn caught_up(&self) -> bool {
        self.status.caught_up && self.wanted.caught_up && self.maintenance.caught_up
    }

    /// The next entry of any of the buckets. Cancel-safe: a watch is a stream,
    /// and an entry not yet returned stays in it.
    pub async fn next(&mut self) -> (Source, kv::Entry) {
        loop {
            let (source, item) = tokio::select! {
                item = self.status.watch.next() => (Source::Status, item),
                item = self.wanted.watch.next() => (Source::Wanted, item),
                item = self.maintenance.watch.next() => (Source::Maintenance, item),
            };
            let w = match source {
                Source::Status => &mut self.status,
                Source::Wanted => &mut self.wanted,
                Source::Maintenance => &mut self.maintenance,
            };
            if let Some(entry) = w.take(item).await {
                return (source, entry);
            }
        }
    }

    /// Apply the next entry to `fleet`.
    pub async fn apply_next(&mut self, fleet: &std::sync::RwLock<Fleet>) -> Change {
        let (source, entry) = self.next().await;
        apply_entry(fleet, source, &entry)
    }
}

/// Apply one KV entry to the fleet, at the reader's clock.
pub fn apply_entry(fleet: &std::sync::RwLock<Fleet>, source: Source, entry: &kv::Entry) -> Change {
    let now = time::OffsetDateTime::now_utc();
    let mut fleet = fleet
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    fleet.apply(Update::from_entry(source, entry), now)
}

/// Read the three buckets into `fleet` until caught up; return the follower so a
/// caller that keeps watching carries on from there.
pub async fn load(
    buckets: &Buckets,
    fleet: &std::sync::RwLock<Fleet>,
) -> Result<Follower, NatsError> {
    let follower = read_values(buckets, fleet).await?;
    fleet
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .refresh_all(time::OffsetDateTime::now_utc());
    Ok(follower)
}

/// [`load`] without computing any row: for a reader that evaluates every
/// row once, next, and then stops ([`Fleet::rows_dealt`]).
pub async fn read_values(
    buckets: &Buckets,
    fleet: &std::sync::RwLock<Fleet>,
) -> Result<Follower, NatsError> {
    read_into(buckets, fleet, None).await
}

/// [`read_values`] begun before the fleet is laid out: a one-look `status`
/// reads the buckets while it reads its roster. What is decoded meanwhile
/// waits, and is stored once `layout` gives the fleet, which takes the
/// place of what `fleet` held. Fails when `layout` is dropped unsent.
pub async fn read_values_before_layout(
    buckets: &Buckets,
    fleet: &std::sync::RwLock<Fleet>,
    layout: tokio::sync::oneshot::Receiver<Fleet>,
) -> Result<Follower, NatsError> {
    read_into(buckets, fleet, Some(layout)).await
}

async fn read_into(
    buckets: &Buckets,
    fleet: &std::sync::RwLock<Fleet>,
    layout: Option<tokio::sync::oneshot::Receiver<Fleet>>,
) -> Result<Follower, NatsError> {
    // Rows are computed once at the end, not once per entry: a hive has an
    // entry in each bucket, and only the last state of the pair matters.
    // Decoding is most of the work: it runs on blocking threads, one lane
    // per core, while the next entries arrive. A key always takes the same
    // lane, so its entries are stored in the order they came. The buckets
    // are read in turn, smallest first: a watch's values arrive as fast as
    // the server sends them and wait in memory until decoded, so only one
    // bucket's can be waiting.
    let mut read = Reading::start(fleet, layout);
    let wanted = read.bucket(Source::Wanted, &buckets.wanted).await?;
    let maintenance = read
        .bucket(Source::Maintenance, &buckets.maintenance)
        .await?;
    let status = read.bucket(Source::Status, &buckets.status).await?;
    read.finish().await?;
    Ok(Follower {
        status,
        wanted,
        maintenance,
    })
}

/// One [`read_values`]: entries sent to the lanes, decoded ones stored.
struct Reading<'a> {
    fleet: &'a std::sync::RwLock<Fleet>,
    /// The fleet, while it is being laid out: decoded batches wait in
    /// `waiting` until it comes.
    layout: Option<tokio::sync::oneshot::Receiver<Fleet>>,
    waiting: Vec<Vec<Decoded>>,
    lanes: DecodeLanes,
    decoded: tokio::sync::mpsc::UnboundedReceiver<Vec<Decoded>>,
    sent: u64,
    stored: u64,
}

impl<'a> Reading<'a> {
    fn start(
        fleet: &'a std::sync::RwLock<Fleet>,
        layout: Option<tokio::sync::oneshot::Receiver<Fleet>>,
    ) -> Self {
        let (lanes, decoded) = DecodeLanes::start();
        Reading {
            fleet,
            layout,
            waiting: Vec::new(),
            lanes,
            decoded,
            sent: 0,
            stored: 0,
        }
    }

    /// Store a lane's batch under one write lock, or keep it until the
    /// fleet is laid out.
    fn store(&mut self, batch: Vec<Decoded>) {
        self.stored += batch.len() as u64;
        if self.layout.is_some() {
            self.waiting.push(batch);
            return;
        }
        let mut fleet = self.fleet.write().unwrap_or_else(|p| p.into_inner());
        for d in batch {
            fleet.store_decoded(d);
        }
    }

    /// The fleet is laid out: it takes the place of the one read into, and
    /// what waited is stored in it.
    fn laid_out(
        &mut self,
        fleet: Result<Fleet, tokio::sync::oneshot::error::RecvError>,
    ) -> Result<(), NatsError> {
        self.layout = None;
        let mut laid = fleet.map_err(|_| NatsError::NotLaidOut)?;
        for d in self.waiting.drain(..).flatten() {
            laid.store_decoded(d);
        }
        *self.fleet.write().unwrap_or_else(|p| p.into_inner()) = laid;
        Ok(())
    }

    /// Watch one bucket until its current values have all been sent to the
    /// lanes (storing what they decoded meanwhile); the watch, to follow.
    async fn bucket(
        &mut self,
        source: Source,
        bucket: &kv::Store,
    ) -> Result<BucketWatch, NatsError> {
        let mut watch = BucketWatch::start(source, bucket).await?;
        while !watch.caught_up {
            tokio::select! {
                // Cancel-safe: see `BucketWatch::next`.
                entry = watch.next() => {
                    self.lanes.send(source, entry).await;
                    self.sent += 1;
                }
                Some(batch) = self.decoded.recv() => self.store(batch),
                // Cancel-safe: a receiver keeps what was sent.
                fleet = layout_of(&mut self.layout) => self.laid_out(fleet)?,
            }
        }
        self.lanes.flush().await;
        Ok(watch)
    }

    /// Store the rest, once every lane has decoded what it was sent.
    async fn finish(mut self) -> Result<(), NatsError> {
        self.lanes.lanes.clear();
        while let Some(batch) = self.decoded.recv().await {
            self.store(batch);
        }
        if self.layout.is_some() {
            let fleet = layout_of(&mut self.layout).await;
            self.laid_out(fleet)?;
        }
        if self.stored < self.sent {
            return Err(NatsError::Watch {
                bucket: swarm_queue_client::buckets::STATUS_BUCKET,
                reason: format!(
                    "a decoding thread ended with {} entries left",
                    self.sent - self.stored
                ),
            });
        }
        Ok(())
    }
}

/// The fleet from `layout`, once it comes; never without one.
async fn layout_of(
    layout: &mut Option<tokio::sync::oneshot::Receiver<Fleet>>,
) -> Result<Fleet, tokio::sync::oneshot::error::RecvError> {
    match layout {
        Some(fleet) => fleet.await,
        None => std::future::pending().await,
    }
}

/// Threads that decode KV entries for [`read_values`], one per core.
///
/// Entries go to a lane, and come back decoded, in batches of
/// [`BATCH`]: one wake-up of each side per batch, not per entry (thread
/// switches and futex wake-ups led the profile of a 10,000-hive read; the
/// batches did not measurably change its time on 2 cores, see
/// `docs/benchmarks-controller.md`). A lane holds at most [`LANE_DEPTH`]
/// batches waiting.
/// When every lane is full the reader stops taking entries from the
/// watch, so the watch answers the server's flow control late and the
/// server stops sending: what waits to be decoded is bounded by that
/// window, not by the bucket.
struct DecodeLanes {
    lanes: Vec<tokio::sync::mpsc::Sender<Vec<(Source, kv::Entry)>>>,
    /// Each lane's batch being filled.
    filling: Vec<Vec<(Source, kv::Entry)>>,
}

/// Entries sent to a lane, or stored, at once.
const BATCH: usize = 32;

/// Batches a decoding lane may hold waiting: 2,048 entries, so at most
/// 4,096 (about 5.5 MB of 10,000-hive statuses) wait on two cores. With
/// less room the reader stopped taking entries whenever a lane was behind,
/// and the read was slower. At 10,000 hives, children alternated in one
/// run, ten pairs each: 2 batches against 64, the read's median 172.6
/// against 154.3 ms (9 of the 10 pairs faster with 64); 16 against 64,
/// 160.6 against 147.9 ms (9 of 10); 16 against 2, no difference (5 of
/// 10). What waits costs memory when the lanes fall behind: the binary's
/// peak over twelve runs of each, alternated, 39.2 to 46.3 MiB with 64
/// against 39.8 to 42.9 with 16.
const LANE_DEPTH: usize = 64;

impl DecodeLanes {
    /// The lanes, and where their decoded batches come out.
    fn start() -> (Self, tokio::sync::mpsc::UnboundedReceiver<Vec<Decoded>>) {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (tx, decoded) = tokio::sync::mpsc::unbounded_channel();
        let lanes = (0..n)
            .map(|_| {
                let (lane, mut batches) =
                    tokio::sync::mpsc::channel::<Vec<(Source, kv::Entry)>>(LANE_DEPTH);
                let tx = tx.clone();
                // Ends when its sender is dropped (the read is over) or the
                // reader is gone.
                tokio::task::spawn_blocking(move || {
                    while let Some(batch) = batches.blocking_recv() {
                        let done = batch
                            .iter()
                            .map(|(source, entry)| Decoded::of(Update::from_entry(*source, entry)))
                            .collect();
                        if tx.send(done).is_err() {
                            return;
                        }
                    }
                });
                lane
            })
            .collect();
        let filling = (0..n).map(|_| Vec::with_capacity(BATCH)).collect();
        (DecodeLanes { lanes, filling }, decoded)
    }

    async fn send(&mut self, source: Source, entry: kv::Entry) {
        let lane = lane_of(&entry.key) % self.lanes.len();
        self.filling[lane].push((source, entry));
        if self.filling[lane].len() >= BATCH {
            self.send_batch(lane).await;
        }
    }

    /// Send every batch being filled.
    async fn flush(&mut self) {
        for lane in 0..self.lanes.len() {
            if !self.filling[lane].is_empty() {
                self.send_batch(lane).await;
            }
        }
    }

    async fn send_batch(&mut self, lane: usize) {
        let batch = std::mem::replace(&mut self.filling[lane], Vec::with_capacity(BATCH));
        // A lane ends only when this is dropped.
        let _ = self.lanes[lane].send(batch).await;
    }
}

/// A key's lane: any stable spread will do.
fn lane_of(key: &str) -> usize {
    key.bytes().fold(0usize, |h, b| {
        h.wrapping_mul(31).wrapping_add(usize::from(b))
    })
}
