//! What can go wrong in a cluster's tables: [`ClusterError`].

use crate::error::PgStoreError;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// Connecting failed, or the database is not a spool store of this version: the
    /// store's own error.
    #[error(transparent)]
    Store(#[from] PgStoreError),
    /// The database holds no cluster: `spool cluster init` makes one.
    #[error("{what} is not a spool cluster ({reason}): run `spool cluster init`")]
    NotACluster {
        /// The database.
        what: String,
        /// What it is instead.
        reason: String,
    },
    /// The cluster was made with another count of shards, which never changes.
    #[error(
        "{what} is a cluster of {found} shards: it cannot be made one of {asked} \
         (the count of shards never changes)"
    )]
    ShardCount {
        /// The database.
        what: String,
        /// The cluster's count.
        found: u32,
        /// The count asked for.
        asked: u32,
    },
    /// A count of shards out of range.
    #[error("a cluster has 1 to {max} shards, not {asked}", max = super::MAX_SHARDS)]
    BadShardCount {
        /// The count asked for.
        asked: u32,
    },
    /// A shard the cluster does not have.
    #[error("shard {shard} does not exist: the cluster has {shards} shards, numbered from 0")]
    NoShard {
        /// The shard asked for.
        shard: u32,
        /// The cluster's count.
        shards: u32,
    },
    /// A node that has not joined the cluster (or has left it).
    #[error("node `{0}` has not joined the cluster")]
    UnknownNode(String),
    /// A name that must not be empty is: `what` says which.
    #[error("{what} must not be empty")]
    Empty {
        /// What is empty: "a node's name", "an idempotency key".
        what: &'static str,
    },
    /// A row of the cluster's tables is damaged: the message names it.
    #[error("the cluster's tables are damaged: {0}")]
    Corrupt(String),
    /// PostgreSQL failed otherwise; the message is the server's or the client's.
    #[error("the cluster's database failed: {}", postgres_words(.0))]
    Postgres(#[from] postgres::Error),
}

/// What PostgreSQL said: the server's own message (and its detail) for an error it
/// reported, whose `Display` is only "db error"; the client's words otherwise.
fn postgres_words(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_owned(),
        },
        None => error.to_string(),
    }
}
