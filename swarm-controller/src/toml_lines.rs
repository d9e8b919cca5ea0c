//! Line numbers for the error messages of the two TOML files the controller
//! reads (its config and swarm files): shared by [`crate::config`] and
//! [`crate::swarm_file`], so neither imports the other for it.

/// Byte offset to line number, for error messages. Built once per file so
/// that a config with 10,000 hive tables does not rescan the text for each.
pub(crate) struct Lines {
    /// Byte offsets of every '\n'.
    newlines: Vec<usize>,
}

impl Lines {
    pub(crate) fn new(text: &str) -> Lines {
        Lines {
            newlines: text
                .bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// 1-based line of byte offset `at`.
    pub(crate) fn line(&self, at: usize) -> usize {
        self.newlines.partition_point(|&nl| nl < at) + 1
    }
}

/// A toml error as "line N: message".
pub(crate) fn describe_toml_error(text: &str, err: &toml::de::Error) -> String {
    match err.span() {
        Some(span) => format!(
            "line {}: {}",
            Lines::new(text).line(span.start),
            err.message()
        ),
        None => err.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_numbers() {
        let lines = Lines::new("a\nbb\n\nc");
        for (at, line) in [(0, 1), (1, 1), (2, 2), (4, 2), (5, 3), (6, 4), (99, 4)] {
            assert_eq!(lines.line(at), line, "offset {at}");
        }
    }
}
