//! The images this hive pulled or built (table `images`), and the pure
//! choice of which of them a cleanup may remove.
//!
//! **Invariant:** cleanup only ever considers images recorded here, so an
//! image the hive did not pull or build (an operator's, another hive's) is
//! never removed. Each agent keeps its newest image (what it runs) and the
//! one before (what a rollback needs); an image any container uses is kept
//! whatever the record says.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::params;
use serde::Serialize;

use super::{Store, StoreError};
use crate::agents::jobs::Millis;

/// One image the hive pulled or built for an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnedImage {
    pub image_id: String,
    pub agent: String,
    pub reference: String,
    /// `pulled` or `built`.
    pub how: String,
    pub recorded_at_ms: Millis,
}

/// Images per agent kept by a cleanup: the current one and the previous.
pub const KEEP_PER_AGENT: usize = 2;

/// The image ids a cleanup removes: recorded ones that are neither among
/// the [`KEEP_PER_AGENT`] newest of an agent still installed, nor used by a
/// container. An agent no longer installed keeps nothing.
pub fn image_cleanup_plan(
    owned: &[OwnedImage],
    installed: &BTreeSet<String>,
    in_use: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut by_agent: BTreeMap<&str, Vec<&OwnedImage>> = BTreeMap::new();
    for image in owned {
        by_agent.entry(&image.agent).or_default().push(image);
    }
    let mut keep: BTreeSet<&str> = in_use.iter().map(String::as_str).collect();
    for (agent, mut images) in by_agent {
        if !installed.contains(agent) {
            continue;
        }
        images.sort_by_key(|i| std::cmp::Reverse(i.recorded_at_ms));
        keep.extend(
            images
                .iter()
                .take(KEEP_PER_AGENT)
                .map(|i| i.image_id.as_str()),
        );
    }
    owned
        .iter()
        .map(|i| i.image_id.as_str())
        .filter(|id| !keep.contains(id))
        .map(str::to_string)
        .collect()
}

impl Store {
    /// Record that `image_id` was pulled or built for `agent` now; a second
    /// record of the same pair only moves its time.
    pub fn record_image(&mut self, image: &OwnedImage) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO images (image_id, agent, reference, how, recorded_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (image_id, agent) DO UPDATE
                 SET reference = ?3, how = ?4, recorded_at_ms = ?5",
                params![
                    image.image_id,
                    image.agent,
                    image.reference,
                    image.how,
                    image.recorded_at_ms
                ],
            )
            .map_err(self.sql("record an image"))?;
        Ok(())
    }

    /// Every recorded image, newest first.
    pub fn images(&self) -> Result<Vec<OwnedImage>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT image_id, agent, reference, how, recorded_at_ms FROM images
                 ORDER BY recorded_at_ms DESC",
            )
            .map_err(self.sql("list images"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(OwnedImage {
                    image_id: r.get(0)?,
                    agent: r.get(1)?,
                    reference: r.get(2)?,
                    how: r.get(3)?,
                    recorded_at_ms: r.get(4)?,
                })
            })
            .map_err(self.sql("list images"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.sql("list images"))
    }

    /// Forget every record of `image_id` (it was removed, or is gone).
    pub fn forget_image(&mut self, image_id: &str) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM images WHERE image_id = ?1", params![image_id])
            .map_err(self.sql("forget an image"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_keeps_current_and_previous_in_use_and_never_unrecorded() {
        let img = |id: &str, agent: &str, at: Millis| OwnedImage {
            image_id: id.into(),
            agent: agent.into(),
            reference: format!("r/{id}"),
            how: "pulled".into(),
            recorded_at_ms: at,
        };
        let owned = vec![
            img("a1", "web", 1),
            img("a2", "web", 2),
            img("a3", "web", 3),
            img("a4", "web", 4),
            img("g1", "gone", 1),
            img("g2", "gone", 2),
        ];
        let installed = BTreeSet::from(["web".to_string()]);
        let none = BTreeSet::new();
        let remove = image_cleanup_plan(&owned, &installed, &none);
        assert_eq!(
            remove,
            BTreeSet::from(["a1", "a2", "g1", "g2"].map(String::from))
        );
        // A container still using an old image keeps it.
        let in_use = BTreeSet::from(["a1".to_string(), "g2".to_string()]);
        let remove = image_cleanup_plan(&owned, &installed, &in_use);
        assert_eq!(remove, BTreeSet::from(["a2", "g1"].map(String::from)));
        // Nothing recorded, nothing removed, whatever Docker holds.
        assert!(image_cleanup_plan(&[], &installed, &none).is_empty());
    }
}
