//! [`DurableStore`]: what a durable backend does, the same on every backend.

use std::fmt;

use spool_core::{Journal, JournalEntry, JournalSink, Snapshot};

use crate::{CheckpointInfo, DurableError, SegmentInfo, StoreSizes, WriteStats};

/// A durable backend: the journal and the checkpoints of one runtime, and what reads
/// them back.
///
/// Every backend keeps these promises, which the conformance suite checks on each:
///
/// - **Acknowledged is kept.** What the sink ([`sink`](DurableStore::sink)) commits —
///   once [`JournalSink::commit`] says [`Commit::Durable`](spool_core::Commit::Durable),
///   or the notifier says the group is durable — is in every later
///   [`recover`](DurableStore::recover), after any crash of the writing process.
///   Groups are committed in order and whole: a recovery sees a prefix of the groups,
///   never part of one.
/// - **Checked on every read.** Every row read back carries a checksum over its fields,
///   its key included: a changed byte, a renumbered, swapped or deleted row is a
///   [`DurableError::Corrupt`] naming the row (or [`DurableError::Entry`] /
///   [`DurableError::Snapshot`] for bytes that pass their checks and do not decode),
///   never a different answer.
/// - **Checkpoints in parts or whole are the same state.** A checkpoint written in
///   parts (only the tasks that changed) recovers to the same snapshot bytes as the
///   whole snapshot of that moment.
/// - **One writer.** A second writer of the same journal is refused
///   ([`DurableError::InUse`]) rather than let the two diverge.
///
/// The trait is object-safe: a program that takes either backend holds a
/// `Box<dyn DurableStore>`. Its methods take `&self`; a backend's handle is shared by
/// the runtime's sink and the program's reads (reads see what is committed).
pub trait DurableStore: fmt::Debug + Send + Sync {
    /// What the store is, for messages: the SQLite file's path, or the PostgreSQL
    /// database's address without its password.
    fn name(&self) -> String;

    /// A sink the runtime journals to (`RuntimeBuilder::journal` in `spool-runtime`):
    /// it records entries and checkpoints, commits them as a group at the end of each
    /// loop turn, and tells the runtime when they are durable.
    fn sink(&self) -> Box<dyn JournalSink>;

    /// Starts a new journal at `snapshot` (encoded): a checkpoint after which the
    /// journal goes on from `snapshot`. Without history it drops every checkpoint and
    /// entry before it; with history the segments before it stay, as retention says
    /// (entry numbers go on). Durable when it returns; returns the checkpoint's id.
    ///
    /// # Errors
    /// The backend's failure; nothing is changed then.
    fn start_journal(&self, snapshot: &[u8]) -> Result<u64, DurableError>;

    /// Writes a checkpoint: `snapshot` (encoded) is the state after every entry so far.
    /// Durable when it returns; returns the checkpoint's id.
    ///
    /// # Errors
    /// The backend's failure; nothing is changed then.
    fn write_checkpoint(&self, snapshot: &[u8]) -> Result<u64, DurableError>;

    /// Appends one journal entry in a transaction of its own, durable when it returns.
    /// Returns the entry's sequence number (the first is 1).
    ///
    /// # Errors
    /// The backend's failure; nothing is changed then.
    fn append(&self, entry: &JournalEntry) -> Result<u64, DurableError>;

    /// The latest checkpoint's snapshot and every entry after it, in order: what
    /// `RuntimeBuilder::recover` goes on from. `None` for a store with no journal.
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] naming what is damaged, [`DurableError::Entry`] for an
    /// entry that does not decode, or the backend's failure.
    fn recover(&self) -> Result<Option<Journal>, DurableError>;

    /// Like [`recover`](DurableStore::recover), from the kept checkpoint `id` (see
    /// [`checkpoints`](DurableStore::checkpoints) and [`segments`](DurableStore::segments)):
    /// its snapshot and every entry after it, across the later checkpoints. From the
    /// oldest kept checkpoint, one journal that replays the whole kept history.
    ///
    /// # Errors
    /// [`DurableError::NoCheckpoint`] if no checkpoint `id` is kept; otherwise as
    /// [`recover`](DurableStore::recover).
    fn recover_from(&self, id: u64) -> Result<Journal, DurableError>;

    /// The latest checkpoint's snapshot, decoded; `None` for a store with no journal.
    ///
    /// # Errors
    /// As [`recover`](DurableStore::recover), and [`DurableError::Snapshot`] if the
    /// bytes are not a snapshot this build reads.
    fn latest_snapshot(&self) -> Result<Option<Snapshot>, DurableError>;

    /// The checkpoints kept, oldest first.
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] for a row that does not match its checksum, or the
    /// backend's failure.
    fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, DurableError>;

    /// The segments of history kept, oldest first: each checkpoint kept, when it was
    /// written, and its entries up to the next one (the latest's up to the last entry).
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] for a row that does not match its checksum, or the
    /// backend's failure.
    fn segments(&self) -> Result<Vec<SegmentInfo>, DurableError>;

    /// What the store holds now.
    ///
    /// # Errors
    /// The backend's failure.
    fn sizes(&self) -> Result<StoreSizes, DurableError>;

    /// The name of what made the store (`spool demo` records `demo`, `spool run` and
    /// `spool serve` record `run`); `None` if none is recorded. Reading it writes
    /// nothing.
    ///
    /// # Errors
    /// The backend's failure.
    fn maker(&self) -> Result<Option<String>, DurableError>;

    /// Records `maker` as what made the store unless one is recorded already; returns
    /// the one recorded after the call. Durable when it returns.
    ///
    /// # Errors
    /// [`DurableError::Unsupported`] for an empty name, or the backend's failure.
    fn claim_maker(&self, maker: &str) -> Result<String, DurableError>;

    /// What this handle was given and wrote since it was opened.
    fn write_stats(&self) -> WriteStats;

    /// Checks everything the store holds: every row against its checksum, no entry
    /// missing, every kept checkpoint's journal readable. Reads everything: for tests
    /// and tools.
    ///
    /// # Errors
    /// [`DurableError::Corrupt`] naming the first problem found, or as
    /// [`recover`](DurableStore::recover).
    fn verify(&self) -> Result<(), DurableError>;
}
