//! What can go wrong opening, writing or reading a store.

use std::path::PathBuf;

use rusqlite::ErrorCode;
use spool_core::DecodeError;

/// Why a store could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file is not a spool store: not an SQLite database, or another program's.
    #[error("{path} is not a spool store: {reason}")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The store was written by a newer spool, with a schema this build cannot read.
    #[error("the store has schema version {found}, newer than this build reads ({supported})")]
    NewerSchema {
        /// The store's schema version.
        found: i64,
        /// The newest this build reads.
        supported: i64,
    },
    /// The store was written by an older spool, with a schema this build no longer
    /// reads: version 1 kept no checksums on its rows, so its journal cannot be
    /// trusted to be the one written. Finish or recover its run with the spool that
    /// wrote it, or start a new store.
    #[error(
        "the store has schema version {found}, older than this build reads ({supported}): \
         finish its run with the spool that wrote it, or start a new store"
    )]
    OlderSchema {
        /// The store's schema version.
        found: i64,
        /// The version this build reads.
        supported: i64,
    },
    /// Another spool process (or another open handle in this one) holds the store's
    /// lock file (`PATH.lock`, beside it): one writer at a time. Stop that process, or
    /// ask it (a running `spool run` takes schedule changes through its HTTP API).
    #[error(
        "the store {path} is in use by another spool process (one process writes a store \
         at a time; its lock is {lock})",
        path = path.display(),
        lock = lock.display()
    )]
    InUse {
        /// The store.
        path: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// The store's file was deleted, or another file put at its path, while the store
    /// had it open. Nothing more is written: on Unix the process could go on writing
    /// to the deleted file, and every write would be acknowledged and then lost when
    /// the process ends. What was written before is in the deleted file, which the
    /// process holds open until it ends (on Linux it can still be copied from
    /// `/proc/PID/fd/` until then); a store opened at the path afterwards does not
    /// hold it.
    #[error(
        "the store file {path} was deleted or replaced while in use: nothing more is \
         written to it. Everything written before (every task acknowledged until now) is \
         in the deleted file, lost when this process ends; a store opened at {path} \
         afterwards does not hold it",
        path = path.display()
    )]
    FileGone {
        /// The store's path.
        path: PathBuf,
    },
    /// The store was opened read-only ([`Store::open_read_only`](crate::Store::open_read_only)):
    /// it reads while another process writes, and writes nothing.
    #[error("the store {path} is open read-only: it is not written to")]
    ReadOnly {
        /// The store's path.
        path: PathBuf,
    },
    /// Another connection (in this process or another) holds the store's database: one
    /// writer at a time.
    #[error("the store is in use by another process or connection")]
    Locked,
    /// What the store holds is damaged; the message names what: a row (journal entry,
    /// checkpoint, head) that does not match its checksum, a chunk whose bytes do not
    /// match its hash, a chunk, entry or checkpoint that is missing, a row that does
    /// not hang together, or a database page SQLite found malformed.
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
    /// A journal entry could not be encoded (a bug).
    #[error("a journal entry could not be encoded: {0}")]
    Encode(String),
    /// The store cannot work on this file (SQLite refused write-ahead logging: an
    /// in-memory database, a file system without shared memory...).
    #[error("the store cannot work here: {0}")]
    Unsupported(String),
    /// No checkpoint with this id is kept.
    #[error("no checkpoint {0} in the store")]
    NoCheckpoint(u64),
    /// SQLite failed otherwise (the disk is full, the file cannot be opened...).
    #[error("the store's database failed: {0}")]
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> StoreError {
        // A value of the wrong type or range in a column the store wrote was changed
        // behind its back.
        if let rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) = error
        {
            return StoreError::Corrupt(error.to_string());
        }
        match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
                StoreError::Corrupt(error.to_string())
            }
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked,
            _ => StoreError::Sqlite(error),
        }
    }
}

/// The same error, as the backend contract names it: every message reads as it did.
impl From<StoreError> for spool_durable::DurableError {
    fn from(error: StoreError) -> spool_durable::DurableError {
        use spool_durable::DurableError as D;
        const STORE: &str = "the store";
        match error {
            StoreError::NotAStore { path, reason } => D::NotAStore {
                what: path.display().to_string(),
                reason,
            },
            StoreError::NewerSchema { found, supported } => D::NewerSchema {
                what: STORE.to_owned(),
                found,
                supported,
            },
            StoreError::OlderSchema { found, supported } => D::OlderSchema {
                what: STORE.to_owned(),
                found,
                supported,
            },
            StoreError::InUse { path, lock } => D::InUse {
                what: format!("the store {}", path.display()),
                detail: format!(
                    "one process writes a store at a time; its lock is {}",
                    lock.display()
                ),
            },
            StoreError::Locked => D::InUse {
                what: STORE.to_owned(),
                detail: "another connection holds its database".to_owned(),
            },
            error @ StoreError::FileGone { .. } => D::Gone(error.to_string()),
            error @ StoreError::ReadOnly { .. } => D::Unsupported(error.to_string()),
            StoreError::Corrupt(what) => D::Corrupt(what),
            StoreError::Entry { seq, source } => D::Entry { seq, source },
            StoreError::Snapshot(error) => D::Snapshot(error),
            StoreError::Encode(what) => D::Encode(what),
            StoreError::Unsupported(what) => D::Unsupported(what),
            StoreError::NoCheckpoint(id) => D::NoCheckpoint(id),
            StoreError::Sqlite(error) => D::Backend(error.to_string()),
        }
    }
}
