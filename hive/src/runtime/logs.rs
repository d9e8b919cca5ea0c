//! What an agent's container printed: the lines Docker keeps in its
//! `json-file` log (capped by [`super::HostLimits`]), read for `hive logs`.
//!
//! Lines are read from Docker only as fast as the reader takes them (a
//! stream, never a buffer of the whole log), each clipped to
//! [`MAX_LINE_BYTES`]. Nothing here logs or publishes a line: an agent's
//! output may hold its secrets, and it goes to the operator who asked and
//! nowhere else.

use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use super::RuntimeError;

/// The most lines one request may ask back from the end of a log.
pub const MAX_TAIL: u64 = 100_000;
/// The longest line passed on; a longer one is cut there (Docker itself
/// splits its log entries at 16 KiB).
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// What the hive keeps of a container it removes (`--previous` once the
/// container is gone): its last lines, at most this many bytes.
pub const PREVIOUS_MAX_BYTES: usize = 256 * 1024;

/// Which lines to read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    /// Keep the stream open and pass on new lines as they come.
    #[serde(default)]
    pub follow: bool,
    /// Only the last this many lines (at most [`MAX_TAIL`]); all without.
    #[serde(default)]
    pub tail: Option<u64>,
    /// Only lines from this time on (seconds since the epoch).
    #[serde(default)]
    pub since_unix: Option<i64>,
    /// The runs before the current one instead: the lines written before
    /// the container last started (see [`super::ContainerRuntime::logs`]).
    #[serde(default)]
    pub previous: bool,
}

/// Which of the container's outputs a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    Stdout,
    Stderr,
}

/// One line of an agent's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub source: LogSource,
    /// Docker's RFC 3339 time of the line (when it was written).
    pub time: String,
    /// The line without its newline, invalid UTF-8 replaced, clipped.
    pub line: String,
}

impl LogLine {
    /// A line as Docker sends it with timestamps on: `<RFC 3339> <text>`.
    pub fn parse(source: LogSource, raw: &[u8]) -> LogLine {
        let text = String::from_utf8_lossy(raw);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let (time, line) = text.split_once(' ').unwrap_or(("", text));
        LogLine {
            source,
            time: time.to_string(),
            line: clip(line).to_string(),
        }
    }
}

/// `text` cut to at most [`MAX_LINE_BYTES`] on a character boundary.
fn clip(text: &str) -> &str {
    if text.len() <= MAX_LINE_BYTES {
        return text;
    }
    let mut end = MAX_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A container's lines, as they are read.
pub type LogStream = BoxStream<'static, Result<LogLine, RuntimeError>>;

/// How many lines [`keep`] reads from the end of a log.
pub const KEEP_LINES: u64 = 4000;

/// Write the last of `lines` (NDJSON, at most [`PREVIOUS_MAX_BYTES`], cut at
/// a line) to `path`, replacing what was there: a temporary file in the
/// same hive-owned directory (0700, the file 0600), then a rename. The
/// number of bytes written.
pub async fn keep(path: &std::path::Path, mut lines: LogStream) -> std::io::Result<usize> {
    use futures_util::StreamExt;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let mut kept: std::collections::VecDeque<Vec<u8>> = Default::default();
    let mut bytes = 0;
    while let Some(Ok(line)) = lines.next().await {
        let mut json = serde_json::to_vec(&line).unwrap_or_default();
        json.push(b'\n');
        bytes += json.len();
        kept.push_back(json);
        while bytes > PREVIOUS_MAX_BYTES {
            bytes -= kept.pop_front().map_or(0, |l| l.len());
        }
    }
    let body: Vec<u8> = kept.into_iter().flatten().collect();
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    std::io::Write::write_all(&mut file, &body)?;
    std::fs::rename(&tmp, path)?;
    Ok(body.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_lines_split_into_time_and_text_and_are_clipped() {
        let l = LogLine::parse(LogSource::Stdout, b"2026-12-01T10:00:00.5Z hello world\n");
        assert_eq!(l.time, "2026-12-01T10:00:00.5Z");
        assert_eq!(l.line, "hello world");
        let long = format!("2026-12-01T10:00:00Z {}\n", "é".repeat(MAX_LINE_BYTES));
        let l = LogLine::parse(LogSource::Stderr, long.as_bytes());
        assert!(l.line.len() <= MAX_LINE_BYTES && l.line.len() > MAX_LINE_BYTES - 2);
        let l = LogLine::parse(LogSource::Stdout, b"\xff\xfe no time");
        assert_eq!(l.line, "no time");
    }
}
