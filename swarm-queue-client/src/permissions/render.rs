//! The generated accounts as nats-server config text (with a comment on
//! every grant, export and import) and as JSON: what `swarm-controller
//! nats-config` prints.

use std::fmt::Write as _;

use super::{Account, Authorization, Grant, User};

/// Quote a string for the nats-server config format. Subjects and keys are
/// plain ASCII without quotes or backslashes, but escape anyway.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn render_grants(out: &mut String, what: &str, grants: &[Grant]) {
    let width = grants
        .iter()
        .map(|g| g.subject.len() + 2)
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "          {what}: {{");
    let _ = writeln!(out, "            allow: [");
    for g in grants {
        let _ = writeln!(
            out,
            "              {:<width$}  # {}",
            quote(&g.subject),
            g.why
        );
    }
    let _ = writeln!(out, "            ]");
    let _ = writeln!(out, "          }}");
}

/// Entries of one list (`users`, `exports`, `imports`), each with its
/// comment, aligned.
fn render_entries(out: &mut String, what: &str, entries: &[(String, String)]) {
    if entries.is_empty() {
        return;
    }
    let width = entries.iter().map(|(e, _)| e.len()).max().unwrap_or(0);
    let _ = writeln!(out, "    {what}: [");
    for (entry, why) in entries {
        let _ = writeln!(out, "      {entry:<width$}  # {why}");
    }
    let _ = writeln!(out, "    ]");
}

fn render_user(out: &mut String, user: &User) {
    let _ = writeln!(out, "      # {}", user.role);
    out.push_str("      {\n");
    let _ = writeln!(out, "        nkey: {}", quote(&user.nkey));
    out.push_str("        permissions: {\n");
    render_grants(out, "publish", &user.permissions.publish);
    render_grants(out, "subscribe", &user.permissions.subscribe);
    if user.permissions.allow_responses {
        out.push_str(
            "          # may answer a request it received (a deploy reply), once per request\n",
        );
        out.push_str("          allow_responses: true\n");
    }
    out.push_str("        }\n      }\n");
}

pub(super) fn render_account(out: &mut String, account: &Account) {
    let _ = writeln!(out, "  # {}", account.about);
    let _ = writeln!(out, "  {}: {{", quote(&account.name));
    if account.jetstream {
        out.push_str("    jetstream: enabled\n");
    }
    out.push_str("    users: [\n");
    for user in &account.users {
        render_user(out, user);
    }
    out.push_str("    ]\n");
    let exports: Vec<(String, String)> = account
        .exports
        .iter()
        .map(|e| (e.render(), e.why.clone()))
        .collect();
    render_entries(out, "exports", &exports);
    let imports: Vec<(String, String)> = account
        .imports
        .iter()
        .map(|i| (i.render(), i.why.clone()))
        .collect();
    render_entries(out, "imports", &imports);
    out.push_str("  }\n");
}

impl Authorization {
    /// The nats-server config text: an `accounts` block to include in (or
    /// paste into) the server's config. It sets nothing else (no listen
    /// address, no server-wide JetStream settings).
    pub fn to_server_config(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# hyperhive: the buckets and the controller in one account, each hive in an\n\
             # account of its own that reaches only its own keys and subjects through\n\
             # imports. Generated from the roster by `swarm-controller nats-config`;\n\
             # regenerate it when the roster changes. Anything not allowed below is\n\
             # refused with a permissions violation or reaches nothing.\n",
        );
        out.push_str("accounts {\n");
        for account in &self.accounts {
            render_account(&mut out, account);
        }
        out.push_str("}\n");
        out
    }

    /// The same, as JSON (for tooling that builds its own server config).
    pub fn to_json(&self) -> serde_json::Value {
        // Serializing plain strings, vectors and bools cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}
