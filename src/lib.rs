//! spool: a deterministic, coroutine-style runtime for LLM agents.
//!
//! Agents are tasks that *yield* whenever they need the outside world — an LLM
//! completion, a tool call, a human's confirmation, a timer. One single-threaded poll
//! loop routes each request to an executor and resumes the task when the answer comes
//! back. Because the loop takes time and answers only as inputs, the same inputs give
//! the same run, step for step: agents are testable in CI with virtual time
//! ([`TestScheduler`]) and run for real on executor threads ([`Runtime`]).
//!
//! This crate re-exports the workspace: [`core`] (the sans-IO scheduler), [`runtime`]
//! (the threaded driver) and [`test`](mod@test) (the deterministic test driver).
//!
//! # Example
//! ```
//! use serde_json::json;
//! use spool::{task_fn, Step, TaskState, TestScheduler};
//!
//! let mut scheduler = TestScheduler::new();
//! scheduler.inject_mock_tool("ls", "result");
//! let mut asked = false;
//! let task_id = scheduler.spawn(task_fn("lister", move |cx| {
//!     if !asked {
//!         asked = true;
//!         cx.tool("ls", json!({}));
//!         return Step::Wait;
//!     }
//!     Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
//! }));
//! scheduler.step_until_idle();
//! assert_eq!(scheduler.task_state(task_id), TaskState::Completed(Ok(json!("result"))));
//! ```

#![forbid(unsafe_code)]

pub use spool_core as core;
pub use spool_runtime as runtime;
pub use spool_test as test;

// The core's API, including the contracts with the outside (`Executor`, `Replies`,
// `JournalSink`, `MemoryJournal`, `SeededRng`, ...).
pub use spool_core::*;
pub use spool_runtime::{
    Clock, DEFAULT_RETENTION, PendingConfirmation, Publication, RunReport, Runtime, RuntimeBuilder,
    RuntimeError, RuntimeHandle, TurnStats,
};
pub use spool_test::{
    DeliveredAnswer, HeldRequest, Mock, SentCancel, SentRequest, TestScheduler, check_determinism,
    check_determinism_with,
};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The executors guide's examples, compiled as doctests.
#[doc = include_str!("../docs/executors.md")]
#[cfg(doctest)]
pub struct ExecutorsDocDoctests;

/// The scheduling guide's examples, compiled and run as doctests.
#[doc = include_str!("../docs/scheduling.md")]
#[cfg(doctest)]
pub struct SchedulingDocDoctests;

/// The testing guide's examples, compiled and run as doctests.
#[doc = include_str!("../docs/testing.md")]
#[cfg(doctest)]
pub struct TestingDocDoctests;

/// The snapshots guide's examples, compiled and run as doctests.
#[doc = include_str!("../docs/snapshots.md")]
#[cfg(doctest)]
pub struct SnapshotsDocDoctests;

/// The schedules guide's examples, compiled and run as doctests.
#[doc = include_str!("../docs/schedules.md")]
#[cfg(doctest)]
pub struct SchedulesDocDoctests;

/// The async guide's examples, compiled as doctests.
#[doc = include_str!("../docs/async.md")]
#[cfg(doctest)]
pub struct AsyncDocDoctests;
