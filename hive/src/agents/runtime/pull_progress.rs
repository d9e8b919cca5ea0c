//! The running tally of one pull, from dockerd's progress messages.
//!
//! dockerd reports a pull layer by layer ("Pulling fs layer",
//! "Downloading" with bytes, "Pull complete", "Already exists"). An
//! operator wants one line: how many layers are done and how many bytes
//! have come. [`PullTally`] folds the messages into that line; it is pure,
//! so the table test below covers it without a registry.

use std::collections::BTreeMap;

/// What is known of one layer.
#[derive(Debug, Default, Clone, Copy)]
struct Layer {
    done: bool,
    current: u64,
    total: u64,
}

/// Layers seen so far and how far each has come.
#[derive(Debug, Default)]
pub struct PullTally {
    layers: BTreeMap<String, Layer>,
}

impl PullTally {
    /// Fold in one message: the layer `id`, dockerd's `status` word and the
    /// byte counts of a download. Messages without a layer id (the
    /// "Pulling from" header, the digest line) change nothing.
    pub fn observe(
        &mut self,
        id: Option<&str>,
        status: &str,
        current: Option<u64>,
        total: Option<u64>,
    ) {
        let Some(id) = id.filter(|id| looks_like_layer(id)) else {
            return;
        };
        let layer = self.layers.entry(id.to_string()).or_default();
        match status {
            "Pull complete" | "Already exists" | "Download complete" => {
                layer.done |= status != "Download complete";
                layer.current = layer.total.max(layer.current);
            }
            "Downloading" => {
                layer.current = current.unwrap_or(layer.current);
                layer.total = total.unwrap_or(layer.total);
            }
            _ => {}
        }
    }

    /// `layers 2/3, 1.5/4.0 MB`; `None` until a layer is known.
    pub fn summary(&self) -> Option<String> {
        if self.layers.is_empty() {
            return None;
        }
        let done = self.layers.values().filter(|l| l.done).count();
        let current: u64 = self.layers.values().map(|l| l.current).sum();
        let total: u64 = self.layers.values().map(|l| l.total).sum();
        let mut line = format!("layers {done}/{}", self.layers.len());
        if total > 0 {
            line.push_str(&format!(", {}/{} MB", mb(current), mb(total)));
        }
        Some(line)
    }
}

/// The tally at the head of a progress line the runtime sent (`layers
/// 1/2, 0.5/2.0 MB: <layer> Downloading …`), if it has one.
pub fn summary_of(line: &str) -> Option<&str> {
    line.strip_prefix("layers ")?;
    line.split_once(": ").map(|(sum, _)| sum)
}

/// dockerd uses the id field for the tag too ("1: Pulling from x"); layer
/// ids are 12 hex digits.
fn looks_like_layer(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_is_folded_into_layers_and_bytes() {
        let mut t = PullTally::default();
        // (layer id, status, current, total) and the summary after it.
        type Step<'a> = (
            Option<&'a str>,
            &'a str,
            Option<u64>,
            Option<u64>,
            Option<&'a str>,
        );
        let steps: [Step; 7] = [
            (Some("1"), "Pulling from h6/x", None, None, None),
            (
                Some("023d1474849e"),
                "Pulling fs layer",
                None,
                None,
                Some("layers 0/1"),
            ),
            (
                Some("aaaaaaaaaaaa"),
                "Already exists",
                None,
                None,
                Some("layers 1/2"),
            ),
            (
                Some("023d1474849e"),
                "Downloading",
                Some(500_000),
                Some(2_000_000),
                Some("layers 1/2, 0.5/2.0 MB"),
            ),
            (
                Some("023d1474849e"),
                "Download complete",
                None,
                None,
                Some("layers 1/2, 2.0/2.0 MB"),
            ),
            (
                Some("023d1474849e"),
                "Pull complete",
                None,
                None,
                Some("layers 2/2, 2.0/2.0 MB"),
            ),
            (
                None,
                "Digest: sha256:abc",
                None,
                None,
                Some("layers 2/2, 2.0/2.0 MB"),
            ),
        ];
        assert_eq!(
            summary_of("layers 1/2, 0.5/2.0 MB: abc Downloading"),
            Some("layers 1/2, 0.5/2.0 MB")
        );
        assert_eq!(summary_of("1 Pulling from h6/x"), None);
        assert_eq!(t.summary(), None);
        for (id, status, cur, tot, want) in steps {
            t.observe(id, status, cur, tot);
            assert_eq!(t.summary().as_deref(), want, "after {id:?} {status}");
        }
    }
}
