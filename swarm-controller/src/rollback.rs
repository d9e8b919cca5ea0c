//! `rollback HIVE [--to REVISION]`: declare an earlier value of
//! `hyperhive-wanted/<hive>` again.
//!
//! The wanted bucket keeps the last values of each key (its history, 10 by
//! default; see `BucketSettings`). A rollback reads that history, picks the
//! value to restore ([`pick`], pure: `--to R`, or else the newest earlier
//! value that differs from the current one) and publishes it through the
//! same plan and compare-and-set as `declare`, so it becomes a **new**
//! revision (hives only ever move forward) with the same diff output. A
//! revision the bucket no longer keeps is an error that says which ones it
//! still has and how many it keeps.

use async_nats::jetstream::kv::{self, Operation};
use futures_util::StreamExt;
use swarm_queue_client::{decode, ensure_connected, Declaration, HiveName, NotConnected};

use crate::declare::{plan_hive, DeclareError, HivePlan};

/// The smallest history that makes rollback useful; a bucket made with less
/// (by hand, or by an old controller) is reported in errors.
pub const MIN_USEFUL_HISTORY: i64 = 10;

/// One kept value of the key: its revision and the declaration, if the
/// value is a put that decodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub revision: u64,
    pub declaration: Option<Declaration>,
}

#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error(transparent)]
    NotConnected(#[from] NotConnected),
    #[error(transparent)]
    Declare(#[from] DeclareError),
    #[error("cannot read the history of hyperhive-wanted/{hive}: {reason}")]
    History { hive: HiveName, reason: String },
    #[error(
        "revision {revision} of hive {hive} is no longer in the history of hyperhive-wanted \
         (it keeps {history} values per key{}; kept: {})",
        if *.history < MIN_USEFUL_HISTORY { ", fewer than the 10 a rollback needs" } else { "" },
        kept_list(.kept)
    )]
    NotInHistory {
        hive: HiveName,
        revision: u64,
        history: i64,
        kept: Vec<u64>,
    },
    #[error("revision {revision} of hive {hive} is a delete or does not decode as a declaration; it cannot be declared again")]
    NotADeclaration { hive: HiveName, revision: u64 },
    #[error(
        "hive {hive} has no earlier declaration to roll back to in the history of \
         hyperhive-wanted (kept: {})",
        kept_list(.kept)
    )]
    NothingEarlier { hive: HiveName, kept: Vec<u64> },
}

/// The value to restore from `kept` (oldest first): revision `to`, or the
/// newest one before the current (last) value that differs from it.
pub fn pick(
    hive: &HiveName,
    kept: &[Kept],
    to: Option<u64>,
    history: i64,
) -> Result<(u64, Declaration), RollbackError> {
    let revisions: Vec<u64> = kept.iter().map(|k| k.revision).collect();
    if let Some(revision) = to {
        let k = kept
            .iter()
            .find(|k| k.revision == revision)
            .ok_or_else(|| RollbackError::NotInHistory {
                hive: hive.clone(),
                revision,
                history,
                kept: revisions.clone(),
            })?;
        return k.declaration.clone().map(|d| (revision, d)).ok_or(
            RollbackError::NotADeclaration {
                hive: hive.clone(),
                revision,
            },
        );
    }
    let current = kept.last().and_then(|k| k.declaration.as_ref());
    kept.iter()
        .rev()
        .skip(1)
        .find_map(|k| match &k.declaration {
            Some(d) if Some(d) != current => Some((k.revision, d.clone())),
            _ => None,
        })
        .ok_or(RollbackError::NothingEarlier {
            hive: hive.clone(),
            kept: revisions,
        })
}

/// Every value the bucket keeps for `hive`, oldest first, and the bucket's
/// history setting.
pub async fn kept(
    client: &async_nats::Client,
    wanted: &kv::Store,
    hive: &HiveName,
) -> Result<(Vec<Kept>, i64), RollbackError> {
    ensure_connected(client)?;
    let err = |reason: String| RollbackError::History {
        hive: hive.clone(),
        reason,
    };
    let history = wanted
        .status()
        .await
        .map_err(|e| err(e.to_string()))?
        .history();
    let mut entries = wanted
        .history(hive.as_str())
        .await
        .map_err(|e| err(e.to_string()))?;
    let mut kept = Vec::new();
    while let Some(entry) = entries.next().await {
        let entry = entry.map_err(|e| err(e.to_string()))?;
        let declaration = (entry.operation == Operation::Put)
            .then(|| decode::<Declaration>(&entry.value).ok().map(|d| d.value))
            .flatten();
        kept.push(Kept {
            revision: entry.revision,
            declaration,
        });
    }
    Ok((kept, history))
}

/// Plan the rollback of `hive`: what would be published and the diff. The
/// revision restored is returned beside it.
pub async fn plan(
    client: &async_nats::Client,
    wanted: &kv::Store,
    hive: &HiveName,
    to: Option<u64>,
) -> Result<(u64, HivePlan), RollbackError> {
    let (kept, history) = kept(client, wanted, hive).await?;
    if history < MIN_USEFUL_HISTORY {
        tracing::warn!(%hive, history, "hyperhive-wanted keeps fewer than {MIN_USEFUL_HISTORY} values per key; rollbacks can reach only that far");
    }
    let (revision, declaration) = pick(hive, &kept, to, history)?;
    Ok((revision, plan_hive(wanted, hive, &declaration).await?))
}

fn kept_list(kept: &[u64]) -> String {
    if kept.is_empty() {
        return "none".into();
    }
    kept.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::{AgentName, AgentSpec};

    fn decl(image: &str) -> Option<Declaration> {
        Some(Declaration::new(
            [(
                AgentName::new("web").unwrap(),
                AgentSpec {
                    image: Some(image.into()),
                    ..Default::default()
                },
            )]
            .into(),
        ))
    }

    #[test]
    fn the_value_to_restore_is_picked_from_the_history() {
        let hive = HiveName::new("alpha").unwrap();
        let k = |revision, declaration| Kept {
            revision,
            declaration,
        };
        let kept = vec![
            k(3, decl("a:1")),
            k(5, None),
            k(7, decl("a:2")),
            k(9, decl("a:2")),
        ];
        // Default: the newest earlier value that differs from the current.
        assert_eq!(
            pick(&hive, &kept, None, 10).unwrap(),
            (3, decl("a:1").unwrap())
        );
        assert_eq!(pick(&hive, &kept, Some(7), 10).unwrap().0, 7);
        let e = pick(&hive, &kept, Some(1), 5).unwrap_err().to_string();
        assert!(
            e.contains("revision 1 of hive alpha is no longer in the history"),
            "{e}"
        );
        assert!(
            e.contains("keeps 5 values per key, fewer than the 10"),
            "{e}"
        );
        assert!(e.contains("kept: 3, 5, 7, 9"), "{e}");
        let e = pick(&hive, &kept, Some(5), 10).unwrap_err().to_string();
        assert!(e.contains("revision 5") && e.contains("delete"), "{e}");
        let e = pick(&hive, &kept[2..], None, 10).unwrap_err().to_string();
        assert!(e.contains("no earlier declaration"), "{e}");
        let e = pick(&hive, &[], None, 10).unwrap_err().to_string();
        assert!(e.contains("kept: none"), "{e}");
    }
}
