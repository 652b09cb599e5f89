//! `spool cluster`: make a PostgreSQL database a cluster of shards (`init`), show its
//! shards and nodes (`status`), and ask a node to hand its shards over (`drain`),
//! through `spool_postgres::Cluster`. What cannot be done is said in one line on
//! stderr, exit status 1, never with the URL's password.

#[cfg(feature = "postgres")]
mod commands;
#[cfg(feature = "postgres")]
mod table;

use std::process::ExitCode;

use crate::cli::cluster::{ClusterArgs, ClusterCommand, ClusterDatabase};
use crate::cli::location::DATABASE_URL_VAR;
use crate::stored::Failure;

/// `spool cluster ...`.
pub(crate) fn run(args: ClusterArgs) -> ExitCode {
    let (name, done) = match args.command {
        ClusterCommand::Init(args) => (
            "init",
            database(&args.database).and_then(|url| init(&url, args.shards)),
        ),
        ClusterCommand::Status(args) => (
            "status",
            database(&args.database).and_then(|url| status(&url, args.json)),
        ),
        ClusterCommand::Drain(args) => (
            "drain",
            database(&args.database).and_then(|url| drain(&url, &args.node)),
        ),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(&format!("spool cluster {name}")),
    }
}

/// The cluster's database URL: `--postgres`, else `SPOOL_DATABASE_URL`; neither is a
/// usage error.
fn database(database: &ClusterDatabase) -> Result<String, Failure> {
    database
        .postgres
        .clone()
        .or_else(|| std::env::var(DATABASE_URL_VAR).ok())
        .filter(|url| !url.trim().is_empty())
        .ok_or_else(|| {
            Failure::Usage(format!(
                "no database given: name the cluster's with --postgres URL (or {DATABASE_URL_VAR})"
            ))
        })
}

#[cfg(feature = "postgres")]
use commands::{drain, init, status};

/// What a build without the `postgres` feature says.
#[cfg(not(feature = "postgres"))]
fn no_postgres() -> Failure {
    Failure::Failed(
        "this spool was built without PostgreSQL (cargo's `--no-default-features` leaves \
         out the `postgres` feature): build it with `cargo build --release -p spool-cli`, \
         or add `--features postgres`"
            .to_owned(),
    )
}

#[cfg(not(feature = "postgres"))]
fn init(_url: &str, _shards: u64) -> Result<(), Failure> {
    Err(no_postgres())
}

#[cfg(not(feature = "postgres"))]
fn status(_url: &str, _json: bool) -> Result<(), Failure> {
    Err(no_postgres())
}

#[cfg(not(feature = "postgres"))]
fn drain(_url: &str, _node: &str) -> Result<(), Failure> {
    Err(no_postgres())
}
