//! spool-store: the durable embedded store of spool, on SQLite.
//!
//! A [`Store`] keeps what a runtime needs to go on after its process dies: the latest
//! checkpoints (snapshots of the scheduler) and the journal entries since, every entry
//! committed before the runtime acts on it. After a crash, [`Store::recover`] gives the
//! latest checkpoint and the entries after it as a [`Journal`](spool_core::Journal),
//! and `RuntimeBuilder::recover` (in `spool-runtime`) goes on from there. The store
//! depends on the core alone: it implements the core's
//! [`JournalSink`](spool_core::JournalSink) contract.
//!
//! What is stored is cut into content-defined chunks keyed by their BLAKE3 hash and
//! stored once: an agent that resends its growing conversation on every LLM call, and
//! a checkpoint after every turn, store the conversation's text about once, not once
//! per turn. See `docs/store.md` for the format, the durability guarantee and its
//! limits.
//!
//! # Example
//! A driver writes to a store through the core's [`JournalSink`](spool_core::JournalSink)
//! contract: `RuntimeBuilder::journal` (in `spool-runtime`) takes a store, and
//! `docs/store.md` shows a runtime writing to one and going on after a crash. Here,
//! the store's own API, with the core's scheduler driven by hand:
//! ```
//! use std::time::Duration;
//! use spool_core::{Config, JournalEntry, Scheduler, TaskRegistry, Time};
//! use spool_store::Store;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("agent.spool");
//! let store = Store::open(&path).unwrap();
//! let mut scheduler = Scheduler::new(Config::new());
//! // The journal starts at a snapshot of the scheduler...
//! store.start_journal(&scheduler.snapshot().unwrap().encode().unwrap()).unwrap();
//! for secs in 1..=3 {
//!     // ...each thing the scheduler takes in is committed before it acts on it...
//!     let at = Time::from_duration(Duration::from_secs(secs));
//!     store.append(&JournalEntry::Timeout { at }).unwrap();
//!     scheduler.handle_timeout(at);
//!     if secs == 2 {
//!         // ...and a checkpoint is the state after every entry so far.
//!         let snapshot = scheduler.snapshot().unwrap().encode().unwrap();
//!         store.write_checkpoint(&snapshot).unwrap();
//!     }
//! }
//! drop(store);
//!
//! // Later, or in the next process after a crash:
//! let store = Store::open(&path).unwrap();
//! // Two checkpoints kept: the journal's start and the one after entry 2 (and, by
//! // default, every segment of the last 7 days up to 1 GiB: see `StoreOptions::history`).
//! let kept: Vec<(u64, u64)> = store
//!     .checkpoints()
//!     .unwrap()
//!     .iter()
//!     .map(|c| (c.after_entry, c.entries_after))
//!     .collect();
//! assert_eq!(kept, [(0, 3), (2, 1)]);
//! // The latest checkpoint and the entries after it: what a driver goes on from.
//! let journal = store.recover().unwrap().expect("the journal was started");
//! assert_eq!(journal.entries.len(), 1);
//! let replay = Scheduler::replay(&journal, &TaskRegistry::new()).unwrap();
//! assert_eq!(replay.scheduler.now(), Time::from_duration(Duration::from_secs(3)));
//! ```

#![forbid(unsafe_code)]

mod chunk;
mod error;
mod store;
mod sum;

pub use error::StoreError;
pub use spool_durable::{
    CRASH_STATUS, CheckpointInfo, CrashAt, History, SegmentInfo, StoreSizes, WallClock, WriteStats,
};
pub use store::{
    APPLICATION_ID, DEFAULT_QUEUE_GROUPS, Durability, INLINE_MAX, ROW_INLINE_MAX, SCHEMA_VERSION,
    Store, StoreOptions,
};

/// The chunking parameters, for documentation and tests: content-defined chunks are
/// at least [`MIN_CHUNK`](chunking::MIN_CHUNK) bytes (except a blob's last), aim at
/// [`AVG_CHUNK`](chunking::AVG_CHUNK) and are at most
/// [`MAX_CHUNK`](chunking::MAX_CHUNK).
pub mod chunking {
    pub use crate::chunk::{AVG_CHUNK, GROUP_AVG, MAX_CHUNK, MIN_CHUNK, ROOTS_MAX};
}
