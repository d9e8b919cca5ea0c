//! The dashboard's rollout line in a real headless Chromium, over six real
//! hives, one nats-server and the machine's dockerd (issue 16, point 4):
//!
//! - while a rollout runs, the page shows "wave k of n" with the done /
//!   written / waiting / failed counts of `rollout status --json` at that
//!   moment, for each of the three waves;
//! - after a bad image halts it, the page shows "halted", the hive and the
//!   reason, and after `rollout abort` it shows "aborted";
//! - when the state cannot be read (nats-server stopped), the line says
//!   "unknown" and why, rather than vanish or keep the last state;
//! - all in one document (no reload: a marker in the page's heap and
//!   `performance.timeOrigin` survive), and as text only: the swarm file's
//!   name and the image, both shown in the line, carry HTML markup that
//!   must not become DOM elements or run.
//!
//! How a wave is held still without a sleep: every hive is SIGSTOPped
//! before `declare --rollout`, so a written hive cannot converge; the test
//! SIGCONTs one wave's hives at a time, waits on `rollout status --json`
//! for the next wave to be written, and then on the page. While the next
//! hives are stopped, the state (wave and counts) cannot change, so what
//! the page shows and what `rollout status --json` says before and after
//! are the same moment. The rollout is driven by a real `declare
//! --rollout` process throughout; only the CLI verbs, HTTP and the page are
//! used, never the controller's rollout code.
//!
//! Needs `chromium` (apt-get install -y chromium); fails loudly without it.

use crate::controller_support::six::{Six, WAVES};
use hyperhive_tests::browser::Page;
use hyperhive_tests::hive::HiveProc;
use hyperhive_tests::{unique_name, wait_until};
use serde_json::{json, Value};

/// How long a wave may take to be written or to converge.
const WAVE: std::time::Duration = std::time::Duration::from_secs(90);

/// Markup in the swarm files' names (they are the rollout's `source`, part
/// of its line): an image that fails to load runs its `onerror`.
const NAME_MARKUP: &str = "<img src=x onerror=window.hhPwned=1>";

/// Markup in the bad image (no whitespace or quotes, as an image
/// reference allows): an `img` with an empty `src`, whose error sets
/// `window.hhPwned`.
const IMAGE_MARKUP: &str = "<img/src/onerror=window.hhPwned=2>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_a_rollout_wave_by_wave_to_its_halt_and_abort() {
    let mut six = Six::start("ro-page", |_| true).await;
    let image = six.swarm.image.reference.clone();
    let all: Vec<usize> = (0..6).collect();
    six.declare_converged(&six.file("v1.toml", &image, "1", WAVES), &all)
        .await;
    let (_serve, base) = crate::controller_support::serve_with(
        &six.swarm.controller_config,
        &six.dir.path().join("serve.log"),
    )
    .await;
    let mut page = Page::launch(&six.dir.path().join("chromium.log")).await;
    page.call("Page.navigate", json!({ "url": format!("{base}/") }))
        .await;
    page.wait_for(
        "the page to run its script",
        "window.hyperhive && document.getElementById('rollout') !== null",
    )
    .await;
    let origin = page
        .eval("window.hhMarker = 'same document'; performance.timeOrigin")
        .await;

    follow_the_waves(&six, &mut page, &image).await;
    halt_then_abort(&six, &mut page).await;

    // (d) The state cannot be read (nats-server is gone): the line says
    // so, instead of vanishing or keeping the last state it read.
    six.swarm.nats[0].stop();
    let shown = page_shows(
        &mut page,
        "unknown",
        "rollout: unknown: GET api/rollout answered 503",
    )
    .await;
    println!("nats-server stopped, on the page: {shown}");

    assert_eq!(
        page.eval("window.hhMarker").await,
        "same document",
        "a reload"
    );
    assert_eq!(
        page.eval("performance.timeOrigin").await,
        origin,
        "a new document"
    );
}

/// (a) A rollout of `image` (V=2) in three waves, the hives held stopped
/// until the test lets a wave go: for each wave, the page shows "wave k of
/// n" and the counts of `rollout status --json` before and after it looked.
async fn follow_the_waves(six: &Six, page: &mut Page, image: &str) {
    let mut stopped = Stopped::all(&six.swarm.hives, &six.swarm.names);
    let v2 = six.file(&format!("v2{NAME_MARKUP}.toml"), image, "2", WAVES);
    let mut driver = six.spawn_rollout(&v2, "driver.log");
    for (wave, counts) in [(0, [0, 1, 5, 0]), (1, [1, 2, 3, 0]), (2, [3, 3, 0, 0])] {
        let state = wave_written(six, wave).await;
        assert_eq!(
            counts_of(&state),
            counts,
            "done/written/waiting/failed: {state:#}"
        );
        let expected = running_text(&state);
        let shown = page_shows(page, "running", &expected).await;
        println!("wave {} on the page: {shown}", wave + 1);
        let after = six.rollout().await;
        assert_eq!(running_text(&after), expected, "the state moved: {after:#}");
        let names: Vec<String> = serde_json::from_value(state["waves"][wave].clone()).unwrap();
        stopped.resume(&names);
    }
    drop(stopped);
    assert_eq!(driver.wait_exit(), Some(0), "{}", driver.log());
    let done = six.rollout().await;
    assert_eq!(done["outcome"], "completed", "{done:#}");
    page_shows(page, "completed", "completed, 3 waves: 6 done").await;
}

