//! What every fuzz target checks, in one place: a decoder never panics,
//! and what it accepts can be written back and read again.

use swarm_queue_client::{decode, encode, Payload};

/// Decode `data` as `T`; when it is accepted and can be re-encoded (it may
/// grow past the size bound, which `encode` then refuses), the re-encoded
/// bytes must decode to the same value.
pub fn round_trip<T: Payload + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let Ok(first) = decode::<T>(data) else {
        return;
    };
    let Ok(bytes) = encode(&first.value) else {
        return;
    };
    let second = decode::<T>(&bytes).expect("what this crate writes, it reads");
    assert_eq!(first.value, second.value, "a value changed on a round trip");
}
