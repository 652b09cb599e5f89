//! The sink half of a backend: what a store handle, as a
//! [`JournalSink`](spool_core::JournalSink), recorded since its last commit, and the
//! commit that hands it to the writer thread.

use spool_core::{Commit, DurableNotifier, JournalEntry, JournalError, SnapshotParts};

use crate::op::Op;
use crate::writer::{Batch, WriterThread};

/// What a store handle, as a sink, buffers between commits: the group being recorded,
/// how many groups it committed, and the notifier it was given. The building block of
/// a backend's [`JournalSink`](spool_core::JournalSink): each method is what the
/// sink's method of the same name does. A new (or cloned) handle starts with
/// [`SinkGroup::default`]: nothing recorded and no notifier.
#[derive(Debug, Default)]
pub struct SinkGroup {
    /// What was recorded since the last commit.
    group: Vec<Op>,
    /// Groups committed.
    groups: u64,
    notifier: Option<DurableNotifier>,
}

impl SinkGroup {
    /// Drops what was recorded and not committed, and counts groups from nothing again:
    /// a new journal starts.
    pub fn start(&mut self) {
        self.group.clear();
        self.groups = 0;
    }

    /// Buffers the entry; it is encoded and written on the writer thread at the next
    /// commit.
    pub fn record(&mut self, entry: &JournalEntry) {
        self.group.push(Op::Entry(entry.clone()));
    }

    /// Buffers the checkpoint in parts, after the entries recorded before it.
    pub fn checkpoint_parts(&mut self, parts: SnapshotParts) {
        self.group.push(Op::Parts(parts));
    }

    /// Buffers the checkpoint, after the entries recorded before it.
    pub fn checkpoint(&mut self, snapshot: &[u8]) {
        self.group.push(Op::Checkpoint {
            snapshot: snapshot.to_vec(),
            start: false,
        });
    }

    /// Hands the group to `writer` (waiting while its queue is full): with a notifier,
    /// returns [`Commit::Queued`] and the notifier hears when it is durable; without
    /// one, waits for the commit. An empty group without a notifier is
    /// [`Commit::Durable`] at once, and `writer` is not looked at.
    ///
    /// # Errors
    /// [`JournalError::Sink`] holding `writer`'s error if there is no writer, the
    /// writer thread's error if it is gone, or the write's error for a group without
    /// a notifier.
    pub fn commit<B: Batch>(
        &mut self,
        writer: Result<&WriterThread<B>, B::Error>,
    ) -> Result<Commit, JournalError> {
        let ops = std::mem::take(&mut self.group);
        if ops.is_empty() && self.notifier.is_none() {
            return Ok(Commit::Durable);
        }
        let writer = writer.map_err(JournalError::sink)?;
        self.groups += 1;
        match &self.notifier {
            Some(notifier) => {
                writer
                    .send_group(ops, self.groups, notifier.clone())
                    .map_err(JournalError::sink)?;
                Ok(Commit::Queued)
            }
            None => {
                writer.call(ops).map_err(JournalError::sink)?;
                Ok(Commit::Durable)
            }
        }
    }

    /// Takes `notifier` for the groups committed from now on.
    pub fn notify_with(&mut self, notifier: DurableNotifier) {
        self.notifier = Some(notifier);
    }
}

