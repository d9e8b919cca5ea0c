#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hyperhive_fuzz::round_trip::<swarm_queue_client::HiveStatus>(data));
