//! Deterministic tests for spool agents.
//!
//! [`TestScheduler`] drives the core scheduler with virtual time and scripted mocks in
//! place of executors: no threads, no wall clock, so a test gives the same trace on
//! every run and every machine. Step it one poll at a time, or until idle, move time
//! by hand, answer held requests in any order, and snapshot the trace with `insta`.

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod determinism;
mod mock;
mod rng;
mod scheduler;

pub use determinism::{check_determinism, check_determinism_with};
pub use mock::{Mock, MockFn};
pub use rng::SeededRng;
pub use scheduler::{DeliveredAnswer, HeldRequest, SentCancel, SentRequest, TestScheduler};
