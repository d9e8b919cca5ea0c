//! How a swarm file's hive tables and groups make each hive's declaration
//! (pure).
//!
//! A hive's declaration is its own `[hives.X]` table merged with every
//! `[groups.G]` whose `select` labels are all among the hive's roster
//! labels. Merging never overrides an agent: the same agent name from two
//! sources for one hive is an error that names both sources and their
//! lines, because "which one wins" would be a rule the operator has to
//! remember. A hive in neither is not in the result, so `declare` leaves it
//! alone; a hive the file names but the roster does not know is an error.
//!
//! Values are the one thing with a precedence, and it is a single rule: a
//! placeholder `${values.NAME}` of an agent takes the hive's own
//! `[hives.X.values]` NAME, else (for an agent a group declares) that
//! group's `[groups.G.values]` default, else it is an error naming the
//! hive, the source, the agent, the field and the placeholder. The
//! substituted spec is checked against the contract's bounds again, per
//! hive. Every problem of every hive is collected.

use std::collections::BTreeMap;

use swarm_queue_client::{AgentName, AgentSpec, Declaration, GroupName, HiveName, Payload};

use crate::roster::{Labels, Roster};
use crate::swarm_file::{AgentTable, DeclaredAgent, SwarmFile};
pub use crate::values::Origin;
use crate::values::{self, Field, SetValue, ValueName, ValueUse, Values};

/// Each value the placeholders of one agent took, by name.
pub type UsedValues = BTreeMap<ValueName, ValueUse>;

/// One hive's merged declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// With every placeholder substituted: what the hive is sent.
    pub declaration: Declaration,
    pub origins: BTreeMap<AgentName, Origin>,
    /// The values each agent with placeholders used, for `--dry-run`.
    pub values: BTreeMap<AgentName, UsedValues>,
    /// The groups that select the hive, by name.
    pub groups: Vec<GroupName>,
    /// Line of the hive's own table, or of the first group selecting it.
    pub line: usize,
}

