//! Per-hive values in a swarm file: the `${values.NAME}` placeholders an
//! agent's `image`, `build.ref`, `command` arguments and `env` values may
//! hold, and how one string is split into text and placeholders (pure).
//!
//! The syntax is explicit so that nothing is substituted by accident: `${`
//! always opens a placeholder, the only placeholder is `${values.NAME}`,
//! and `$${` is a literal `${`. Any other `${…` (`${foo}`, `${values.x`
//! without its `}`) is refused with its line when the file is parsed, so a
//! shell snippet in a `command` that used `${HOME}` is a clear error, not a
//! silently empty string. A `$` not followed by `{` is plain text (`$HOME`,
//! `$$`). A `${values.` anywhere else in an agent (`build.context`,
//! `health`, …) is refused rather than passed on literally.
//!
//! Which value a placeholder takes is [`crate::groups`]'s business: the
//! substitution happens in the controller before the declaration is
//! encoded, so a hive (of any version) only ever sees plain strings, and a
//! spec hash depends only on the substituted values.

use std::collections::BTreeMap;

use serde::Serialize;
use swarm_queue_client::{AgentSpec, GroupName};

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

/// The longest value name, like a DNS label.
pub const MAX_VALUE_NAME_LEN: usize = 63;

const PLACEHOLDER_HELP: &str = "a placeholder is ${values.NAME} (NAME: a lowercase letter, \
     then lowercase letters, digits, _ or -, at most 63), and $${ is a literal ${";

/// The name of a value (`[hives.X.values] NAME = "…"`): a lowercase ASCII
/// letter, then up to 62 lowercase letters, digits, `_` or `-`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ValueName(String);

impl ValueName {
    pub fn new(name: &str) -> Result<ValueName, String> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if first_ok && rest_ok && name.len() <= MAX_VALUE_NAME_LEN {
            Ok(ValueName(name.to_string()))
        } else {
            Err(format!(
                "{name:?} is not a value name: it must be a lowercase letter, then lowercase \
                 letters, digits, _ or -, at most {MAX_VALUE_NAME_LEN} in all"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ValueName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One value as a `values` table of the file sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetValue {
    pub value: String,
    /// Line of the value's key, for `declare --dry-run`.
    pub line: usize,
}

/// A `[hives.X.values]` or `[groups.G.values]` table.
pub type Values = BTreeMap<ValueName, SetValue>;

/// One value an agent of a hive uses: what it is, where it came from and
/// the fields it went into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValueUse {
    pub value: String,
    /// The hive's own `[hives.X.values]`, or the default in
    /// `[groups.G.values]` of the group that declares the agent; at the
    /// value's line.
    #[serde(flatten)]
    pub source: Origin,
    #[serde(rename = "in")]
    pub fields: Vec<String>,
}

impl std::fmt::Display for ValueUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} from ", self.value)?;
        match &self.source {
            Origin::Hive { line } => write!(f, "the hive's values (line {line})")?,
            Origin::Group { group, line } => write!(f, "group {group}'s default (line {line})")?,
        }
        write!(f, ", in {}", self.fields.join(", "))
    }
}

/// A field of an agent that may hold placeholders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    Image,
    BuildRef,
    Command(usize),
    Env(String),
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Image => f.write_str("image"),
            Field::BuildRef => f.write_str("build.ref"),
            Field::Command(i) => write!(f, "command[{i}]"),
            Field::Env(key) => write!(f, "env.{key}"),
        }
    }
}

/// One string split into text and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Value(ValueName),
}

/// Every field of one agent that holds a placeholder or an escape.
pub type Templates = BTreeMap<Field, Template>;

