//! The swarm file: what every hive should run, as an operator writes it.
//!
//! ```toml
//! [hives.alpha.agents.mail-bot]
//! image = "local/mail-bot:1.4"
//! env = { LOG = "info" }
//! credentials = ["smtp"]
//!
//! [hives.beta]
//! agents = {}          # explicit: beta runs nothing
//!
//! [hives.gamma.values] # no agents of its own: values for its groups
//! region = "eu"
//!
//! [groups.web]         # every rostered hive whose labels include role=web
//! select = { role = "web" }
//! values = { region = "us" }   # a default, for a hive that sets none
//! [groups.web.agents.api]
//! image = "local/api:2"
//! env = { REGION = "${values.region}" }
//!
//! [rollout]            # for `declare --rollout`
//! waves = ["1", "10%", "100%"]
//! ```
//!
//! Each agent table takes exactly the fields of the wire contract's
//! `AgentSpec`. A file is refused as a whole when anything in it is wrong,
//! and every problem is reported with its line: names that are not DNS
//! labels, keys no field takes (a typo such as `imgae`), values the contract
//! bounds refuse. A hive or group table must say `agents`, even when empty:
//! an explicit empty declaration retires everything on that hive, so it is
//! never inferred from an absent key; a hive table with only `values`
//! declares no agents of its own. A hive that is neither in the file nor
//! selected by a group is left alone by `declare`. The placeholders of
//! [`crate::values`] are checked here (their form, and that the rest of the
//! agent is valid); their values are filled in by [`crate::groups`].
//!
//! This module only parses; how a hive's own table and its groups make one
//! declaration is [`crate::groups`], which needs the roster's labels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use swarm_queue_client::{AgentName, AgentSpec, GroupName, HiveName};
use toml::Spanned;

use crate::rollout_settings::{RawRollout, RolloutSettings};
use crate::roster::Labels;
use crate::toml_lines::{describe_toml_error, Lines};
use crate::values::{templates_of, SetValue, Templates, ValueName, Values};

/// One agent as a table of the file declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredAgent {
    /// Line of the agent's key, for conflict messages.
    pub line: usize,
    /// As written: placeholders and escapes are still in it.
    pub spec: AgentSpec,
    /// The fields of `spec` that hold placeholders or escapes, split.
    pub templates: Templates,
}

/// A table of agents: a hive's own (`[hives.X]`) or a group's.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTable {
    /// Line of the hive's or group's key.
    pub line: usize,
    pub agents: BTreeMap<AgentName, DeclaredAgent>,
}

/// A `[hives.NAME]` table: the hive's own agents and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct HiveTable {
    /// Line of the hive's key.
    pub line: usize,
    /// `None` when the table only sets values: the hive's agents then come
    /// from its groups alone.
    pub agents: Option<AgentTable>,
    /// `[hives.NAME.values]`: what the placeholders of this hive's agents
    /// (its own and its groups') take, before any group's default.
    pub values: Values,
}

/// A `[groups.NAME]` table: the labels it selects and the agents it declares
/// for every hive it selects.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Every label here must be on a hive for the group to select it; an
    /// empty `select` selects every rostered hive.
    pub select: BTreeMap<String, String>,
    pub table: AgentTable,
    /// `[groups.NAME.values]`: defaults for the placeholders of this
    /// group's agents, for a hive whose own values do not set them.
    pub values: Values,
}

