//! An agent's output over NATS: the controller's request on
//! `hyperhive.hive.<hive>.logs.request`, the hive's frames to the
//! request's reply subject (under the hive's answer prefix), and the
//! controller's acknowledgements on `hyperhive.hive.<hive>.logs.ack.<token>`.
//!
//! Flow control is a window of frames: the hive sends at most
//! [`LOG_WINDOW`] frames the reader has not acknowledged, each at most
//! [`MAX_LOG_FRAME_BYTES`], and ends the stream when the oldest of them
//! waits longer than [`LOG_ACK_TIMEOUT_SECS`]. A quiet follow sends an
//! empty frame every [`LOG_HEARTBEAT_SECS`], so a reader that went away is
//! noticed within seconds. A hive never holds more than the window for a
//! reader, however slow it is.

use serde::{Deserialize, Serialize};

use super::checks::sanitize_message;
use super::codec::{DecodeError, InvalidField, Payload};
use crate::limits::SCHEMA_VERSION;
use crate::names::AgentName;

/// The most frames a hive sends ahead of the reader's acknowledgement.
pub const LOG_WINDOW: u64 = 8;
/// The largest frame a hive sends (its JSON, lines and all).
pub const MAX_LOG_FRAME_BYTES: usize = 64 * 1024;
/// How long the oldest unacknowledged frame may wait before the hive ends
/// the stream (the reader is gone or stuck).
pub const LOG_ACK_TIMEOUT_SECS: u64 = 5;
/// How often a quiet follow sends an empty frame.
pub const LOG_HEARTBEAT_SECS: u64 = 2;
/// The most lines one request may ask back from the end of a log.
pub const MAX_LOG_TAIL: u64 = 100_000;
/// The longest line passed on; a longer one is cut there (Docker itself
/// splits its log entries at 16 KiB).
pub const MAX_LOG_LINE_BYTES: usize = 16 * 1024;

/// `hyperhive.hive.<hive>.logs.request`: what to read of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogsRequest {
    pub schema: u32,
    pub agent: AgentName,
    /// Keep the stream open and pass on new lines as they come.
    #[serde(default)]
    pub follow: bool,
    /// Only the last this many lines (at most [`MAX_LOG_TAIL`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<u64>,
    /// Only lines from this time on (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_unix: Option<i64>,
    /// The run before the current one (or what the hive kept of the
    /// container it last replaced).
    #[serde(default)]
    pub previous: bool,
}

impl LogsRequest {
    pub fn new(agent: AgentName) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            agent,
            follow: false,
            tail: None,
            since_unix: None,
            previous: false,
        }
    }
}

impl Payload for LogsRequest {
    const WHAT: &'static str = "logs request";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        if let Some(n) = self.tail.filter(|n| *n > MAX_LOG_TAIL) {
            return Err(InvalidField::OutOfRange {
                field: "tail".into(),
                value: n.to_string(),
                allowed: format!("at most {MAX_LOG_TAIL} lines"),
            });
        }
        if self.previous && self.follow {
            return Err(InvalidField::OutOfRange {
                field: "previous".into(),
                value: "true with follow".into(),
                allowed: "without follow: previous and follow do not go together, a previous run has ended".into(),
            });
        }
        Ok(())
    }
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
    /// The line without its newline, invalid UTF-8 replaced, clipped to
    /// [`MAX_LOG_LINE_BYTES`].
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

/// The most a line adds to a frame (its JSON and a separator): half a
/// frame, so a frame always has room for a line more until it is half
/// full. A line of control characters, which JSON writes six bytes each,
/// is cut to fit.
pub const MAX_LOG_LINE_COST: usize = (MAX_LOG_FRAME_BYTES - LOG_FRAME_OVERHEAD) / 2;

impl LogLine {
    /// This line, its text cut until it costs at most
    /// [`MAX_LOG_LINE_COST`] in a frame.
    pub fn fit_frame(mut self) -> LogLine {
        loop {
            let cost = LogFrame::line_cost(&self);
            if cost <= MAX_LOG_LINE_COST {
                return self;
            }
            let mut end = self.line.len() * MAX_LOG_LINE_COST / cost;
            while !self.line.is_char_boundary(end) {
                end -= 1;
            }
            self.line.truncate(end);
        }
    }
}

/// `text` cut to at most [`MAX_LOG_LINE_BYTES`] on a character boundary.
fn clip(text: &str) -> &str {
    if text.len() <= MAX_LOG_LINE_BYTES {
        return text;
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One frame of a log stream, to the request's reply subject. Frames are
/// numbered from 1 with no gap; the last has `end`, and `error` when the
/// stream did not end by itself (the request was refused, Docker broke off,
/// the reader stopped acknowledging).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogFrame {
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<LogLine>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub end: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a frame costs on the wire besides its lines, with room to spare.
pub const LOG_FRAME_OVERHEAD: usize = 1024;

impl LogFrame {
    /// The bytes of this frame as it goes out (an error text sanitized).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.clone();
        out.error = out.error.as_deref().map(sanitize_message);
        // Strings, numbers and bools always serialize.
        serde_json::to_vec(&out).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_small(bytes, "log frame", MAX_LOG_FRAME_BYTES)
    }

    /// What `line` adds to an encoded frame.
    pub fn line_cost(line: &LogLine) -> usize {
        serde_json::to_vec(line).map_or(MAX_LOG_FRAME_BYTES, |v| v.len() + 1)
    }
}

/// `hyperhive.hive.<hive>.logs.ack.<token>`: every frame up to `seq` has
/// been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogsAck {
    pub seq: u64,
}

