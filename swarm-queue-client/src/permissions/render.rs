//! The generated authorization as nats-server config text (with a comment
//! on every grant) and as JSON: what `swarm-controller nats-config` prints.

use std::fmt::Write as _;

use super::{Authorization, Grant};

/// Quote a string for the nats-server config format. Subjects and keys are
/// plain ASCII without quotes or backslashes, but escape anyway.
fn quote(s: &str) -> String {
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
    let _ = writeln!(out, "        {what}: {{");
    let _ = writeln!(out, "          allow: [");
    for g in grants {
        let _ = writeln!(
            out,
            "            {:<width$}  # {}",
            quote(&g.subject),
            g.why
        );
    }
    let _ = writeln!(out, "          ]");
    let _ = writeln!(out, "        }}");
}

impl Authorization {
    /// The nats-server config text: an `authorization` block to include in
    /// (or paste into) the server's config. It sets nothing else (no
    /// listen address, no JetStream settings).
    pub fn to_server_config(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# hyperhive: one nkey user per identity. Generated from the roster by\n\
             # `swarm-controller nats-config`; regenerate it when the roster changes.\n\
             # Anything not allowed below is refused with a permissions violation.\n",
        );
        out.push_str("authorization {\n  users = [\n");
        for user in &self.users {
            let _ = writeln!(out, "    # {}", user.role);
            out.push_str("    {\n");
            let _ = writeln!(out, "      nkey: {}", quote(&user.nkey));
            out.push_str("      permissions: {\n");
            render_grants(&mut out, "publish", &user.permissions.publish);
            render_grants(&mut out, "subscribe", &user.permissions.subscribe);
            if user.permissions.allow_responses {
                out.push_str(
                    "        # may answer a request it received (a deploy reply), once per request\n",
                );
                out.push_str("        allow_responses: true\n");
            }
            out.push_str("      }\n    }\n");
        }
        out.push_str("  ]\n}\n");
        out
    }

    /// The same, as JSON (for tooling that builds its own server config).
    pub fn to_json(&self) -> serde_json::Value {
        // Serializing plain strings, vectors and bools cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}
