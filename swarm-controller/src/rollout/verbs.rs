//! `declare --rollout`, `rollout resume` and `rollout abort`: each reads the
//! stored rollout, decides, records its decision by compare-and-set, and
//! only then acts. A lost compare-and-set is never retried blindly: the
//! verb reads what the other controller wrote and backs off.

use std::time::Duration;

use swarm_queue_client::HiveName;
use time::OffsetDateTime;

use crate::age::{human_age, unix_ms};
use crate::declare::{self, HivePlan, Stored as WantedStored};
use crate::fleet::Fleet;
use crate::rollout::drive::{drive, Deps, DriveError, Ended};
use crate::rollout::settings::RolloutSettings;
use crate::rollout::state::{Change, Outcome, Rollout, Step};
use crate::rollout::store::{self, StoreError, Stored};

#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    #[error(transparent)]
    Drive(#[from] DriveError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Rollback(#[from] crate::rollback::RollbackError),
    #[error(transparent)]
    Declare(#[from] declare::DeclareError),
    #[error("{0}; `rollout resume` continues it and `rollout abort` restores its hives")]
    StillOpen(String),
    #[error("no rollout to {verb}: {why}")]
    Nothing { verb: &'static str, why: String },
    #[error("not resuming {line}: it is driven by controller {driver}, whose last write was {age} ago (lease {lease}s)")]
    Driven {
        line: String,
        driver: String,
        age: String,
        lease: u64,
    },
    #[error("another controller changed the rollout first; not advancing it: {0}")]
    LostRace(String),
}

/// `declare --rollout`: record a new rollout of the changed hives of
/// `plans`, then drive it.
pub async fn start(
    deps: &Deps<'_>,
    source: String,
    settings: RolloutSettings,
    plans: &[HivePlan],
) -> Result<Ended, VerbError> {
    let current = store::read(&deps.buckets.rollouts).await?;
    if let Some(s) = current.as_ref().filter(|s| s.rollout.outcome.is_open()) {
        return Err(VerbError::StillOpen(s.rollout.line()));
    }
    let changes: Vec<Change> = plans
        .iter()
        .filter(|p| p.changed)
        .map(|p| Change {
            hive: p.hive.clone(),
            expected_revision: p.expected_revision(),
            had_declaration: matches!(p.previous, WantedStored::Declaration { .. }),
            declaration: p.declaration().clone(),
        })
        .collect();
    let id = format!("r{}", unix_ms(OffsetDateTime::now_utc()));
    let rollout = Rollout::plan(id, source, settings, deps.me.to_string(), changes);
    for (i, wave) in rollout.waves.iter().enumerate() {
        let names: Vec<&str> = wave.iter().map(HiveName::as_str).collect();
        (deps.report)(&format!(
            "wave {} of {}: {}",
            i + 1,
            rollout.waves.len(),
            names.join(", ")
        ));
    }
    let expected = store::revision(&deps.buckets.rollouts).await?;
    let old_parts = current
        .as_ref()
        .map(|s| s.parts.clone())
        .unwrap_or_default();
    let written = store::write(&deps.buckets.rollouts, &rollout, expected, &old_parts).await;
    let (revision, parts) = match written {
        Ok(r) => r,
        Err(StoreError::Conflict { .. }) => {
            return Err(VerbError::LostRace(
                store::winner_line(&deps.buckets.rollouts).await?,
            ));
        }
        Err(e) => return Err(e.into()),
    };
    (deps.report)(&format!("started {}", rollout.line()));
    store::remove_strays(&deps.buckets.rollouts, &parts).await;
    let stored = Stored {
        rollout,
        revision,
        created: OffsetDateTime::now_utc(),
        parts,
    };
    Ok(drive(deps, stored).await?)
}

/// `rollout resume`: continue a halted rollout (its failed hives are judged
/// again and asked to deploy their agents now), or take over a running one
/// whose driver stopped writing for longer than the lease. Either way, and
/// also for a completed one, the hives it skipped for maintenance are
/// written now (those still in maintenance are skipped again).
pub async fn resume(deps: &Deps<'_>) -> Result<Ended, VerbError> {
    let Some(mut stored) = store::read(&deps.buckets.rollouts).await? else {
        return Err(VerbError::Nothing {
            verb: "resume",
            why: "hyperhive-rollouts has none".into(),
        });
    };
    let r = &mut stored.rollout;
    let mut retry = Vec::new();
    let unskipped = unskip(r);
    match &r.outcome {
        Outcome::Halted { .. } => {
            for (hive, t) in r.hives.iter_mut() {
                if t.step == Step::Failed {
                    t.step = Step::Written;
                    retry.push(hive.clone());
                }
            }
            r.wave_started_ms = Some(unix_ms(OffsetDateTime::now_utc()));
        }
        Outcome::Running => {
            let age: Duration = (OffsetDateTime::now_utc() - stored.created)
                .try_into()
                .unwrap_or(Duration::ZERO);
            if age < r.settings.lease() {
                return Err(VerbError::Driven {
                    line: r.line(),
                    driver: r.driver.clone(),
                    age: human_age(age),
                    lease: r.settings.lease_secs,
                });
            }
            (deps.report)(&format!(
                "taking over from controller {} (its last write was {} ago)",
                r.driver,
                human_age(age)
            ));
        }
        Outcome::Completed if unskipped > 0 => {
            (deps.report)(&format!(
                "writing the {unskipped} hive(s) skipped for maintenance, from wave {}",
                r.wave + 1
            ));
        }
        Outcome::Completed | Outcome::Aborted => {
            return Err(VerbError::Nothing {
                verb: "resume",
                why: r.line(),
            })
        }
    }
    r.outcome = Outcome::Running;
    r.driver = deps.me.to_string();
    update_or_back_off(deps, &mut stored).await?;
    (deps.report)(&format!("resumed {}", stored.rollout.line()));
    retry_now(deps, &stored.rollout, &retry).await;
    if !retry.is_empty() {
        // Recorded after the hives queued their jobs: a report at or before
        // this revision may still show the old failure.
        for hive in &retry {
            let at = deps
                .buckets
                .status
                .entry(hive.as_str())
                .await
                .ok()
                .flatten()
                .map(|e| e.revision);
            if let Some(t) = stored.rollout.hives.get_mut(hive) {
                t.retried_at_status = at;
            }
        }
        update_or_back_off(deps, &mut stored).await?;
    }
    Ok(drive(deps, stored).await?)
}

/// Make every hive skipped for maintenance due again (a written one is
/// judged again, an unwritten one written when its wave comes, unless it
/// is still in maintenance), and go back to the first wave holding one.
/// How many there were.
fn unskip(r: &mut Rollout) -> usize {
    let mut count = 0;
    for (i, wave) in r.waves.iter().enumerate() {
        for hive in wave {
            let Some(t) = r.hives.get_mut(hive).filter(|t| t.step == Step::Skipped) else {
                continue;
            };
            t.step = match t.written_revision {
                Some(_) => Step::Written,
                None => Step::Waiting,
            };
            t.reason = None;
            if count == 0 && i < r.wave {
                r.wave = i;
                r.wave_started_ms = None;
            }
            count += 1;
        }
    }
    count
}

/// `rollout abort`: record the rollout aborted, then declare each hive's
/// pre-rollout revision again (from the wanted bucket's history, as
/// `rollback --to`) where the rollout's target is what the hive has now.
pub async fn abort(deps: &Deps<'_>) -> Result<Rollout, VerbError> {
    let mut stored = loop {
        let Some(mut stored) = store::read(&deps.buckets.rollouts).await? else {
            return Err(VerbError::Nothing {
                verb: "abort",
                why: "hyperhive-rollouts has none".into(),
            });
        };
        if !stored.rollout.outcome.is_open() {
            return Err(VerbError::Nothing {
                verb: "abort",
                why: stored.rollout.line(),
            });
        }
        stored.rollout.outcome = Outcome::Aborted;
        stored.rollout.driver = deps.me.to_string();
        match store::update(&deps.buckets.rollouts, &mut stored).await {
            Ok(()) => break stored,
            // A driver recorded progress meanwhile: abort what it wrote too.
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let hives: Vec<HiveName> = stored.rollout.hives.keys().cloned().collect();
    for hive in hives {
        let note = restore_hive(deps, &stored.rollout, &hive).await?;
        if let Some(t) = stored.rollout.hives.get_mut(&hive) {
            if let Some((restored, text)) = note {
                if restored {
                    t.step = Step::Restored;
                }
                (deps.report)(&format!("{hive}: {text}"));
                t.reason = Some(text);
            }
        }
    }
    for _attempt in 0..5 {
        match store::update(&deps.buckets.rollouts, &mut stored).await {
            Ok(()) => break,
            Err(StoreError::Conflict { .. }) => {
                if let Some(again) = store::read(&deps.buckets.rollouts).await? {
                    stored.revision = again.revision;
                    stored.parts = again.parts;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(stored.rollout)
}

/// Restore one hive if the rollout's target is what it holds now. `None`:
/// the rollout never wrote it.
async fn restore_hive(
    deps: &Deps<'_>,
    r: &Rollout,
    hive: &HiveName,
) -> Result<Option<(bool, String)>, VerbError> {
    let Some(t) = r.hives.get(hive) else {
        return Ok(None);
    };
    let plan = match r.target(hive) {
        Some(target) => declare::plan_hive(&deps.buckets.wanted, hive, target).await?,
        None => return Ok(None),
    };
    let current = plan.expected_revision();
    if current == t.expected_revision {
        return Ok(None);
    }
    if plan.changed {
        return Ok(Some((
            false,
            format!(
                "changed outside the rollout since (revision {}); left alone",
                current.map_or("none".into(), |r| r.to_string())
            ),
        )));
    }
    let (true, Some(previous)) = (t.had_declaration, t.expected_revision) else {
        return Ok(Some((
            false,
            "had no declaration before the rollout; left as the rollout wrote it".into(),
        )));
    };
    let (_, plan) =
        crate::rollback::plan(deps.client, &deps.buckets.wanted, hive, Some(previous)).await?;
    let mut plans = vec![plan];
    declare::publish(deps.client, &deps.buckets.wanted, &mut plans).await?;
    Ok(Some((
        true,
        format!("declared revision {previous} again: {}", plans[0].outcome),
    )))
}

/// Record `stored` by compare-and-set; a lost one is [`VerbError::LostRace`]
/// with what the winner wrote, and this verb does nothing more.
async fn update_or_back_off(deps: &Deps<'_>, stored: &mut Stored) -> Result<(), VerbError> {
    match store::update(&deps.buckets.rollouts, stored).await {
        Ok(()) => Ok(()),
        Err(StoreError::Conflict { .. }) => Err(VerbError::LostRace(
            store::winner_line(&deps.buckets.rollouts).await?,
        )),
        Err(e) => Err(e.into()),
    }
}

/// Ask each hive in `hives` to deploy every agent of its target that is not
/// running as declared: a request the hive takes as "try now", so a fixed
/// cause (an image pushed, a registry back) does not wait for its backoff.
async fn retry_now(deps: &Deps<'_>, r: &Rollout, hives: &[HiveName]) {
    if hives.is_empty() {
        return;
    }
    let now = OffsetDateTime::now_utc();
    let fleet = std::sync::RwLock::new(Fleet::new(deps.roster.clone(), deps.stale_after, now));
    if let Err(e) = crate::nats::load(deps.buckets, &fleet).await {
        tracing::warn!(error = %e, "cannot read the fleet to retry failed hives; they retry on their own");
        return;
    }
    // Decide every request first, so no lock is held across a request.
    let mut requests = Vec::new();
    {
        let f = fleet.read().unwrap_or_else(|p| p.into_inner());
        for hive in hives {
            let Some(target) = r.target(hive) else {
                continue;
            };
            let row = f.peek_row(hive.as_str(), now);
            for agent in target.agents.keys() {
                let as_declared = row.as_ref().is_some_and(|row| {
                    row.agents
                        .iter()
                        .any(|a| a.name == agent.as_str() && a.spec_matches == Some(true))
                });
                if !as_declared {
                    requests.push((hive.clone(), agent.clone()));
                }
            }
        }
    }
    for (hive, agent) in requests {
        let outcome =
            crate::deploy::request(deps.client, &hive, &agent, Duration::from_secs(10)).await;
        (deps.report)(&format!("retry {hive}/{agent}: {outcome}"));
    }
}
