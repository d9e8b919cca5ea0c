//! A headless Chromium (Debian's `chromium`) driven over the Chrome
//! DevTools Protocol: a websocket to `--remote-debugging-port`, commands
//! sent with [`Page::call`], the live DOM read with `Runtime.evaluate`.
//! Used by the dashboard test and by the browser-origin tests of the
//! hive's API. Needs `chromium` (apt-get install -y chromium); fails
//! loudly without it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::{wait_until, Daemon};

/// How long a browser step may take.
const T: Duration = Duration::from_secs(30);

pub const CHROMIUM: &str = "/usr/bin/chromium";

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A headless Chromium page driven over CDP.
pub struct Page {
    browser: Daemon,
    profile: tempfile::TempDir,
    socket: Socket,
    next_id: AtomicU64,
}

impl Page {
    pub async fn launch(log: &Path) -> Page {
        Page::launch_with(log, &[]).await
    }

    /// [`Page::launch`] with extra Chromium switches, for example
    /// `--host-resolver-rules=MAP rebind.test 127.0.0.1` to play a name
    /// that an attacker's DNS points at this machine.
    pub async fn launch_with(log: &Path, extra: &[&str]) -> Page {
        assert!(
            Path::new(CHROMIUM).is_file(),
            "{CHROMIUM} is missing: apt-get install -y chromium"
        );
        let profile = tempfile::Builder::new()
            .prefix("hhtest-chromium-")
            .tempdir()
            .unwrap();
        let user_data = format!("--user-data-dir={}", profile.path().display());
        // Chromium's own temporary files (its singleton socket and lock)
        // go inside the profile, which is removed after the browser is
        // killed: a killed Chromium cannot remove them itself.
        let tmp = profile.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let tmp = tmp.display().to_string();
        let mut args = vec![
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            &user_data,
        ];
        args.extend_from_slice(extra);
        args.push("about:blank");
        let browser = Daemon::spawn(Path::new(CHROMIUM), &args, &[("TMPDIR", &tmp)], log);
        // Chromium writes the port it chose into the profile directory.
        let port_file = profile.path().join("DevToolsActivePort");
        let port = wait_until(T, "Chromium's DevTools port", || async {
            let text = std::fs::read_to_string(&port_file).ok()?;
            text.lines().next()?.trim().parse::<u16>().ok()
        })
        .await;
        let targets: Value = wait_until(T, "Chromium's page target", || async {
            let list: Value = reqwest::get(format!("http://127.0.0.1:{port}/json/list"))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            list.as_array()?
                .iter()
                .any(|t| t["type"] == "page")
                .then_some(list)
        })
        .await;
        let ws = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target with a websocket")
            .to_string();
        let (socket, _) = tokio_tungstenite::connect_async(ws.as_str()).await.unwrap();
        Page {
            browser,
            profile,
            socket,
            next_id: AtomicU64::new(1),
        }
    }

    /// Send one CDP command and return its result.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        match self.try_call(method, params).await {
            Ok(result) => result,
            Err(reply) => panic!("{method}: {reply}"),
        }
    }

    /// Send one CDP command; its result, or the whole reply when it is an
    /// error.
    async fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({ "id": id, "method": method, "params": params }).to_string();
        self.socket.send(Message::text(msg)).await.unwrap();
        loop {
            let frame = tokio::time::timeout(T, self.socket.next())
                .await
                .expect("a CDP reply in time")
                .expect("the CDP socket is open")
                .unwrap();
            let Message::Text(text) = frame else { continue };
            let reply: Value = serde_json::from_str(text.as_str()).unwrap();
            if reply["id"] == id {
                if reply.get("error").is_some() {
                    return Err(reply);
                }
                return Ok(reply["result"].clone());
            }
        }
    }

    /// Evaluate a JavaScript expression in the page; its value as JSON.
    pub async fn eval(&mut self, expression: &str) -> Value {
        match self.try_eval(expression).await {
            Ok(value) => value,
            Err(reply) => panic!("Runtime.evaluate: {reply}"),
        }
    }

    /// [`Page::eval`], with a CDP error given back (the expression throwing
    /// still fails the test).
    async fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let params = json!({ "expression": expression, "returnByValue": true });
        let r = self.try_call("Runtime.evaluate", params).await?;
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        Ok(r["result"]["value"].clone())
    }

    /// Evaluate until the expression is truthy. A page that navigates
    /// (a click on a link, a form sent) drops an evaluation that was under
    /// way in the document it leaves; that evaluation is asked again in
    /// the next document, as any other not-yet.
    pub async fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        let deadline = std::time::Instant::now() + T;
        loop {
            let v = match self.try_eval(expression).await {
                Ok(v) => v,
                Err(reply) if left_its_document(&reply) => Value::Null,
                Err(reply) => panic!("Runtime.evaluate: {reply}"),
            };
            if !(v.is_null() || v == false || v == "") {
                return v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// Whether a CDP error says the evaluation's document went away under it
/// (the page navigated), rather than that the command was wrong.
fn left_its_document(reply: &Value) -> bool {
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    message.contains("Inspected target navigated or closed")
        || message.contains("Cannot find context with specified id")
}

impl Drop for Page {
    /// Kill the browser, then its helper processes (renderer, zygote,
    /// network service: started by it, each with `--user-data-dir=` of this
    /// profile), which outlive it for a moment and keep writing into the
    /// profile; only then can the profile be removed for good.
    fn drop(&mut self) {
        self.browser.kill();
        let marker = format!("--user-data-dir={}", self.profile.path().display());
        let path = self.profile.path().to_path_buf();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let helpers = helper_pids(&marker);
            for pid in &helpers {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            let _ = std::fs::remove_dir_all(&path);
            if (helpers.is_empty() && !path.exists()) || std::time::Instant::now() > deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The processes whose command line holds `marker`.
fn helper_pids(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == marker.as_bytes()))
        })
        .collect()
}
