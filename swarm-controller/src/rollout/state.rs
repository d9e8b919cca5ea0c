//! A rollout's state (stored in `hyperhive-rollouts` as a head and parts:
//! `parts.rs`), and the decisions made on it (pure).
//!
//! The state is the whole plan: every hive's target declaration (by value
//! hash; each distinct declaration is stored once), the KV revision of
//! `hyperhive-wanted/<hive>` the write expects, the waves, the wave in
//! progress and the outcome. A controller that reads it needs nothing else
//! to carry on, which is what makes a rollout resumable by any controller.
//!
//! [`judge_wave`] is the heart: from each written hive's row (the
//! controller's own convergence evaluation, `evaluate.rs`) it says whether
//! the wave is done, still waiting, or must halt, and never says "done" for
//! a hive whose row does not say fresh and converged on the revision the
//! rollout wrote.
//!
//! A hive in maintenance is `skipped`: never written while its hold is in
//! force, never waited for, never counted as failed. The wave goes on
//! without it, and `rollout resume` (or the next rollout) writes it once
//! its maintenance has ended.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use swarm_queue_client::{Declaration, HiveName, Unsettled};

use crate::evaluate::{Convergence, Freshness, HiveRow};
use crate::rollout::settings::RolloutSettings;

/// The rollout state's own schema version. 1: the whole state in the one
/// value `current`; 2: a head naming parts (`parts.rs`). Both are read.
pub const ROLLOUT_SCHEMA: u32 = 2;

/// A short, stable hash of a declaration's value.
pub fn value_hash(declaration: &Declaration) -> String {
    let bytes = serde_json::to_vec(declaration).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}

/// Where one hive of the rollout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// Not written yet: its declaration is what it was before the rollout.
    Waiting,
    /// Its target is published; waiting for it to converge.
    Written,
    /// Fresh and converged on the written revision.
    Done,
    /// Failed or degraded on the written revision.
    Failed,
    /// Its previous declaration was declared again by `abort`.
    Restored,
    /// In maintenance when its wave came (or while its wave waited): not
    /// written, not waited for; `rollout resume` writes it later.
    Skipped,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Waiting => "waiting",
            Step::Written => "written",
            Step::Done => "done",
            Step::Failed => "failed",
            Step::Restored => "restored",
            Step::Skipped => "skipped",
        }
    }
}

/// One hive's part of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HiveTarget {
    /// [`value_hash`] of the declaration to publish (a key of
    /// [`Rollout::declarations`]).
    pub target: String,
    /// The revision of `hyperhive-wanted/<hive>` when the rollout was
    /// planned: what the compare-and-set write expects, and what `abort`
    /// declares again.
    pub expected_revision: Option<u64>,
    /// Whether that revision holds a declaration `abort` can restore.
    pub had_declaration: bool,
    /// The revision the rollout's write got.
    pub written_revision: Option<u64>,
    pub step: Step,
    /// Why it failed, or a note from `abort`.
    pub reason: Option<String>,
    /// After a `resume`, the hive's status revision when it was asked to
    /// try again. Reports of the old failure go on for a while after that
    /// (until the hive picks the new job up), so such a hive halts the
    /// rollout only when the wave's `wait_converged_secs` runs out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_at_status: Option<u64>,
    /// While it soaks: since when it has been seen converged, with how many
    /// agent exits (see [`judge_wave`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<Soak>,
}

/// A written hive seen converged and not yet done: it must stay so for the
/// rollout's `min_converged_secs` with no exit of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Soak {
    /// When it was first seen converged (ms since the epoch, by the
    /// driving controller's clock, as `wave_started_ms`).
    pub since_ms: i64,
    /// The exits its row counted then, summed over its declared agents
    /// (each since its spec changed): a larger count is an exit since.
    pub exits: u64,
}

/// How the rollout stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Outcome {
    Running,
    Halted {
        /// The wave (0-based) that halted.
        halted_wave: usize,
        hive: Option<HiveName>,
        reason: String,
    },
    Completed,
    Aborted,
}