impl Group {
    pub fn selects(&self, labels: &Labels) -> bool {
        self.select.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// A parsed, valid swarm file.
#[derive(Debug, Clone, PartialEq)]
pub struct SwarmFile {
    pub path: PathBuf,
    /// Each hive's own table.
    pub hives: BTreeMap<HiveName, HiveTable>,
    pub groups: BTreeMap<GroupName, Group>,
    /// The `[rollout]` table, if the file has one.
    pub rollout: Option<RolloutSettings>,
}

#[derive(Debug, thiserror::Error)]
pub enum SwarmFileError {
    #[error("cannot read swarm file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("swarm file {path} is invalid:\n  - {}", problems.join("\n  - "))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    hives: BTreeMap<Spanned<String>, Spanned<RawHive>>,
    #[serde(default)]
    groups: BTreeMap<Spanned<String>, Spanned<RawGroup>>,
    #[serde(default)]
    rollout: Option<Spanned<RawRollout>>,
}

type RawAgents = BTreeMap<Spanned<String>, Spanned<toml::Value>>;
type RawValues = BTreeMap<Spanned<String>, String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHive {
    #[serde(default)]
    agents: Option<RawAgents>,
    #[serde(default)]
    values: Option<RawValues>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    select: BTreeMap<String, String>,
    agents: RawAgents,
    #[serde(default)]
    values: RawValues,
}

const NO_AGENTS_HINT: &str = "write `agents = {}` to declare that this hive runs nothing \
     (that retires every agent on it), or remove the hive table to leave it alone";

impl SwarmFile {
    pub fn load(path: &Path) -> Result<SwarmFile, SwarmFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| SwarmFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<SwarmFile, SwarmFileError> {
        let invalid = |problems| SwarmFileError::Invalid {
            path: path.to_path_buf(),
            problems,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let mut message = describe_toml_error(text, &e);
            if e.message().contains("missing field `agents`") {
                message.push_str("; ");
                message.push_str(NO_AGENTS_HINT);
            }
            invalid(vec![message])
        })?;
        let mut problems = Vec::new();
        let lines = Lines::new(text);
        let mut hives = BTreeMap::new();
        for (key, hive) in raw.hives {
            let at = format!("hives.{}", key.get_ref());
            let line = lines.line(key.span().start);
            let hive = hive.into_inner();
            if hive.agents.is_none() && hive.values.is_none() {
                problems.push(format!(
                    "line {line}: {at}: missing field `agents`; {NO_AGENTS_HINT}; or give it \
                     only a [{at}.values] table for its groups"
                ));
            }
            let table = HiveTable {
                line,
                agents: hive
                    .agents
                    .map(|raw| agent_table(&lines, line, &at, raw, &mut problems)),
                values: values_table(&lines, &at, hive.values.unwrap_or_default(), &mut problems),
            };
            match HiveName::new(key.get_ref().as_str()) {
                Ok(name) => {
                    hives.insert(name, table);
                }
                Err(e) => problems.push(format!("line {line}: {at}: {e}")),
            }
        }
        let mut groups = BTreeMap::new();
        for (key, group) in raw.groups {
            let at = format!("groups.{}", key.get_ref());
            let line = lines.line(key.span().start);
            let group = group.into_inner();
            let table = agent_table(&lines, line, &at, group.agents, &mut problems);
            let values = values_table(&lines, &at, group.values, &mut problems);
            match GroupName::new(key.get_ref().as_str()) {
                Ok(name) => {
                    groups.insert(
                        name,
                        Group {
                            select: group.select,
                            table,
                            values,
                        },
                    );
                }
                Err(e) => problems.push(format!("line {line}: {at}: {e}")),
            }
        }
        let rollout = raw.rollout.and_then(|r| {
            let line = lines.line(r.span().start);
            RolloutSettings::from_raw(r.into_inner())
                .map_err(|e| problems.push(format!("line {line}: rollout: {e}")))
                .ok()
        });
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        Ok(SwarmFile {
            path: path.to_path_buf(),
            hives,
            groups,
            rollout,
        })
    }
}

/// Parse one table of agents, pushing every problem (prefixed with its line
/// and `at`, the table's dotted path) to `problems`.
fn agent_table(
    lines: &Lines,
    line: usize,
    at: &str,
    raw: RawAgents,
    problems: &mut Vec<String>,
) -> AgentTable {
    let mut agents = BTreeMap::new();
    for (agent_key, value) in raw {
        let agent_line = lines.line(agent_key.span().start);
        let here = format!("line {agent_line}: {at}.agents.{}", agent_key.get_ref());
        let agent = match AgentName::new(agent_key.get_ref().as_str()) {
            Ok(a) => a,
            Err(e) => {
                problems.push(format!("{here}: {e}"));
                continue;
            }
        };
        let mut unknown = Vec::new();
        let spec: Result<AgentSpec, _> = serde_ignored::deserialize(value.into_inner(), |path| {
            // `?` is serde_ignored's step into an `Option`: not a key.
            unknown.push(path.to_string().replace(".?", ""))
        });
        // The contract keeps an agent's unknown keys (for a reader to warn
        // of); in a file they are typos, refused like nested ones.
        if let Ok(spec) = &spec {
            unknown.extend(spec.unknown.keys().cloned());
        }
        for key in unknown {
            problems.push(format!(
                "{here}: unknown key `{key}`; an agent takes {}",
                swarm_queue_client::AGENT_FIELDS.join(", ")
            ));
        }
        match spec {
            Ok(spec) => {
                let templates = templates_of(&spec).unwrap_or_else(|bad| {
                    problems.extend(bad.into_iter().map(|e| format!("{here}.{e}")));
                    Templates::new()
                });
                if let Err(e) = as_written(&spec, &templates).validate(&agent) {
                    problems.push(format!("line {agent_line}: {at}.{e}"));
                }
                agents.insert(
                    agent,
                    DeclaredAgent {
                        line: agent_line,
                        spec,
                        templates,
                    },
                );
            }
            Err(e) => problems.push(format!("{here}: {}", e.message())),
        }
    }
    AgentTable { line, agents }
}

/// Parse a `values` table, pushing every bad name (with its line).
fn values_table(lines: &Lines, at: &str, raw: RawValues, problems: &mut Vec<String>) -> Values {
    let mut values = Values::new();
    for (key, value) in raw {
        let line = lines.line(key.span().start);
        match ValueName::new(key.get_ref()) {
            Ok(name) => {
                values.insert(name, SetValue { value, line });
            }
            Err(e) => problems.push(format!("line {line}: {at}.values: {e}")),
        }
    }
    values
}

/// `spec` with each placeholder left as written (and each `$${` made
/// `${`): what the contract's bounds are checked on before any hive's
/// values are known. The substituted spec is checked again per hive.
fn as_written(spec: &AgentSpec, templates: &Templates) -> AgentSpec {
    let mut spec = spec.clone();
    for (field, template) in templates {
        let written: BTreeMap<&ValueName, String> = template
            .names()
            .into_iter()
            .map(|n| (n, format!("${{values.{n}}}")))
            .collect();
        crate::values::set(&mut spec, field, template.render(|n| written[n].as_str()));
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn parse(text: &str) -> Result<SwarmFile, Vec<String>> {
        SwarmFile::parse(Path::new("swarm.toml"), text).map_err(|e| match e {
            SwarmFileError::Invalid { problems, .. } => problems,
            other => panic!("{other}"),
        })
    }

    fn own<'a>(f: &'a SwarmFile, hive: &str) -> &'a AgentTable {
        f.hives[&HiveName::new(hive).unwrap()]
            .agents
            .as_ref()
            .unwrap()
    }