impl Template {
    /// Split `text`; an error says what is wrong with which `${…`.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("$${") {
                literal.push_str("${");
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${") {
                let Some(end) = after.find('}') else {
                    return Err(format!(
                        "{} has no closing }}; {PLACEHOLDER_HELP}",
                        shown(tail)
                    ));
                };
                let name = after[..end].strip_prefix("values.").ok_or_else(|| {
                    format!(
                        "{} is not a placeholder; {PLACEHOLDER_HELP}",
                        shown(&tail[..end + 3])
                    )
                })?;
                let name = ValueName::new(name)
                    .map_err(|e| format!("{}: {e}; {PLACEHOLDER_HELP}", shown(&tail[..end + 3])))?;
                if !literal.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                }
                parts.push(Part::Value(name));
                rest = &after[end + 1..];
            } else {
                literal.push('$');
                rest = &tail[1..];
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { parts })
    }

    /// The value names the template uses, in order, each once.
    pub fn names(&self) -> Vec<&ValueName> {
        let mut names: Vec<&ValueName> = Vec::new();
        for part in &self.parts {
            if let Part::Value(n) = part {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names
    }

    /// The string with each placeholder replaced by `value(name)`.
    pub fn render<'a>(&'a self, value: impl Fn(&'a ValueName) -> &'a str) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.as_str(),
                Part::Value(n) => value(n),
            })
            .collect()
    }
}

/// Every field of `spec` that holds `${`, split; or every problem, each
/// starting with the field's name. A `${values.` in any other field is a
/// problem too: it would reach the hive as it is.
pub fn templates_of(spec: &AgentSpec) -> Result<Templates, Vec<String>> {
    let mut fields: Vec<(Field, &str)> = Vec::new();
    if let Some(image) = &spec.image {
        fields.push((Field::Image, image));
    }
    if let Some(r) = spec.build.as_ref().and_then(|b| b.git_ref.as_deref()) {
        fields.push((Field::BuildRef, r));
    }
    for (i, arg) in spec.command.iter().flatten().enumerate() {
        fields.push((Field::Command(i), arg));
    }
    for (key, value) in &spec.env {
        fields.push((Field::Env(key.clone()), value));
    }
    let mut templates = Templates::new();
    let mut problems = Vec::new();
    for (field, text) in fields.into_iter().filter(|(_, t)| t.contains("${")) {
        match Template::parse(text) {
            Ok(t) => {
                templates.insert(field, t);
            }
            Err(e) => problems.push(format!("{field}: {e}")),
        }
    }
    let mut elsewhere = Vec::new();
    if let Ok(json) = serde_json::to_value(spec) {
        placeholders_elsewhere(&json, String::new(), &mut elsewhere);
    }
    problems.extend(elsewhere.into_iter().map(|path| {
        format!(
            "{path}: placeholders are substituted only in image, build.ref, command and env values"
        )
    }));
    if problems.is_empty() {
        Ok(templates)
    } else {
        Err(problems)
    }
}

/// Write `value` into `field` of `spec`.
pub fn set(spec: &mut AgentSpec, field: &Field, value: String) {
    match field {
        Field::Image => spec.image = Some(value),
        Field::BuildRef => {
            if let Some(b) = spec.build.as_mut() {
                b.git_ref = Some(value);
            }
        }
        Field::Command(i) => {
            if let Some(arg) = spec.command.as_mut().and_then(|c| c.get_mut(*i)) {
                *arg = value;
            }
        }
        Field::Env(key) => {
            spec.env.insert(key.clone(), value);
        }
    }
}

/// The paths of strings holding `${values.` outside the substituted
/// fields of a spec serialised to JSON.
fn placeholders_elsewhere(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
    let substituted = path == "image"
        || path == "build.ref"
        || path.starts_with("command[")
        || path.starts_with("env.");
    match v {
        serde_json::Value::String(s) if !substituted && s.contains("${values.") => out.push(path),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                placeholders_elsewhere(item, format!("{path}[{i}]"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                placeholders_elsewhere(item, path, out);
            }
        }
        _ => {}
    }
}

