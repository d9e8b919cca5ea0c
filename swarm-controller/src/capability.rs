//! Mixed hive versions never drop a constraint: before a declaration is
//! written, every agent field it sets is checked against the fields of the
//! agent spec the hive's own status says its build knows (`agent_spec`; a
//! hive that does not say is taken to know the first spec's fields only). A
//! hive would leave an agent with a field it does not know as it is, so
//! writing one is refused, naming the hive, its version and the field;
//! `--force` writes it anyway.
//!
//! A hive that has never reported cannot be checked: it is named, and the
//! write goes on (a hive being set up is declared before it starts).

use async_nats::jetstream::kv::{self, Operation};
use swarm_queue_client::{decode, AgentName, Declaration, HiveName, HiveStatus};

use crate::declare::HivePlan;

/// One agent of one hive whose spec sets fields the hive does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub hive: HiveName,
    pub version: String,
    pub agent: AgentName,
    pub fields: Vec<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hive {} (version {}) does not know the agent field{} {} of {}: it would leave {} \
             as it is; upgrade the hive first, or declare with --force",
            self.hive,
            self.version,
            if self.fields.len() == 1 { "" } else { "s" },
            self.fields.join(", "),
            self.agent,
            self.agent
        )
    }
}

/// Each agent of `declaration` that sets a field `hive_status` does not list.
pub fn check(hive: &HiveName, declaration: &Declaration, hive_status: &HiveStatus) -> Vec<Refusal> {
    let known = hive_status.known_agent_fields();
    declaration
        .agents
        .iter()
        .filter_map(|(agent, spec)| {
            let fields: Vec<String> = spec
                .set_fields()
                .into_iter()
                .filter(|f| !known.contains(&f.as_str()))
                .collect();
            (!fields.is_empty()).then(|| Refusal {
                hive: hive.clone(),
                version: hive_status.version.clone(),
                agent: agent.clone(),
                fields,
            })
        })
        .collect()
}

/// What the check of a declare found.
#[derive(Debug, Default)]
pub struct Checked {
    pub refusals: Vec<Refusal>,
    /// Hives with no readable status: not checked.
    pub unchecked: Vec<HiveName>,
}

/// Check every plan that would write, against its hive's status.
pub async fn check_plans(status: &kv::Store, plans: &[HivePlan]) -> Checked {
    let mut out = Checked::default();
    for plan in plans.iter().filter(|p| p.changed) {
        let entry = status.entry(plan.hive.as_str()).await.ok().flatten();
        let hive_status = entry
            .filter(|e| e.operation == Operation::Put)
            .and_then(|e| decode::<HiveStatus>(&e.value).ok())
            .map(|d| d.value);
        match hive_status {
            Some(r) => out
                .refusals
                .extend(check(&plan.hive, plan.declaration(), &r)),
            None => out.unchecked.push(plan.hive.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use swarm_queue_client::test_support::HiveStatusBuilder;
    use swarm_queue_client::{AgentSpec, HiveState, AGENT_SPEC};

    use super::*;

    fn declaration(agents: &[(&str, AgentSpec)]) -> Declaration {
        Declaration {
            schema: 1,
            agents: agents
                .iter()
                .map(|(n, s)| (AgentName::new(*n).unwrap(), s.clone()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn a_field_the_hive_does_not_list_is_refused_by_name() {
        let hive = HiveName::new("alpha").unwrap();
        let plain = AgentSpec {
            image: Some("i:1".into()),
            min_running_secs: Some(5),
            ..Default::default()
        };
        let mut newer = plain.clone();
        newer.unknown.insert("user_ns".into(), "remap".into());
        let d = declaration(&[("web", newer), ("db", plain)]);
        // A hive of this build: only the field it does not know.
        let mut r = HiveStatusBuilder::new("alpha", HiveState::Ok).build();
        r.agent_spec = Some(AGENT_SPEC);
        let got = check(&hive, &d, &r);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].agent.as_str(), &got[0].fields[..]),
            ("web", &["user_ns".to_string()][..])
        );
        assert_eq!(
            got[0].to_string(),
            "hive alpha (version 0.1.0) does not know the agent field user_ns of web: it would \
             leave web as it is; upgrade the hive first, or declare with --force"
        );
        // A hive of spec 2 knows min_running_secs but none of spec 3's.
        let mut strict = AgentSpec {
            image: Some("i:1".into()),
            min_running_secs: Some(5),
            user: Some("1000".into()),
            network: Some(swarm_queue_client::ObjectName::new("none").unwrap()),
            ..Default::default()
        };
        r.agent_spec = Some(2);
        let got = check(&hive, &declaration(&[("web", strict.clone())]), &r);
        assert_eq!(got.len(), 1, "{got:?}");
        let mut fields = got[0].fields.clone();
        fields.sort();
        assert_eq!(fields, ["network", "user"]);
        strict.user = None;
        strict.network = None;
        assert!(check(&hive, &declaration(&[("web", strict)]), &r).is_empty());
        r.agent_spec = Some(AGENT_SPEC);
        // A hive that does not say: the first spec's fields only, so
        // min_running_secs is refused for both agents.
        r.agent_spec = None;
        let got = check(&hive, &d, &r);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got
            .iter()
            .all(|g| g.fields.contains(&"min_running_secs".to_string())));
        // Nothing set beyond what it knows: nothing refused.
        let first = declaration(&[(
            "web",
            AgentSpec {
                image: Some("i:1".into()),
                ..Default::default()
            },
        )]);
        assert!(check(&hive, &first, &r).is_empty());
    }
}
