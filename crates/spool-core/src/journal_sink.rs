//! The journal contract: where a driver writes the scheduler's journal.
//!
//! The core only names the contract; a sink that keeps the journal in memory is here,
//! a durable one (a store) lives in its own crate and reports its own error inside a
//! [`JournalError`].

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::journal::{Journal, JournalEntry, JournalError};
use crate::snapshot::SnapshotParts;

/// What [`JournalSink::commit`] says of the group it closed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Commit {
    /// Everything recorded so far is durable now.
    Durable,
    /// The group was handed to a writer: the sink's [`DurableNotifier`] will say when
    /// it is durable (or that writing failed).
    Queued,
}

/// What a sink reports through its [`DurableNotifier`]: `Ok(n)` when the first `n`
/// groups (counted from 1 in the order [`JournalSink::commit`] closed them) are
/// durable; `Err` when a group could not be written (and no later group will be).
pub type DurableNotice = Result<u64, JournalError>;

/// How a sink that commits on another thread tells its driver that groups are durable:
/// a callback the driver gives it ([`JournalSink::notify_with`]), called from the
/// sink's writer thread. The threaded runtime's turns it into a message that wakes its
/// loop.
#[derive(Clone)]
pub struct DurableNotifier(Arc<dyn Fn(DurableNotice) + Send + Sync>);

impl DurableNotifier {
    /// A notifier that calls `f` with each notice.
    pub fn new(f: impl Fn(DurableNotice) + Send + Sync + 'static) -> DurableNotifier {
        DurableNotifier(Arc::new(f))
    }

    /// Tells the driver that the first `groups` groups are durable.
    pub fn durable(&self, groups: u64) {
        (self.0)(Ok(groups));
    }

    /// Tells the driver that a group could not be written: journaling stops.
    pub fn failed(&self, error: JournalError) {
        (self.0)(Err(error));
    }

    /// Whether two notifiers are the same callback (clones of one another).
    pub fn same(&self, other: &DurableNotifier) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for DurableNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DurableNotifier")
    }
}

/// Takes a scheduler's journal, forwarded by its driver: first the snapshot it starts
/// from, then every entry in order
/// ([`Scheduler::poll_journal`](crate::Scheduler::poll_journal)), in **groups**.
///
/// The contract, for write-ahead:
/// - [`record`](JournalSink::record) and [`checkpoint`](JournalSink::checkpoint) may
///   buffer; they keep their order (a checkpoint covers exactly the entries recorded
///   before it).
/// - [`commit`](JournalSink::commit) closes a group (groups are counted from 1 since
///   [`start`](JournalSink::start)): it makes everything recorded so far durable before
///   it returns ([`Commit::Durable`]), or hands it to a writer and reports later
///   through the [`DurableNotifier`] the driver gave ([`Commit::Queued`]); groups
///   become durable in order.
/// - A driver lets nothing out that an entry caused — a request to an executor, an
///   acknowledgment — before the group holding the entry is durable. What a crash
///   loses is then only groups whose effects never left the process.
///
/// The defaults keep a sink that writes as it records (like [`MemoryJournal`])
/// working unchanged: every commit is durable at once and the notifier is not used.
/// A sink that wraps another must forward `commit` and `notify_with` to it.
pub trait JournalSink: Send + 'static {
    /// The encoded snapshot the journal starts from; durable when it returns.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn start(&mut self, snapshot: &[u8]) -> Result<(), JournalError>;

    /// One entry, in the open group (it may only be buffered).
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn record(&mut self, entry: &JournalEntry) -> Result<(), JournalError>;

    /// A checkpoint: a snapshot of the scheduler now, after every entry recorded so
    /// far, in the open group. A store keeps it and may forget the entries before it.
    /// By default the journal just goes on.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        let _ = snapshot;
        Ok(())
    }

    /// Whether the sink takes checkpoints in parts
    /// ([`checkpoint_parts`](JournalSink::checkpoint_parts)): a driver then hands it
    /// the tasks that changed since the last checkpoint instead of a whole snapshot.
    /// By default it does not.
    fn takes_parts(&self) -> bool {
        false
    }

    /// A checkpoint in parts ([`Scheduler::snapshot_changes`](crate::Scheduler::snapshot_changes)),
    /// in the open group: the header, the rows of the tasks that changed since the last
    /// checkpoint (all of them if `full`), and the tasks removed. Called only if
    /// [`takes_parts`](JournalSink::takes_parts) says so; by default the journal just
    /// goes on.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn checkpoint_parts(&mut self, parts: SnapshotParts) -> Result<(), JournalError> {
        let _ = parts;
        Ok(())
    }

    /// Closes the open group: everything recorded so far is durable on return
    /// ([`Commit::Durable`], the default: a sink that writes as it records), or will be
    /// when the notifier says so ([`Commit::Queued`]). A driver calls it at the end of
    /// each loop turn that recorded something.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn commit(&mut self) -> Result<Commit, JournalError> {
        Ok(Commit::Durable)
    }

    /// Gives the sink the way to tell the driver that queued groups are durable, before
    /// the first commit. A sink that never answers [`Commit::Queued`] ignores it (the
    /// default); one that does commits before returning while it has none.
    fn notify_with(&mut self, notifier: DurableNotifier) {
        let _ = notifier;
    }
}

/// A boxed sink is a sink: a program that picks its backend when it runs (SQLite or
/// PostgreSQL) hands the runtime a `Box<dyn JournalSink>`.
impl<S: JournalSink + ?Sized> JournalSink for Box<S> {
    fn start(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        (**self).start(snapshot)
    }

    fn record(&mut self, entry: &JournalEntry) -> Result<(), JournalError> {
        (**self).record(entry)
    }

    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        (**self).checkpoint(snapshot)
    }

    fn takes_parts(&self) -> bool {
        (**self).takes_parts()
    }

    fn checkpoint_parts(&mut self, parts: SnapshotParts) -> Result<(), JournalError> {
        (**self).checkpoint_parts(parts)
    }

    fn commit(&mut self) -> Result<Commit, JournalError> {
        (**self).commit()
    }

    fn notify_with(&mut self, notifier: DurableNotifier) {
        (**self).notify_with(notifier);
    }
}

/// A journal kept in memory; clones share it, so a test can read it while (or after)
/// a driver writes it.
///
/// # Example
/// ```
/// use spool_core::{JournalEntry, JournalError, JournalSink, MemoryJournal, Time};
///
/// let mut sink = MemoryJournal::new();
/// let reader = sink.clone();
/// let entry = JournalEntry::Timeout { at: Time::ZERO };
/// assert_eq!(sink.record(&entry), Err(JournalError::NotStarted));
/// sink.start(b"snapshot").unwrap();
/// sink.record(&entry).unwrap();
/// assert_eq!(reader.journal().unwrap().entries, vec![entry]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryJournal {
    journal: Arc<Mutex<Option<Journal>>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> MemoryJournal {
        MemoryJournal::default()
    }

    /// The journal so far (`None` before the driver started it).
    pub fn journal(&self) -> Option<Journal> {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Journal>> {
        // A panic elsewhere while holding the lock leaves a journal that is still
        // whole (every write is one push), so it is read on.
        self.journal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl JournalSink for MemoryJournal {
    fn start(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        *self.lock() = Some(Journal {
            start: snapshot.to_vec(),
            entries: Vec::new(),
        });
        Ok(())
    }

    fn record(&mut self, entry: &JournalEntry) -> Result<(), JournalError> {
        match self.lock().as_mut() {
            Some(journal) => {
                journal.entries.push(entry.clone());
                Ok(())
            }
            None => Err(JournalError::NotStarted),
        }
    }
}