/// A bad `${…` as the message shows it: quoted, at most 40 characters.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        format!("`{cut}…`")
    } else {
        format!("`{cut}`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(text: &str) -> Result<String, String> {
        let t = Template::parse(text)?;
        Ok(t.render(|n| if n.as_str() == "region" { "eu" } else { "X" }))
    }

    #[test]
    fn placeholders_escapes_and_plain_dollars() {
        for (text, want) in [
            ("plain", "plain"),
            ("${values.region}", "eu"),
            ("api-${values.region}:${values.tag}", "api-eu:X"),
            ("$${values.region}", "${values.region}"),
            ("echo $HOME $$ $", "echo $HOME $$ $"),
            ("a$${b}c", "a${b}c"),
            ("${values.region}${values.region}", "eueu"),
            ("", ""),
        ] {
            assert_eq!(render(text).as_deref(), Ok(want), "{text}");
        }
        let t = Template::parse("${values.b}-${values.a}-${values.b}").unwrap();
        let names: Vec<&str> = t.names().iter().map(|n| n.as_str()).collect();
        assert_eq!(names, vec!["b", "a"]);
        assert!(Template::parse("$${x}").unwrap().names().is_empty());
    }

    #[test]
    fn an_unknown_form_is_refused_naming_it() {
        for (text, want) in [
            ("${foo}", "`${foo}` is not a placeholder"),
            ("x ${values.region", "`${values.region` has no closing }"),
            ("${values.}", "`${values.}`: \"\" is not a value name"),
            ("${values.Region}", "\"Region\" is not a value name"),
            ("${values.a.b}", "\"a.b\" is not a value name"),
            ("${ values.a }", "is not a placeholder"),
            (
                "ok ${values.a} then ${HOME}",
                "`${HOME}` is not a placeholder",
            ),
        ] {
            let err = render(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("$${ is a literal ${"), "{text}: {err}");
        }
        let long = format!("${{{}", "y".repeat(100));
        assert!(render(&long).unwrap_err().contains("…`"));
    }

    #[test]
    fn value_names_are_bounded() {
        for ok in ["a", "region", "eu_west-1", &"x".repeat(63)] {
            assert!(ValueName::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "_a", "A", "a.b", "a b", "zürich", &"x".repeat(64)] {
            assert!(ValueName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_fields_of_a_spec_and_placeholders_elsewhere() {
        let spec: AgentSpec = toml::from_str(
            "image = \"r/${values.app}:1\"\ncommand = [\"run\", \"--at=${values.region}\"]\n\
             env = { A = \"${values.region}\", B = \"plain\", C = \"$${lit}\" }\n\
             [build]\ncontext = \"https://forge/x.git\"\nref = \"${values.branch}\"\n",
        )
        .unwrap();
        let got = templates_of(&spec).unwrap();
        let fields: Vec<String> = got.keys().map(ToString::to_string).collect();
        assert_eq!(
            fields,
            vec!["image", "build.ref", "command[1]", "env.A", "env.C"]
        );
        let mut spec2 = spec.clone();
        for (field, t) in &got {
            set(&mut spec2, field, t.render(|n| n.as_str()));
        }
        assert_eq!(spec2.image.as_deref(), Some("r/app:1"));
        assert_eq!(spec2.build.unwrap().git_ref.as_deref(), Some("branch"));
        assert_eq!(spec2.command.unwrap(), vec!["run", "--at=region"]);
        assert_eq!(spec2.env["A"], "region");
        assert_eq!(spec2.env["C"], "${lit}");

        let spec: AgentSpec = toml::from_str(
            "image = \"x\"\nenv = { A = \"${bad}\" }\n[health]\ncommand = [\"${values.probe}\"]\n",
        )
        .unwrap();
        let err = templates_of(&spec).unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(
            err[0].starts_with("env.A: `${bad}` is not a placeholder"),
            "{err:?}"
        );
        assert!(
            err[1].starts_with("health.command[0]: placeholders are substituted only in"),
            "{err:?}"
        );
    }
}