impl Outcome {
    /// Whether the rollout still holds its hives (a new one is refused).
    pub fn is_open(&self) -> bool {
        matches!(self, Outcome::Running | Outcome::Halted { .. })
    }
}

/// A whole rollout (schema 1 stored exactly this in `current`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    pub schema: u32,
    /// Unique per rollout (`r<unix ms>`), for messages.
    pub id: String,
    /// The swarm file it came from.
    pub source: String,
    pub settings: RolloutSettings,
    /// Hives in wave order; wave 0 first.
    pub waves: Vec<Vec<HiveName>>,
    /// The wave being written or waited on; `waves.len()` when all are done.
    pub wave: usize,
    /// When the current wave's writes were recorded (ms since the epoch, by
    /// the driving controller's clock): the start of its wait.
    pub wave_started_ms: Option<i64>,
    /// The controller instance driving it; another one takes it over only
    /// through `resume`, once the state is older than the lease.
    pub driver: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub hives: BTreeMap<HiveName, HiveTarget>,
    /// Each distinct target declaration, by its value hash.
    pub declarations: BTreeMap<String, Declaration>,
}

/// One changed hive, as `declare --rollout` plans it.
#[derive(Debug, Clone)]
pub struct Change {
    pub hive: HiveName,
    pub expected_revision: Option<u64>,
    pub had_declaration: bool,
    pub declaration: Declaration,
}

/// What the rows of the written hives say about the current wave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every hive of the wave is done (or failed within `max_failed`).
    Done,
    /// Still waiting on these hives, with each one's reason.
    Waiting(Vec<(HiveName, String)>),
    /// More than `max_failed` hives failed; the first one and why.
    Halt { hive: HiveName, reason: String },
}

/// Counts for `status` and the dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub done: usize,
    pub written: usize,
    pub waiting: usize,
    pub failed: usize,
    pub restored: usize,
    pub skipped: usize,
}

impl Rollout {
    /// A new running rollout of `changes` (in rollout order), driven by
    /// `driver`.
    pub fn plan(
        id: String,
        source: String,
        settings: RolloutSettings,
        driver: String,
        changes: Vec<Change>,
    ) -> Rollout {
        let order: Vec<HiveName> = changes.iter().map(|c| c.hive.clone()).collect();
        let waves = crate::rollout::settings::split(&order, &settings.waves);
        let mut hives = BTreeMap::new();
        let mut declarations = BTreeMap::new();
        for c in changes {
            let target = value_hash(&c.declaration);
            declarations.entry(target.clone()).or_insert(c.declaration);
            hives.insert(
                c.hive,
                HiveTarget {
                    target,
                    expected_revision: c.expected_revision,
                    had_declaration: c.had_declaration,
                    written_revision: None,
                    step: Step::Waiting,
                    reason: None,
                    retried_at_status: None,
                    soak: None,
                },
            );
        }
        Rollout {
            schema: ROLLOUT_SCHEMA,
            id,
            source,
            settings,
            waves,
            wave: 0,
            wave_started_ms: None,
            driver,
            outcome: Outcome::Running,
            hives,
            declarations,
        }
    }

    /// The target declaration of `hive`.
    pub fn target(&self, hive: &HiveName) -> Option<&Declaration> {
        self.declarations.get(&self.hives.get(hive)?.target)
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for t in self.hives.values() {
            match t.step {
                Step::Done => c.done += 1,
                Step::Written => c.written += 1,
                Step::Waiting => c.waiting += 1,
                Step::Failed => c.failed += 1,
                Step::Restored => c.restored += 1,
                Step::Skipped => c.skipped += 1,
            }
        }
        c
    }

