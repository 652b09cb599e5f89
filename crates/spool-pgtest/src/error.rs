//! What can go wrong while making, starting or using a throwaway cluster.

use std::path::PathBuf;
use std::process::ExitStatus;

/// An error from [`PgCluster`](crate::PgCluster): each says what failed and, where the
/// server wrote one, the end of its log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// No PostgreSQL binaries were found, even after running the install script.
    #[error(
        "no PostgreSQL binaries (initdb, pg_ctl, postgres) found: looked at `pg_config --bindir` and /usr/lib/postgresql/*/bin{after_install}"
    )]
    NoBinaries {
        /// What the install script did, if it ran.
        after_install: String,
    },
    /// The install script (`scripts/test-deps.sh postgres`) failed.
    #[error("{script} failed ({status}): {stderr}")]
    Install {
        /// The script's path.
        script: PathBuf,
        /// How it ended.
        status: ExitStatus,
        /// What it wrote on its standard error.
        stderr: String,
    },
    /// A program could not be started at all.
    #[error("could not run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A program ran and failed.
    #[error("{program} failed ({status}): {output}")]
    Command {
        /// The program and its arguments.
        program: String,
        /// How it ended.
        status: ExitStatus,
        /// What it wrote (standard output, then standard error).
        output: String,
    },
    /// A file or directory of the cluster could not be made, read or changed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The server did not start (or did not restart).
    #[error("PostgreSQL did not start: {reason}; last lines of {log}:\n{tail}")]
    Start {
        /// What was seen.
        reason: String,
        /// The server's log file.
        log: PathBuf,
        /// Its last lines.
        tail: String,
    },
    /// Every port tried was taken by the time the server bound it.
    #[error(
        "PostgreSQL could not bind a free port in {attempts} attempts; last lines of {log}:\n{tail}"
    )]
    NoFreePort {
        /// How many ports were tried.
        attempts: u32,
        /// The server's log file.
        log: PathBuf,
        /// Its last lines.
        tail: String,
    },
    /// The server could not be reached at its URL.
    #[error("could not connect to {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// The client's error.
        source: postgres::Error,
    },
    /// A statement failed.
    #[error("`{sql}` failed: {source}")]
    Query {
        /// The statement.
        sql: String,
        /// The server's error.
        source: postgres::Error,
    },
    /// A database name that is not a plain identifier.
    #[error(
        "database name {name:?} is not a plain identifier: use 1 to 63 of a-z, 0-9 and _, not starting with a digit"
    )]
    DatabaseName {
        /// The name given.
        name: String,
    },
    /// The system user that runs the server as root could not be found or made.
    #[error("the system user {user:?} that runs PostgreSQL for root is missing: {reason}")]
    User {
        /// The user's name.
        user: String,
        /// What was wrong.
        reason: String,
    },
}
