//! Cutting a rollout's state into values that each fit a KV value, and
//! putting it together again (pure; [`super::store`] does the reads and
//! writes).
//!
//! A rollout over 10,000 hives is a few MB of state, and one KV value holds
//! 512 KiB. So the state is stored as a small head (the plan's settings,
//! where it stands, the wave sizes, and a reference to every part) and two
//! kinds of part, each under [`PART_BUDGET`] bytes:
//!
//! - hive parts (`current.<writer>.h<k>`): the hives' rows in rollout order
//!   (wave 0 first), so the waves are the head's wave sizes laid over that
//!   order;
//! - declaration parts (`current.<writer>.d<k>`): the distinct target
//!   declarations by value hash. They do not change during a rollout, so
//!   each writer writes them once.
//!
//! `<writer>` is the writing controller's instance ([`writer_tag`]): two
//! controllers never write the same part key.
//!
//! A part is referred to by its key, the KV revision it was written at, and
//! a hash of its bytes: a part whose bytes did not change is not written
//! again, and a reader reads each part at exactly the revision the head
//! names and checks its hash.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use swarm_queue_client::buckets::CURRENT_ROLLOUT_KEY;
use swarm_queue_client::{Declaration, HiveName};

use crate::rollout::settings::RolloutSettings;
use crate::rollout::state::{HiveTarget, Outcome, Rollout, ROLLOUT_SCHEMA};

/// The most bytes one part holds (half a KV value: room for one hive whose
/// row or declaration is unusually large).
pub const PART_BUDGET: usize = 256 * 1024;

/// Where one part is stored, and what it held when written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    pub key: String,
    pub revision: u64,
    /// [`bytes_hash`] of the value written.
    pub hash: String,
}

/// The parts a head names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    pub hives: Vec<PartRef>,
    pub declarations: Vec<PartRef>,
}

impl Parts {
    /// Every part key named.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.hives
            .iter()
            .chain(&self.declarations)
            .map(|p| p.key.as_str())
    }
}

/// The value of `hyperhive-rollouts/current`: the rollout without its
/// per-hive rows and declarations, which are in the parts it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub schema: u32,
    pub id: String,
    pub source: String,
    pub settings: RolloutSettings,
    /// How many hives each wave has, in order; the hives themselves are the
    /// hive parts' rows in that order.
    pub wave_sizes: Vec<usize>,
    pub wave: usize,
    pub wave_started_ms: Option<i64>,
    pub driver: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub parts: Parts,
}

/// One hive part: rows in rollout order.
#[derive(Debug, Deserialize)]
pub struct HivePart {
    pub hives: Vec<(HiveName, HiveTarget)>,
}

/// One declaration part.
#[derive(Debug, Deserialize)]
pub struct DeclarationPart {
    pub declarations: BTreeMap<String, Declaration>,
}

/// A rollout cut into the values to store: the head (its `parts` still to
/// be filled in with the written revisions) and each part's bytes.
#[derive(Debug)]
pub struct Cut {
    pub head: Head,
    pub hives: Vec<Vec<u8>>,
    pub declarations: Vec<Vec<u8>>,
}

/// The key of hive part `k` or declaration part `k` as written by the
/// controller whose [`writer_tag`] is `tag`. Each writer writes only keys of
/// its own, so a controller that loses the head's compare-and-set never
/// overwrites a part the winning head names, whatever the bucket's history.
pub fn hive_part_key(tag: &str, k: usize) -> String {
    format!("{CURRENT_ROLLOUT_KEY}.{tag}.h{k}")
}

pub fn declaration_part_key(tag: &str, k: usize) -> String {
    format!("{CURRENT_ROLLOUT_KEY}.{tag}.d{k}")
}

/// One key token for the controller instance `driver` (its id, `c<pid>-<ms>`,
/// when that is one; a hash of it otherwise).
pub fn writer_tag(driver: &str) -> String {
    let plain = !driver.is_empty()
        && driver.len() <= 64
        && driver
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        driver.to_string()
    } else {
        format!("w{}", bytes_hash(driver.as_bytes()))
    }
}

