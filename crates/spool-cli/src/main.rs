//! The `spool` command-line tool.
//!
//! `spool demo` runs a seeded multi-agent workload on the threaded runtime and prints a
//! checked summary; `spool inspect` prints a store's, a snapshot's or a journal's task
//! table; `spool replay` replays a demo's journal; `spool schedule` manages a store's
//! schedules and `spool run` runs them; `spool serve` runs them behind the HTTP API, and `spool top`
//! draws a live dashboard of it. The command line is parsed by `clap`
//! (see [`cli`]): a usage error prints a short message and exits with status 2.
//! Diagnostics are `tracing` logs on stderr (see [`logs`]): `RUST_LOG` filters them,
//! `--log-format json` writes them for machines.

#![forbid(unsafe_code)]

/// The paragraph on a store's limits that the help of `spool run` and `spool serve`
/// ends with (a macro, for `concat!`).
macro_rules! store_limits_help {
    () => {
        "The store keeps its limits: started without limit options it runs under those it was
last started with; other ones are taken only while no task is live (docs/http.md)."
    };
}

/// `println!` for a command's output: stdout, through [`output::write`] (a reader
/// that went away ends the command quietly).
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's output: see `outln!`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}

mod agent;
mod cli;
mod cluster;
mod demo;
mod history;
mod inspect;
mod limits;
mod logs;
mod mcp;
mod otel;
mod output;
mod remote;
mod replay;
mod run;
mod schedule;
mod serve;
mod signals;
mod stored;
mod terminal;
mod top;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    logs::init(cli.log_format);
    match cli.command {
        Command::Demo(args) => demo::run(&args.into()),
        Command::Inspect(args) => inspect::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Run(args) => run::run(&args.into()),
        Command::Serve(args) => serve::run(&args.into()),
        Command::Schedule(args) => schedule::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Top(args) => top::run(&args),
        Command::History(args) => history::run(&args),
        Command::Fork(args) => history::fork(&args),
    }
}
