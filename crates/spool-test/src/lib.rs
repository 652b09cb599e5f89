//! Deterministic tests for spool agents.
//!
//! [`TestScheduler`] drives the core scheduler with virtual time and scripted mocks in
//! place of executors: no threads, no wall clock, so a test gives the same trace on
//! every run and every machine. Step it one poll at a time, or until idle, move time
//! by hand, answer held requests in any order, and snapshot the trace with `insta`.
//! A real [`Executor`](spool_core::Executor) can serve a kind too
//! ([`TestScheduler::executor`]): it runs on virtual time, polled as time advances.

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod determinism;
mod executors;
mod mock;
mod regression;
mod scheduler;
mod schedules;
pub mod sim;
mod whatif;

pub use determinism::{check_determinism, check_determinism_with};
pub use mock::{Mock, MockFn};
pub use regression::{JournalCheckError, check_journal};
pub use scheduler::{
    DeliveredAnswer, HeldRequest, SentCancel, SentRequest, TestForkError, TestScheduler,
};
pub use sim::simulate;
/// Re-exported from the core, where it moved (it is pure): older imports keep working.
pub use spool_core::SeededRng;
pub use whatif::{RunStats, UnmatchedRequest, Waits, WhatIfError, Workload};