    /// One line for people: "rollout r1 (swarm.toml): running, wave 2 of 3:
    /// 1 done, 2 written, 3 waiting, 0 failed".
    pub fn line(&self) -> String {
        let c = self.counts();
        let n = self.waves.len();
        let k = (self.wave + 1).min(n);
        let head = format!("rollout {} ({})", self.id, self.source);
        let mut counts = format!(
            "{} done, {} written, {} waiting, {} failed",
            c.done, c.written, c.waiting, c.failed
        );
        if c.skipped > 0 {
            counts.push_str(&format!(
                ", {} skipped (in maintenance; `rollout resume` writes them once it ends)",
                c.skipped
            ));
        }
        match &self.outcome {
            Outcome::Running => format!("{head}: running, wave {k} of {n}: {counts}"),
            Outcome::Halted {
                halted_wave,
                hive,
                reason,
            } => {
                let who = hive
                    .as_ref()
                    .map(|h| format!("hive {h}: "))
                    .unwrap_or_default();
                format!(
                    "{head}: halted at wave {} of {n}: {who}{reason} ({counts})",
                    halted_wave + 1
                )
            }
            Outcome::Completed => format!("{head}: completed, {n} waves: {counts}"),
            Outcome::Aborted => format!(
                "{head}: aborted at wave {k} of {n}: {} restored, {counts}",
                c.restored
            ),
        }
    }
}

/// Judge the current wave from the rows of the rollout's hives (`row`
/// gives the controller's row of a hive, None when it has none) at `now_ms`
/// (the driver's clock), and mark each written hive done or failed. Hives
/// of earlier waves are judged again: one that turns degraded, or whose
/// agent crash-loops, later still counts as failed.
///
/// A hive is done only after its row said fresh and converged on the
/// written revision for `min_converged_secs` on end, with no exit of an
/// agent in between ([`Soak`]); an exit starts the soak again, and an agent
/// the hive holds in a crash-loop delay fails the hive.
pub fn judge_wave<R: Borrow<HiveRow>>(
    rollout: &mut Rollout,
    now_ms: i64,
    row: impl Fn(&HiveName) -> Option<R>,
) -> Verdict {
    let written = due(rollout);
    let soak_ms = rollout.settings.min_converged().as_millis() as i64;
    let mut waiting = Vec::new();
    for hive in &written {
        let Some(t) = rollout.hives.get_mut(hive) else {
            continue;
        };
        if passed_by(t, row(hive).as_ref().map(Borrow::borrow)) {
            continue;
        }
        let Some(revision) = t.written_revision else {
            waiting.push((hive.clone(), "not written yet".into()));
            continue;
        };
        let judged = row(hive).map(|r| {
            let r = r.borrow();
            match judge_hive(r, revision) {
                // Reports of the old failure keep coming until the retried
                // job is picked up, so after a resume only the wave's
                // deadline halts.
                HiveJudgement::Failed(why) if t.retried_at_status.is_some() => {
                    HiveJudgement::Waiting(format!("asked to try again after a resume; {why}"))
                }
                HiveJudgement::Done if t.step != Step::Done => soak(t, r, now_ms, soak_ms),
                j => j,
            }
        });
        match judged {
            Some(HiveJudgement::Done) => {
                t.step = Step::Done;
                t.reason = None;
                t.soak = None;
            }
            Some(HiveJudgement::Failed(reason)) => {
                t.step = Step::Failed;
                t.reason = Some(reason);
                t.soak = None;
            }
            Some(HiveJudgement::Soaking(reason)) => {
                t.step = Step::Written;
                waiting.push((hive.clone(), reason));
            }
            Some(HiveJudgement::Waiting(reason)) => {
                // A done hive that is only progressing again (a new status
                // on its way) keeps its step; the wave waits on the others.
                if t.step != Step::Done {
                    t.step = Step::Written;
                    t.soak = None;
                    waiting.push((hive.clone(), reason));
                }
            }
            None => {
                t.step = Step::Written;
                t.soak = None;
                waiting.push((hive.clone(), "the controller has no row for it".into()));
            }
        }
    }
    let failed: Vec<(HiveName, String)> = rollout
        .hives
        .iter()
        .filter(|(_, t)| t.step == Step::Failed)
        .map(|(h, t)| (h.clone(), t.reason.clone().unwrap_or_default()))
        .collect();
    if failed.len() > rollout.settings.max_failed {
        if let Some((hive, reason)) = failed.into_iter().next() {
            return Verdict::Halt { hive, reason };
        }
    }
    if waiting.is_empty() {
        Verdict::Done
    } else {
        Verdict::Waiting(waiting)
    }
}

