//! The shards a node runs now, shared by its threads: the lease thread changes it, the
//! node's callers and the inbox reader read it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use spool_runtime::RuntimeHandle;

use crate::options::ShardId;

/// Each shard the node runs, with its lease's epoch and its runtime's handle.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held(Arc<Mutex<BTreeMap<ShardId, (u64, RuntimeHandle)>>>);

impl Held {
    /// The shards in order, each with its epoch and handle.
    pub(crate) fn list(&self) -> Vec<(ShardId, u64, RuntimeHandle)> {
        self.lock()
            .iter()
            .map(|(shard, (epoch, handle))| (*shard, *epoch, handle.clone()))
            .collect()
    }

    /// Shard `shard`'s epoch and handle, if it runs here.
    pub(crate) fn get(&self, shard: ShardId) -> Option<(u64, RuntimeHandle)> {
        self.lock().get(&shard).cloned()
    }

    /// Lists `shard` as run here under `epoch`.
    pub(crate) fn insert(&self, shard: ShardId, epoch: u64, handle: RuntimeHandle) {
        self.lock().insert(shard, (epoch, handle));
    }

    /// Takes `shard` off the list.
    pub(crate) fn remove(&self, shard: ShardId) {
        self.lock().remove(&shard);
    }

    /// Takes every shard off the list.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    /// The map, whatever thread poisoned the lock: it is changed only by whole inserts
    /// and removes, so it is never half changed.
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ShardId, (u64, RuntimeHandle)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
