//! The watchdog: a thread that stops a shard the moment its lease runs out by the
//! node's monotonic clock (its ttl less the margin after the last renewal), whatever
//! the lease thread is doing — waiting on a database that does not answer, or
//! recovering another shard.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::ClusterError;
use crate::held::Held;

/// The longest the watchdog sleeps with no shard to watch.
const IDLE: Duration = Duration::from_secs(1);

/// The watchdog's thread; dropping the sender stops it.
#[derive(Debug)]
pub(crate) struct Watchdog {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Watchdog {
    /// Starts watching the shards of `held` for node `node`.
    pub(crate) fn start(node: &str, held: Held) -> Result<Watchdog, ClusterError> {
        let (stop, stop_rx) = std::sync::mpsc::channel();
        let name = format!("spool watchdog {node}");
        let node = node.to_owned();
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || watch(&node, &held, &stop_rx))
            .map_err(|e| ClusterError::Spawn {
                thread: name,
                reason: e.to_string(),
            })?;
        Ok(Watchdog { stop, thread })
    }

    /// Stops the watchdog and waits for it.
    pub(crate) fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the watchdog panicked");
        }
    }
}

/// Sleeps until the first shard's time runs out, stops every shard whose time ran
/// out, and goes round until told to stop.
fn watch(node: &str, held: &Held, stop: &Receiver<()>) {
    loop {
        let now = Instant::now();
        for (shard, handle) in held.take_overdue(now) {
            tracing::warn!(
                node,
                shard,
                "the lease was not renewed in time; the shard stops"
            );
            // Gone means it stopped already.
            let _ = handle.shutdown();
        }
        let wait = held
            .next_deadline()
            .map_or(IDLE, |at| at.saturating_duration_since(now).min(IDLE));
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
