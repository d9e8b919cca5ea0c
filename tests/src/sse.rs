//! A minimal reader of server-sent events (the controller's `/api/events`)
//! over a streaming GET, for tests and benches that watch the dashboard's
//! stream the way a page does.

use std::time::Duration;

/// One open event stream.
pub struct EventStream {
    resp: reqwest::Response,
    buf: String,
    /// Longest wait for the next chunk before the reader gives up.
    timeout: Duration,
}

impl EventStream {
    /// GET `url` and check it answers 200.
    pub async fn open(url: &str, timeout: Duration) -> EventStream {
        let resp = reqwest::get(url).await.expect("GET the event stream");
        assert_eq!(resp.status(), 200, "GET {url}");
        EventStream {
            resp,
            buf: String::new(),
            timeout,
        }
    }

    /// The next event that carries data: (name, data). The name is
    /// `message` when the event has none; keep-alive comments are skipped.
    pub async fn next(&mut self) -> (String, String) {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut name = "message".to_string();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if !data.is_empty() {
                    return (name, data);
                }
                continue;
            }
            let chunk = tokio::time::timeout(self.timeout, self.resp.chunk())
                .await
                .expect("an event in time")
                .expect("read the event stream")
                .expect("the event stream is open");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
