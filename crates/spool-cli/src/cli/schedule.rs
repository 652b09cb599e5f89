//! The command line of `spool schedule`: its subcommands and their arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};
use jiff::Timestamp;
use spool_core::{CatchUp, Overlap, Priority, Spec};

use super::location::StoreLocation;

/// The most fire times `spool schedule next --count` prints.
const MAX_COUNT: u64 = 10_000;

/// `spool schedule SUBCOMMAND`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: ScheduleCommand,
}

/// The subcommands of `spool schedule`.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Print the next times a cron expression fires (no store needed)
    Next(NextArgs),
    /// Add a schedule that runs the built-in agent on a prompt
    Add(AddArgs),
    /// List a store's schedules and their status
    List(ListArgs),
    /// Show one schedule, its status and its session
    Show(ShowArgs),
    /// Pause a schedule: it fires nothing until resumed
    Pause(SlugArgs),
    /// Resume a paused schedule from its next fire after now
    Resume(SlugArgs),
    /// Delete a schedule (its session stays)
    Rm(SlugArgs),
    /// Run a schedule now, through its overlap policy; `spool run` runs it
    Run(SlugArgs),
    /// List the runs of a schedule the store still holds, with their fire times
    Runs(ShowArgs),
}

/// `spool schedule next`.
#[derive(Debug, Args)]
pub(crate) struct NextArgs {
    /// A five-field cron expression (minute hour day-of-month month
    /// day-of-week), or a nickname such as @daily
    #[arg(value_name = "EXPR", verbatim_doc_comment)]
    pub(crate) expr: String,
    /// Fire times after this instant (RFC 3339; default: now)
    #[arg(long, value_name = "RFC3339", value_parser = parse_instant)]
    pub(crate) after: Option<Timestamp>,
    /// The IANA time zone the expression is read in; its local times are
    /// printed beside the UTC ones
    #[arg(long, value_name = "ZONE", verbatim_doc_comment)]
    pub(crate) tz: Option<String>,
    /// How many fire times
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..=MAX_COUNT),
    )]
    pub(crate) count: u64,
}

/// Where a command finds the schedules: a store (`--store PATH`, `--postgres URL`, or
/// with neither `SPOOL_DATABASE_URL`), or a running server (`--addr URL`, its HTTP API).
/// At most one of `--store`, `--postgres` and `--addr`; `--addr` wins over the
/// environment.
#[derive(Debug, Args)]
pub(crate) struct StoreArg {
    /// The store holding the schedules.
    #[command(flatten)]
    pub(crate) location: StoreLocation,
    /// A running `spool serve` (http://HOST:PORT) to work through instead
    /// of a store: its HTTP API
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["store", "postgres"],
        verbatim_doc_comment
    )]
    pub(crate) addr: Option<String>,
    /// With --addr: a file holding the server's bearer token (else
    /// SPOOL_TOKEN)
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["store", "postgres"],
        verbatim_doc_comment
    )]
    pub(crate) token_file: Option<PathBuf>,
}

/// The usage line of `spool schedule add`, on two lines (clap's own is one line of
/// over 100 columns).
const ADD_USAGE: &str = "\
spool schedule add [OPTIONS] --prompt <TEXT> <--store <PATH>|--postgres <URL>|--addr <URL>>
       <SLUG> <--cron <EXPR>|--every <DURATION>|--once <RFC3339>>";

