//! A shutdown signal every task takes: cloneable, and `wait` is cancel-safe
//! (it returns at once when shutdown was already requested), so it can sit in
//! any `select!`.

use std::time::Duration;

use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown is requested (or the trigger is gone).
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|v| *v).await;
    }

    /// Sleep for `wait` unless shutdown comes first: false when it did.
    pub async fn sleep(&mut self, wait: Duration) -> bool {
        tokio::select! {
            // Both cancel-safe.
            _ = self.wait() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }

    /// Wait until the NATS connection behind `connects` (its connect
    /// counter) has connected at least once, then mark the counter seen, so
    /// a later change means a reconnect. False when shutdown came first.
    /// The start of every NATS session loop.
    pub async fn until_connected(&mut self, connects: &mut watch::Receiver<u64>) -> bool {
        tokio::select! {
            // Both cancel-safe.
            _ = self.wait() => return false,
            _ = connects.wait_for(|n| *n > 0) => {}
        }
        connects.mark_unchanged();
        true
    }
}
