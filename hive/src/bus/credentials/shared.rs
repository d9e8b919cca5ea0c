//! The daemon's one [`Credentials`] handle, shared by the boot task and
//! the event listener: it opens the bucket's deliverer on first use.

use std::path::PathBuf;
use std::sync::Arc;

use swarm_queue_client::credentials::XKey;
use swarm_queue_client::{AccountName, AgentName, HiveName};

use super::{DeliverError, Delivered, Deliverer, DelivererParts, OnChange};

/// Where the daemon's credential delivery reads and writes: one handle
/// shared by the boot task and the event listener.
#[derive(Clone)]
pub struct Credentials {
    opened: Arc<tokio::sync::Mutex<Option<Deliverer>>>,
    opener: Option<Arc<Opener>>,
}

/// What opening the credentials bucket needs.
pub struct Opener {
    pub client: async_nats::Client,
    /// JetStream on the buckets' domain.
    pub js: async_nats::jetstream::Context,
    pub bucket: swarm_queue_client::BucketSettings,
    pub hive: HiveName,
    pub xkey: Arc<XKey>,
    pub trusted: Arc<Vec<String>>,
    pub agents_dir: PathBuf,
    /// Where deliveries are told to the fleet.
    pub events: Option<crate::fleet_events::EventSink>,
    /// What a change does to its agent.
    pub on_change: Option<OnChange>,
}

impl Credentials {
    /// Opens the bucket when first needed.
    pub fn new(opener: Opener) -> Credentials {
        Credentials {
            opened: Arc::default(),
            opener: Some(Arc::new(opener)),
        }
    }

    /// Over a bucket that is already open.
    pub fn open(deliverer: Deliverer) -> Credentials {
        Credentials {
            opened: Arc::new(tokio::sync::Mutex::new(Some(deliverer))),
            opener: None,
        }
    }

    /// The deliverer (made on first use; it sends nothing until asked).
    pub async fn deliverer(&self) -> Deliverer {
        let mut opened = self.opened.lock().await;
        if let Some(d) = opened.as_ref() {
            return d.clone();
        }
        // Only `Credentials::open` makes one without an opener, and it is
        // open from the start, so this cannot fail.
        let o = self
            .opener
            .as_ref()
            .expect("a Credentials without an opener is made open");
        let parts = DelivererParts {
            client: o.client.clone(),
            hive: o.hive.clone(),
            xkey: o.xkey.clone(),
            trusted: o.trusted.clone(),
            agents_dir: o.agents_dir.clone(),
        };
        let d = Deliverer::on_context(parts, &o.js)
            .with_events(o.events.clone())
            .with_on_change(o.on_change.clone());
        *opened = Some(d.clone());
        d
    }

    /// How the bucket is made if it is missing at start and this identity
    /// may create it (no per-hive permissions).
    pub(super) fn bucket_settings(&self) -> swarm_queue_client::BucketSettings {
        self.opener
            .as_ref()
            .map(|o| o.bucket.clone())
            .unwrap_or_default()
    }

    /// Deliver one credential named by a notice, then raise or clear the
    /// `credential_refused` warning in `board`.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
        board: &crate::status::StatusBoard,
    ) -> Result<Delivered, DeliverError> {
        let deliverer = self.deliverer().await;
        let result = deliverer.deliver(agent, account).await;
        deliverer.publish_refusals(board);
        result
    }
}
