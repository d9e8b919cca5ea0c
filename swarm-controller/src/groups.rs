//! How a swarm file's hive tables and groups make each hive's declaration
//! (pure).
//!
//! A hive's declaration is its own `[hives.X]` table merged with every
//! `[groups.G]` whose `select` labels are all among the hive's roster
//! labels. Merging never overrides: the same agent name from two sources for
//! one hive is an error that names both sources and their lines, because
//! "which one wins" would be a rule the operator has to remember. A hive in
//! neither is not in the result, so `declare` leaves it alone; a hive the
//! file names but the roster does not know is an error.

use std::collections::BTreeMap;

use serde::Serialize;
use swarm_queue_client::{AgentName, Declaration, GroupName, HiveName, Payload};

use crate::config::Roster;
use crate::swarm_file::{AgentTable, SwarmFile};

/// Where one agent of a hive's declaration comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "lowercase")]
pub enum Origin {
    /// The hive's own `[hives.X]` table.
    Hive { line: usize },
    /// A group that selects the hive.
    Group { group: GroupName, line: usize },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Hive { line } => write!(f, "its own table (line {line})"),
            Origin::Group { group, line } => write!(f, "group {group} (line {line})"),
        }
    }
}

/// One hive's merged declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub declaration: Declaration,
    pub origins: BTreeMap<AgentName, Origin>,
    /// The groups that select the hive, by name.
    pub groups: Vec<GroupName>,
    /// Line of the hive's own table, or of the first group selecting it.
    pub line: usize,
}

