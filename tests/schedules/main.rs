//! Schedules and sessions on the deterministic core, in virtual time.
#![allow(clippy::unwrap_used)]

mod basics;
mod dst;
mod errors;
mod overlap;
mod restarts;
mod session_limits;
mod sessions;
mod support;
