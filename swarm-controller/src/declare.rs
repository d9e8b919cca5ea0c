//! `declare`: publish a swarm file's declarations, hive by hive.
//!
//! For each hive in the file, the current value of `hyperhive-wanted/<hive>`
//! is read and compared with the file (decoded values, agent by agent); only
//! hives whose declaration changed are written. The write is a
//! compare-and-set on the revision that was read, so two controllers
//! declaring the same file at once publish it once: the second one's write
//! is refused, it reads again, finds the same declaration and reports the
//! hive unchanged. Hives on the roster but not in the file are not touched:
//! absence is not a deletion order.
//!
//! [`diff`] is pure; [`plan`] reads, [`publish`] writes.

use std::collections::BTreeMap;

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use serde::Serialize;
use swarm_queue_client::{
    decode, encode_pretty, ensure_connected, AgentSpec, Declaration, HiveName, NotConnected,
};

use crate::cas::CasError;
use crate::groups::{Origin, Resolved, UsedValues};

/// How one agent differs between the stored and the new declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "lowercase")]
pub enum AgentDiff {
    Added { agent: String },
    Removed { agent: String },
    Changed { agent: String, fields: Vec<String> },
}

impl std::fmt::Display for AgentDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentDiff::Added { agent } => write!(f, "+ {agent}"),
            AgentDiff::Removed { agent } => write!(f, "- {agent} (will be retired)"),
            AgentDiff::Changed { agent, fields } => write!(f, "~ {agent}: {}", fields.join(", ")),
        }
    }
}

/// Agent-by-agent difference from `current` (None: nothing stored) to `new`.
pub fn diff(current: Option<&Declaration>, new: &Declaration) -> Vec<AgentDiff> {
    let empty = BTreeMap::new();
    let old = current.map(|d| &d.agents).unwrap_or(&empty);
    let mut out = Vec::new();
    for (agent, spec) in &new.agents {
        match old.get(agent) {
            None => out.push(AgentDiff::Added {
                agent: agent.to_string(),
            }),
            Some(prev) if prev != spec => {
                let (a, b) = (fields(prev), fields(spec));
                let changed: Vec<String> = a
                    .keys()
                    .chain(b.keys())
                    .filter(|k| a.get(*k) != b.get(*k))
                    .cloned()
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                out.push(AgentDiff::Changed {
                    agent: agent.to_string(),
                    fields: changed,
                });
            }
            Some(_) => {}
        }
    }
    for agent in old.keys() {
        if !new.agents.contains_key(agent) {
            out.push(AgentDiff::Removed {
                agent: agent.to_string(),
            });
        }
    }
    out
}

/// What is stored for a hive now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "stored", rename_all = "lowercase")]
pub enum Stored {
    /// No key, or a deleted one.
    Nothing {
        revision: Option<u64>,
    },
    Declaration {
        revision: u64,
    },
    /// A value that does not decode; the file replaces it.
    Undecodable {
        revision: u64,
        error: String,
    },
}

/// One hive's part of a declare.
#[derive(Debug, Clone, Serialize)]
pub struct HivePlan {
    pub hive: HiveName,
    /// What was stored when the plan was made.
    pub previous: Stored,
    /// What is stored now (after publishing, the new revision).
    pub stored: Stored,
    pub changes: Vec<AgentDiff>,
    /// Whether the stored value differs from the file.
    pub changed: bool,
    /// What happened: "unchanged", "would publish", "published revision N",
    /// "published by another controller (revision N)".
    pub outcome: String,
    /// Where each agent of the new declaration comes from in the swarm file
    /// (empty for a rollback, which restores a stored value).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, Origin>,
    /// Per agent with placeholders, each value it took and where from.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, UsedValues>,
    #[serde(skip)]
    declaration: Declaration,
    #[serde(skip)]
    stored_declaration: Option<Declaration>,
}