    #[test]
    fn a_valid_file() {
        let f = parse(
            "[hives.alpha.agents.mail-bot]\nimage = \"local/mail:1\"\nenv = { LOG = \"info\" }\n\
             credentials = [\"smtp\"]\npower = \"down\"\n\n\
             [hives.alpha.agents.builder.build]\ncontext = \"https://forge/org/builder.git\"\n\n\
             [hives.beta]\nagents = {}\n",
        )
        .unwrap();
        let alpha = own(&f, "alpha");
        assert_eq!(alpha.agents.len(), 2);
        let bot = &alpha.agents[&AgentName::new("mail-bot").unwrap()];
        assert_eq!(bot.spec.env["LOG"], "info");
        assert_eq!(bot.line, 1);
        assert!(own(&f, "beta").agents.is_empty());
        assert!(f.groups.is_empty() && f.rollout.is_none());
    }

    #[test]
    fn every_problem_with_its_line() {
        let err = parse(
            "[hives.alpha.agents.bot]\nimgae = \"x\"\n\n\
             [hives.alpha.agents.Bad_Name]\nimage = \"x\"\n\n\
             [hives.alpha.agents.mem]\nimage = \"x\"\nmemory_mb = 1\n\n\
             [groups.web]\nselect = {}\n[groups.web.agents.api]\nimgae = \"y\"\n",
        )
        .unwrap_err();
        let all = err.join("\n");
        assert!(
            all.contains("line 1: hives.alpha.agents.bot: unknown key `imgae`"),
            "{all}"
        );
        assert!(
            all.contains("line 1: hives.alpha.agents.bot")
                && all.contains("neither image nor build"),
            "{all}"
        );
        assert!(
            all.contains("line 4: hives.alpha.agents.Bad_Name: invalid agent name"),
            "{all}"
        );
        assert!(
            all.contains("line 7: hives.alpha.agents.mem.memory_mb is 1"),
            "{all}"
        );
        assert!(
            all.contains("line 13: groups.web.agents.api: unknown key `imgae`"),
            "{all}"
        );
    }

