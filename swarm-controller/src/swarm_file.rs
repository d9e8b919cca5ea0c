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
//! ```
//!
//! Each agent table takes exactly the fields of the wire contract's
//! `AgentSpec`. A file is refused as a whole when anything in it is wrong,
//! and every problem is reported with its line: names that are not DNS
//! labels, keys no field takes (a typo such as `imgae`), values the contract
//! bounds refuse. A hive table must say `agents`, even when empty: an
//! explicit empty declaration retires everything on that hive, so it is
//! never inferred from an absent key. A hive that is not in the file at all
//! is left alone by `declare`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use swarm_queue_client::{AgentName, AgentSpec, Declaration, HiveName, Payload};
use toml::Spanned;

use crate::config::{describe_toml_error, Lines, Roster};

/// One hive's declaration, and where it is in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct HiveDeclaration {
    pub line: usize,
    pub declaration: Declaration,
}

/// A parsed, valid swarm file.
#[derive(Debug, Clone, PartialEq)]
pub struct SwarmFile {
    pub path: PathBuf,
    pub hives: BTreeMap<HiveName, HiveDeclaration>,
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHive {
    agents: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

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
                message.push_str(
                    "; write `agents = {}` to declare that this hive runs nothing \
                     (that retires every agent on it), or remove the hive table to leave it alone",
                );
            }
            invalid(vec![message])
        })?;
        let mut problems = Vec::new();
        let mut hives = BTreeMap::new();
        let lines = Lines::new(text);
        for (hive_key, hive) in raw.hives {
            let hive_line = lines.line(hive_key.span().start);
            let hive_name = match HiveName::new(hive_key.get_ref().as_str()) {
                Ok(n) => Some(n),
                Err(e) => {
                    problems.push(format!(
                        "line {hive_line}: hives.{}: {e}",
                        hive_key.get_ref()
                    ));
                    None
                }
            };
            let mut agents = BTreeMap::new();
            for (agent_key, value) in hive.into_inner().agents {
                let line = lines.line(agent_key.span().start);
                let at = format!(
                    "line {line}: hives.{}.agents.{}",
                    hive_key.get_ref(),
                    agent_key.get_ref()
                );
                let agent = match AgentName::new(agent_key.get_ref().as_str()) {
                    Ok(a) => a,
                    Err(e) => {
                        problems.push(format!("{at}: {e}"));
                        continue;
                    }
                };
                let mut unknown = Vec::new();
                let spec: Result<AgentSpec, _> =
                    serde_ignored::deserialize(value.into_inner(), |path| {
                        unknown.push(path.to_string())
                    });
                for key in unknown {
                    problems.push(format!(
                        "{at}: unknown key `{key}`; an agent takes image, build, command, env, \
                         power, memory_mb, cpus and credentials"
                    ));
                }
                match spec {
                    Ok(spec) => {
                        if let Err(e) = spec.validate(&agent) {
                            problems.push(format!("line {line}: hives.{}.{e}", hive_key.get_ref()));
                        }
                        agents.insert(agent, spec);
                    }
                    Err(e) => problems.push(format!("{at}: {}", e.message())),
                }
            }
            let declaration = Declaration::new(agents);
            if let Err(e) = declaration.validate() {
                problems.push(format!(
                    "line {hive_line}: hives.{}: {e}",
                    hive_key.get_ref()
                ));
            }
            if let Some(name) = hive_name {
                hives.insert(
                    name,
                    HiveDeclaration {
                        line: hive_line,
                        declaration,
                    },
                );
            }
        }
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        Ok(SwarmFile {
            path: path.to_path_buf(),
            hives,
        })
    }

    /// Hives the file declares that the roster does not know.
    pub fn check_roster(&self, roster: &Roster) -> Vec<String> {
        self.hives
            .iter()
            .filter(|(name, _)| !roster.contains_key(*name))
            .map(|(name, d)| {
                format!(
                    "line {}: hive {name} is not on the roster; add [hives.{name}] to the \
                     controller config first",
                    d.line
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SwarmFile, Vec<String>> {
        SwarmFile::parse(Path::new("swarm.toml"), text).map_err(|e| match e {
            SwarmFileError::Invalid { problems, .. } => problems,
            other => panic!("{other}"),
        })
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
        let alpha = &f.hives[&HiveName::new("alpha").unwrap()];
        assert_eq!(alpha.declaration.agents.len(), 2);
        let bot = &alpha.declaration.agents[&AgentName::new("mail-bot").unwrap()];
        assert_eq!(bot.env["LOG"], "info");
        let beta = &f.hives[&HiveName::new("beta").unwrap()];
        assert!(beta.declaration.agents.is_empty());
    }

    #[test]
    fn every_problem_with_its_line() {
        let err = parse(
            "[hives.alpha.agents.bot]\nimgae = \"x\"\n\n\
             [hives.alpha.agents.Bad_Name]\nimage = \"x\"\n\n\
             [hives.alpha.agents.mem]\nimage = \"x\"\nmemory_mb = 1\n",
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
    }

    #[test]
    fn a_hive_must_say_agents() {
        let err = parse("[hives.alpha]\n").unwrap_err();
        assert!(
            err[0].contains("line 1") && err[0].contains("agents = {}"),
            "{err:?}"
        );
    }

    #[test]
    fn bad_hive_names_and_syntax_and_types() {
        let err = parse("[hives.\"al.pha\"]\nagents = {}\n").unwrap_err();
        assert!(err[0].contains("invalid hive name \"al.pha\""), "{err:?}");
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
    fn hives_off_the_roster_are_named() {
        let f = parse("[hives.alpha]\nagents = {}\n\n[hives.gamma]\nagents = {}\n").unwrap();
        let roster: Roster = [(HiveName::new("alpha").unwrap(), Default::default())].into();
        let problems = f.check_roster(&roster);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("line 4: hive gamma is not on the roster"),
            "{problems:?}"
        );
    }
}
