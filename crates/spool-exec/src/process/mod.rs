//! The subprocess tool: each request runs the configured command in a process group of
//! its own, watched by helper threads so the executor thread never waits on it; the
//! answer is the exit status and the (capped) output, and a timeout, a cancellation or
//! a passed deadline kills the whole group. The helpers end a bounded time after the
//! command does, whoever else still holds its pipes.
//!
//! The files: `config` (what to run: the configuration and what a request adds),
//! `tool` (the executor: it starts a run and its helper threads), `watch` (a run's
//! watcher, which answers), `pipes` (serving a run's pipes without blocking), `output`
//! (an output as captured and cut), `groups` (the process groups of the runs, and
//! killing them).

mod config;
mod groups;
mod output;
mod pipes;
mod tool;
mod watch;

pub use config::ProcessConfig;
pub use tool::ProcessTool;
