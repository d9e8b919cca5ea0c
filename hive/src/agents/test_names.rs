//! What the agents' unit tests build their cases from: an agent's name
//! and a spec that is only an image.

use swarm_queue_client::{AgentName, AgentSpec};

/// The agent named `name` (a valid name, or the test is wrong).
pub(crate) fn agent(name: &str) -> AgentName {
    AgentName::new(name).unwrap()
}

/// A spec that runs `image` and sets nothing else.
pub(crate) fn spec(image: &str) -> AgentSpec {
    AgentSpec {
        image: Some(image.into()),
        ..Default::default()
    }
}
