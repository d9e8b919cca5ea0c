//! What is declared for this hive, as the container side takes it: a valid
//! declaration with its revision ([`Wanted`]), the latest-value channel
//! that hands it to the converger ([`WantedTx`], [`WantedRx`]), and the one
//! on which the converger says which declaration it last planned
//! ([`PlannedTx`], [`PlannedRx`]). The NATS side's wanted task
//! ([`crate::bus::wanted`]) reads the key and fills the first; its saver of
//! `wanted.json` waits on the second. The types live here, with their
//! reader, so the container side imports nothing of the NATS side.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use swarm_queue_client::Declaration;
use tokio::sync::watch;

/// A valid declaration and its KV revision (its identity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wanted {
    pub revision: u64,
    pub declaration: Declaration,
    /// The server's time of that revision, in Unix nanoseconds: with the
    /// revision, it tells a bucket made again from the same bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ns: Option<i64>,
}

/// Which message of the wanted key: a revision number and the server's time
/// for it. A bucket made again can reach the number handled before with
/// another declaration, so the number alone does not name a message. The
/// same identity the job store records with a declaration's jobs.
pub type MessageId = crate::agents::jobs::AppliedRevision;

impl Wanted {
    pub fn id(&self) -> MessageId {
        MessageId {
            revision: self.revision,
            created_ns: self.created_ns,
        }
    }
}

pub type WantedTx = watch::Sender<Option<Arc<Wanted>>>;
pub type WantedRx = watch::Receiver<Option<Arc<Wanted>>>;

/// The declaration the converger last planned (its jobs committed, or the
/// attempt failed): the saver of `wanted.json`
/// ([`crate::bus::wanted::save_each`]) waits for it.
pub type PlannedTx = watch::Sender<Option<MessageId>>;
pub type PlannedRx = watch::Receiver<Option<MessageId>>;
