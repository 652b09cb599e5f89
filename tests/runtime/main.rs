//! Integration tests of the threaded runtime: real executor threads, handles used from
//! other threads, wall-clock timers.
#![allow(clippy::unwrap_used)]

mod async_agents;
mod confirm;
mod executors;
mod failures;
mod handle;
mod idle;
mod limits;
mod load;
mod publish;
mod schedules;
mod support;
mod timers;
