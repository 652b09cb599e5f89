//! [`DurableError`]: what can go wrong with a durable backend, named the same on every
//! backend.

use spool_core::DecodeError;

/// Why a durable backend could not be opened, written or read.
///
/// Each backend has its own error type with what only it can say (`spool-store`'s
/// `StoreError`, `spool-postgres`'s `PgStoreError`); each converts into this one, which
/// a program that takes any backend matches on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DurableError {
    /// What was named is not a spool store: not a database of the backend's kind, or
    /// another program's.
    #[error("{what} is not a spool store: {reason}")]
    NotAStore {
        /// The file or database.
        what: String,
        /// What it is instead.
        reason: String,
    },
    /// The store was written by a newer spool, with a schema this build cannot read.
    #[error("{what} has schema version {found}, newer than this build reads ({supported})")]
    NewerSchema {
        /// The file or database.
        what: String,
        /// The store's schema version.
        found: i64,
        /// The newest this build reads.
        supported: i64,
    },
    /// The store was written by an older spool, with a schema this build no longer
    /// reads.
    #[error(
        "{what} has schema version {found}, older than this build reads ({supported}): \
         finish its run with the spool that wrote it, or start a new store"
    )]
    OlderSchema {
        /// The file or database.
        what: String,
        /// The store's schema version.
        found: i64,
        /// The version this build reads.
        supported: i64,
    },
    /// Another writer holds the store: one process writes a store at a time.
    #[error("{what} is in use by another spool process ({detail})")]
    InUse {
        /// The file or database.
        what: String,
        /// Who holds it, or how it is held.
        detail: String,
    },
    /// What the store holds is damaged; the message names the row, chunk or page.
    #[error("the store is damaged: {0}")]
    Corrupt(String),
    /// A stored journal entry passed its checks but does not decode as an entry.
    #[error("journal entry {seq} cannot be read: {source}")]
    Entry {
        /// The entry's sequence number.
        seq: u64,
        /// Why.
        source: DecodeError,
    },
    /// The stored snapshot passed its checks but does not decode as a snapshot.
    #[error("the checkpoint's snapshot cannot be read: {0}")]
    Snapshot(DecodeError),
    /// A journal entry or snapshot could not be encoded (a bug).
    #[error("could not encode: {0}")]
    Encode(String),
    /// No checkpoint with this id is kept.
    #[error("no checkpoint {0} in the store")]
    NoCheckpoint(u64),
    /// The backend cannot work here, or was asked something it does not do.
    #[error("the store cannot work here: {0}")]
    Unsupported(String),
    /// The backend could not be reached (refused, cut, shutting down) and did not come
    /// back in time.
    #[error("the store cannot be reached: {0}")]
    Unavailable(String),
    /// The store was taken away while in use (its file deleted or replaced): nothing
    /// more is written.
    #[error("{0}")]
    Gone(String),
    /// The backend failed otherwise; the message is the backend's.
    #[error("the store's database failed: {0}")]
    Backend(String),
}