/// A short hash of a value's bytes.
pub fn bytes_hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

/// Cut `r` into a head and parts of at most [`PART_BUDGET`] bytes each (a
/// single row or declaration larger than that gets a part of its own).
pub fn cut(r: &Rollout) -> Result<Cut, serde_json::Error> {
    let mut rows = Vec::with_capacity(r.hives.len());
    let mut placed = std::collections::BTreeSet::new();
    for hive in r.waves.iter().flatten() {
        if let Some(t) = r.hives.get(hive) {
            if placed.insert(hive) {
                rows.push(serde_json::to_vec(&(hive, t))?);
            }
        }
    }
    // A row in no wave (not made by `plan`, but kept if present) goes last.
    for (hive, t) in &r.hives {
        if !placed.contains(hive) {
            rows.push(serde_json::to_vec(&(hive, t))?);
        }
    }
    let mut entries = Vec::with_capacity(r.declarations.len());
    for (hash, d) in &r.declarations {
        let mut e = serde_json::to_vec(hash)?;
        e.push(b':');
        e.extend(serde_json::to_vec(d)?);
        entries.push(e);
    }
    let head = Head {
        schema: ROLLOUT_SCHEMA,
        id: r.id.clone(),
        source: r.source.clone(),
        settings: r.settings.clone(),
        wave_sizes: r.waves.iter().map(Vec::len).collect(),
        wave: r.wave,
        wave_started_ms: r.wave_started_ms,
        driver: r.driver.clone(),
        outcome: r.outcome.clone(),
        parts: Parts::default(),
    };
    Ok(Cut {
        head,
        hives: pack(br#"{"hives":["#, &rows, b"]}"),
        declarations: pack(br#"{"declarations":{"#, &entries, b"}}"),
    })
}

/// Join `items` with commas into values `open … close` of at most
/// [`PART_BUDGET`] bytes each; no items, no values.
fn pack(open: &[u8], items: &[Vec<u8>], close: &[u8]) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    for item in items {
        let full =
            !current.is_empty() && current.len() + 1 + item.len() + close.len() > PART_BUDGET;
        if full {
            current.extend_from_slice(close);
            parts.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            current.extend_from_slice(open);
        } else {
            current.push(b',');
        }
        current.extend_from_slice(item);
    }
    if !current.is_empty() {
        current.extend_from_slice(close);
        parts.push(current);
    }
    parts
}

/// What is wrong with a head and its parts, put together again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error("the waves add up to {waves} hives, the parts hold {rows}")]
    Count { waves: usize, rows: usize },
    #[error("hive {0} is in the parts twice")]
    Twice(HiveName),
}

/// The rollout from its head and parts (in the head's order).
pub fn join(
    head: Head,
    hive_parts: Vec<HivePart>,
    declaration_parts: Vec<DeclarationPart>,
) -> Result<Rollout, JoinError> {
    let rows: Vec<(HiveName, HiveTarget)> = hive_parts.into_iter().flat_map(|p| p.hives).collect();
    let in_waves: usize = head.wave_sizes.iter().sum();
    if in_waves > rows.len() {
        return Err(JoinError::Count {
            waves: in_waves,
            rows: rows.len(),
        });
    }
    let mut waves = Vec::with_capacity(head.wave_sizes.len());
    let mut at = 0;
    for size in &head.wave_sizes {
        waves.push(rows[at..at + size].iter().map(|(h, _)| h.clone()).collect());
        at += size;
    }
    let mut hives = BTreeMap::new();
    for (hive, t) in rows {
        if hives.insert(hive.clone(), t).is_some() {
            return Err(JoinError::Twice(hive));
        }
    }
    let declarations = declaration_parts
        .into_iter()
        .flat_map(|p| p.declarations)
        .collect();
    Ok(Rollout {
        schema: head.schema,
        id: head.id,
        source: head.source,
        settings: head.settings,
        waves,
        wave: head.wave,
        wave_started_ms: head.wave_started_ms,
        driver: head.driver,
        outcome: head.outcome,
        hives,
        declarations,
    })
}

#[cfg(test)]
mod tests;