/// The hives of the current wave and every wave before it.
fn due(rollout: &Rollout) -> Vec<HiveName> {
    let upto = (rollout.wave + 1).min(rollout.waves.len());
    rollout.waves[..upto].iter().flatten().cloned().collect()
}

/// Whether the wave passes `t` by: skipped for maintenance already, or in
/// maintenance now, when what its row says is no verdict on the rollout (a
/// done hive stays done, any other is skipped).
fn passed_by(t: &mut HiveTarget, row: Option<&HiveRow>) -> bool {
    if t.step == Step::Skipped {
        return true;
    }
    let Some(hold) = row.and_then(|r| r.maintenance.as_ref()) else {
        return false;
    };
    if t.step != Step::Done {
        t.step = Step::Skipped;
        t.reason = Some(format!("in maintenance {}", hold.line()));
        t.soak = None;
    }
    true
}

enum HiveJudgement {
    Done,
    Failed(String),
    /// Converged, and holding it for `min_converged_secs`.
    Soaking(String),
    Waiting(String),
}

/// One hive's row against the revision the rollout wrote for it.
fn judge_hive(row: &HiveRow, revision: u64) -> HiveJudgement {
    if row.declared_revision != Some(revision) {
        return match row.declared_revision {
            Some(r) if r > revision => HiveJudgement::Failed(format!(
                "its declaration was replaced outside the rollout (revision {r}, the rollout wrote {revision})"
            )),
            _ => HiveJudgement::Waiting(format!(
                "the controller has not seen revision {revision} yet"
            )),
        };
    }
    if let Some(why) = crash_loop(row) {
        return HiveJudgement::Failed(why);
    }
    match row.convergence {
        Convergence::Converged if row.freshness == Freshness::Fresh => HiveJudgement::Done,
        Convergence::Failed | Convergence::Degraded => {
            HiveJudgement::Failed(format!("{}: {}", row.convergence, row.reason))
        }
        _ => HiveJudgement::Waiting(format!("{}: {}", row.convergence, row.reason)),
    }
}

/// The first declared agent the hive holds in a crash-loop delay, in
/// words with its exit evidence: "agent a is crash-looping: stopped (wanted
/// up), crash loop: exited 3 (2 times in 41s), next start in 10s".
fn crash_loop(row: &HiveRow) -> Option<String> {
    let a = row
        .agents
        .iter()
        .find(|a| a.declared && a.unsettled == Some(Unsettled::Backoff))?;
    let note = a
        .note
        .as_deref()
        .unwrap_or("waiting out a crash-loop delay");
    Some(format!("agent {} is crash-looping: {note}", a.name))
}

/// Exits of the declared agents of `row`, each counted since its spec
/// last changed.
fn exits(row: &HiveRow) -> u64 {
    let declared = row.agents.iter().filter(|a| a.declared);
    declared
        .filter_map(|a| a.exits.as_ref())
        .map(|e| u64::from(e.count))
        .sum()
}

/// A converged hive's soak: done once it has held for `soak_ms` with the
/// same exit count; an exit (a larger or reset count) starts it again.
fn soak(t: &mut HiveTarget, row: &HiveRow, now_ms: i64, soak_ms: i64) -> HiveJudgement {
    if soak_ms == 0 {
        return HiveJudgement::Done;
    }
    let count = exits(row);
    let secs = soak_ms / 1000;
    match t.soak {
        Some(s) if s.exits == count => {
            let held = (now_ms - s.since_ms).max(0);
            if held >= soak_ms {
                return HiveJudgement::Done;
            }
            HiveJudgement::Soaking(format!(
                "converged, holding it: {}s of min_converged_secs {secs}",
                held / 1000
            ))
        }
        seen => {
            t.soak = Some(Soak {
                since_ms: now_ms,
                exits: count,
            });
            HiveJudgement::Soaking(match seen {
                Some(s) => format!(
                    "an agent exited while it held converged ({} exits, {count} now); \
                     holding it again: 0s of min_converged_secs {secs}",
                    s.exits
                ),
                None => format!("converged, holding it: 0s of min_converged_secs {secs}"),
            })
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
