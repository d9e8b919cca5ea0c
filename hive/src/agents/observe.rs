//! What Docker shows, turned into what the converger decides from.
//!
//! Everything here is untrusted input: anyone who can reach dockerd can put
//! any label, name or image on a container, including this hive's own
//! labels. So the grouping is by container id and agent label, never by the
//! expected name, and every string that may later reach a published
//! `HiveStatus` is made safe ([`sanitize_short`]) before it leaves this
//! module. A container the hive cannot place (its agent label is missing or
//! not a valid agent name) is reported as odd and left alone.
//!
//! Pure: a list of containers in, [`Observed`] out.

use std::collections::BTreeMap;

use swarm_queue_client::containers::container_name;
use swarm_queue_client::payload::sanitize_short;
use swarm_queue_client::{AgentName, HiveName};

use crate::agents::plan::Seen;
use crate::agents::runtime::ContainerInfo;

/// Docker's containers with this hive's label, grouped by agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub seen: BTreeMap<AgentName, Seen>,
    /// Containers with this hive's label that cannot be placed, described
    /// for an operator (already sanitized).
    pub odd: Vec<String>,
}

/// A spec label as the hive reports it: a plausible spec hash passes as
/// it is; anything else is clipped and cleaned so it can be shown, and
/// never equals a real hash.
pub fn reported_spec(label: &str) -> String {
    sanitize_short(label)
}

/// Group `containers` by their agent label. Only containers whose hive
/// label is `hive` count; the caller's list should hold no others, but a
/// second look costs nothing.
pub fn group(hive: &HiveName, containers: Vec<ContainerInfo>) -> Observed {
    let mut out = Observed::default();
    for c in containers {
        if c.owner() != Some(hive.as_str()) {
            continue;
        }
        let short_id = sanitize_short(&c.id[..c.id.len().min(12)]);
        let Some(agent) = c.agent().and_then(|a| AgentName::new(a).ok()) else {
            out.odd.push(format!(
                "container {} ({short_id}) has agent label {}",
                sanitize_short(&c.name),
                match c.agent() {
                    Some(a) => format!("{:?}, which is not a valid agent name", sanitize_short(a)),
                    None => "missing".to_string(),
                }
            ));
            continue;
        };
        let main = c.name == container_name(hive, &agent);
        let entry = out.seen.entry(agent).or_default();
        // The container with the expected name speaks for the agent; a
        // renamed copy only adds its id.
        if main || entry.ids.is_empty() {
            entry.running = c.running;
            entry.spec = c.spec_hash().map(str::to_string);
            entry.health = c.health.as_deref().map(sanitize_short);
        }
        entry.ids.push(c.id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::containers::{LABEL_AGENT, LABEL_HIVE, LABEL_SPEC};

    fn info(id: &str, name: &str, labels: &[(&str, &str)], running: bool) -> ContainerInfo {
        ContainerInfo {
            id: id.into(),
            name: name.into(),
            image: "img".into(),
            image_id: "sha256:img".into(),
            health: None,
            running,
            status: "running".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            stop_grace_secs: None,
            failing_streak: None,
        }
    }

    #[test]
    fn containers_group_by_agent_label_and_odd_ones_are_named() {
        let hive = HiveName::new("alpha").unwrap();
        let long = "x".repeat(5000);
        let got = group(
            &hive,
            vec![
                info(
                    "c-renamed",
                    "someone-renamed-it",
                    &[
                        (LABEL_HIVE, "alpha"),
                        (LABEL_AGENT, "web"),
                        (LABEL_SPEC, "old"),
                    ],
                    false,
                ),
                info(
                    "c-main",
                    "hyperhive.alpha.web",
                    &[
                        (LABEL_HIVE, "alpha"),
                        (LABEL_AGENT, "web"),
                        (LABEL_SPEC, "s1"),
                    ],
                    true,
                ),
                info(
                    "c-odd",
                    "bad\u{7}name",
                    &[(LABEL_HIVE, "alpha"), (LABEL_AGENT, "Not A Name\n")],
                    true,
                ),
                info(
                    "c-long",
                    "hyperhive.alpha.hostile",
                    &[
                        (LABEL_HIVE, "alpha"),
                        (LABEL_AGENT, "hostile"),
                        (LABEL_SPEC, &long),
                    ],
                    true,
                ),
                info(
                    "c-beta",
                    "hyperhive.alpha.web",
                    &[(LABEL_HIVE, "beta"), (LABEL_AGENT, "web")],
                    true,
                ),
            ],
        );
        let web = &got.seen[&AgentName::new("web").unwrap()];
        assert_eq!(web.ids, ["c-renamed", "c-main"]);
        assert!(web.running && web.duplicated());
        assert_eq!(web.spec.as_deref(), Some("s1"), "the expected name speaks");
        let hostile = &got.seen[&AgentName::new("hostile").unwrap()];
        assert_eq!(hostile.spec.as_ref().map(String::len), Some(5000));
        let shown = reported_spec(hostile.spec.as_deref().unwrap());
        assert!(shown.len() <= swarm_queue_client::limits::MAX_SHORT_LEN);
        assert_eq!(got.seen.len(), 2, "another hive's container is not ours");
        assert_eq!(got.odd.len(), 1);
        assert!(
            got.odd[0].contains("bad?name") && got.odd[0].contains("\"Not A Name?\""),
            "{}",
            got.odd[0]
        );
        assert!(!got.odd[0].chars().any(char::is_control));
    }
}