/// Implements [`JournalSink`](spool_core::JournalSink) for a backend's store handle,
/// the same for every backend: entries and checkpoints are buffered in its
/// [`SinkGroup`], a commit hands the group to its [`WriterThread`], and a start writes
/// the starting checkpoint and waits for it (dropping what was recorded and not
/// committed). Checkpoints are taken in parts.
///
/// The handle provides two inherent methods:
/// - `fn start_journal(&self, snapshot: &[u8]) -> Result<u64, E>`: writes a checkpoint
///   that starts a new journal and waits for it;
/// - `fn sink_and_writer(&mut self) -> (&mut SinkGroup, Result<&WriterThread<B>, E>)`:
///   its sink group, and its writer thread or why it has none (a read-only handle);
///
/// where `B: Batch<Error = E>`.
///
/// A backend that counts what it is given, as a sink:
/// ```
/// use spool_core::{Commit, JournalEntry, JournalSink, Time};
/// use spool_durable::{Batch, Op, SinkGroup, WriterThread};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("{0}")]
/// struct Failed(String);
///
/// /// Numbers entries and checkpoints as a store would, and keeps nothing.
/// #[derive(Default)]
/// struct Counting {
///     entries: u64,
///     checkpoints: u64,
/// }
///
/// impl Batch for Counting {
///     type Error = Failed;
///     fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, Failed> {
///         let number = |op: &&Op| match op {
///             Op::Entry(_) => {
///                 self.entries += 1;
///                 self.entries
///             }
///             _ => {
///                 self.checkpoints += 1;
///                 self.checkpoints
///             }
///         };
///         Ok(ops.iter().map(number).collect())
///     }
///     fn writer_error(message: String) -> Failed {
///         Failed(message)
///     }
/// }
///
/// struct MyStore {
///     writer: WriterThread<Counting>,
///     group: SinkGroup,
/// }
///
/// impl MyStore {
///     fn start_journal(&self, snapshot: &[u8]) -> Result<u64, Failed> {
///         self.writer.call_one(Op::Checkpoint { snapshot: snapshot.to_vec(), start: true })
///     }
///     fn sink_and_writer(&mut self) -> (&mut SinkGroup, Result<&WriterThread<Counting>, Failed>) {
///         (&mut self.group, Ok(&self.writer))
///     }
/// }
///
/// spool_durable::journal_sink!(MyStore);
///
/// let writer = WriterThread::start(Counting::default(), 8, "counting-writer").unwrap();
/// let mut store = MyStore { writer, group: SinkGroup::default() };
/// store.start(b"a snapshot").unwrap();
/// store.record(&JournalEntry::Timeout { at: Time::from_nanos(1) }).unwrap();
/// // Without a notifier, a commit waits for the writer.
/// assert_eq!(store.commit().unwrap(), Commit::Durable);
/// assert!(store.takes_parts());
/// ```
#[macro_export]
macro_rules! journal_sink {
    ($store:ty) => {
        impl $crate::__core::JournalSink for $store {
            /// Writes the starting checkpoint and waits for it; what was recorded and not
            /// committed before is dropped.
            fn start(&mut self, snapshot: &[u8]) -> Result<(), $crate::__core::JournalError> {
                self.sink_and_writer().0.start();
                self.start_journal(snapshot)
                    .map(drop)
                    .map_err($crate::__core::JournalError::sink)
            }

            /// Buffers the entry; it is encoded and written on the writer thread at the
            /// next commit.
            fn record(
                &mut self,
                entry: &$crate::__core::JournalEntry,
            ) -> Result<(), $crate::__core::JournalError> {
                self.sink_and_writer().0.record(entry);
                Ok(())
            }

            /// Checkpoints in parts: only the tasks that changed are written.
            fn takes_parts(&self) -> bool {
                true
            }

            /// Buffers the checkpoint in parts, after the entries recorded before it:
            /// its header becomes the checkpoint's body, its rows are written over the
            /// task rows.
            fn checkpoint_parts(
                &mut self,
                parts: $crate::__core::SnapshotParts,
            ) -> Result<(), $crate::__core::JournalError> {
                self.sink_and_writer().0.checkpoint_parts(parts);
                Ok(())
            }

            /// Buffers the checkpoint, after the entries recorded before it.
            fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), $crate::__core::JournalError> {
                self.sink_and_writer().0.checkpoint(snapshot);
                Ok(())
            }

            /// Hands the group to the writer (waiting while its queue is full): with a
            /// notifier, returns [`Commit::Queued`](spool_core::Commit::Queued) and the
            /// notifier hears when it is durable; without one, waits for the commit. A
            /// handle without a writer refuses a group that has anything to write.
            fn commit(&mut self) -> Result<$crate::__core::Commit, $crate::__core::JournalError> {
                let (sink, writer) = self.sink_and_writer();
                sink.commit(writer)
            }

            fn notify_with(&mut self, notifier: $crate::__core::DurableNotifier) {
                self.sink_and_writer().0.notify_with(notifier);
            }
        }
    };
}
