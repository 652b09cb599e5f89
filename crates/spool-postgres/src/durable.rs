//! The PostgreSQL store as a backend of the contract every durable backend keeps
//! ([`DurableStore`]): each method is the store's own, its error converted.

use spool_core::{Journal, JournalEntry, JournalSink, Snapshot};
use spool_durable::{
    CheckpointInfo, DurableError, DurableStore, SegmentInfo, StoreSizes, WriteStats,
};

use crate::store::PgStore;

impl DurableStore for PgStore {
    fn name(&self) -> String {
        PgStore::name(self)
    }

    /// A clone of the handle: it shares the connections and the writer.
    fn sink(&self) -> Box<dyn JournalSink> {
        Box::new(self.clone())
    }

    fn start_journal(&self, snapshot: &[u8]) -> Result<u64, DurableError> {
        Ok(PgStore::start_journal(self, snapshot)?)
    }

    fn write_checkpoint(&self, snapshot: &[u8]) -> Result<u64, DurableError> {
        Ok(PgStore::write_checkpoint(self, snapshot)?)
    }

    fn append(&self, entry: &JournalEntry) -> Result<u64, DurableError> {
        Ok(PgStore::append(self, entry)?)
    }

    fn recover(&self) -> Result<Option<Journal>, DurableError> {
        Ok(PgStore::recover(self)?)
    }

    fn recover_from(&self, id: u64) -> Result<Journal, DurableError> {
        Ok(PgStore::recover_from(self, id)?)
    }

    fn latest_snapshot(&self) -> Result<Option<Snapshot>, DurableError> {
        Ok(PgStore::latest_snapshot(self)?)
    }

    fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, DurableError> {
        Ok(PgStore::checkpoints(self)?)
    }

    fn segments(&self) -> Result<Vec<SegmentInfo>, DurableError> {
        Ok(PgStore::segments(self)?)
    }

    fn sizes(&self) -> Result<StoreSizes, DurableError> {
        Ok(PgStore::sizes(self)?)
    }

    fn maker(&self) -> Result<Option<String>, DurableError> {
        Ok(PgStore::maker(self)?)
    }

    fn claim_maker(&self, maker: &str) -> Result<String, DurableError> {
        Ok(PgStore::claim_maker(self, maker)?)
    }

    fn write_stats(&self) -> WriteStats {
        PgStore::write_stats(self)
    }

    fn verify(&self) -> Result<(), DurableError> {
        Ok(PgStore::verify(self)?)
    }
}
