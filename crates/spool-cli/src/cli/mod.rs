//! The command line: what `spool` takes, parsed by `clap`.
//!
//! [`Cli`] holds one [`Command`]; each variant is a subcommand with its own args
//! struct. A subcommand group (`spool NAME SUB ...`) is a variant whose args struct
//! holds a `#[command(subcommand)]` field of its own enum, in the same pattern.
//!
//! Every clap type and the constants its attributes use are here, so that the command
//! modules take their options from this module and it needs nothing of theirs.

pub(crate) mod budgets;
pub(crate) mod cluster;
pub(crate) mod history;
pub(crate) mod limits;
pub(crate) mod location;
pub(crate) mod mcp;
pub(crate) mod replay;
pub(crate) mod schedule;
pub(crate) mod serve;
pub(crate) mod top;

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::{Args, Parser, Subcommand};

use limits::LimitArgs;
use location::StoreLocation;
use replay::ReplayArgs;
use schedule::ScheduleArgs;
use serve::{SERVE_ENVIRONMENT, ServeArgs};
use top::{TOP_ENVIRONMENT, TopArgs};

/// The most agents `--agents` takes.
const MAX_AGENTS: u64 = 1_000_000;
/// The largest `--max-latency-ms`.
const MAX_LATENCY_MS: u64 = 60_000;

/// The agents `spool demo` runs by default.
pub(crate) const DEMO_AGENTS: usize = 300;
/// The seed `spool demo` runs with by default.
pub(crate) const DEMO_SEED: u64 = 42;
/// The slowest simulated call of `spool demo` by default (ms).
pub(crate) const DEMO_MAX_LATENCY_MS: u64 = 40;

/// The environment `spool demo` reads, shown after its options in `spool demo --help`.
const DEMO_ENVIRONMENT: &str = "\
Environment for demo:
  OPENAI_BASE_URL  Use this OpenAI-compatible endpoint as the LLM instead of the
                   scripted model (answers are then reported, not checked)
  OPENAI_API_KEY   Its API key, if it needs one
  OPENAI_MODEL     Its model (default gpt-4o-mini)";

/// The whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "spool",
    version,
    about = "spool — a deterministic, coroutine-style runtime for LLM agents",
    // No command is a usage error like any other (a short error naming the
    // commands), not the whole help as clap's derive would print.
    arg_required_else_help = false
)]
pub(crate) struct Cli {
    /// Log lines on stderr: text (the default) or json (one object
    /// a line); RUST_LOG filters them (default: spool's info, other
    /// crates' warnings)
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text,
        hide_default_value = true,
        hide_possible_values = true,
        verbatim_doc_comment,
        display_order = 900
    )]
    pub(crate) log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How log lines are written.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    // For people: the message, and its fields as `key=value`. (Plain comments: doc
    // comments would make clap list the values at length in `--help`.)
    #[default]
    Text,
    // For machines: one JSON object a line, with `timestamp`, `level`, `target`,
    // `message` and the event's fields.
    Json,
}

/// The subcommands. `help` is clap's own.
///
/// The help texts keep their line breaks (`verbatim_doc_comment`), as clap wraps no
/// help without its `wrap_help` feature: a long one would be one line.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run scripted ReAct agents on the threaded runtime against simulated
    /// LLM and tool executors, then print a summary that checks every answer
    #[command(verbatim_doc_comment, after_help = DEMO_ENVIRONMENT)]
    Demo(DemoArgs),
    /// Print the task table of a store, a snapshot, a journal file or a running
    /// server (id, agent, type, priority, age, state and what it waits on) and totals
    #[command(verbatim_doc_comment)]
    Inspect(InspectArgs),
    /// Replay a journal of the demo; print the trace hash and the first event
    /// that differs from the recorded run (exit 1 if one does); with --policy or
    /// a limit, its workload under those rules beside the recorded run
    #[command(verbatim_doc_comment)]
    Replay(ReplayArgs),
    /// Run a store's schedules and tasks with the built-in agent until Ctrl-C
    /// or SIGTERM; killed, the next start goes on from the store
    #[command(verbatim_doc_comment, after_help = RUN_ENVIRONMENT)]
    Run(RunArgs),
    /// Serve a store over HTTP (tasks, schedules, confirmations, queue, events,
    /// metrics) with the built-in agent as task type `agent`, until Ctrl-C or SIGTERM
    #[command(verbatim_doc_comment, after_help = SERVE_ENVIRONMENT)]
    Serve(ServeArgs),
    /// A live dashboard of a running `spool serve`: the queue, the gates, the
    /// tasks, the schedules and the statistics, with a task's timeline and trace
    #[command(verbatim_doc_comment, after_help = TOP_ENVIRONMENT)]
    Top(TopArgs),
    /// Cron next-fire times, and the schedules of a store or of a running server
    /// (--addr): add, list, show, pause, resume, rm, run now, runs
    #[command(verbatim_doc_comment)]
    Schedule(ScheduleArgs),
    /// A cluster of nodes on one PostgreSQL database: init (its shards),
    /// status (shards, owners, epochs, leases, inboxes; nodes), drain NODE
    #[command(verbatim_doc_comment)]
    Cluster(cluster::ClusterArgs),
    /// A task's steps as a store keeps them or a running server gives them:
    /// each step's time, what it received, what it asked for, how it ended
    #[command(verbatim_doc_comment)]
    History(history::HistoryArgs),
    /// Fork a task from a step of its history, with another answer or input,
    /// through a running server: recorded answers are reused, the rest runs live
    #[command(verbatim_doc_comment)]
    Fork(history::ForkArgs),
}