/// The groups of `file` that select a hive with `labels`.
pub fn groups_of(file: &SwarmFile, labels: &BTreeMap<String, String>) -> Vec<GroupName> {
    file.groups
        .iter()
        .filter(|(_, g)| g.selects(labels))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Every hive's declaration, or every problem (hives off the roster, agents
/// declared twice) with its lines.
pub fn resolve(
    file: &SwarmFile,
    roster: &Roster,
) -> Result<BTreeMap<HiveName, Resolved>, Vec<String>> {
    let mut problems: Vec<String> = file
        .hives
        .iter()
        .filter(|(name, _)| !roster.contains_key(*name))
        .map(|(name, t)| {
            format!(
                "line {}: hive {name} is not on the roster; add [hives.{name}] to the \
                 controller config first",
                t.line
            )
        })
        .collect();
    let mut out = BTreeMap::new();
    for (hive, entry) in roster {
        let groups = groups_of(file, &entry.labels);
        let own = file.hives.get(hive);
        if own.is_none() && groups.is_empty() {
            continue;
        }
        let mut sources: Vec<(Origin, &AgentTable)> = Vec::new();
        if let Some(t) = own {
            sources.push((Origin::Hive { line: t.line }, t));
        }
        for g in &groups {
            let t = &file.groups[g].table;
            sources.push((
                Origin::Group {
                    group: g.clone(),
                    line: t.line,
                },
                t,
            ));
        }
        match merge(hive, &sources) {
            Ok(mut resolved) => {
                resolved.groups = groups;
                out.insert(hive.clone(), resolved);
            }
            Err(mut p) => problems.append(&mut p),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Merge the sources of one hive, in order; an agent from two is an error.
fn merge(hive: &HiveName, sources: &[(Origin, &AgentTable)]) -> Result<Resolved, Vec<String>> {
    let mut agents = BTreeMap::new();
    let mut origins: BTreeMap<AgentName, Origin> = BTreeMap::new();
    let mut problems = Vec::new();
    for (origin, table) in sources {
        for (agent, declared) in &table.agents {
            let here = at_line(origin, declared.line);
            if let Some(first) = origins.get(agent) {
                problems.push(format!(
                    "agent {agent} of hive {hive} is declared twice: by {} (line {}) and by {} \
                     (line {}); declare it in one place",
                    source_name(first),
                    line_of(first),
                    source_name(&here),
                    declared.line,
                ));
                continue;
            }
            origins.insert(agent.clone(), here);
            agents.insert(agent.clone(), declared.spec.clone());
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let declaration = Declaration::new(agents);
    if let Err(e) = declaration.validate() {
        return Err(vec![format!("hive {hive}: {e}")]);
    }
    Ok(Resolved {
        declaration,
        origins,
        groups: Vec::new(),
        line: sources.first().map_or(0, |(o, _)| line_of(o)),
    })
}

/// The origin of one agent: its table, at the agent's own line.
fn at_line(origin: &Origin, line: usize) -> Origin {
    match origin {
        Origin::Hive { .. } => Origin::Hive { line },
        Origin::Group { group, .. } => Origin::Group {
            group: group.clone(),
            line,
        },
    }
}

fn line_of(origin: &Origin) -> usize {
    match origin {
        Origin::Hive { line } | Origin::Group { line, .. } => *line,
    }
}

fn source_name(origin: &Origin) -> String {
    match origin {
        Origin::Hive { .. } => "the hive's own table".into(),
        Origin::Group { group, .. } => format!("group {group}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RosterEntry;
    use std::path::Path;

    fn file(text: &str) -> SwarmFile {
        SwarmFile::parse(Path::new("swarm.toml"), text).unwrap()
    }

    fn roster(hives: &[(&str, &[(&str, &str)])]) -> Roster {
        hives
            .iter()
            .map(|(name, labels)| {
                (
                    HiveName::new(*name).unwrap(),
                    RosterEntry {
                        labels: labels
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    fn agents(r: &Resolved) -> Vec<String> {
        r.origins.iter().map(|(a, o)| format!("{a}: {o}")).collect()
    }

    const FILE: &str = "\
[hives.alpha.agents.local]
image = \"local:1\"

[groups.web]
select = { role = \"web\" }
[groups.web.agents.api]
image = \"api:1\"

[groups.eu-web]
select = { role = \"web\", site = \"eu\" }
[groups.eu-web.agents.cache]
image = \"cache:1\"

[groups.everyone]
select = {}
[groups.everyone.agents.metrics]
image = \"metrics:1\"
";

    #[test]
    fn a_hive_gets_its_table_and_every_group_that_selects_it() {
        let r = roster(&[
            ("alpha", &[("role", "web"), ("site", "eu")]),
            ("beta", &[("role", "web"), ("site", "us")]),
            ("gamma", &[("role", "db")]),
        ]);
        let got = resolve(&file(FILE), &r).unwrap();
        let h = |n: &str| &got[&HiveName::new(n).unwrap()];
        assert_eq!(
            agents(h("alpha")),
            vec![
                "api: group web (line 6)",
                "cache: group eu-web (line 11)",
                "local: its own table (line 1)",
                "metrics: group everyone (line 16)",
            ]
        );
        assert_eq!(
            agents(h("beta")),
            vec![
                "api: group web (line 6)",
                "metrics: group everyone (line 16)"
            ]
        );
        assert_eq!(
            agents(h("gamma")),
            vec!["metrics: group everyone (line 16)"]
        );
        let groups: Vec<&str> = h("alpha").groups.iter().map(|g| g.as_str()).collect();
        assert_eq!(groups, vec!["eu-web", "everyone", "web"]);
        let spec = &h("beta").declaration.agents[&AgentName::new("api").unwrap()];
        assert_eq!(spec.image.as_deref(), Some("api:1"));
    }

    #[test]
    fn a_hive_no_source_names_is_left_out() {
        let f = file("[groups.web]\nselect = { role = \"web\" }\nagents = {}\n");
        let got = resolve(&f, &roster(&[("alpha", &[("role", "db")])])).unwrap();
        assert!(got.is_empty());
        // An explicit empty group is a declaration: it retires everything.
        let got = resolve(&f, &roster(&[("alpha", &[("role", "web")])])).unwrap();
        assert!(got[&HiveName::new("alpha").unwrap()]
            .declaration
            .agents
            .is_empty());
    }

    #[test]
    fn the_same_agent_from_two_sources_names_both_with_lines() {
        let f = file(
            "[hives.alpha.agents.api]\nimage = \"mine:1\"\n\n\
             [groups.web]\nselect = { role = \"web\" }\n[groups.web.agents.api]\nimage = \"api:1\"\n\n\
             [groups.all]\nselect = {}\n[groups.all.agents.api]\nimage = \"api:2\"\n",
        );
        let err = resolve(&f, &roster(&[("alpha", &[("role", "web")])])).unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(
            err[0].contains(
                "agent api of hive alpha is declared twice: by the hive's own table (line 1) \
                 and by group all (line 11)"
            ),
            "{err:?}"
        );
        assert!(
            err[1].contains("by the hive's own table (line 1) and by group web (line 6)"),
            "{err:?}"
        );
    }

    #[test]
    fn hives_off_the_roster_are_named() {
        let f = file("[hives.alpha]\nagents = {}\n\n[hives.gamma]\nagents = {}\n");
        let problems = resolve(&f, &roster(&[("alpha", &[])])).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("line 4: hive gamma is not on the roster"),
            "{problems:?}"
        );
    }
}
