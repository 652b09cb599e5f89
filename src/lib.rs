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
//! (the threaded driver) and [`test`](mod@test) (the deterministic test driver), and
//! behind features, off by default:
//!
//! | feature | module | what it holds |
//! |---|---|---|
//! | `store` | `spool::store`, `spool::durable` | the durable store: a runtime that goes on after its process dies (SQLite, compiled in) |
//! | `postgres` | `spool::postgres`, `spool::durable` | the same store contract on a PostgreSQL database, which other processes can read while one writes |
//! | `exec` | `spool::exec` | real executors: an OpenAI-compatible LLM over HTTP, subprocess tools, function tools with JSON schemas |
//! | `http` | `spool::http` | the HTTP API: an `axum` router and a server on a thread of its own |
//!
//! An application depends on this crate alone (it is not on crates.io; a path or git
//! dependency):
//!
//! ```toml
//! [dependencies]
//! spool = { path = "../spool", features = ["store", "exec", "http"] }
//! serde_json = "1"
//! ```
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

/// The durable store (`spool-store`): a [`Runtime`]'s journal and checkpoints in one
/// SQLite file, and the recovery that goes on from them.
#[cfg(feature = "store")]
pub use spool_store as store;

/// The contract every durable backend keeps (`spool-durable`): `DurableStore`, which
/// [`store`] (SQLite) and `postgres` both implement, so a program can take either.
#[cfg(any(feature = "store", feature = "postgres"))]
pub use spool_durable as durable;

/// The durable store on PostgreSQL (`spool-postgres`): the same contract as [`store`]'s
/// SQLite file, in a database.
#[cfg(feature = "postgres")]
pub use spool_postgres as postgres;

/// Real executors (`spool-exec`): an OpenAI-compatible LLM over HTTP, subprocess tools
/// and function tools with JSON schemas.
#[cfg(feature = "exec")]
pub use spool_exec as exec;

/// The HTTP API (`spool-http`): a router over the views a [`Runtime`] publishes, and a
/// server on a thread of its own.
#[cfg(feature = "http")]
pub use spool_http as http;

// The core's API, including the contracts with the outside (`Executor`, `Replies`,
// `JournalSink`, `MemoryJournal`, `SeededRng`, ...).
pub use spool_core::*;
pub use spool_runtime::{
    Clock, DEFAULT_RETENTION, PendingConfirmation, Progress, Publication, RunReport, Runtime,
    RuntimeBuilder, RuntimeError, RuntimeHandle, TurnStats,
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

/// The store guide's example, compiled and run as a doctest.
#[doc = include_str!("../docs/store.md")]
#[cfg(all(doctest, feature = "store"))]
pub struct StoreDocDoctests;

/// The streaming guide's examples, compiled and run as doctests.
#[doc = include_str!("../docs/streaming.md")]
#[cfg(all(doctest, feature = "exec"))]
pub struct StreamingDocDoctests;

/// The HTTP guide's example, compiled as a doctest.
#[doc = include_str!("../docs/http.md")]
#[cfg(all(doctest, feature = "http"))]
pub struct HttpDocDoctests;
