//! Where the runtime writes its journal: every input, as it takes it.

use std::sync::{Arc, Mutex};

use spool_core::{Journal, JournalEntry};

/// Takes the runtime's journal: first the snapshot it starts from, then every entry in
/// order. A durable sink (a store) makes an entry durable before `record` returns, so
/// what the runtime has taken in is never lost.
pub trait JournalSink: Send + 'static {
    /// The encoded snapshot the journal starts from.
    ///
    /// # Errors
    /// The sink's message; the runtime stops journaling and shuts down.
    fn start(&mut self, snapshot: &[u8]) -> Result<(), String>;

    /// One entry.
    ///
    /// # Errors
    /// The sink's message; the runtime stops journaling and shuts down.
    fn record(&mut self, entry: &JournalEntry) -> Result<(), String>;

    /// A checkpoint: a snapshot of the scheduler now, after every entry recorded so
    /// far. A store keeps it and may forget the entries before it. By default the
    /// journal just goes on.
    ///
    /// # Errors
    /// The sink's message; the runtime stops journaling and shuts down.
    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let _ = snapshot;
        Ok(())
    }
}

/// A journal kept in memory; clones share it, so a test can read it while (or after)
/// the runtime runs.
#[derive(Clone, Debug, Default)]
pub struct MemoryJournal {
    journal: Arc<Mutex<Option<Journal>>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> MemoryJournal {
        MemoryJournal::default()
    }

    /// The journal so far (`None` before the runtime started it).
    pub fn journal(&self) -> Option<Journal> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Journal>> {
        self.journal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl JournalSink for MemoryJournal {
    fn start(&mut self, snapshot: &[u8]) -> Result<(), String> {
        *self.lock() = Some(Journal {
            start: snapshot.to_vec(),
            entries: Vec::new(),
        });
        Ok(())
    }

    fn record(&mut self, entry: &JournalEntry) -> Result<(), String> {
        match self.lock().as_mut() {
            Some(journal) => {
                journal.entries.push(entry.clone());
                Ok(())
            }
            None => Err("an entry before the journal started".to_owned()),
        }
    }
}
