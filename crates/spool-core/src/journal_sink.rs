//! The journal contract: where a driver writes the scheduler's journal, and why a
//! write can fail.
//!
//! The core only names the contract; a sink that keeps the journal in memory is here,
//! a durable one (a store) lives in its own crate and reports its own error inside a
//! [`JournalError`].

use std::error::Error as StdError;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{Journal, JournalEntry, SnapshotError};

/// Why a journal could not be written (or encoded).
///
/// A sink's own error (a store's) is kept as the [`source`](StdError::source), so a
/// caller can downcast it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum JournalError {
    /// An entry or checkpoint came before the journal's starting snapshot: the driver
    /// must call [`JournalSink::start`] first.
    NotStarted,
    /// The scheduler could not be snapshotted for the journal's start or a checkpoint
    /// (a live task that cannot be saved, or a snapshot that cannot be encoded).
    Snapshot(SnapshotError),
    /// The journal (or one entry) could not be encoded: a value serde cannot write.
    Encode(String),
    /// The sink's storage failed; the error says how (a store's own error: damaged,
    /// full, read-only).
    Sink(Arc<dyn StdError + Send + Sync>),
}

impl JournalError {
    /// A sink's own error, kept as the source.
    pub fn sink(error: impl StdError + Send + Sync + 'static) -> JournalError {
        JournalError::Sink(Arc::new(error))
    }
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::NotStarted => {
                f.write_str("an entry was recorded before the journal started (call `start` first)")
            }
            JournalError::Snapshot(error) => {
                write!(
                    f,
                    "the scheduler could not be snapshotted for the journal: {error}"
                )
            }
            JournalError::Encode(message) => {
                write!(f, "the journal could not be encoded: {message}")
            }
            JournalError::Sink(error) => write!(f, "the journal's sink failed: {error}"),
        }
    }
}

impl StdError for JournalError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            JournalError::Snapshot(error) => Some(error),
            // The sink's error itself, not the `Arc` around it, so that it downcasts.
            JournalError::Sink(error) => Some(&**error),
            JournalError::NotStarted | JournalError::Encode(_) => None,
        }
    }
}

impl From<SnapshotError> for JournalError {
    fn from(error: SnapshotError) -> JournalError {
        JournalError::Snapshot(error)
    }
}

/// Two journal errors are equal when they are the same variant saying the same thing
/// (a sink's error is compared by its message: it need not be comparable itself).
impl PartialEq for JournalError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (JournalError::NotStarted, JournalError::NotStarted) => true,
            (JournalError::Snapshot(a), JournalError::Snapshot(b)) => a == b,
            (JournalError::Encode(a), JournalError::Encode(b)) => a == b,
            (JournalError::Sink(a), JournalError::Sink(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

/// Takes a scheduler's journal, forwarded by its driver: first the snapshot it starts
/// from, then every entry in order ([`Scheduler::poll_journal`](crate::Scheduler::poll_journal)). A durable sink (a store) makes an entry durable before `record` returns, so
/// what the scheduler has taken in is never lost.
pub trait JournalSink: Send + 'static {
    /// The encoded snapshot the journal starts from.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn start(&mut self, snapshot: &[u8]) -> Result<(), JournalError>;

    /// One entry.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn record(&mut self, entry: &JournalEntry) -> Result<(), JournalError>;

    /// A checkpoint: a snapshot of the scheduler now, after every entry recorded so
    /// far. A store keeps it and may forget the entries before it. By default the
    /// journal just goes on.
    ///
    /// # Errors
    /// The sink's failure; the driver stops journaling and shuts down.
    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        let _ = snapshot;
        Ok(())
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