impl LogsAck {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_small(bytes, "logs ack", 256)
    }
}

/// A `--since` of either CLI: `90s`, `10m`, `2h`, `1d` (or plain seconds)
/// as seconds. The error names the value.
pub fn parse_age(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 10m, 2h or 1d"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too long ago"))
}

fn decode_small<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    max: usize,
) -> Result<T, DecodeError> {
    if bytes.len() > max {
        return Err(DecodeError::TooLarge {
            what,
            len: bytes.len(),
            max,
        });
    }
    serde_json::from_slice(bytes).map_err(|source| DecodeError::Json { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{decode, encode};

    #[test]
    fn docker_lines_split_into_time_and_text_and_are_clipped() {
        let l = LogLine::parse(LogSource::Stdout, b"2026-12-01T10:00:00.5Z hello world\n");
        assert_eq!(l.time, "2026-12-01T10:00:00.5Z");
        assert_eq!(l.line, "hello world");
        let long = format!("2026-12-01T10:00:00Z {}\n", "é".repeat(MAX_LOG_LINE_BYTES));
        let l = LogLine::parse(LogSource::Stderr, long.as_bytes());
        assert!(l.line.len() <= MAX_LOG_LINE_BYTES && l.line.len() > MAX_LOG_LINE_BYTES - 2);
        let l = LogLine::parse(LogSource::Stdout, b"\xff\xfe no time");
        assert_eq!(l.line, "no time");
    }

    #[test]
    fn ages_parse_with_their_units_and_bad_ones_are_named() {
        assert_eq!(parse_age("90"), Ok(90));
        assert_eq!(parse_age("90s"), Ok(90));
        assert_eq!(parse_age("10m"), Ok(600));
        assert_eq!(parse_age("2h"), Ok(7200));
        assert_eq!(parse_age("1d"), Ok(86_400));
        assert!(parse_age("10w").unwrap_err().contains("\"10w\""));
        assert!(parse_age("soon").unwrap_err().contains("\"soon\""));
    }

    #[test]
    fn requests_round_trip_and_bad_ones_name_the_field() {
        let mut r = LogsRequest::new(AgentName::new("mail").unwrap());
        r.tail = Some(10);
        let back = decode::<LogsRequest>(&encode(&r).unwrap()).unwrap().value;
        assert_eq!(back, r);
        r.tail = Some(MAX_LOG_TAIL + 1);
        let e = encode(&r).unwrap_err().to_string();
        assert!(e.contains("tail") && e.contains("100000"), "{e}");
        r.tail = None;
        r.follow = true;
        r.previous = true;
        let e = encode(&r).unwrap_err().to_string();
        assert!(e.contains("previous and follow"), "{e}");
    }

    /// Lines fitted to a frame, as many as a hive puts in one, stay under
    /// the frame limit, however much JSON escaping they need; an error
    /// text is sanitized on the way out.
    #[test]
    fn frames_fit_their_limit_and_carry_sanitized_errors() {
        let worst = LogLine::parse(
            LogSource::Stdout,
            format!(
                "2026-12-01T10:00:00Z {}",
                "\u{1}".repeat(MAX_LOG_LINE_BYTES)
            )
            .as_bytes(),
        );
        assert!(LogFrame::line_cost(&worst) > MAX_LOG_FRAME_BYTES);
        let fitted = worst.fit_frame();
        assert!(LogFrame::line_cost(&fitted) <= MAX_LOG_LINE_COST);
        assert!(
            fitted.line.len() > MAX_LOG_LINE_COST / 7,
            "{}",
            fitted.line.len()
        );
        let line = LogLine::parse(
            LogSource::Stdout,
            format!("2026-12-01T10:00:00Z {}", "\"".repeat(MAX_LOG_LINE_BYTES)).as_bytes(),
        )
        .fit_frame();
        let mut frame = LogFrame {
            seq: 1,
            ..Default::default()
        };
        let mut size = LOG_FRAME_OVERHEAD;
        loop {
            size += LogFrame::line_cost(&line);
            frame.lines.push(line.clone());
            if size + MAX_LOG_LINE_COST > MAX_LOG_FRAME_BYTES {
                break;
            }
        }
        let bytes = frame.encode();
        assert!(bytes.len() <= MAX_LOG_FRAME_BYTES, "{}", bytes.len());
        assert_eq!(LogFrame::decode(&bytes).unwrap(), frame);
        let end = LogFrame {
            seq: 2,
            end: true,
            error: Some("bad\u{1b}[31m".into()),
            ..Default::default()
        };
        let back = LogFrame::decode(&end.encode()).unwrap();
        assert!(back.end && !back.error.unwrap().contains('\u{1b}'));
        assert_eq!(
            LogsAck::decode(&LogsAck { seq: 7 }.encode()).unwrap().seq,
            7
        );
    }
}