#[derive(Debug, thiserror::Error)]
pub enum DeclareError {
    #[error(transparent)]
    NotConnected(#[from] NotConnected),
    #[error("cannot read hyperhive-wanted/{hive}: {reason}")]
    Read { hive: HiveName, reason: String },
    #[error("cannot write hyperhive-wanted/{hive}: {reason}")]
    Write { hive: HiveName, reason: String },
    #[error("hyperhive-wanted/{hive} kept changing under us; try again")]
    Contended { hive: HiveName },
}

pub(crate) async fn plan_hive(
    wanted: &kv::Store,
    hive: &HiveName,
    declaration: &Declaration,
) -> Result<HivePlan, DeclareError> {
    let (stored, stored_declaration) = read_stored(wanted, hive).await?;
    let changes = diff(stored_declaration.as_ref(), declaration);
    let changed = stored_declaration.as_ref() != Some(declaration);
    Ok(HivePlan {
        hive: hive.clone(),
        previous: stored.clone(),
        stored,
        changes,
        changed,
        outcome: if changed {
            "would publish"
        } else {
            "unchanged"
        }
        .into(),
        sources: BTreeMap::new(),
        values: BTreeMap::new(),
        declaration: declaration.clone(),
        stored_declaration,
    })
}

/// Read what is stored for every hive the swarm file declares (each one's
/// own table merged with its groups, [`crate::groups::resolve`]) and compare.
pub async fn plan(
    client: &async_nats::Client,
    wanted: &kv::Store,
    hives: &BTreeMap<HiveName, Resolved>,
) -> Result<Vec<HivePlan>, DeclareError> {
    ensure_connected(client)?;
    let mut plans = Vec::new();
    for (hive, resolved) in hives {
        let mut plan = plan_hive(wanted, hive, &resolved.declaration).await?;
        plan.sources = resolved
            .origins
            .iter()
            .map(|(agent, origin)| (agent.to_string(), origin.clone()))
            .collect();
        plan.values = resolved
            .values
            .iter()
            .map(|(agent, used)| (agent.to_string(), used.clone()))
            .collect();
        plans.push(plan);
    }
    Ok(plans)
}

impl HivePlan {
    /// The declaration this plan publishes.
    pub fn declaration(&self) -> &Declaration {
        &self.declaration
    }

