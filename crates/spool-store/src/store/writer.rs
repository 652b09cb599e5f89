//! The store's writer: the SQLite side of the writer thread ([`spool_durable::WriterThread`]),
//! which takes the connection's lock for each transaction, as readers do for each read.
//! Store clones share it; the last one to go waits for the thread, so the file is
//! closed when it returns.

use std::sync::{Arc, Mutex, MutexGuard};

use spool_durable::{Batch, Op, WriterThread};

use super::write::Inner;
use crate::StoreError;

/// The writer thread's side of the connection: the lock it takes for each transaction.
pub(super) struct Locked(Arc<Mutex<Inner>>);

impl Batch for Locked {
    type Error = StoreError;

    fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, StoreError> {
        lock(&self.0).write(ops)
    }

    fn writer_error(message: String) -> StoreError {
        StoreError::Unsupported(message)
    }
}

/// What store clones share: the connection (behind its lock) and the writer thread.
/// The writer goes first: it commits what is queued, then the connection is closed.
pub(super) struct Shared {
    pub(super) writer: WriterThread<Locked>,
    pub(super) inner: Arc<Mutex<Inner>>,
}

impl Shared {
    /// Starts the writer thread on `inner`, with a queue of `groups` jobs.
    pub(super) fn start(inner: Inner, groups: usize) -> Result<Shared, StoreError> {
        let inner = Arc::new(Mutex::new(inner));
        let locked = Locked(Arc::clone(&inner));
        let writer = WriterThread::start(locked, groups, "spool-store-writer")?;
        Ok(Shared { writer, inner })
    }

    /// The connection and what goes with it, for a read (or the writer's transaction).
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic while the lock was held dropped its transaction, which rolled back.
    inner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
