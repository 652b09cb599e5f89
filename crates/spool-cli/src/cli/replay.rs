//! The options of `spool replay`: the journal, and the what-if options that replay its
//! workload under other scheduling rules (`--policy` and the limit options `spool
//! serve` and `spool run` take).

use std::path::PathBuf;

use clap::{ArgGroup, Args, ValueEnum};

use super::limits::LimitArgs;

/// The help's heading over the what-if options.
const WHAT_IF_HEADING: &str = "What-if (any of these replays the workload under other rules, \
                               in virtual time; see docs/replay.md)";

/// The arguments of `spool replay`. The limit options come with the store's
/// `--history`, which a replay has no use for: it is left out of the help, and refused
/// when given (see [`WhatIfArgs::history_given`]).
#[derive(Debug, Args)]
#[command(
    group(
        ArgGroup::new("what_if")
            .args(["policy", "max_running", "limits", "agent_limits", "agent_max_in_flight"])
            .multiple(true)
    ),
    mut_arg("history", |arg| arg.hide(true))
)]
pub(crate) struct ReplayArgs {
    /// A journal written by `spool demo --journal`, or a store
    /// (an SQLite file, or a postgres:// URL): its kept history,
    /// from its oldest checkpoint
    #[arg(value_name = "JOURNAL", verbatim_doc_comment)]
    pub(crate) journal: PathBuf,
    /// Check the recorded run against this build's code: its inputs
    /// are taken again with the recorded answers; the first step
    /// asking another request than recorded is shown (exit 1)
    #[arg(long, conflicts_with = "what_if", verbatim_doc_comment)]
    pub(crate) check: bool,
    /// Write the journal read (a store's kept history, as one
    /// journal) to FILE and stop: a run to keep as a test
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["what_if", "check"],
        verbatim_doc_comment
    )]
    pub(crate) save: Option<PathBuf>,
    /// The what-if options.
    #[command(flatten)]
    pub(crate) what_if: WhatIfArgs,
}

/// The what-if options: the rules to run the recorded workload under, each one the
/// recorded run's when not given.
#[derive(Debug, Args)]
#[command(next_help_heading = WHAT_IF_HEADING)]
pub(crate) struct WhatIfArgs {
    /// The run-queue policy: fifo, priority or fair-share [default: the
    /// recorded run's]
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        hide_possible_values = true,
        verbatim_doc_comment,
        display_order = 99
    )]
    pub(crate) policy: Option<PolicyName>,
    /// The limits; each not given is the recorded run's.
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// Print the two runs' figures as JSON (with a what-if option)
    #[arg(long, requires = "what_if", display_order = 103)]
    pub(crate) json: bool,
}

impl WhatIfArgs {
    /// Whether any what-if option was given: the replay is then a what-if run.
    pub(crate) fn given(&self) -> bool {
        let LimitArgs {
            max_running,
            limits,
            agent_limits,
            agent_max_in_flight,
            ..
        } = &self.limits;
        self.policy.is_some()
            || max_running.is_some()
            || !limits.is_empty()
            || !agent_limits.is_empty()
            || agent_max_in_flight.is_some()
    }

    /// Whether `--history` was given another value than its default: a store's option,
    /// which a replay refuses.
    pub(crate) fn history_given(&self) -> bool {
        self.limits.history != LimitArgs::default().history
    }
}

/// A run-queue policy `--policy` names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PolicyName {
    // First in, first out.
    Fifo,
    // Priority levels, first in first out within a level.
    Priority,
    // The agent with the fewest in flight first, priority within an agent.
    FairShare,
}
