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
//! ```
//! use serde_json::json;
//! use spool_core::{Kind, TaskRegistry};
//! use spool_runtime::{Runtime, from_fn};
//! use spool_store::Store;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("agent.spool");
//! let store = Store::open(&path).unwrap();
//! let mut runtime = Runtime::builder()
//!     .executor(Kind::Llm, from_fn(|_request| Ok(json!("hello"))))
//!     .journal(store.clone())
//!     .checkpoint_every(100)
//!     .try_build() // starting writes to the store, which can fail: an error, not a panic
//!     .unwrap();
//! runtime.run_until_idle();
//! drop(runtime);
//! drop(store);
//!
//! // Later, or in the next process after a crash:
//! let store = Store::open(&path).unwrap();
//! let journal = store.recover().unwrap().expect("the runtime started a journal");
//! let runtime = Runtime::builder()
//!     .recover(&journal, &TaskRegistry::new())
//!     .unwrap()
//!     .journal(store)
//!     .try_build()
//!     .unwrap();
//! # drop(runtime);
//! ```

#![forbid(unsafe_code)]

mod chunk;
mod error;
mod store;
mod sum;

pub use error::StoreError;
pub use store::{
    APPLICATION_ID, CheckpointInfo, Durability, INLINE_MAX, SCHEMA_VERSION, Store, StoreOptions,
    StoreSizes, WriteStats,
};

/// The chunking parameters, for documentation and tests: content-defined chunks are
/// at least [`MIN_CHUNK`](chunking::MIN_CHUNK) bytes (except a blob's last), aim at
/// [`AVG_CHUNK`](chunking::AVG_CHUNK) and are at most
/// [`MAX_CHUNK`](chunking::MAX_CHUNK).
pub mod chunking {
    pub use crate::chunk::{AVG_CHUNK, GROUP_AVG, MAX_CHUNK, MIN_CHUNK, ROOTS_MAX};
}
