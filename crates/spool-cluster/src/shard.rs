//! One shard the node holds: its store opened as the lease's writer, its runtime
//! recovered from it and run on a thread of its own, and how it is stopped.

use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use spool_core::Config;
use spool_postgres::cluster::Lease;
use spool_postgres::{PgOptions, PgStore};
use spool_runtime::{RuntimeBuilder, RuntimeHandle};

use crate::error::ClusterError;
use crate::event::Event;
use crate::options::{NodeOptions, ShardId};

/// How many bits of a task id are the task's number within its shard: shard `s`
/// numbers its tasks from `s << TASK_ID_SHARD_SHIFT` + 1, and a task's shard is its id
/// shifted right by it.
pub const TASK_ID_SHARD_SHIFT: u32 = 44;

/// The id of the first task shard `shard` makes: ids of different shards never meet.
pub fn first_task_id(shard: ShardId) -> u64 {
    (u64::from(shard) << TASK_ID_SHARD_SHIFT) + 1
}

/// The shard that made the task with id `id`.
pub fn shard_of_task(id: u64) -> ShardId {
    // Ids stay below 2^53 for at most 512 shards, so the shift leaves at most 9 bits.
    u32::try_from(id >> TASK_ID_SHARD_SHIFT).unwrap_or(u32::MAX)
}

/// A shard's runtime running on its thread.
#[derive(Debug)]
pub(crate) struct RunningShard {
    /// The lease's epoch the store writes under.
    pub(crate) epoch: u64,
    /// Its runtime's handle.
    pub(crate) handle: RuntimeHandle,
    thread: JoinHandle<()>,
}

impl RunningShard {
    /// Opens shard `shard`'s store as the writer of epoch `epoch` (fencing any older
    /// writer), recovers its runtime from what it holds (`make` gives the executors),
    /// and runs it on a thread of its own; its end is sent to `ended`.
    pub(crate) fn start(
        url: &str,
        options: &NodeOptions,
        make: &(dyn Fn(ShardId) -> RuntimeBuilder + Send),
        lease: Lease,
        ended: Sender<Event>,
    ) -> Result<RunningShard, ClusterError> {
        let Lease { shard, epoch, .. } = lease;
        // A writer that cannot reach the database gives up when the lease would be
        // given up: past it, nothing it holds could be written, and its runtime must
        // stop rather than wait for it.
        let writer = PgOptions::new()
            .shard(shard)
            .lease_epoch(epoch)
            .history(options.history)
            .retry_for(options.hold_for(options.lease_ttl));
        let store = PgStore::connect_with(url, writer)
            .map_err(|source| ClusterError::OpenShard { shard, source })?;
        let journal = store
            .recover()
            .map_err(|source| ClusterError::OpenShard { shard, source })?;
        let config: Config = options.config.clone().first_task_id(first_task_id(shard));
        let mut builder = make(shard)
            .config(config)
            .registry(options.registry.clone())
            .checkpoint_every(options.checkpoint_every);
        if let Some(journal) = &journal {
            builder = builder
                .recover(journal, &options.registry)
                .map_err(|source| ClusterError::Replay { shard, source })?;
        }
        let mut runtime = builder
            .journal(store.clone())
            .history(std::sync::Arc::new(store.clone()))
            .try_build()
            .map_err(|source| ClusterError::Runtime { shard, source })?;
        let handle = runtime.handle();
        let name = format!("spool shard {shard}");
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                runtime.run();
                // A journal that failed ended the loop; a shutdown asked for did not.
                let error = runtime.journal_error().map(|source| ClusterError::Journal {
                    shard,
                    source: source.clone(),
                });
                drop(runtime);
                drop(store);
                let _ = ended.send(Event::Ended {
                    shard,
                    epoch,
                    error,
                });
            })
            .map_err(|e| ClusterError::Spawn {
                thread: name,
                reason: e.to_string(),
            })?;
        Ok(RunningShard {
            epoch,
            handle,
            thread,
        })
    }

    /// Asks the runtime to stop after its current turn; [`join`](RunningShard::join)
    /// waits for it.
    pub(crate) fn ask_to_stop(&self) {
        // Gone means it stopped already.
        let _ = self.handle.shutdown();
    }

    /// Whether its thread has ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the runtime's thread to end (its last groups committed or refused,
    /// its store closed).
    pub(crate) fn join(self, shard: ShardId) -> Result<(), ClusterError> {
        self.thread.join().map_err(|_| ClusterError::Panicked {
            thread: format!("spool shard {shard}"),
        })
    }
}
