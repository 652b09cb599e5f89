//! Schedules and sessions (seed 004) on the deterministic core, in virtual time.
#![allow(clippy::unwrap_used)]

mod basics;
mod support;
