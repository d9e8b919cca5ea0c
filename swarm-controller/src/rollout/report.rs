//! What a rollout shows, the same to both faces: `rollout status --json`
//! and `status --json` on the command line, `/api/rollout` in `serve`.

use std::time::Duration;

use time::OffsetDateTime;

use super::store;

/// `rollout status --json` and `/api/rollout?hives=true`: the
/// [`summary_json`], and every wave's hives and each hive's row of the plan.
pub fn status_json(stored: Option<&store::Stored>, now: OffsetDateTime) -> serde_json::Value {
    let mut v = summary_json(stored, now);
    if let (Some(map), Some(s)) = (v.as_object_mut(), stored) {
        map.insert("waves".into(), serde_json::json!(s.rollout.waves));
        map.insert("hives".into(), serde_json::json!(s.rollout.hives));
    }
    v
}

/// The rollout without its hives: the plan's settings, where it stands,
/// the wave sizes, the counts and the line, and how old its last write is.
/// What `status --json` and the dashboard (`/api/rollout`) show: a rollout
/// over 10,000 hives is a few MB with them, a few hundred bytes without.
pub fn summary_json(stored: Option<&store::Stored>, now: OffsetDateTime) -> serde_json::Value {
    #[derive(serde::Serialize)]
    struct Summary<'a> {
        schema: u32,
        id: &'a str,
        source: &'a str,
        settings: &'a crate::rollout::settings::RolloutSettings,
        wave: usize,
        wave_started_ms: Option<i64>,
        driver: &'a str,
        #[serde(flatten)]
        outcome: &'a crate::rollout::state::Outcome,
        wave_sizes: Vec<usize>,
        wave_count: usize,
        counts: crate::rollout::state::Counts,
        line: String,
        revision: u64,
        written_ms_ago: u64,
    }
    let Some(s) = stored else {
        return serde_json::Value::Null;
    };
    let r = &s.rollout;
    let age: Duration = (now - s.created).try_into().unwrap_or(Duration::ZERO);
    serde_json::to_value(Summary {
        schema: r.schema,
        id: &r.id,
        source: &r.source,
        settings: &r.settings,
        wave: r.wave,
        wave_started_ms: r.wave_started_ms,
        driver: &r.driver,
        outcome: &r.outcome,
        wave_sizes: r.waves.iter().map(Vec::len).collect(),
        wave_count: r.waves.len(),
        counts: r.counts(),
        line: r.line(),
        revision: s.revision,
        written_ms_ago: age.as_millis() as u64,
    })
    .unwrap_or(serde_json::Value::Null)
}
