//! The shards a node runs now, shared by its threads: the lease thread lists and
//! renews them, the watchdog takes off those whose lease ran out, the node's callers
//! and the inbox reader read them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use spool_runtime::RuntimeHandle;

use crate::options::ShardId;

/// One shard the node runs.
#[derive(Clone, Debug)]
struct Entry {
    /// The lease's epoch its writer writes under.
    epoch: u64,
    /// Its runtime.
    handle: RuntimeHandle,
    /// Until when, on the node's monotonic clock, it may run without a renewal.
    hold_until: Instant,
}

/// Each shard the node runs, with its lease's epoch, its runtime's handle and until
/// when it may run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held(Arc<Mutex<BTreeMap<ShardId, Entry>>>);

impl Held {
    /// The shards in order, each with its epoch and handle.
    pub(crate) fn list(&self) -> Vec<(ShardId, u64, RuntimeHandle)> {
        self.lock()
            .iter()
            .map(|(shard, entry)| (*shard, entry.epoch, entry.handle.clone()))
            .collect()
    }

    /// Shard `shard`'s epoch and handle, if it runs here.
    pub(crate) fn get(&self, shard: ShardId) -> Option<(u64, RuntimeHandle)> {
        self.lock()
            .get(&shard)
            .map(|entry| (entry.epoch, entry.handle.clone()))
    }

    /// Lists `shard` as run here under `epoch` until `hold_until`.
    pub(crate) fn insert(
        &self,
        shard: ShardId,
        epoch: u64,
        handle: RuntimeHandle,
        hold_until: Instant,
    ) {
        let entry = Entry {
            epoch,
            handle,
            hold_until,
        };
        self.lock().insert(shard, entry);
    }

    /// Lets `shard`, if it still runs under `epoch`, run until `hold_until`; `false`
    /// if it no longer runs (the watchdog stopped it).
    pub(crate) fn renew(&self, shard: ShardId, epoch: u64, hold_until: Instant) -> bool {
        match self.lock().get_mut(&shard) {
            Some(entry) if entry.epoch == epoch => {
                entry.hold_until = hold_until;
                true
            }
            _ => false,
        }
    }

    /// Takes `shard` off the list.
    pub(crate) fn remove(&self, shard: ShardId) {
        self.lock().remove(&shard);
    }

    /// Takes every shard off the list.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    /// Takes off the list every shard whose time ran out by `now`, and returns them
    /// with their handles.
    pub(crate) fn take_overdue(&self, now: Instant) -> Vec<(ShardId, RuntimeHandle)> {
        let mut map = self.lock();
        let overdue: Vec<ShardId> = map
            .iter()
            .filter(|(_, entry)| entry.hold_until <= now)
            .map(|(shard, _)| *shard)
            .collect();
        overdue
            .into_iter()
            .filter_map(|shard| map.remove(&shard).map(|entry| (shard, entry.handle)))
            .collect()
    }

    /// When the first shard's time runs out.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.lock().values().map(|entry| entry.hold_until).min()
    }

    /// The map, whatever thread poisoned the lock: it is changed only by whole inserts,
    /// removes and stores of one field, so it is never half changed.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<ShardId, Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
