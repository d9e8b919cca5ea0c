#![no_main]
use libfuzzer_sys::fuzz_target;
use swarm_queue_client::subjects::{credential_key, parse_credential_key};
use swarm_queue_client::HiveName;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(name) = HiveName::new(text) {
        // A valid name is one subject token.
        assert!(!name.as_str().contains(['.', '*', '>', ' ']));
    }
    if let Ok((hive, agent, account)) = parse_credential_key(text) {
        assert_eq!(credential_key(&hive, &agent, &account), text);
    }
});
