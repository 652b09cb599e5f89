//! The node's calls on the cluster's tables, under its name and lease ttl: join,
//! renew, count its fair share, take, release, leave.

use std::time::Duration;

use spool_postgres::Cluster;
use spool_postgres::cluster::{ClusterError as TablesError, Lease, share_of};

use crate::options::{NodeOptions, ShardId};

/// The cluster's tables as one node uses them.
#[derive(Debug)]
pub(crate) struct Leases {
    cluster: Cluster,
    node: String,
    addr: String,
    ttl: Duration,
}

impl Leases {
    /// Connects to the cluster at `url` and joins it as `options` says.
    pub(crate) fn join(url: &str, options: &NodeOptions) -> Result<Leases, TablesError> {
        let cluster = Cluster::connect(url)?;
        cluster.join(&options.node_id, &options.addr)?;
        Ok(Leases {
            cluster,
            node: options.node_id.clone(),
            addr: options.addr.clone(),
            ttl: options.lease_ttl,
        })
    }

    /// Renews the node's row and its unexpired leases; returns the leases it holds. A
    /// node whose row is gone (removed by hand, or it left) joins again, holding
    /// nothing, and the renewal fails.
    pub(crate) fn renew(&self) -> Result<Vec<Lease>, TablesError> {
        let renewed = self.cluster.heartbeat(&self.node, self.ttl);
        if let Err(TablesError::UnknownNode(_)) = &renewed {
            self.cluster.join(&self.node, &self.addr)?;
        }
        renewed
    }

    /// How many shards the node should hold: none while it is draining, else its share
    /// of the shards among the nodes heard from within a ttl
    /// ([`share_of`]: the shares add up to the shard count).
    pub(crate) fn fair_share(&self) -> Result<usize, TablesError> {
        if self.cluster.draining(&self.node)? {
            return Ok(0);
        }
        let live = self.cluster.live_nodes(self.ttl)?;
        let share = share_of(self.cluster.shards(), &live, &self.node);
        Ok(usize::try_from(share).unwrap_or(usize::MAX))
    }

    /// Takes up to `count` free or expired shards.
    pub(crate) fn take(&self, count: usize) -> Result<Vec<Lease>, TablesError> {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        self.cluster.take(&self.node, count, self.ttl)
    }

    /// Releases `shard`'s lease of `epoch` if the node still holds it.
    pub(crate) fn release(&self, shard: ShardId, epoch: u64) -> Result<bool, TablesError> {
        let lease = Lease {
            shard,
            epoch,
            expires_in: Duration::ZERO,
        };
        self.cluster.release(&self.node, &lease)
    }

    /// Releases every lease and leaves the nodes.
    pub(crate) fn leave(&self) -> Result<Vec<ShardId>, TablesError> {
        self.cluster.leave(&self.node)
    }
}
