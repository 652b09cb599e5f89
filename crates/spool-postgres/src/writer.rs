//! The store's writer: the PostgreSQL side of the writer thread
//! ([`spool_durable::WriterThread`]), which owns the writing connection. Store clones
//! share it; the last one to go waits for the thread, so the connection is closed (and
//! the writer's lock let go) when it returns.

use spool_durable::{Batch, Op, WriterThread};

use crate::error::PgStoreError;
use crate::write::Writer;

/// What store clones share: the writer thread, which owns the writing connection.
pub(crate) type Shared = WriterThread<Writer>;

/// The writer thread's name.
pub(crate) const THREAD: &str = "spool-postgres-writer";

impl Batch for Writer {
    type Error = PgStoreError;

    /// Writes `ops` in one transaction, trying again through lost connections for up
    /// to `retry_for`.
    fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, PgStoreError> {
        Writer::write(self, ops)
    }

    fn writer_error(message: String) -> PgStoreError {
        PgStoreError::Unsupported(message)
    }

    /// Lets go of the writer's lock and closes the connection.
    fn close(&mut self) {
        Writer::close(self);
    }
}
