//! What can go wrong starting or stopping a node, and starting one of its shards.

use spool_core::{JournalError, ReplayError};
use spool_postgres::PgStoreError;
use spool_runtime::RuntimeError;

use crate::options::ShardId;

/// Why a node could not start or stop, or could not run one of its shards.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The cluster's tables could not be reached, read or written (the node could not
    /// join, or release its leases), or the database holds no cluster.
    #[error(transparent)]
    Database(#[from] spool_postgres::cluster::ClusterError),
    /// A shard's store could not be opened as its writer: a newer owner holds it
    /// ([`PgStoreError::Fenced`]), the server is gone, or the store is damaged.
    #[error("shard {shard}'s store cannot be opened: {source}")]
    OpenShard {
        /// The shard.
        shard: ShardId,
        /// What the store said.
        source: PgStoreError,
    },
    /// What a shard's store holds could not be replayed into a runtime (a task type
    /// the node's registry does not know, a journal from another program).
    #[error("shard {shard}'s journal cannot be replayed: {source}")]
    Replay {
        /// The shard.
        shard: ShardId,
        /// What the replay said.
        source: ReplayError,
    },
    /// A shard's runtime could not start (its journal could not start, or an executor
    /// thread could not be made).
    #[error("shard {shard}'s runtime cannot start: {source}")]
    Runtime {
        /// The shard.
        shard: ShardId,
        /// What the runtime said.
        source: RuntimeError,
    },
    /// A shard's runtime stopped because its journal failed; for a writer fenced by a
    /// newer owner the source is [`PgStoreError::Fenced`].
    #[error("shard {shard}'s journal failed: {source}")]
    Journal {
        /// The shard.
        shard: ShardId,
        /// What the journal said.
        source: JournalError,
    },
    /// The operating system refused to start one of the node's threads.
    #[error("cannot start the thread `{thread}`: {reason}")]
    Spawn {
        /// The thread's name.
        thread: String,
        /// Why.
        reason: String,
    },
    /// One of the node's threads panicked; what it held was stopped.
    #[error("the thread `{thread}` panicked")]
    Panicked {
        /// The thread's name.
        thread: String,
    },
}

impl ClusterError {
    /// Whether this is a writer refused because a newer owner of its shard exists.
    pub fn is_fenced(&self) -> bool {
        match self {
            ClusterError::OpenShard { source, .. } => matches!(source, PgStoreError::Fenced { .. }),
            ClusterError::Journal {
                source: JournalError::Sink(sink),
                ..
            } => matches!(
                sink.downcast_ref::<PgStoreError>(),
                Some(PgStoreError::Fenced { .. })
            ),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer fenced at connect or while journaling is told apart from other
    /// failures of a shard.
    #[test]
    fn a_fenced_writer_is_told_apart() {
        let fenced = || PgStoreError::Fenced {
            what: "postgres://spool@127.0.0.1:5432/agents".to_owned(),
            ours: 3,
            found: 4,
        };
        let at_connect = ClusterError::OpenShard {
            shard: 2,
            source: fenced(),
        };
        assert!(at_connect.is_fenced());
        let journaling = ClusterError::Journal {
            shard: 2,
            source: JournalError::sink(fenced()),
        };
        assert!(journaling.is_fenced());
        assert_eq!(
            journaling.to_string(),
            "shard 2's journal failed: the journal's sink failed: \
             postgres://spool@127.0.0.1:5432/agents was taken over by another writer (epoch 4, this writer's is 3): nothing more is written by this one"
        );
        let other = ClusterError::OpenShard {
            shard: 2,
            source: PgStoreError::Corrupt("the head row is missing".to_owned()),
        };
        assert!(!other.is_fenced());
        let unsaveable = ClusterError::Journal {
            shard: 2,
            source: JournalError::Encode("a NaN".to_owned()),
        };
        assert!(!unsaveable.is_fenced());
    }
}
