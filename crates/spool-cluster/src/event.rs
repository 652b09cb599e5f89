//! What the lease thread is told: the node is stopping, or a shard's runtime ended.

use crate::error::ClusterError;
use crate::options::ShardId;

/// A message to the lease thread.
#[derive(Debug)]
pub(crate) enum Event {
    /// Stop every shard and release every lease: the node leaves.
    Stop,
    /// A shard's runtime stopped by itself (its journal failed).
    Ended {
        /// The shard.
        shard: ShardId,
        /// The epoch it ran under.
        epoch: u64,
        /// Why, if its journal failed (fenced by a newer owner, or the database gone).
        error: Option<ClusterError>,
    },
}
