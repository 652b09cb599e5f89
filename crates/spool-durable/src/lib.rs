//! spool-durable: the contract every durable backend of spool keeps.
//!
//! A runtime goes on after its process dies because a backend keeps what it needs: the
//! latest checkpoints (snapshots of the scheduler) and the journal entries since, every
//! entry committed before the runtime acts on it. It keeps the history before them too,
//! as segments (a checkpoint and the entries after it) that a [`History`] retention
//! policy drops, oldest first: [`DurableStore::segments`] lists them and
//! [`DurableStore::recover_from`] reads the journal from any of them. spool has two backends, the same in
//! everything a program can observe:
//!
//! - `spool-store`: one SQLite file, embedded, one process at a time;
//! - `spool-postgres`: a PostgreSQL database, which other processes can read while one
//!   writes.
//!
//! [`DurableStore`] is what both do, as one object-safe trait: a program (the `spool`
//! binary, a test) opens either and uses it the same way — a [`JournalSink`](spool_core::JournalSink) for the
//! runtime ([`DurableStore::sink`]), recovery ([`DurableStore::recover`]), the kept
//! checkpoints and history, sizes, the maker record, and a full check
//! ([`DurableStore::verify`]).
//! What a backend may not do differently is pinned by one conformance suite, run against
//! both in the workspace's tests (`tests/durable`).
//!
//! The idempotency record (which key named which task) and everything else the
//! scheduler keeps is part of its snapshots and journal entries, so it survives a
//! restart on any backend that keeps this contract.
//!
//! The building blocks of a backend are here too: a backend implements [`Batch`] (one
//! transaction writing a run of [`Op`]s), runs it on a [`WriterThread`] (a bounded
//! queue, waiting groups batched into one transaction, the runtime told when they are
//! durable), and buffers what its sink records in a [`SinkGroup`]; [`journal_sink!`]
//! makes its [`JournalSink`](spool_core::JournalSink) of these.
//!
//! # Example
//! A program that takes any backend:
//! ```
//! use spool_core::{Scheduler, TaskRegistry};
//! use spool_durable::{DurableError, DurableStore};
//!
//! /// How many tasks the backend's latest state holds, replayed to its last entry.
//! fn live_tasks(store: &dyn DurableStore) -> Result<usize, DurableError> {
//!     let Some(journal) = store.recover()? else {
//!         return Ok(0);
//!     };
//!     let replay = Scheduler::replay(&journal, &TaskRegistry::new())
//!         .map_err(|e| DurableError::Corrupt(format!("{}: {e}", store.name())))?;
//!     Ok(replay.scheduler.live_len())
//! }
//! # let _ = live_tasks;
//! ```

#![forbid(unsafe_code)]

mod contract;
mod crash;
mod error;
mod history;
mod op;
mod sequence;
mod sink;
mod stats;
mod writer;

pub use contract::DurableStore;
pub use crash::{CRASH_STATUS, CrashAt, CrashCounter};
pub use error::DurableError;
pub use history::{
    History, HistoryParseError, KeptCheckpoint, SegmentCost, WallClock, from_unix_ms, segments_of,
    unix_ms,
};
pub use op::Op;
pub use sequence::{EntrySequence, SequenceError};
pub use sink::SinkGroup;
pub use stats::{CheckpointInfo, SegmentInfo, StoreSizes, WriteStats};
pub use writer::{Batch, WriterThread};

/// What [`journal_sink!`] names, for the crate that uses it.
#[doc(hidden)]
pub use spool_core as __core;
