//! This host's wall clock in milliseconds: what the job store, the retry
//! and crash-loop timers and Docker's events (when Docker gives no time)
//! are stamped with. Only the hive reads these; they never go on the wire,
//! where the server's own time is the only clock.

/// Milliseconds since the Unix epoch, from this host's clock. Only the hive
/// reads these (ordering, backoff, retention); they never go on the wire.
pub type Millis = i64;

/// This host's wall clock in [`Millis`].
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}