    /// The KV revision a compare-and-set write of this plan expects.
    pub fn expected_revision(&self) -> Option<u64> {
        match &self.stored {
            Stored::Nothing { revision } => *revision,
            Stored::Declaration { revision } | Stored::Undecodable { revision, .. } => {
                Some(*revision)
            }
        }
    }
}

/// Where each hive's agents come from, and each value their placeholders
/// took, for `declare --dry-run`.
pub fn describe_sources(plans: &[HivePlan]) -> String {
    let mut out = String::new();
    for p in plans.iter().filter(|p| !p.sources.is_empty()) {
        out.push_str(&format!(
            "{}: agents from
",
            p.hive
        ));
        for (agent, origin) in &p.sources {
            out.push_str(&format!("    {agent}: {origin}\n"));
            for (name, used) in p.values.get(agent).into_iter().flatten() {
                out.push_str(&format!("        {name} = {used}\n"));
            }
        }
    }
    out
}

/// Write every changed hive, compare-and-set on the revision read.
pub async fn publish(
    client: &async_nats::Client,
    wanted: &kv::Store,
    plans: &mut [HivePlan],
) -> Result<(), DeclareError> {
    for plan in plans.iter_mut() {
        let span = tracing::info_span!("declare", hive = %plan.hive);
        let _guard = span.enter();
        let mut pending = plan.changed;
        for _attempt in 0..5 {
            if !pending {
                break;
            }
            ensure_connected(client)?;
            let bytes = encode_pretty(&plan.declaration).map_err(|e| DeclareError::Write {
                hive: plan.hive.clone(),
                reason: e.to_string(),
            })?;
            let expected = plan.expected_revision();
            let result =
                crate::cas::write_if(wanted, plan.hive.as_str(), Bytes::from(bytes), expected)
                    .await;
            match result {
                Ok(revision) => {
                    tracing::info!(revision, "published a declaration");
                    plan.outcome = format!("published revision {revision}");
                    plan.stored = Stored::Declaration { revision };
                    plan.stored_declaration = Some(plan.declaration.clone());
                    pending = false;
                }
                Err(CasError::Conflict) => {
                    // Someone wrote between our read and our write: look again.
                    let again = plan_hive(wanted, &plan.hive, &plan.declaration).await?;
                    if !again.changed {
                        let rev = match again.stored {
                            Stored::Declaration { revision } => revision,
                            _ => 0,
                        };
                        plan.outcome = format!(
                            "unchanged: already published by another writer (revision {rev})"
                        );
                        plan.stored = again.stored;
                        plan.changed = false;
                        pending = false;
                    } else {
                        plan.stored = again.stored;
                        plan.stored_declaration = again.stored_declaration;
                        plan.changes = again.changes;
                    }
                }
                Err(e) => {
                    return Err(DeclareError::Write {
                        hive: plan.hive.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        }
        if pending {
            return Err(DeclareError::Contended {
                hive: plan.hive.clone(),
            });
        }
    }
    Ok(())
}

/// The per-hive diff for people.
pub fn describe(plans: &[HivePlan]) -> String {
    let mut out = String::new();
    for p in plans {
        let stored = match &p.previous {
            Stored::Nothing { .. } => "nothing stored".to_string(),
            Stored::Declaration { revision } => format!("stored revision {revision}"),
            Stored::Undecodable { revision, error } => {
                format!("stored revision {revision} does not decode ({error})")
            }
        };
        out.push_str(&format!("{}: {} ({stored})\n", p.hive, p.outcome));
        for c in &p.changes {
            out.push_str(&format!("    {c}\n"));
        }
        if p.changes.is_empty() && p.changed {
            if p.declaration.agents.is_empty() {
                out.push_str("    (an explicit empty declaration: nothing runs on this hive)\n");
            } else {
                out.push_str("    (same agents; the stored value is replaced)\n");
            }
        }
    }
    out
}

/// The fields of a spec, by their wire names, so a diff names what changed
/// without a second list of the contract's fields.
fn fields(spec: &AgentSpec) -> BTreeMap<String, serde_json::Value> {
    match serde_json::to_value(spec) {
        Ok(serde_json::Value::Object(map)) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    }
}

async fn read_stored(
    wanted: &kv::Store,
    hive: &HiveName,
) -> Result<(Stored, Option<Declaration>), DeclareError> {
    let entry = wanted
        .entry(hive.as_str())
        .await
        .map_err(|e| DeclareError::Read {
            hive: hive.clone(),
            reason: e.to_string(),
        })?;
    Ok(match entry {
        None => (Stored::Nothing { revision: None }, None),
        Some(e) if e.operation != Operation::Put => (
            Stored::Nothing {
                revision: Some(e.revision),
            },
            None,
        ),
        Some(e) => match decode::<Declaration>(&e.value) {
            Ok(d) => (
                Stored::Declaration {
                    revision: e.revision,
                },
                Some(d.value),
            ),
            Err(err) => (
                Stored::Undecodable {
                    revision: e.revision,
                    error: err.to_string(),
                },
                None,
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::AgentName;

    fn decl(agents: &[(&str, &str)]) -> Declaration {
        Declaration::new(
            agents
                .iter()
                .map(|(a, image)| {
                    (
                        AgentName::new(*a).unwrap(),
                        AgentSpec {
                            image: Some(image.to_string()),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn diff_table() {
        let cases: Vec<(Option<Declaration>, Declaration, Vec<&str>)> = vec![
            (None, decl(&[("a", "x")]), vec!["+ a"]),
            (Some(decl(&[("a", "x")])), decl(&[("a", "x")]), vec![]),
            (
                Some(decl(&[("a", "x")])),
                decl(&[("a", "y")]),
                vec!["~ a: image"],
            ),
            (
                Some(decl(&[("a", "x"), ("b", "x")])),
                decl(&[("a", "x")]),
                vec!["- b (will be retired)"],
            ),
            (
                Some(decl(&[("a", "x")])),
                decl(&[]),
                vec!["- a (will be retired)"],
            ),
        ];
        for (old, new, want) in cases {
            let got: Vec<String> = diff(old.as_ref(), &new)
                .iter()
                .map(|d| d.to_string())
                .collect();
            assert_eq!(got, want, "{old:?} -> {new:?}");
        }
        let mut with_env = decl(&[("a", "y")]);
        with_env.agents.values_mut().for_each(|s| {
            s.env.insert("LOG".into(), "debug".into());
            s.memory_mb = Some(64);
        });
        let got = diff(Some(&decl(&[("a", "x")])), &with_env);
        assert_eq!(got[0].to_string(), "~ a: env, image, memory_mb");
    }
}
