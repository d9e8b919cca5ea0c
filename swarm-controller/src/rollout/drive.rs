//! Driving a rollout: write a wave's hives, wait until the controller's own
//! rows say they converged, record, go on to the next wave.
//!
//! The driver holds the fleet picture the way `status --watch` does (a KV
//! watch on the status and wanted buckets into a [`Fleet`]), so each wave is
//! judged by exactly the evaluation `status` shows. Everything it decides is
//! recorded in `hyperhive-rollouts/current` by compare-and-set before it acts
//! on the next wave; a lost compare-and-set means another controller took
//! the rollout over (or aborted it), and the driver stops.
//!
//! A hive is written at most once per rollout: the write of
//! `hyperhive-wanted/<hive>` is itself a compare-and-set on the revision the
//! plan read, and a driver that finds the key already holding its target
//! (written by a driver that was killed before it recorded the write) takes
//! that revision as the write instead of writing again.
//!
//! A hive whose maintenance hold is in force when its wave is written
//! (read from `hyperhive-maintenance` just before) is not written: it is
//! recorded `skipped` and its wave does not wait for it.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use swarm_queue_client::{decode, encode_pretty, Declaration, HiveName};
use time::OffsetDateTime;

use crate::age::unix_ms;
use crate::cas::CasError;
use crate::config::Roster;
use crate::evaluate::HiveRow;
use crate::fleet::{Change, Fleet};
use crate::nats::{self, Buckets, NatsError};
use crate::rollout::state::{judge_wave, Outcome, Rollout, Step, Verdict};
use crate::rollout::store::{self, StoreError, Stored};

/// What the driver needs.
pub struct Deps<'a> {
    pub client: &'a async_nats::Client,
    pub buckets: &'a Buckets,
    pub roster: &'a Roster,
    pub stale_after: Duration,
    /// This controller instance's id, recorded as the rollout's driver.
    pub me: &'a str,
    /// Where progress lines go (stdout for the CLI).
    pub report: &'a (dyn Fn(&str) + Sync),
}

