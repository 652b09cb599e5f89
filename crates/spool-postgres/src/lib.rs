//! spool-postgres: spool's durable store in a PostgreSQL database.
//!
//! [`PgStore`] keeps the same contract as `spool-store`'s SQLite file
//! ([`spool_durable::DurableStore`]): a [`JournalSink`](spool_core::JournalSink) the
//! runtime journals to in groups (one transaction per batch of loop turns, on a writer
//! thread), checkpoints whole or in parts, recovery from the latest or any kept
//! checkpoint, a checksum on every row checked on every read, and one writer at a time
//! (an advisory lock, and an epoch in the head row that fences a writer once another
//! has taken over). Other processes read the store while it is written
//! ([`PgStore::connect_read_only`]).
//!
//! Several journals share a database as the shards of a cluster of nodes
//! ([`cluster`]): each shard's writer ([`PgOptions::shard`]) holds the shard's lease and
//! is fenced by its epoch ([`PgOptions::lease_epoch`]) rather than by the writer's lock.
//!
//! Connections use TLS (rustls) as the URL's `sslmode` says, with libpq's values:
//! `disable`, `prefer` (the default), `require`, `verify-ca` and `verify-full`, the
//! server's certificate checked against the PEM file `sslrootcert=PATH` or the Mozilla
//! roots.
//!
//! A writer that loses its connection (the server restarts, the connection is cut)
//! stops writing and tries again with back-off for [`PgOptions::retry_for`]; groups
//! wait meanwhile, and the runtime waits for room in the queue.
//!
//! ```no_run
//! use spool_postgres::{PgOptions, PgStore};
//!
//! let store = PgStore::connect_with(
//!     "postgres://spool@127.0.0.1:5432/agents",
//!     PgOptions::new().keep_checkpoints(3),
//! )?;
//! if let Some(journal) = store.recover()? {
//!     println!("{} entries after the latest checkpoint", journal.entries.len());
//! }
//! # Ok::<(), spool_postgres::PgStoreError>(())
//! ```

#![forbid(unsafe_code)]

mod address;
pub mod cluster;
mod durable;
mod error;
mod fence;
mod history;
mod maker;
mod options;
mod reader;
mod recover;
mod redact;
mod retry;
mod rows;
mod schema;
mod sizes;
mod store;
mod sum;
mod tls;
mod verify;
mod versions;
mod write;
mod writer;

pub use address::{database_of, display_name};
pub use cluster::{Cluster, ClusterError};
pub use error::PgStoreError;
pub use options::{DEFAULT_QUEUE_GROUPS, PgOptions};
pub use redact::redact_url;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