/// The groups of `file` that select a hive with `labels`.
pub fn groups_of(file: &SwarmFile, labels: &Labels) -> Vec<GroupName> {
    file.groups
        .iter()
        .filter(|(_, g)| g.selects(labels))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Every hive's declaration, or every problem (hives off the roster, agents
/// declared twice, values missing or making a spec invalid) with its lines.
pub fn resolve(
    file: &SwarmFile,
    roster: &Roster,
) -> Result<BTreeMap<HiveName, Resolved>, Vec<String>> {
    static NO_VALUES: Values = Values::new();
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
        let own_agents = own.and_then(|t| t.agents.as_ref());
        if own_agents.is_none() && groups.is_empty() {
            continue;
        }
        let mut sources: Vec<Source> = Vec::new();
        if let Some(t) = own_agents {
            sources.push(Source {
                origin: Origin::Hive { line: t.line },
                table: t,
                defaults: None,
            });
        }
        for g in &groups {
            let group = &file.groups[g];
            sources.push(Source {
                origin: Origin::Group {
                    group: g.clone(),
                    line: group.table.line,
                },
                table: &group.table,
                defaults: Some(&group.values),
            });
        }
        let hive_values = own.map_or(&NO_VALUES, |t| &t.values);
        match merge(hive, hive_values, &sources) {
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

/// One table of agents a hive gets, and the value defaults that go with it.
struct Source<'a> {
    origin: Origin,
    table: &'a AgentTable,
    /// A group's `[groups.G.values]`; `None` for the hive's own table.
    defaults: Option<&'a Values>,
}

/// Merge the sources of one hive, in order; an agent from two is an error.
fn merge(
    hive: &HiveName,
    hive_values: &Values,
    sources: &[Source],
) -> Result<Resolved, Vec<String>> {
    let mut agents = BTreeMap::new();
    let mut origins: BTreeMap<AgentName, Origin> = BTreeMap::new();
    let mut values = BTreeMap::new();
    let mut problems = Vec::new();
    for source in sources {
        let scope = Scope {
            hive,
            hive_values,
            source,
        };
        for (agent, declared) in &source.table.agents {
            let here = at_line(&source.origin, declared.line);
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
            match scope.substitute(agent, declared) {
                Ok((spec, used)) => {
                    if !used.is_empty() {
                        values.insert(agent.clone(), used);
                    }
                    agents.insert(agent.clone(), spec);
                }
                Err(mut p) => problems.append(&mut p),
            }
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
        values,
        groups: Vec::new(),
        line: sources.first().map_or(0, |s| line_of(&s.origin)),
    })
}

/// Where one source's placeholders find their values on one hive.
struct Scope<'a> {
    hive: &'a HiveName,
    hive_values: &'a Values,
    source: &'a Source<'a>,
}

impl Scope<'_> {
    /// The agent's spec with its placeholders filled in, checked again, and
    /// the values it used; or every missing value.
    fn substitute(
        &self,
        agent: &AgentName,
        declared: &DeclaredAgent,
    ) -> Result<(AgentSpec, UsedValues), Vec<String>> {
        let mut used = UsedValues::new();
        let mut problems = Vec::new();
        for (field, template) in &declared.templates {
            for name in template.names() {
                let Some((set, source)) = self.lookup(name) else {
                    problems.push(self.missing(agent, field, name, declared.line));
                    continue;
                };
                used.entry(name.clone())
                    .or_insert_with(|| ValueUse {
                        value: set.value.clone(),
                        source,
                        fields: Vec::new(),
                    })
                    .fields
                    .push(field.to_string());
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut spec = declared.spec.clone();
        for (field, template) in &declared.templates {
            let value = template.render(|n| used[n].value.as_str());
            values::set(&mut spec, field, value);
        }
        if !declared.templates.is_empty() {
            if let Err(e) = spec.validate(agent) {
                return Err(vec![format!(
                    "hive {}: {}, agent {agent}, with its values: {e}",
                    self.hive,
                    at_line(&self.source.origin, declared.line),
                )]);
            }
        }
        Ok((spec, used))
    }

    /// The hive's own value, else the group's default.
    fn lookup(&self, name: &ValueName) -> Option<(&SetValue, Origin)> {
        if let Some(v) = self.hive_values.get(name) {
            return Some((v, Origin::Hive { line: v.line }));
        }
        let (Origin::Group { group, .. }, Some(defaults)) =
            (&self.source.origin, self.source.defaults)
        else {
            return None;
        };
        let v = defaults.get(name)?;
        let group = group.clone();
        Some((
            v,
            Origin::Group {
                group,
                line: v.line,
            },
        ))
    }

    fn missing(&self, agent: &AgentName, field: &Field, name: &ValueName, line: usize) -> String {
        let hive = self.hive;
        match &self.source.origin {
            Origin::Hive { .. } => format!(
                "hive {hive}: its own table, agent {agent}, {field} uses ${{values.{name}}}, \
                 which hive {hive} does not set (line {line}); add {name} to \
                 [hives.{hive}.values]"
            ),
            Origin::Group { group, .. } => format!(
                "hive {hive}: group {group}, agent {agent}, {field} uses ${{values.{name}}}, \
                 which hive {hive} does not set and group {group} has no default for (line \
                 {line}); add {name} to [hives.{hive}.values] or [groups.{group}.values]"
            ),
        }
    }
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
    use crate::roster::RosterEntry;
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

    const VALUES: &str = "\
[hives.h1.values]
region = \"eu\"
tag = \"2.1\"

[hives.h2.values]
region = \"us\"

[hives.h3]
values = { region = \"ap\", probe = \"fast\" }
[hives.h3.agents.tool]
image = \"tool:${values.probe}\"

[groups.web]
select = { role = \"web\" }
values = { tag = \"1.0\" }
[groups.web.agents.api]
image = \"reg.${values.region}/api:${values.tag}\"
command = [\"api\", \"--region=${values.region}\", \"--literal=$${values.region}\"]
env = { REGION = \"${values.region}\", HOME_REF = \"$${HOME}\", PLAIN = \"x\" }
build = { context = \"https://forge/api.git\", ref = \"release-${values.tag}\" }
";

    fn spec<'a>(got: &'a BTreeMap<HiveName, Resolved>, hive: &str, agent: &str) -> &'a AgentSpec {
        &got[&HiveName::new(hive).unwrap()].declaration.agents[&AgentName::new(agent).unwrap()]
    }

    fn used(got: &BTreeMap<HiveName, Resolved>, hive: &str, agent: &str) -> Vec<String> {
        got[&HiveName::new(hive).unwrap()].values[&AgentName::new(agent).unwrap()]
            .iter()
            .map(|(n, u)| format!("{n} = {u}"))
            .collect()
    }

    #[test]
    fn placeholders_take_the_hives_values_in_every_field() {
        let web = [("role", "web")];
        let r = roster(&[("h1", &web), ("h2", &web), ("h3", &web)]);
        let got = resolve(&file(VALUES), &r).unwrap();
        let api = spec(&got, "h1", "api");
        assert_eq!(api.image.as_deref(), Some("reg.eu/api:2.1"));
        assert_eq!(
            api.command.as_deref().unwrap(),
            ["api", "--region=eu", "--literal=${values.region}"]
        );
        assert_eq!(api.env["REGION"], "eu");
        assert_eq!(api.env["HOME_REF"], "${HOME}", "$${{ is a literal ${{");
        assert_eq!(api.env["PLAIN"], "x");
        let git_ref = api.build.as_ref().unwrap().git_ref.as_deref();
        assert_eq!(git_ref, Some("release-2.1"));
        assert_eq!(
            used(&got, "h1", "api"),
            vec![
                "region = \"eu\" from the hive's values (line 2), in image, command[1], env.REGION",
                "tag = \"2.1\" from the hive's values (line 3), in image, build.ref",
            ]
        );
        // h2 sets no tag: the group's default fills it, and says so.
        assert_eq!(
            spec(&got, "h2", "api").image.as_deref(),
            Some("reg.us/api:1.0")
        );
        assert_eq!(
            used(&got, "h2", "api"),
            vec![
                "region = \"us\" from the hive's values (line 6), in image, command[1], env.REGION",
                "tag = \"1.0\" from group web's default (line 15), in image, build.ref",
            ]
        );
        // A hive's own table uses its values too.
        assert_eq!(spec(&got, "h3", "tool").image.as_deref(), Some("tool:fast"));
        assert_eq!(
            used(&got, "h3", "tool"),
            vec!["probe = \"fast\" from the hive's values (line 9), in image"]
        );
        // Hash and all depend on the substituted strings only.
        let (eu, us) = (spec(&got, "h1", "api"), spec(&got, "h2", "api"));
        assert_ne!(eu.spec_hash(), us.spec_hash());
    }

    #[test]
    fn a_hive_with_only_values_is_left_alone_unless_a_group_selects_it() {
        let r = roster(&[("h1", &[]), ("h2", &[("role", "db")]), ("h3", &[])]);
        let got = resolve(&file(VALUES), &r).unwrap();
        let hives: Vec<&str> = got.keys().map(|h| h.as_str()).collect();
        assert_eq!(hives, vec!["h3"], "h1 and h2 only give values to groups");
    }

    #[test]
    fn a_missing_value_names_the_hive_the_source_and_the_placeholder() {
        let f = file(
            "[hives.own.agents.tool]\nimage = \"t:${values.probe}\"\n\n\
             [groups.web]\nselect = {}\nvalues = { tag = \"1\" }\n\
             [groups.web.agents.api]\nimage = \"api:${values.tag}\"\n\
             env = { REGION = \"${values.region}\", ZONE = \"${values.region}-a\" }\n",
        );
        let err = resolve(&f, &roster(&[("beta", &[]), ("own", &[])])).unwrap_err();
        let want = [
            "hive beta: group web, agent api, env.REGION uses ${values.region}, which hive beta \
             does not set and group web has no default for (line 7); add region to \
             [hives.beta.values] or [groups.web.values]",
            "hive beta: group web, agent api, env.ZONE uses ${values.region}",
            "hive own: its own table, agent tool, image uses ${values.probe}, which hive own \
             does not set (line 1); add probe to [hives.own.values]",
            "hive own: group web, agent api, env.REGION uses ${values.region}",
            "hive own: group web, agent api, env.ZONE uses ${values.region}",
        ];
        assert_eq!(err.len(), want.len(), "{err:#?}");
        for (got, want) in err.iter().zip(want) {
            assert!(got.starts_with(want), "{got}\n does not start with\n{want}");
        }
    }

    #[test]
    fn a_substituted_spec_is_checked_again_per_hive() {
        let f = file(
            "[hives.beta.values]\nimage = \"bad image\"\n\
             [hives.gamma.values]\nimage = \"good:1\"\n\
             [groups.web]\nselect = {}\n[groups.web.agents.api]\nimage = \"${values.image}\"\n",
        );
        let err = resolve(&f, &roster(&[("beta", &[]), ("gamma", &[])])).unwrap_err();
        assert_eq!(err.len(), 1, "{err:#?}");
        assert_eq!(
            err[0],
            "hive beta: group web (line 7), agent api, with its values: agents.api.image \
             \"bad image\" is not an image reference"
        );
    }

    #[test]
    fn values_do_not_make_one_agent_from_two_sources_legal() {
        let f = file(
            "[hives.alpha]\nvalues = { v = \"1\" }\n[hives.alpha.agents.api]\nimage = \"a:${values.v}\"\n\n\
             [groups.web]\nselect = {}\nvalues = { v = \"2\" }\n\
             [groups.web.agents.api]\nimage = \"a:${values.v}\"\n",
        );
        let err = resolve(&f, &roster(&[("alpha", &[])])).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(
            err[0].contains(
                "agent api of hive alpha is declared twice: by the hive's own table (line 3) \
                 and by group web (line 9)"
            ),
            "{err:?}"
        );
    }
}