/// `spool schedule add`.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("when").required(true).args(["cron", "every", "once"])),
    override_usage = ADD_USAGE
)]
pub(crate) struct AddArgs {
    /// Its name: lower-case letters, digits and '-', at most 63
    #[arg(value_name = "SLUG")]
    pub(crate) slug: String,
    /// Fire at the times of this five-field cron expression
    #[arg(long, value_name = "EXPR")]
    pub(crate) cron: Option<String>,
    /// Fire every DURATION from the last fire (90s, 5m, 1h30m)
    #[arg(long, value_name = "DURATION", value_parser = parse_every)]
    pub(crate) every: Option<Duration>,
    /// Fire once, at this instant (RFC 3339: 2026-12-01T09:00:00Z)
    #[arg(long, value_name = "RFC3339", value_parser = parse_instant)]
    pub(crate) once: Option<Timestamp>,
    /// The IANA time zone of --cron (default UTC)
    #[arg(long, value_name = "ZONE", conflicts_with_all = ["every", "once"])]
    pub(crate) tz: Option<String>,
    /// What the agent is asked at each run
    #[arg(long, value_name = "TEXT", value_parser = parse_prompt)]
    pub(crate) prompt: String,
    /// Start each run with an empty conversation (default: runs continue
    /// the schedule's session)
    #[arg(long, verbatim_doc_comment)]
    pub(crate) fresh_session: bool,
    /// A fire while a run is going: skip, buffer-one, buffer-all,
    /// cancel-other or allow-all
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "skip",
        value_parser = parse_overlap,
        verbatim_doc_comment
    )]
    pub(crate) overlap: Overlap,
    /// Pause the schedule after N failed runs in a row (default: never)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) pause_after_failures: Option<u32>,
    /// Fires missed while nothing ran (after downtime): latest (run the
    /// last one once; the default), none, or all:WINDOW (run each
    /// within WINDOW before now, e.g. all:6h)
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "latest",
        hide_default_value = true,
        value_parser = parse_catch_up,
        verbatim_doc_comment
    )]
    pub(crate) catch_up: CatchUp,
    /// The agent its runs run as, for fairness and per-agent limits
    /// (default: the default agent)
    #[arg(long, value_name = "NAME", value_parser = parse_agent, verbatim_doc_comment)]
    pub(crate) agent: Option<String>,
    /// Its runs' priority: low, normal (the default), high or critical
    #[arg(long, value_name = "LEVEL", value_parser = parse_priority)]
    pub(crate) priority: Option<Priority>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

/// `spool schedule list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print JSON (an array of schedules with their status)
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

/// `spool schedule show` and `runs`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The schedule
    #[arg(value_name = "SLUG")]
    pub(crate) slug: String,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

/// The commands that name one schedule of a store.
#[derive(Debug, Args)]
pub(crate) struct SlugArgs {
    /// The schedule
    #[arg(value_name = "SLUG")]
    pub(crate) slug: String,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

fn parse_instant(text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>()
        .map_err(|e| format!("not an RFC 3339 instant: {e}"))
}

fn parse_every(text: &str) -> Result<Duration, String> {
    Spec::parse_every(text).map_err(|e| e.to_string())
}

fn parse_overlap(text: &str) -> Result<Overlap, String> {
    Overlap::parse(text).map_err(|e| e.to_string())
}

/// A catch-up policy as the HTTP API spells it (`latest`, `none`, or `all` with a
/// window), `all:WINDOW` on the command line; the window is an interval as `--every`
/// takes it.
pub(crate) fn parse_catch_up(text: &str) -> Result<CatchUp, String> {
    match text {
        "latest" => Ok(CatchUp::Latest),
        "none" => Ok(CatchUp::None),
        other => match other.strip_prefix("all:") {
            Some(window) => Spec::parse_every(window)
                .map(|window| CatchUp::All { window })
                .map_err(|e| e.to_string()),
            None => Err(format!(
                "`{other}` is not `latest`, `none` or `all:WINDOW` (all:6h)"
            )),
        },
    }
}

/// A priority as the HTTP API takes a task's, with its message for another word.
pub(crate) fn parse_priority(text: &str) -> Result<Priority, String> {
    match text {
        "low" => Ok(Priority::Low),
        "normal" => Ok(Priority::Normal),
        "high" => Ok(Priority::High),
        "critical" => Ok(Priority::Critical),
        other => Err(format!(
            "unknown priority `{other}` (expected low, normal, high or critical)"
        )),
    }
}

/// A prompt: any text but a blank one, as the HTTP API takes the agent's.
fn parse_prompt(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("must not be blank".to_owned());
    }
    Ok(text.to_owned())
}

/// An agent's name: any text but a blank one.
fn parse_agent(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("an agent's name is not blank".to_owned());
    }
    Ok(text.to_owned())
}