/// How driving ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Completed,
    Halted {
        hive: Option<HiveName>,
        reason: String,
    },
    /// Another controller holds the rollout now (it took it over, or aborted it).
    Lost {
        line: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Nats(#[from] NatsError),
    #[error("cannot write hyperhive-wanted/{hive}: {reason}")]
    Wanted { hive: HiveName, reason: String },
    #[error(transparent)]
    Maintenance(#[from] crate::maintenance::store::MaintenanceError),
}

/// Drive `stored` (a running rollout whose driver is `deps.me`) until it
/// completes, halts, or another controller takes it.
pub async fn drive(deps: &Deps<'_>, mut stored: Stored) -> Result<Ended, DriveError> {
    let now = OffsetDateTime::now_utc();
    let fleet = RwLock::new(Fleet::new(deps.roster.clone(), deps.stale_after, now));
    let mut follower = nats::load(deps.buckets, &fleet).await?;
    let mut rows = Rows::new(&fleet.read().unwrap_or_else(|p| p.into_inner()), now);
    loop {
        if let Some(ended) = settled(&stored.rollout, deps.me) {
            return Ok(ended);
        }
        let r = &mut stored.rollout;
        let n = r.waves.len();
        if r.wave >= n {
            r.outcome = Outcome::Completed;
            if !save(deps, &mut stored).await? {
                continue;
            }
            (deps.report)(&stored.rollout.line());
            return Ok(Ended::Completed);
        }
        if let Some(halt) = write_wave(deps, r).await? {
            r.outcome = halt;
            save(deps, &mut stored).await?;
            continue;
        }
        if !save(deps, &mut stored).await? {
            continue;
        }
        wait_wave(deps, &mut stored, &fleet, &mut follower, &mut rows).await?;
    }
}

/// The end of driving, when the stored rollout is no longer ours to drive.
fn settled(r: &Rollout, me: &str) -> Option<Ended> {
    if r.driver != me {
        return Some(Ended::Lost { line: r.line() });
    }
    match &r.outcome {
        Outcome::Running => None,
        Outcome::Completed => Some(Ended::Completed),
        Outcome::Halted { hive, reason, .. } => Some(Ended::Halted {
            hive: hive.clone(),
            reason: reason.clone(),
        }),
        Outcome::Aborted => Some(Ended::Lost { line: r.line() }),
    }
}

/// Record `stored.rollout` by compare-and-set. `false`: another controller
/// wrote first; `stored` now holds what it wrote.
async fn save(deps: &Deps<'_>, stored: &mut Stored) -> Result<bool, DriveError> {
    match store::update(&deps.buckets.rollouts, stored).await {
        Ok(()) => Ok(true),
        Err(StoreError::Conflict { .. }) => {
            tracing::info!("the rollout changed under us; reading it again");
            match store::read(&deps.buckets.rollouts).await? {
                Some(again) => *stored = again,
                None => {
                    stored.rollout.driver = String::from("(the rollout state was removed)");
                }
            }
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Hives of a wave written at the same time.
const WRITES_IN_FLIGHT: usize = 64;

/// Write every hive of the current wave not written yet, [`WRITES_IN_FLIGHT`]
/// at a time (each is its own compare-and-set; a wave of 9,000 written one
/// after another took 6 s). `Some(halt)` when one cannot be written because
/// its declaration changed outside the rollout: the writes of its batch
/// that succeeded are recorded, and no later batch is started.
async fn write_wave(deps: &Deps<'_>, r: &mut Rollout) -> Result<Option<Outcome>, DriveError> {
    let wave = r.wave;
    skip_held(deps, r).await?;
    let todo: Vec<(HiveName, Declaration, Option<u64>)> = r.waves[wave]
        .iter()
        .filter_map(|hive| {
            let t = r
                .hives
                .get(hive)
                .filter(|t| t.written_revision.is_none() && t.step != Step::Skipped)?;
            Some((hive.clone(), r.target(hive)?.clone(), t.expected_revision))
        })
        .collect();
    let mut wrote = Vec::new();
    let mut halt = None;
    for batch in todo.chunks(WRITES_IN_FLIGHT) {
        let writes = batch.iter().map(|(hive, target, expected)| async move {
            (
                hive,
                write_hive(&deps.buckets.wanted, hive, target, *expected).await,
            )
        });
        for (hive, result) in futures_util::future::join_all(writes).await {
            match result? {
                Ok(revision) => {
                    if let Some(t) = r.hives.get_mut(hive) {
                        t.written_revision = Some(revision);
                        t.step = Step::Written;
                    }
                    wrote.push(format!("{hive} (revision {revision})"));
                }
                Err(changed) => {
                    halt.get_or_insert(Outcome::Halted {
                        halted_wave: wave,
                        hive: Some(hive.clone()),
                        reason: changed.to_string(),
                    });
                }
            }
        }
        if halt.is_some() {
            break;
        }
    }
    if !wrote.is_empty() {
        r.wave_started_ms = Some(unix_ms(OffsetDateTime::now_utc()));
        (deps.report)(&format!(
            "wave {} of {}: wrote {}",
            wave + 1,
            r.waves.len(),
            wrote.join(", ")
        ));
    } else if r.wave_started_ms.is_none() {
        r.wave_started_ms = Some(unix_ms(OffsetDateTime::now_utc()));
    }
    Ok(halt)
}

/// Mark every hive of the current wave not written yet whose maintenance
/// hold is in force `skipped`, with the hold as its reason.
async fn skip_held(deps: &Deps<'_>, r: &mut Rollout) -> Result<(), DriveError> {
    let holds = crate::maintenance::store::read_all(&deps.buckets.maintenance).await?;
    let now = OffsetDateTime::now_utc();
    let (wave, n) = (r.wave, r.waves.len());
    for hive in &r.waves[wave] {
        let Some(hold) = holds.get(hive.as_str()).and_then(|h| h.active(now)) else {
            continue;
        };
        let Some(t) = r.hives.get_mut(hive) else {
            continue;
        };
        if t.written_revision.is_none() && t.step != Step::Skipped {
            t.step = Step::Skipped;
            t.reason = Some(format!("in maintenance {}", hold.line()));
            (deps.report)(&format!(
                "wave {} of {n}: skipped {hive}: in maintenance {}",
                wave + 1,
                hold.line()
            ));
        }
    }
    Ok(())
}

/// A hive's wanted key that moved away from the revision the rollout planned
/// against, to something other than the rollout's target: the rollout halts.
#[derive(Debug, thiserror::Error)]
#[error(
    "hyperhive-wanted/{hive} changed outside the rollout (revision {}, planned against {})",
    revision_text(*current),
    revision_text(*expected)
)]
struct ChangedOutside {
    hive: HiveName,
    current: Option<u64>,
    expected: Option<u64>,
}

fn revision_text(revision: Option<u64>) -> String {
    revision.map_or("none".into(), |r| r.to_string())
}

/// Publish `target` for `hive` if its key is still at `expected`; the
/// revision written, or adopted when the key already holds the target.
/// `Ok(Err(_))`: the key changed to something else outside the rollout.
async fn write_hive(
    wanted: &kv::Store,
    hive: &HiveName,
    target: &Declaration,
    expected: Option<u64>,
) -> Result<Result<u64, ChangedOutside>, DriveError> {
    let fail = |reason: String| DriveError::Wanted {
        hive: hive.clone(),
        reason,
    };
    let bytes = encode_pretty(target).map_err(|e| fail(e.to_string()))?;
    for _attempt in 0..3 {
        let entry = wanted
            .entry(hive.as_str())
            .await
            .map_err(|e| fail(e.to_string()))?;
        let current = entry.as_ref().map(|e| e.revision);
        if current != expected {
            let holds_target = entry.as_ref().is_some_and(|e| {
                e.operation == Operation::Put
                    && decode::<Declaration>(&e.value).is_ok_and(|d| &d.value == target)
            });
            return Ok(match (holds_target, current) {
                (true, Some(revision)) => {
                    tracing::info!(%hive, revision, "already holds the rollout's target; not writing it again");
                    Ok(revision)
                }
                _ => Err(ChangedOutside {
                    hive: hive.clone(),
                    current,
                    expected,
                }),
            });
        }
        let result =
            crate::cas::write_if(wanted, hive.as_str(), Bytes::from(bytes.clone()), expected).await;
        match result {
            Ok(revision) => return Ok(Ok(revision)),
            // Someone wrote between our read and our write: look again.
            Err(CasError::Conflict) => continue,
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    Err(fail("the key kept changing under us".into()))
}

/// Wait until the current wave is judged done (advance), must halt, or
/// runs out of time; renew the lease by saving on a timer.
async fn wait_wave(
    deps: &Deps<'_>,
    stored: &mut Stored,
    fleet: &RwLock<Fleet>,
    follower: &mut nats::Follower,
    rows: &mut Rows,
) -> Result<(), DriveError> {
    let heartbeat = (stored.rollout.settings.lease() / 3).max(Duration::from_millis(200));
    let mut last_save = tokio::time::Instant::now();
    loop {
        let now = OffsetDateTime::now_utc();
        let r = &mut stored.rollout;
        let verdict = judge_wave(r, unix_ms(now), |h| rows.get(h));
        let wave = r.wave;
        let n = r.waves.len();
        let started = r.wave_started_ms.unwrap_or_else(|| unix_ms(now));
        let waited = Duration::from_millis((unix_ms(now) - started).max(0) as u64);
        let halt = match verdict {
            Verdict::Done => {
                let line = done_line(r);
                r.wave += 1;
                r.wave_started_ms = None;
                if save(deps, stored).await? {
                    (deps.report)(&line);
                }
                return Ok(());
            }
            Verdict::Halt { hive, reason } => Some((hive, reason)),
            Verdict::Waiting(list) if waited > r.settings.wait_converged() => {
                list.into_iter().next().map(|(hive, why)| {
                    let secs = r.settings.wait_converged_secs;
                    (hive, format!("did not converge within {secs}s: {why}"))
                })
            }
            Verdict::Waiting(_) => None,
        };
        if let Some((hive, reason)) = halt {
            (deps.report)(&format!(
                "wave {} of {n}: halted: hive {hive} {reason}",
                wave + 1
            ));
            r.outcome = Outcome::Halted {
                halted_wave: wave,
                hive: Some(hive),
                reason,
            };
            save(deps, stored).await?;
            return Ok(());
        }
        let until_deadline = r.settings.wait_converged().saturating_sub(waited);
        if last_save.elapsed() >= heartbeat {
            last_save = tokio::time::Instant::now();
            if !save(deps, stored).await? {
                return Ok(());
            }
        }
        let pause = heartbeat
            .saturating_sub(last_save.elapsed())
            .min(until_deadline + Duration::from_millis(5))
            .min(Duration::from_secs(1));
        tokio::select! {
            // Cancel-safe: an entry not yet taken stays in the watch.
            change = follower.apply_next(fleet) => {
                rows.take(change);
                drain(follower, fleet, rows);
            }
            // Cancel-safe: a sleep holds nothing. Rows turn stale with time alone.
            _ = tokio::time::sleep(pause) => {
                let due = fleet.write().unwrap_or_else(|p| p.into_inner()).expire(OffsetDateTime::now_utc());
                due.into_iter().for_each(|c| rows.take(c));
            }
        }
    }
}

/// "wave 2 of 3: every hive converged and held it for 2s (1 skipped: in
/// maintenance)", said when the current wave is done.
fn done_line(r: &Rollout) -> String {
    let (wave, n) = (r.wave + 1, r.waves.len());
    let mut line = match r.settings.min_converged_secs {
        0 => format!("wave {wave} of {n}: every hive converged"),
        s => format!("wave {wave} of {n}: every hive converged and held it for {s}s"),
    };
    let skipped = r.waves[r.wave]
        .iter()
        .filter(|h| r.hives.get(*h).is_some_and(|t| t.step == Step::Skipped))
        .count();
    if skipped > 0 {
        line.push_str(&format!(" ({skipped} skipped: in maintenance)"));
    }
    line
}

/// The most entries applied between two judgements of a wave.
const DRAIN_MAX: usize = 4096;

/// Apply every entry the watches already hold (up to [`DRAIN_MAX`]) before
/// the wave is judged again: a judgement looks at every written hive, so
/// judging once per entry costs O(hives) per status of a wave of thousands.
fn drain(follower: &mut nats::Follower, fleet: &RwLock<Fleet>, rows: &mut Rows) {
    use futures_util::FutureExt;
    for _ in 0..DRAIN_MAX {
        // Cancel-safe (as above): an entry not ready is left in the watch.
        match follower.apply_next(fleet).now_or_never() {
            Some(change) => rows.take(change),
            None => break,
        }
    }
}

/// Each hive's row as the fleet last evaluated it (when its entry was
/// applied, or when it turned stale), so that judging a wave evaluates no
/// row again: the same rows `status --watch` shows.
struct Rows(HashMap<String, HiveRow>);

impl Rows {
    fn new(fleet: &Fleet, now: OffsetDateTime) -> Rows {
        let rows = fleet
            .peek_rows(now)
            .into_iter()
            .map(|v| (v.row.name.clone(), v.row));
        Rows(rows.collect())
    }

    fn take(&mut self, change: Change) {
        match change.row {
            Some(v) => {
                self.0.insert(change.name, v.row);
            }
            None => {
                self.0.remove(&change.name);
            }
        }
    }

    fn get(&self, hive: &HiveName) -> Option<&HiveRow> {
        self.0.get(hive.as_str())
    }
}
