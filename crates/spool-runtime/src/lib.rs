//! The threaded driver of spool.
//!
//! [`Runtime`] owns a `spool_core::Scheduler` and runs its poll loop on the thread that
//! calls [`Runtime::run_until_idle`] or [`Runtime::run`]. Each request kind is routed to
//! an [`Executor`] running on its own thread(s); requests go out in batches over
//! crossbeam channels and answers come back on one completion channel. The loop blocks
//! on that channel, with the next timer as timeout, only when no task is ready.
//! Other threads submit, cancel and answer confirmations through a [`RuntimeHandle`].
//!
//! The contracts it drives ([`Executor`], [`JournalSink`]) are the core's; this crate
//! only adapts them: an executor's [`Replies`] come back over the completion channel,
//! and its `poll` is called with the real clock read as the core's `Time`.

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod builder;
mod clock;
mod error;
mod handle;
mod history;
mod keyed;
mod progress;
mod run_loop;
mod schedules;
mod store_history;
mod worker;

pub use builder::{DEFAULT_RETENTION, RuntimeBuilder};
pub use clock::Clock;
pub use error::RuntimeError;
pub use handle::RuntimeHandle;
pub use keyed::Keyed;
pub use progress::Progress;
pub use run_loop::observe::{Observed, Observer};
pub use run_loop::publish::{Publication, TurnStats};
pub use run_loop::{PendingConfirmation, RunReport, Runtime};
pub use schedules::WALL_CLOCK_CHECK;
/// The contracts with the outside, defined in the core; the runtime adapts them to
/// threads and channels. Re-exported so that code written against the runtime keeps
/// compiling.
pub use spool_core::{
    Commit, DurableNotice, DurableNotifier, Executor, FnExecutor, JournalError, JournalSink,
    MemoryJournal, Replier, Replies, ReplySink, from_fn,
};
pub use store_history::{StoreHistory, TaskHistoryError};
