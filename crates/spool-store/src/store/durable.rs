//! The store as a backend of the contract every durable backend keeps
//! ([`DurableStore`]): each method is the store's own, its error converted.

use spool_core::{Journal, JournalEntry, JournalSink, Snapshot};
use spool_durable::{
    CheckpointInfo, DurableError, DurableStore, SegmentInfo, StoreSizes, WriteStats,
};

use super::Store;

impl DurableStore for Store {
    fn name(&self) -> String {
        self.path().display().to_string()
    }

    /// A clone of the handle: it shares the file and the writer.
    fn sink(&self) -> Box<dyn JournalSink> {
        Box::new(self.clone())
    }

    fn start_journal(&self, snapshot: &[u8]) -> Result<u64, DurableError> {
        Ok(Store::start_journal(self, snapshot)?)
    }

    fn write_checkpoint(&self, snapshot: &[u8]) -> Result<u64, DurableError> {
        Ok(Store::write_checkpoint(self, snapshot)?)
    }

    fn append(&self, entry: &JournalEntry) -> Result<u64, DurableError> {
        Ok(Store::append(self, entry)?)
    }

    fn recover(&self) -> Result<Option<Journal>, DurableError> {
        Ok(Store::recover(self)?)
    }

    fn recover_from(&self, id: u64) -> Result<Journal, DurableError> {
        Ok(Store::recover_from(self, id)?)
    }

    fn latest_snapshot(&self) -> Result<Option<Snapshot>, DurableError> {
        Ok(Store::latest_snapshot(self)?)
    }

    fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, DurableError> {
        Ok(Store::checkpoints(self)?)
    }

    fn segments(&self) -> Result<Vec<SegmentInfo>, DurableError> {
        Ok(Store::segments(self)?)
    }

    fn sizes(&self) -> Result<StoreSizes, DurableError> {
        Ok(Store::sizes(self)?)
    }

    fn maker(&self) -> Result<Option<String>, DurableError> {
        Ok(Store::maker(self)?)
    }

    fn claim_maker(&self, maker: &str) -> Result<String, DurableError> {
        Ok(Store::claim_maker(self, maker)?)
    }

    fn write_stats(&self) -> WriteStats {
        Store::write_stats(self)
    }

    fn verify(&self) -> Result<(), DurableError> {
        Ok(Store::verify(self)?)
    }
}
