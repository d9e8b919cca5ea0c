#![no_main]
use libfuzzer_sys::fuzz_target;
use swarm_queue_client::DeployReply;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = DeployReply::decode(data) {
        // Replies are written through `encode`, which clips the message.
        DeployReply::decode(&reply.encode()).expect("an encoded reply decodes");
    }
});
