//! A shutdown signal every task takes: cloneable, and `wait` is cancel-safe
//! (it returns at once when shutdown was already requested), so it can sit in
//! any `select!`.

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
}
