//! `spool top`: a live terminal dashboard (ratatui) over a running `spool serve`.
//!
//! [`client`] reads the HTTP API and the event stream on threads of its own and
//! reports [`model::Update`]s; [`model`] keeps what was read; [`app`] takes the keys;
//! [`ui`] draws the screen from the app alone; [`dashboard`] owns the terminal. All of it
//! is in builds with the `top` feature (on by default); this file holds the options,
//! which every build parses.

#[cfg(feature = "top")]
pub(crate) mod app;
#[cfg(feature = "top")]
pub(crate) mod client;
#[cfg(feature = "top")]
mod dashboard;
#[cfg(feature = "top")]
pub(crate) mod model;
#[cfg(feature = "top")]
pub(crate) mod ui;

use std::path::PathBuf;

use clap::Args;

#[cfg(feature = "top")]
pub(crate) use dashboard::run;
#[cfg(all(test, feature = "top"))]
use dashboard::{TopError, base_url, token};

/// The address `spool top` reads by default: `spool serve`'s.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:7420";

/// The environment `spool top` reads.
pub(crate) const TOP_ENVIRONMENT: &str = "\
Environment for top:
  SPOOL_TOKEN  The bearer token, when --token-file is not given

Keys: j/k or arrows move, / filters, s sorts, Enter opens a task's detail (its
timeline and trace), c cancels a task (asks first), ? shows the keys, q quits.
See docs/top.md.";

/// The options of `spool top`.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// The server's URL
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    addr: String,
    /// A file holding the bearer token (else SPOOL_TOKEN)
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

/// `spool top` in a build without the `top` feature: says how to get one.
#[cfg(not(feature = "top"))]
pub(crate) fn run(_args: &TopArgs) -> std::process::ExitCode {
    crate::stored::Failure::Failed(crate::stored::not_built("top")).report("spool top")
}

#[cfg(all(test, feature = "top"))]
mod tests;
