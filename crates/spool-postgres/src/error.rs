//! What can go wrong connecting to, writing or reading a store in PostgreSQL. No
//! message holds the URL's password: a database is named by its address without it
//! ([`PgStore::name`](crate::PgStore::name)).

use spool_core::DecodeError;

/// Why a PostgreSQL store could not be connected to, written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgStoreError {
    /// The URL does not parse as a PostgreSQL connection string.
    #[error("`{url}` is not a PostgreSQL URL: {reason}")]
    BadUrl {
        /// The URL as given, its password left out.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The root certificates named by the URL's `sslrootcert` cannot be used: the file
    /// is missing or unreadable, or holds no PEM certificate.
    #[error("cannot use sslrootcert {path}: {reason}")]
    RootCert {
        /// The file, as the URL names it.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server could not be reached when connecting (refused, no such host, the
    /// timeout passed, authentication failed).
    #[error("cannot connect to PostgreSQL at {address}: {reason}")]
    Refused {
        /// `host:port` of the server.
        address: String,
        /// Why, as the client says.
        reason: String,
    },
    /// The connection was lost while writing and did not come back within
    /// [`PgOptions::retry_for`](crate::PgOptions::retry_for): the group being written
    /// failed, and nothing more is written.
    #[error("{what} could not be reached for {seconds} s: {reason}")]
    Unavailable {
        /// The database.
        what: String,
        /// How long the writer tried.
        seconds: u64,
        /// The last failure.
        reason: String,
    },
    /// The database is not a spool store: another program's tables, or a `spool`
    /// schema without spool's marker; for a read-only connection, an empty database.
    #[error("{what} is not a spool store: {reason}")]
    NotAStore {
        /// The database.
        what: String,
        /// What it is instead.
        reason: String,
    },
    /// The store was written by a newer spool, with a schema this build cannot read.
    #[error("{what} has schema version {found}, newer than this build reads ({supported})")]
    NewerSchema {
        /// The database.
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
        /// The database.
        what: String,
        /// The store's schema version.
        found: i64,
        /// The version this build reads.
        supported: i64,
    },
    /// Another connection holds the store's writer lock: one process writes a store at
    /// a time. Stop that process, or connect read only.
    #[error(
        "{what} is in use by another spool process (it holds the store's writer lock; \
         one process writes a store at a time)"
    )]
    InUse {
        /// The database.
        what: String,
    },
    /// Another writer connected to the store after this one (its epoch in the head row
    /// is newer): this handle's lease is lost, the group being written failed and
    /// nothing more is written by it.
    #[error(
        "{what} was taken over by another writer (epoch {found}, this writer's is {ours}): \
         nothing more is written by this one"
    )]
    Fenced {
        /// The database.
        what: String,
        /// This writer's epoch.
        ours: i64,
        /// The head row's epoch now (`0`: the head row is gone).
        found: i64,
    },
    /// After a lost connection the head row is *behind* this writer's last committed
    /// batch: the server lost commits it had acknowledged (the session ran with
    /// `synchronous_commit = off`, or the database failed over to a replica that had
    /// not received them). What was lost is lost; nothing more is written.
    #[error(
        "{what} lost commits it had acknowledged: its head row says entry {found_entry} and \
         checkpoint {found_checkpoint}, behind this writer's last committed batch (entry \
         {ours_entry}, checkpoint {ours_checkpoint}); a server with synchronous_commit off, \
         or a failover to a replica that had not received them, loses them"
    )]
    LostCommits {
        /// The database.
        what: String,
        /// The last entry the head row says.
        found_entry: u64,
        /// The latest checkpoint the head row says.
        found_checkpoint: u64,
        /// The last entry this writer committed.
        ours_entry: u64,
        /// The latest checkpoint this writer committed.
        ours_checkpoint: u64,
    },
    /// A lease writer could not take its shard: the shard's head row stayed locked by
    /// a session that is not a lease writer of the shard (so not ended), for as long as
    /// connecting may take.
    #[error(
        "{what}: the head row of shard {shard} stayed locked for {seconds} s by a session \
         that is not a lease writer of the shard (a writer without a lease?)"
    )]
    HeadLocked {
        /// The database.
        what: String,
        /// The shard.
        shard: u32,
        /// How long the writer waited.
        seconds: u64,
    },
    /// The handle was connected read only: it writes nothing.
    #[error("{what} was connected read only: {action} is refused")]
    ReadOnly {
        /// The database.
        what: String,
        /// What was asked.
        action: &'static str,
    },
    /// What the store holds is damaged; the message names the row: one that does not
    /// match its checksum, a missing entry or checkpoint, a row past the head.
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
    /// No checkpoint with this id is kept.
    #[error("no checkpoint {0} in the store")]
    NoCheckpoint(u64),
    /// A journal entry or snapshot could not be encoded (a bug).
    #[error("could not encode: {0}")]
    Encode(String),
    /// The store was asked something it does not do (an empty maker name), or its
    /// writer thread is gone.
    #[error("the store cannot do this: {0}")]
    Unsupported(String),
    /// PostgreSQL failed otherwise; the message is the server's or the client's.
    #[error("the store's database failed: {0}")]
    Postgres(#[from] postgres::Error),
}

/// The same error, as the backend contract names it.
impl From<PgStoreError> for spool_durable::DurableError {
    fn from(error: PgStoreError) -> spool_durable::DurableError {
        use spool_durable::DurableError as D;
        match error {
            error @ (PgStoreError::BadUrl { .. } | PgStoreError::RootCert { .. }) => {
                D::Unsupported(error.to_string())
            }
            error @ (PgStoreError::Refused { .. } | PgStoreError::Unavailable { .. }) => {
                D::Unavailable(error.to_string())
            }
            PgStoreError::NotAStore { what, reason } => D::NotAStore { what, reason },
            PgStoreError::NewerSchema {
                what,
                found,
                supported,
            } => D::NewerSchema {
                what,
                found,
                supported,
            },
            PgStoreError::OlderSchema {
                what,
                found,
                supported,
            } => D::OlderSchema {
                what,
                found,
                supported,
            },
            PgStoreError::InUse { what } => D::InUse {
                what,
                detail: "it holds the store's writer lock; one process writes a store at a time"
                    .to_owned(),
            },
            error @ PgStoreError::LostCommits { .. } => D::Backend(error.to_string()),
            PgStoreError::Fenced { what, ours, found } => D::InUse {
                what,
                detail: format!(
                    "this writer's lease was lost: another writer took over \
                     (epoch {found}, this writer's is {ours})"
                ),
            },
            PgStoreError::HeadLocked {
                what,
                shard,
                seconds,
            } => D::InUse {
                what,
                detail: format!(
                    "the head row of shard {shard} stayed locked for {seconds} s by a session \
                     that is not a lease writer of the shard"
                ),
            },
            error @ PgStoreError::ReadOnly { .. } => D::Unsupported(error.to_string()),
            PgStoreError::Corrupt(what) => D::Corrupt(what),
            PgStoreError::Entry { seq, source } => D::Entry { seq, source },
            PgStoreError::Snapshot(error) => D::Snapshot(error),
            PgStoreError::NoCheckpoint(id) => D::NoCheckpoint(id),
            PgStoreError::Encode(what) => D::Encode(what),
            PgStoreError::Unsupported(what) => D::Unsupported(what),
            PgStoreError::Postgres(error) => D::Backend(error.to_string()),
        }
    }
}
