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

pub use swarm_queue_client::payload::{
    LogLine, LogSource, MAX_LOG_LINE_BYTES as MAX_LINE_BYTES, MAX_LOG_TAIL as MAX_TAIL,
};

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

impl From<&swarm_queue_client::LogsRequest> for LogRequest {
    /// What a request over NATS asks of the agent's log (its agent aside).
    fn from(r: &swarm_queue_client::LogsRequest) -> Self {
        LogRequest {
            follow: r.follow,
            tail: r.tail,
            since_unix: r.since_unix,
            previous: r.previous,
        }
    }
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