    #[test]
    fn an_agents_min_running_secs_is_read_and_bounded() {
        let f = parse(
            "[hives.alpha.agents.quick]\nimage = \"x\"\nmin_running_secs = 3\n\n\
             [hives.alpha.agents.plain]\nimage = \"x\"\n",
        )
        .unwrap();
        let alpha = own(&f, "alpha");
        let quick = &alpha.agents[&AgentName::new("quick").unwrap()].spec;
        assert_eq!(quick.min_running_secs, Some(3));
        let plain = &alpha.agents[&AgentName::new("plain").unwrap()].spec;
        assert_eq!(plain.min_running_secs, None, "the hive's own applies");
        assert_eq!(quick.spec_hash(), plain.spec_hash(), "no rebuild for it");
        parse("[hives.a.agents.b]\nimage = \"x\"\nmin_running_secs = 0\n").unwrap();
        let err = parse(
            "[hives.alpha.agents.web]\nimage = \"x\"\nmin_running_secs = 3601\n\n\
             [hives.alpha.agents.neg]\nimage = \"x\"\nmin_running_secs = -1\n",
        )
        .unwrap_err();
        for want in [
            "line 1: hives.alpha.agents.web.min_running_secs is 3601; it must be 0 to 3600",
            "line 5: hives.alpha.agents.neg: invalid value: integer `-1`",
        ] {
            assert!(err.iter().any(|e| e.contains(want)), "{want} in {err:#?}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_at_every_depth() {
        let err = parse(
            "[hives.alpha.agents.bot]\nimage = \"x\"\nmin_runing_secs = 3\n\
             [hives.alpha.agents.bot.health]\ncommand = [\"true\"]\nretrys = 2\n",
        )
        .unwrap_err();
        let all = err.join("\n");
        assert!(all.contains("unknown key `min_runing_secs`"), "{all}");
        assert!(all.contains("unknown key `health.retrys`"), "{all}");
        // The hint lists every agent field, `health` among them.
        assert!(
            all.contains("credentials, health, min_running_secs"),
            "{all}"
        );
        assert_eq!(err.len(), 2, "{all}");
    }

    #[test]
    fn a_hive_must_say_agents() {
        let err = parse("[hives.alpha]\n").unwrap_err();
        assert!(
            err[0].contains("line 1") && err[0].contains("agents = {}"),
            "{err:?}"
        );
        assert!(err[0].contains("[hives.alpha.values]"), "{err:?}");
        let err = parse("[groups.web]\nselect = {}\n").unwrap_err();
        assert!(err[0].contains("agents"), "{err:?}");
        let err = parse("[groups.web]\nagents = {}\n").unwrap_err();
        assert!(err[0].contains("select"), "{err:?}");
    }

    #[test]
    fn bad_names_and_syntax_and_types() {
        let err = parse("[hives.\"al.pha\"]\nagents = {}\n").unwrap_err();
        assert!(err[0].contains("invalid hive name \"al.pha\""), "{err:?}");
        let err = parse("[groups.Web]\nselect = {}\nagents = {}\n").unwrap_err();
        assert!(
            err[0].contains("line 1: groups.Web: invalid group name"),
            "{err:?}"
        );
        let err = parse("[hives.alpha.agents.bot\nimage = 1\n").unwrap_err();
        assert!(err[0].starts_with("line 1"), "{err:?}");
        let err = parse("[hives.alpha.agents.bot]\nimage = 3\n").unwrap_err();
        assert!(
            err[0].contains("line 1: hives.alpha.agents.bot: invalid type"),
            "{err:?}"
        );
        let err = parse("[hivez.alpha]\n").unwrap_err();
        assert!(err[0].contains("hivez"), "{err:?}");
    }

    #[test]
    fn groups_and_rollout_parse() {
        let f = parse(
            "[groups.web]\nselect = { role = \"web\" }\n\
             [groups.web.agents.api]\nimage = \"api:1\"\n\n\
             [rollout]\nwaves = [\"1\", \"50%\", \"100%\"]\nmax_failed = 1\n",
        )
        .unwrap();
        let web = &f.groups[&GroupName::new("web").unwrap()];
        assert_eq!(web.table.line, 1);
        assert_eq!(web.table.agents[&AgentName::new("api").unwrap()].line, 3);
        assert!(web.selects(&[("role".into(), "web".into())].into()));
        assert!(!web.selects(&[("role".into(), "db".into())].into()));
        assert!(!web.selects(&Labels::default()));
        assert_eq!(f.rollout.unwrap().max_failed, 1);
        let err = parse("[rollout]\nwaves = [\"0\"]\n").unwrap_err();
        assert!(err[0].starts_with("line 1: rollout: "), "{err:?}");
    }

    #[test]
    fn values_tables_and_placeholders_parse_with_their_lines() {
        let f = parse(
            "[hives.alpha.values]\nregion = \"eu\"\n\n\
             [groups.web]\nselect = {}\nvalues = { region = \"us\" }\n\
             [groups.web.agents.api]\nimage = \"api:${values.region}\"\n",
        )
        .unwrap();
        let alpha = &f.hives[&HiveName::new("alpha").unwrap()];
        assert!(alpha.agents.is_none(), "values only: no agents of its own");
        let region = ValueName::new("region").unwrap();
        assert_eq!(alpha.values[&region].value, "eu");
        assert_eq!(alpha.values[&region].line, 2);
        let web = &f.groups[&GroupName::new("web").unwrap()];
        assert_eq!(web.values[&region].line, 6);
        let api = &web.table.agents[&AgentName::new("api").unwrap()];
        assert_eq!(api.spec.image.as_deref(), Some("api:${values.region}"));
        assert_eq!(api.templates.len(), 1);
    }

    #[test]
    fn bad_placeholders_and_value_names_are_refused_with_their_lines() {
        let err = parse(
            "[groups.web]\nselect = {}\nvalues = { Region = \"x\" }\n\
             [groups.web.agents.api]\nimage = \"api:${foo}\"\n\
             command = [\"run\", \"${values.x\"]\n\n\
             [hives.alpha.values]\nok = \"1\"\n\"bad.name\" = \"2\"\n",
        )
        .unwrap_err();
        let all = err.join("\n");
        for want in [
            "line 4: groups.web.agents.api.image: `${foo}` is not a placeholder; a placeholder \
             is ${values.NAME}",
            "line 4: groups.web.agents.api.command[1]: `${values.x` has no closing }",
            "line 3: groups.web.values: \"Region\" is not a value name",
            "line 10: hives.alpha.values: \"bad.name\" is not a value name",
        ] {
            assert!(all.contains(want), "{want}\nin\n{all}");
        }
        // A value is a string: the toml error names the line.
        let err = parse("[hives.beta.values]\nn = 3\n").unwrap_err();
        assert!(
            err[0].starts_with("line 2") && err[0].contains("string"),
            "{err:?}"
        );
        // The rest of an agent with placeholders is still checked.
        let err = parse(
            "[hives.a.values]\nv = \"1\"\n[hives.a.agents.b]\nimage = \"x:${values.v}\"\nmemory_mb = 1\n",
        )
        .unwrap_err();
        assert!(
            err[0].contains("line 3: hives.a.agents.b.memory_mb is 1"),
            "{err:?}"
        );
        let err = parse("[hives.a.agents.b]\nimage = \"x y ${values.v}\"\n").unwrap_err();
        assert!(
            err[0].contains("image \"x y ${values.v}\" is not an image reference"),
            "{err:?}"
        );
    }
}
