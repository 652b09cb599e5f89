//! Helpers for runtime tests: bounded waits, so that a bug fails a test instead of
//! hanging the suite, and a guard that always shuts the loop down.

#[path = "../common/ask_once.rs"]
mod ask_once;
pub(crate) use ask_once::ask_once;

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use spool::{OutboundRequest, RuntimeHandle};

/// How long any one runtime test may take before it counts as hung.
pub(crate) const LIMIT: Duration = Duration::from_secs(20);

/// Runs `f` on a thread of its own and returns what it returns; panics if it takes
/// longer than `limit` (the thread is left behind) and passes on its panic if it panics.
pub(crate) fn within<T, F>(limit: Duration, what: &str, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let thread = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => {
            thread.join().unwrap();
            value
        }
        Err(RecvTimeoutError::Timeout) => panic!("{what} did not finish within {limit:?}"),
        Err(RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what} ended without a result"),
        },
    }
}

/// Polls `probe` every millisecond until it gives a value; panics after `LIMIT`.
pub(crate) fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Shuts the runtime's loop down when dropped, so that `run()` on the main thread
/// returns even when the thread holding the guard panics.
pub(crate) struct ShutdownOnDrop(pub(crate) RuntimeHandle);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

/// A request's payload as a number.
pub(crate) fn payload(out: &OutboundRequest) -> u64 {
    out.request.payload.as_u64().unwrap_or(u64::MAX)
}
