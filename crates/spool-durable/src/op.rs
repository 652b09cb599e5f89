//! One write a backend's writer is given: a journal entry, or a checkpoint.

use spool_core::{JournalEntry, SnapshotParts};

/// One write in a backend's transaction: an entry appended, or a checkpoint. The
/// building block of a backend: a [`JournalSink`](spool_core::JournalSink) buffers
/// these ([`SinkGroup`](crate::SinkGroup)) and its writer thread
/// ([`WriterThread`](crate::WriterThread)) hands them to the backend's
/// [`Batch::write`](crate::Batch::write) in order.
#[derive(Debug)]
pub enum Op {
    /// A journal entry, encoded on the writer thread.
    Entry(JournalEntry),
    /// A checkpoint's encoded snapshot.
    Checkpoint {
        /// The snapshot, encoded.
        snapshot: Vec<u8>,
        /// Whether it starts a new journal: without history, everything before it is
        /// dropped.
        start: bool,
    },
    /// A checkpoint in parts: the header, and the rows of the tasks that changed.
    Parts(SnapshotParts),
}

impl Op {
    /// Whether `ops` hold the checkpoint that starts a new journal.
    pub fn starts(ops: &[&Op]) -> bool {
        ops.iter()
            .any(|op| matches!(op, Op::Checkpoint { start: true, .. }))
    }
}
