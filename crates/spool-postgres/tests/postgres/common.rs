//! What the tests share: a fresh database, journal entries, snapshots.

use spool_core::{JournalEntry, Time};

/// The URL of a new, empty database named `name` in the binary's cluster.
pub(crate) fn database(name: &str) -> String {
    spool_pgtest::PgCluster::shared()
        .create_database(name)
        .unwrap_or_else(|e| panic!("database {name}: {e}"))
}

/// A journal entry told apart by `n`.
pub(crate) fn entry(n: u64) -> JournalEntry {
    JournalEntry::Timeout {
        at: Time::from_nanos(n),
    }
}
