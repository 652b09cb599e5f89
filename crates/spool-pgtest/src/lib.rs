//! Throwaway PostgreSQL clusters for spool's tests.
//!
//! [`PgCluster::start`] makes a cluster of its own with Debian's PostgreSQL binaries:
//! `initdb` into a new temporary directory, a free port on 127.0.0.1, its own socket
//! directory. It never connects to a server that happens to be running. Tests in one
//! binary share one cluster through [`PgCluster::shared`] and each takes a database of
//! its own with [`PgCluster::create_database`].
//!
//! The cluster is stopped and its directory removed when the [`PgCluster`] is dropped,
//! and also when the test process ends without dropping it (a static, `exit`, a
//! `SIGKILL`): a small reaper process started beside the cluster waits for the test
//! process to end and cleans up after it.
//!
//! For TLS tests, [`TestCertificates`] makes a CA and a server certificate with the
//! `openssl` command, and [`PgClusterBuilder::tls`] starts a cluster that serves them.
//!
//! When the binaries are missing, `scripts/test-deps.sh postgres` installs them (the
//! `postgresql` package). `initdb` and `postgres` refuse to run as root: a root test
//! process runs them as the system user `spool-pg`, which the same script creates.
//!
//! ```no_run
//! let cluster = spool_pgtest::PgCluster::shared();
//! let url = cluster.create_database("journal_order").expect("a fresh database");
//! let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
//! # let _ = &mut client;
//! ```

mod account;
mod certs;
mod cluster;
mod error;
mod install;
mod reaper;

pub use certs::TestCertificates;
pub use cluster::{PgCluster, PgClusterBuilder};
pub use error::PgError;

/// The PostgreSQL guide's examples (`docs/postgres.md`), compiled as doctests.
#[doc = include_str!("../../../docs/postgres.md")]
#[cfg(doctest)]
pub struct PostgresDocDoctests;
