//! `spool top`: a live terminal dashboard (ratatui) over a running `spool serve`.
//!
//! [`client`] reads the HTTP API and the event stream on threads of its own and
//! reports [`model::Update`]s; [`model`] keeps what was read; [`app`] takes the keys;
//! [`ui`] draws the screen from the app alone; [`dashboard`] owns the terminal. All of it
//! is in builds with the `top` feature (on by default); the options, which every
//! build parses, are in [`crate::cli::top`].

#[cfg(feature = "top")]
pub(crate) mod app;
#[cfg(feature = "top")]
pub(crate) mod client;
#[cfg(feature = "top")]
mod dashboard;
#[cfg(feature = "top")]
pub(crate) mod live;
#[cfg(feature = "top")]
pub(crate) mod model;
#[cfg(feature = "top")]
pub(crate) mod ui;

#[cfg(feature = "top")]
pub(crate) use dashboard::run;
#[cfg(all(test, feature = "top"))]
use dashboard::{TopError, base_url, token};

/// `spool top` in a build without the `top` feature: says how to get one.
#[cfg(not(feature = "top"))]
pub(crate) fn run(_args: &crate::cli::top::TopArgs) -> std::process::ExitCode {
    crate::stored::Failure::Failed(crate::stored::not_built("top")).report("spool top")
}

#[cfg(all(test, feature = "top"))]
mod tests;
