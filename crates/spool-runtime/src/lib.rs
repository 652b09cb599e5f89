//! The threaded driver of spool.
//!
//! [`Runtime`] owns a `spool_core::Scheduler` and runs its poll loop on the thread that
//! calls [`Runtime::run_until_idle`] or [`Runtime::run`]. Each request kind is routed to
//! an [`Executor`] running on its own thread(s); requests go out in batches over
//! crossbeam channels and answers come back on one completion channel. The loop blocks
//! on that channel, with the next timer as timeout, only when no task is ready.
//! Other threads submit, cancel and answer confirmations through a [`RuntimeHandle`].

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod clock;
mod error;
mod executor;
mod journal;
mod runtime;

pub use clock::Clock;
pub use error::RuntimeError;
pub use executor::{Executor, FnExecutor, Replier, Replies, from_fn};
pub use journal::{JournalSink, MemoryJournal};
pub use runtime::{
    DEFAULT_RETENTION, PendingConfirmation, RunReport, Runtime, RuntimeBuilder, RuntimeHandle,
};
