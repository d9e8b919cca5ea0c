//! A `sha256:<64 hex digits>` text (a spec hash, an image digest) kept as
//! its 32 bytes.
//!
//! A hive reports two spec hashes and an image digest for each agent, and
//! a declaration is kept as one spec hash per agent: a dozen such texts a
//! hive. As `String`s each costs its 24 bytes, a 71-byte allocation and
//! malloc's own header; kept as bytes, 40 bytes and no allocation. At
//! 10,000 hives that is about a sixth of what a fleet read keeps.
//!
//! The text is kept exactly: only the canonical form (lowercase hex) is
//! kept as bytes, anything else a hive wrote (`sha256:ABC…`, another
//! algorithm, a truncated hash) as the text it was. So two values are
//! equal exactly when their texts are, and [`HashText`] shows the text it
//! was made from.

use std::fmt;

use swarm_queue_client::payload::{
    read_sha256_text, write_sha256_text, SPEC_HASH_PREFIX as PREFIX,
};

/// See the module documentation.
#[derive(Clone, PartialEq, Eq)]
pub enum HashText {
    /// `sha256:` and 64 lowercase hex digits.
    Sha256([u8; 32]),
    /// Any other text, as it was.
    Other(Box<str>),
}

impl HashText {
    /// The first 12 hex digits with the prefix (`sha256:0123456789ab`), or
    /// the whole text when it is shorter: enough to tell two hashes apart
    /// in a sentence.
    pub fn short(&self) -> String {
        let text = self.to_string();
        let end = PREFIX.len() + 12;
        match text.get(..end) {
            Some(short) => short.to_string(),
            None => text,
        }
    }
}

impl From<String> for HashText {
    fn from(text: String) -> Self {
        match read_sha256_text(&text) {
            Some(bytes) => HashText::Sha256(bytes),
            None => HashText::Other(text.into_boxed_str()),
        }
    }
}

impl fmt::Display for HashText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashText::Sha256(bytes) => write_sha256_text(bytes, f),
            HashText::Other(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for HashText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn text(t: &str) -> HashText {
        HashText::from(t.to_string())
    }

    #[test]
    fn a_canonical_hash_is_kept_as_bytes_and_shown_as_it_was() {
        let h = text(HASH);
        assert!(matches!(h, HashText::Sha256(_)));
        assert_eq!(h.to_string(), HASH);
        assert_eq!(h.short(), "sha256:0123456789ab");
        assert_eq!(format!("{h:?}"), format!("{HASH:?}"));
    }

    #[test]
    fn any_other_text_is_kept_as_it_came_and_equals_only_itself() {
        let upper = HASH.replace("abcdef", "ABCDEF");
        for t in [
            upper.as_str(),
            "sha256:0123",
            "sha512:00",
            "",
            "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg",
            &format!("{HASH}0"),
        ] {
            let h = text(t);
            assert!(matches!(h, HashText::Other(_)), "{t:?}");
            assert_eq!(h.to_string(), t);
            assert_ne!(h, text(HASH), "{t:?}");
            assert_eq!(h, text(t));
        }
        assert_eq!(text("sha256:0123").short(), "sha256:0123");
    }

    #[test]
    fn every_byte_but_a_lowercase_hex_digit_is_refused_anywhere() {
        for b in 0u8..=127 {
            for at in [0, 1, 30, 31, 62, 63] {
                let mut digits = HASH.as_bytes()[PREFIX.len()..].to_vec();
                digits[at] = b;
                let t = format!("{PREFIX}{}", String::from_utf8(digits).unwrap());
                let h = text(&t);
                let digit = b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
                assert_eq!(matches!(h, HashText::Sha256(_)), digit, "byte {b} at {at}");
                assert_eq!(h.to_string(), t);
            }
        }
        // Bytes of a multi-byte character, 64 bytes in all.
        let t = format!("{}é", &HASH[..HASH.len() - 2]);
        assert!(matches!(text(&t), HashText::Other(_)));
        assert_eq!(text(&t).to_string(), t);
    }

    #[test]
    fn equal_exactly_when_the_texts_are() {
        let other = HASH.replace('0', "1");
        assert_ne!(text(HASH), text(&other));
        assert_eq!(text(&other), text(&other));
    }

    #[test]
    fn a_spec_digest_shows_as_the_spec_hash_does() {
        let spec: swarm_queue_client::AgentSpec =
            serde_json::from_str(r#"{"image": "registry.example/bot:1"}"#).unwrap();
        let shown = HashText::Sha256(spec.clone().into_spec_digest());
        assert_eq!(shown.to_string(), spec.spec_hash());
        assert_eq!(shown, text(&spec.spec_hash()));
    }

    #[test]
    fn it_is_small() {
        assert!(std::mem::size_of::<Option<HashText>>() <= 40);
    }
}
