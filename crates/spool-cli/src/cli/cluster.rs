//! The command line of `spool cluster`: its subcommands and their arguments.

use clap::{Args, Subcommand};

/// The most shards a cluster has.
pub(crate) const MAX_SHARDS: u64 = 512;

/// `spool cluster SUBCOMMAND`.
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: ClusterCommand,
}

/// The subcommands of `spool cluster`.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Make a database a cluster of N shards (again with the same N: nothing
    /// changes; with another: refused)
    #[command(verbatim_doc_comment)]
    Init(InitArgs),
    /// Print the shards (owner, epoch, lease, inbox depth, lag) and the nodes
    /// (address, heartbeat, draining, shards held)
    #[command(verbatim_doc_comment)]
    Status(StatusArgs),
    /// Mark a node as draining: it takes no more shards and hands over the
    /// ones it holds
    #[command(verbatim_doc_comment)]
    Drain(DrainArgs),
}

/// The database of the cluster: `--postgres URL`, or `SPOOL_DATABASE_URL`.
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct ClusterDatabase {
    /// The cluster's PostgreSQL database, by its URL:
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB
    /// (default: SPOOL_DATABASE_URL)
    #[arg(long, value_name = "URL", verbatim_doc_comment)]
    pub(crate) postgres: Option<String>,
}

/// `spool cluster init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// How many shards (1 to 512); fixed once made
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u64).range(1..=MAX_SHARDS)
    )]
    pub(crate) shards: u64,
    /// The database.
    #[command(flatten)]
    pub(crate) database: ClusterDatabase,
}

/// `spool cluster status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print one JSON object instead of the tables
    #[arg(long)]
    pub(crate) json: bool,
    /// The database.
    #[command(flatten)]
    pub(crate) database: ClusterDatabase,
}

/// `spool cluster drain`.
#[derive(Debug, Args)]
pub(crate) struct DrainArgs {
    /// The node's name, as `spool cluster status` lists it
    #[arg(value_name = "NODE")]
    pub(crate) node: String,
    /// The database.
    #[command(flatten)]
    pub(crate) database: ClusterDatabase,
}