/// The environment `spool run` reads.
const RUN_ENVIRONMENT: &str = concat!(
    "\
Environment for run:
  OPENAI_BASE_URL  Use this OpenAI-compatible endpoint as the agent's LLM instead of
                   the scripted model
  OPENAI_API_KEY   Its API key, if it needs one
  OPENAI_MODEL     Its model (default gpt-4o-mini)

A store is written by one process at a time: `spool schedule` commands on a store
that `spool run` is running fail (\"the store ... is in use by another spool
process\"); stop it, change the schedules, and start it again.

",
    store_limits_help!()
);

/// The scripted model's option, which `spool run` and `spool serve` share.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// Latency of each call to the scripted model (ms)
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 20,
        value_parser = clap::value_parser!(u64).range(..=MAX_LATENCY_MS),
    )]
    llm_latency_ms: u64,
    /// Read a real endpoint's answers whole, not streamed
    #[arg(long)]
    no_stream: bool,
}

impl ModelArgs {
    /// The latency of each call.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_millis(self.llm_latency_ms)
    }

    /// Whether a real endpoint's answers are streamed (the default).
    pub(crate) fn stream(&self) -> bool {
        !self.no_stream
    }
}

/// The options of `spool run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The store to run: `--store PATH` or `--postgres URL`.
    #[command(flatten)]
    pub(crate) location: StoreLocation,
    /// The scripted model's latency.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// No run lines on stderr
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// The limits on tasks and requests.
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// The budgets on LLM spend.
    #[command(flatten)]
    pub(crate) budgets: budgets::BudgetArgs,
    /// The MCP servers whose tools the agent offers.
    #[command(flatten)]
    pub(crate) mcp: mcp::McpArgs,
}

/// The options of `spool demo`; `spool demo`'s options are made from them.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Agents to run
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEMO_AGENTS,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_AGENTS),
    )]
    pub(crate) agents: usize,
    /// Seed of the agents' scripts and the simulated latencies
    #[arg(long, value_name = "S", default_value_t = DEMO_SEED)]
    pub(crate) seed: u64,
    /// Slowest simulated call: LLM 5-M ms, tools 1-10 ms up to M
    #[arg(
        long,
        value_name = "M",
        default_value_t = DEMO_MAX_LATENCY_MS,
        value_parser = clap::value_parser!(u64).range(..=MAX_LATENCY_MS),
    )]
    pub(crate) max_latency_ms: u64,
    /// The store to journal the run to (`--store PATH` or `--postgres URL`): started
    /// again on the same store after a Ctrl-C or a kill, it goes on where it stopped.
    #[command(flatten)]
    pub(crate) location: StoreLocation,
    /// Record the run's journal (every input, and the trace) to FILE,
    /// for `spool replay FILE`; not together with a store
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["store", "postgres"],
        verbatim_doc_comment
    )]
    pub(crate) journal: Option<PathBuf>,
    /// Keep a finished agent's result N seconds, then evict it; an agent
    /// that ran is never run again, whatever this says
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "N",
        default_value_t = spool_runtime::DEFAULT_RETENTION.as_secs(),
    )]
    pub(crate) retention_secs: u64,
    /// Print `acked N` on stdout as answers become durable: for tests,
    /// not in the help
    #[arg(long, hide = true)]
    pub(crate) report_acks: bool,
    /// No progress lines on stderr
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

/// The arguments of `spool inspect`: what to read, one of a file, a PostgreSQL store
/// (with none given, `SPOOL_DATABASE_URL`) and a running server.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").args(["path", "postgres", "addr"])))]
pub(crate) struct InspectArgs {
    /// A store, a snapshot or a journal file
    #[arg(value_name = "PATH")]
    pub(crate) path: Option<PathBuf>,
    /// A store in a PostgreSQL database instead, read without stopping
    /// its writer (default: SPOOL_DATABASE_URL)
    #[arg(long, value_name = "URL", verbatim_doc_comment)]
    pub(crate) postgres: Option<String>,
    /// A running `spool serve` (http://HOST:PORT) instead: the tasks its
    /// HTTP API lists
    #[arg(long, value_name = "URL", verbatim_doc_comment)]
    pub(crate) addr: Option<String>,
    /// With --addr: a file holding the server's bearer token (else
    /// SPOOL_TOKEN)
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["path", "postgres"],
        verbatim_doc_comment
    )]
    pub(crate) token_file: Option<PathBuf>,
}

#[cfg(test)]
mod tests;
