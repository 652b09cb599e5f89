//! The options of `spool history` and `spool fork`.

use std::path::PathBuf;

use clap::Args;

use super::location::StoreLocation;

/// The options of `spool history`: the task, and where its history is read — a store
/// (`--store PATH`, `--postgres URL`) or a running server (`--addr URL`).
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// The task's id
    #[arg(value_name = "TASK")]
    pub(crate) task: u64,
    /// The store to read it from: `--store PATH` or `--postgres URL`.
    #[command(flatten)]
    pub(crate) location: StoreLocation,
    /// A running `spool serve` (http://HOST:PORT) instead: the history
    /// its HTTP API gives
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["store", "postgres"],
        verbatim_doc_comment
    )]
    pub(crate) addr: Option<String>,
    /// With --addr: a file holding the server's bearer token (else
    /// SPOOL_TOKEN)
    #[arg(long, value_name = "FILE", requires = "addr", verbatim_doc_comment)]
    pub(crate) token_file: Option<PathBuf>,
    /// Print the history as JSON (as `GET /v1/tasks/{id}/history` gives it)
    #[arg(long)]
    pub(crate) json: bool,
}

/// The options of `spool fork`: the task, the step, the edit, and the running server
/// that makes the fork.
#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The task to fork
    #[arg(value_name = "TASK")]
    pub(crate) task: u64,
    /// The step of its history to start from (see `spool history`): the
    /// answers it had received before it are reused, the rest runs live
    #[arg(long, value_name = "N", verbatim_doc_comment)]
    pub(crate) at: u32,
    /// Answer request REQ (made before step N) with JSON instead of what
    /// it was answered
    #[arg(
        long,
        value_name = "REQ=JSON",
        conflicts_with = "input",
        verbatim_doc_comment
    )]
    pub(crate) answer: Option<String>,
    /// Start the fork from this input (JSON) instead of the task's
    #[arg(long, value_name = "JSON")]
    pub(crate) input: Option<String>,
    /// The running `spool serve` (http://HOST:PORT) that makes the fork:
    /// a fork is made only through a running server
    #[arg(long, value_name = "URL", verbatim_doc_comment)]
    pub(crate) addr: Option<String>,
    /// A file holding the server's bearer token (else SPOOL_TOKEN)
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
}