/// (b) A bad image (with markup in it) halts the next rollout in wave 1:
/// the page shows "halted", the hive and the reason. (c) After `rollout
/// abort` it shows "aborted".
async fn halt_then_abort(six: &Six, page: &mut Page) {
    let bad = format!("127.0.0.1:1/{}{IMAGE_MARKUP}:1", unique_name("missing"));
    let v3 = six.file(&format!("v3{NAME_MARKUP}.toml"), &bad, "3", WAVES);
    let r = six.run(&["declare", &v3, "--rollout"]).await;
    println!("declare --rollout (bad image):\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 1, "{r:?}");
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "halted", "{state:#}");
    let hive = state["hive"].as_str().unwrap().to_string();
    assert_eq!(state["waves"][0][0], hive.as_str(), "{state:#}");
    assert_eq!(counts_of(&state), [0, 0, 5, 1], "{state:#}");
    let reason = state["reason"].as_str().unwrap().to_string();
    println!("halt reason: {reason}");
    let shown = page_shows(
        page,
        "halted",
        &format!(
            "halted at wave 1 of 3: hive {hive}: {reason} ({})",
            counts_text(&state)
        ),
    )
    .await;
    println!("halt on the page: {shown}");
    assert!(shown.contains(NAME_MARKUP), "{shown}");
    assert!(
        reason.contains(IMAGE_MARKUP),
        "the image's markup reaches the reason: {reason}"
    );
    assert!(shown.contains(IMAGE_MARKUP), "{shown}");

    // Abort: the line says aborted.
    let r = six.run(&["rollout", "abort"]).await;
    println!("rollout abort:\n{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "{r:?}");
    let state = six.rollout().await;
    assert_eq!(state["outcome"], "aborted", "{state:#}");
    let restored = state["counts"]["restored"].as_u64().unwrap();
    assert_eq!(restored, 1, "{state:#}");
    let shown = page_shows(
        page,
        "aborted",
        &format!(
            "aborted at wave 1 of 3: {restored} restored, {}",
            counts_text(&state)
        ),
    )
    .await;
    println!("abort on the page: {shown}");
}

/// Wait until wave `wave` (0-based) of the running rollout is the current
/// one and each of its hives is written; the state then.
async fn wave_written(six: &Six, wave: usize) -> Value {
    wait_until(
        WAVE,
        &format!("wave {} to be written", wave + 1),
        || async {
            let s = six.rollout().await;
            let written = s["waves"][wave].as_array()?.iter().all(|h| {
                h.as_str()
                    .is_some_and(|h| s["hives"][h]["written_revision"].is_u64())
            });
            (s["outcome"] == "running" && s["wave"] == wave && written).then_some(s)
        },
    )
    .await
}

/// done, written, waiting, failed of `rollout status --json`.
fn counts_of(state: &Value) -> [u64; 4] {
    ["done", "written", "waiting", "failed"].map(|k| state["counts"][k].as_u64().unwrap())
}

/// "d done, w written, x waiting, f failed" from the JSON's counts.
fn counts_text(state: &Value) -> String {
    let [done, written, waiting, failed] = counts_of(state);
    format!("{done} done, {written} written, {waiting} waiting, {failed} failed")
}

/// What the line of a running rollout must say, from its JSON fields (not
/// from its `line`, so a line with wrong numbers fails).
fn running_text(state: &Value) -> String {
    format!(
        "running, wave {} of {}: {}",
        state["wave"].as_u64().unwrap() + 1,
        state["wave_count"],
        counts_text(state)
    )
}

/// Wait until the rollout line has class `outcome` and holds `text`; the
/// line. Whatever it shows on the way must be text only.
async fn page_shows(page: &mut Page, outcome: &str, text: &str) -> String {
    let line = "document.getElementById('rollout')";
    page.wait_for(
        &format!("the rollout line to turn {outcome}"),
        &format!("{line}.className === {}", json!(outcome)),
    )
    .await;
    assert_text_only(page).await;
    let shown = page
        .wait_for(
            &format!("the page to show {outcome}: {text:?}"),
            &format!(
                "{line}.className === {} && {line}.textContent.includes({}) \
                 && {line}.textContent",
                json!(outcome),
                json!(text)
            ),
        )
        .await;
    assert_text_only(page).await;
    shown.as_str().unwrap().to_string()
}

/// The markup in the line stayed text: no element inside the line, no
/// image anywhere on the page, and no `onerror` ran.
async fn assert_text_only(page: &mut Page) {
    let dom = page
        .eval(
            "JSON.stringify([document.querySelectorAll('#rollout *').length, \
             document.images.length, typeof window.hhPwned])",
        )
        .await;
    assert_eq!(dom, json!("[0,0,\"undefined\"]"), "markup became DOM");
}

/// Hives SIGSTOPped by the test; the ones still stopped get SIGCONT when
/// it ends, passing or failing.
struct Stopped<'a> {
    hives: Vec<(&'a str, &'a HiveProc)>,
}

impl<'a> Stopped<'a> {
    fn all(hives: &'a [HiveProc], names: &'a [String]) -> Stopped<'a> {
        let hives: Vec<(&str, &HiveProc)> = names.iter().map(String::as_str).zip(hives).collect();
        for (_, h) in &hives {
            h.daemon.signal("STOP");
        }
        Stopped { hives }
    }

    fn resume(&mut self, names: &[String]) {
        self.hives.retain(|(name, h)| {
            let go = names.iter().any(|n| n == name);
            if go {
                h.daemon.signal("CONT");
            }
            !go
        });
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        for (_, h) in &self.hives {
            if let Some(pid) = h.daemon.pid() {
                let _ = std::process::Command::new("kill")
                    .args(["-CONT", &pid.to_string()])
                    .status();
            }
        }
    }
}
