//! The shutdown signal, on the ground floor: every long-running task (the listeners, the
//! file watchers, the JWKS refresher, the store watch) ends when it flips. A listener's
//! connections learn it from the listener, through their clocks
//! (the server's `Slots::stop_all`), not each from the channel.
//!
//! Invariant: [`stopped`] resolves once shutdown is signalled or its sender is gone, and
//! holds no borrow of the channel across an await.

use tokio::sync::watch;

/// Resolves once shutdown is signalled (or its sender is gone). The guard `wait_for`
/// returns is not `Send`, so it is dropped here rather than held across a `select!`.
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
