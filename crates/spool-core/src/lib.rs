//! The sans-IO heart of spool.
//!
//! An agent is an [`AgentTask`] that yields [`Request`]s; the [`Scheduler`] decides which
//! ready task runs next, hands its requests out through `poll_request`, takes answers
//! through `handle_response`, and records every state transition in a [`Trace`].
//! Nothing here reads a clock, spawns a thread, or touches a channel, a file or a
//! socket: time and answers are inputs, so the same inputs give the same run.
//!
//! The contracts with the outside live here too, so that a driver and the crates that
//! plug into it depend on the core alone: an [`Executor`] serves requests into a
//! [`Replies`] buffer and is polled with the scheduler's [`Time`]; a [`JournalSink`]
//! takes the journal; [`SeededRng`] makes reproducible workloads.
//! The threaded driver lives in `spool-runtime`; the deterministic test driver in
//! `spool-test`.

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod admission;
mod async_task;
mod bounded;
mod budget;
mod executor;
mod fingerprint;
mod history;
mod id;
mod journal;
mod journal_sink;
mod kind;
mod limiter;
mod payload;
mod pending;
pub mod policy;
mod priority;
mod registry;
mod replaying;
mod request;
mod rng;
mod saved;
mod schedule;
mod scheduler;
mod snapshot;
mod spec;
mod state;
mod stats;
mod tape;
mod task;
mod time;
mod timeline;
mod trace;

pub use admission::{Admission, AgentTaskLimits, RejectReason, TaskLimits};
pub use async_task::{
    AllRequests, AsyncTask, ChildHandle, Cx, JoinAll, JoinAny, Nondeterminism, RequestFuture,
    Sleep, async_task,
};
pub use budget::{
    Amount, Budget, BudgetScope, BudgetSpec, BudgetSpecError, Budgets, ModelPrice, OnSpent, Prices,
    Spend, SpendReport, Usage,
};
pub use executor::{
    Delta, Executor, FnExecutor, Replier, Replies, ReplySink, ToolCallDelta, from_fn,
};
pub use fingerprint::Fingerprint;
pub use history::{
    Edit, Fork, ForkError, HistoryEnd, HistoryError, HistoryStep, StepAnswer, StepEnd, StepRequest,
    TaskHistory,
};
pub use id::{AgentId, RequestKey, TaskId};
pub use journal::{
    JOURNAL_MAGIC, Journal, JournalEntry, JournalError, RebuildError, SaveError, SavedSubmission,
    ScheduleOp,
};
pub use journal_sink::{Commit, DurableNotice, DurableNotifier, JournalSink, MemoryJournal};
pub use kind::{Kind, KindError};
pub use limiter::{AgentKindLimits, BackoffConfig, KindLimits, RequestLimits};
pub use payload::Payload;
pub use policy::{
    ComputedConfig, ComputedPriority, FairShare, Fifo, OrderedFifo, Policy, PolicyChoice,
    PriorityLevels, QueueEntry, TaskRef,
};
pub use priority::Priority;
pub use registry::{MakeError, TaskRegistry};
pub use request::{
    Answer, BackoffBound, CancelSignal, Delivery, DropReason, OutboundRequest, Request,
    RequestError, Response,
};
pub use rng::SeededRng;
pub use saved::{SavedResult, SavedTask, StateError};
pub use schedule::{
    CatchUp, DEFAULT_BUSY_RETRY, FireOutcome, MAX_BUFFERED, MAX_SLUG_LEN, Overlap, RunResult,
    ScheduleDef, ScheduleError, ScheduleInfo, SchedulePatch, ScheduleStatus, SessionInfo,
    SessionMode, check_session_id, check_slug,
};
pub use schedule::{
    DEFAULT_SESSION_BYTES, DEFAULT_SESSION_MESSAGES, SessionLimits, SessionTrimmer, message_bytes,
    trim_session,
};
pub use scheduler::{
    CancelError, CheckReport, Config, DEFAULT_IDEMPOTENCY_WINDOW, Divergence, GateView,
    InFlightRequest, InvariantError, KeyRecord, KeyedSubmission, KindRequests, QueueDetail,
    QueueState, Replay, ReplayError, Scheduler, StepDivergence, Submission, SubmitError, TaskInfo,
    WaitCounts,
};
pub use snapshot::{
    DecodeError, FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_PAYLOAD, RestoreError, RoundTripError,
    Snapshot, SnapshotError, SnapshotParts, SnapshotRow,
};
pub use spec::{CronField, CronSpec, FieldProblem, IntervalProblem, Spec, SpecError};
pub use state::{CancelReason, Outcome, TaskError, TaskState, WaitReason};
pub use stats::Stats;
pub use tape::{
    Asked, ForkOrigin, Playback, Tape, TapeAnswer, ending_digest, payload_digest, request_digest,
};
pub use task::{AgentTask, Dep, FnTask, NewTask, Step, TaskContext, task_fn};
pub use time::Time;
pub use timeline::{Interval, Timeline, Totals, Wait};
pub use trace::{AnswerCounts, Cause, Phase, Trace, TraceEvent};

/// JSON values, the payloads of requests and answers.
pub use serde_json::Value;
