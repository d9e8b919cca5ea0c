//! The userinfo of a URL (`https://user:token@forge/…`,
//! `ssh://user:password@host/…`) is a secret: a forge token, a password.
//! It is taken out of every text that leaves a process (an error, a log
//! line, a payload): [`userinfo`] finds each `scheme://` in free text and
//! replaces what stands before the authority's last `@` with `***`.
//!
//! One function for both daemons, so that a hive's error texts and
//! everything put in a payload ([`crate::payload::sanitize_message`] calls
//! it) follow one rule. The scp-like `user@host:path` form has no password
//! and is left as it is.

use std::borrow::Cow;

/// What replaces a URL's userinfo.
pub const REDACTED: &str = "***";

/// `text` with the userinfo of every URL in it replaced by [`REDACTED`]:
/// `clone https://user:tok@forge/x.git failed` becomes
/// `clone https://***@forge/x.git failed`.
pub fn userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let authority_end = tail.find(ends_authority).unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&tail[at..authority_end]);
            }
            None => out.push_str(&tail[..authority_end]),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Where a URL's authority ends in free text: its path, query or fragment,
/// or the quote, bracket or space that ends the URL itself.
fn ends_authority(c: char) -> bool {
    matches!(
        c,
        '/' | '?' | '#' | '\'' | '"' | '`' | '<' | '>' | '(' | ')'
    ) || c.is_whitespace()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_redacted_and_the_rest_kept() {
        let table = [
            (
                "https://user:s3cr3t@forge/org/x.git",
                "https://***@forge/org/x.git",
            ),
            ("https://tok@forge/x", "https://***@forge/x"),
            ("ssh://git:pw@host:22/x", "ssh://***@host:22/x"),
            (
                "`git clone -- https://u:p@h/x.git /s/b` failed: 'https://u:p@h/x.git/'",
                "`git clone -- https://***@h/x.git /s/b` failed: 'https://***@h/x.git/'",
            ),
            (
                "a p@ss@word: https://u:p@ss@h:1",
                "a p@ss@word: https://***@h:1",
            ),
            ("https://h/x@y", "https://h/x@y"),
            ("git@forge:org/x.git", "git@forge:org/x.git"),
            ("file:///srv/r", "file:///srv/r"),
            (
                "nats://a:b@n:4222 and http://c@d",
                "nats://***@n:4222 and http://***@d",
            ),
            ("no url here @ all", "no url here @ all"),
            ("https://u:p@", "https://***@"),
            ("://@", "://***@"),
        ];
        for (text, want) in table {
            assert_eq!(userinfo(text), want, "{text}");
        }
        assert!(matches!(userinfo("https://forge/x"), Cow::Borrowed(_)));
    }
}
