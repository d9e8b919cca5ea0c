#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use swarm_queue_client::credentials::{open, CredentialEnvelope, XKey};

/// A hive key and a trusted sender, made once: opening must refuse
/// arbitrary envelopes without panicking.
fn keys() -> &'static (XKey, Vec<String>) {
    static KEYS: OnceLock<(XKey, Vec<String>)> = OnceLock::new();
    KEYS.get_or_init(|| (XKey::new(), vec![XKey::new().public_key()]))
}

fuzz_target!(|data: &[u8]| {
    hyperhive_fuzz::round_trip::<CredentialEnvelope>(data);
    if let Ok(envelope) = swarm_queue_client::decode::<CredentialEnvelope>(data) {
        let (hive, trusted) = keys();
        let mut trusting = trusted.clone();
        trusting.push(envelope.value.sender.clone());
        assert!(
            open(&envelope.value, hive, &trusting).is_err(),
            "an envelope no one sealed opened"
        );
    }
});
