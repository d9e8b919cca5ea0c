//! Reads through a NATS client this project did not write (nats-py, run by
//! `tools/kv_get.py`), so a test checks what is stored on the wire and not
//! what our own client makes of it.

use std::process::Command;

/// Read `bucket/key` with nats-py: the revision and the value parsed as
/// JSON, or `None` when the key has no value.
pub fn kv_get(url: &str, bucket: &str, key: &str) -> Option<(u64, serde_json::Value)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/kv_get.py");
    let out = Command::new("python3")
        .args([script, url, bucket, key])
        .output()
        .expect("python3 with nats-py (pip install nats-py)");
    match out.status.code() {
        Some(0) => {
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let value: serde_json::Value =
                serde_json::from_str(doc["value"].as_str().unwrap()).expect("value is JSON");
            Some((doc["revision"].as_u64().unwrap(), value))
        }
        Some(3) => None,
        _ => panic!(
            "kv_get.py failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
