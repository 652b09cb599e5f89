//! spool-cluster: a spool node of a cluster on one PostgreSQL database.
//!
//! A cluster has a fixed number of shards (made by `spool cluster init`); each is a
//! scheduler with its own journal and checkpoints in the database. A [`Node`] leases
//! shards — up to its fair share, the shard count divided among the live nodes with
//! the remainder one each to the first by name — and runs a runtime per shard it holds, recovered from the shard's store and
//! journaling to it under the lease's epoch. It renews its leases every third of their
//! ttl; a shard whose lease it could not renew in time is stopped before the lease
//! expires, by the node's own monotonic clock, and a writer that finds a newer owner
//! of its shard is refused and stops at once. A node stopped (or dropped) stops every
//! runtime and releases its leases at once, so the others take its shards without
//! waiting; a node that dies holds them until its leases expire, and then the others
//! take them and recover their tasks from checkpoint and journal tail.
//!
//! Task ids are unique across the cluster: shard `s` numbers its tasks from
//! [`first_task_id`]`(s)`, and [`shard_of_task`] finds a task's shard from its id.
//! Submissions another node took for a shard it does not hold wait in the shard's
//! inbox; the owner submits them under their idempotency keys
//! ([`NodeOptions::inbox`]).
//!
//! ```no_run
//! use spool_cluster::{Node, NodeOptions};
//! use spool_runtime::Runtime;
//!
//! let url = "postgres://spool@127.0.0.1:5432/agents";
//! let node = Node::start(url, NodeOptions::new("node-a", "10.0.0.5:8080"), |_shard| {
//!     Runtime::builder()
//! })?;
//! for (shard, epoch, _handle) in node.shards() {
//!     println!("shard {shard} runs here under epoch {epoch}");
//! }
//! node.stop()?;
//! # Ok::<(), spool_cluster::ClusterError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

pub mod budget;
mod error;
mod event;
mod held;
mod inbox;
mod lease;
mod leases;
mod node;
mod options;
mod shard;
mod watchdog;

pub use error::ClusterError;
pub use node::{HeldShards, Node};
pub use options::{
    DEFAULT_CHECKPOINT_EVERY, DEFAULT_INBOX_POLL, DEFAULT_LEASE_TTL, InboxDecoder, NodeOptions,
    ShardId,
};
pub use shard::{TASK_ID_SHARD_SHIFT, first_task_id, shard_of_task};
