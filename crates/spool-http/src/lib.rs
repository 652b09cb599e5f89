//! The HTTP API of spool: tasks, task types, confirmations,
//! schedules, the queue, a resumable Server-Sent Events stream of the trace, `/healthz`,
//! Prometheus `/metrics` and an OpenAPI document.
//!
//! The API is an `axum` [`router`]; [`Server`] runs it on a tokio runtime of its own,
//! on a thread of its own. The sans-IO core and the run loop are untouched: commands go
//! to the loop through the [`RuntimeHandle`](spool_runtime::RuntimeHandle) (journaled
//! like every input, answered once durable), and reads come from [`Views`] the loop
//! publishes ([`publish_views`], on [`RuntimeBuilder::publish`](spool_runtime::RuntimeBuilder::publish)).
//! Every error is an RFC 9457 [`Problem`].
//!
//! # Example
//! ```no_run
//! use serde_json::json;
//! use spool_core::{Step, TaskRegistry, task_fn};
//! use spool_runtime::Runtime;
//!
//! let registry = TaskRegistry::new()
//!     .with_input("hello", |input| {
//!         let name = input["name"].as_str().unwrap_or("world").to_owned();
//!         Ok(Box::new(task_fn("hello", move |_cx| Step::done(format!("hello, {name}")))))
//!     })
//!     .with_input_schema("hello", json!({"type": "object", "required": ["name"],
//!         "properties": {"name": {"type": "string"}}}));
//! let (builder, views) = spool_http::publish_views(
//!     Runtime::builder().registry(registry.clone()),
//!     spool_http::DEFAULT_PUBLISH_EVERY,
//!     spool_http::DEFAULT_EVENT_RING,
//! );
//! let mut runtime = builder.build();
//! let state = spool_http::AppState::new(runtime.handle(), registry, views, "secret")?;
//! let server = spool_http::Server::builder().start(state)?;
//! eprintln!("listening on http://{}", server.addr());
//! runtime.run();
//! server.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod call;
mod deltas;
mod guard;
mod histogram;
mod millis;
mod openapi;
mod problem;
mod router;
mod routes;
mod server;
mod state;
mod submission;
mod views;
mod waits;
mod whole;

pub use deltas::{DEFAULT_DELTA_RING, DeltaHub, publish_deltas};
pub use histogram::{BOUNDS_MS, Histogram, TaskHistograms};
pub use openapi::ApiDoc;
pub use problem::{FieldError, PROBLEM_JSON, Problem};
pub use router::router;
pub use routes::confirmations::{AnswerBody, ConfirmationBody};
pub use routes::events::START_HEADER as EVENTS_START_HEADER;
pub use routes::history::{AnswerEdit, EditBody, ForkBody, ForkOriginBody, Forked};
pub use routes::queue::{
    BackoffBody, GateBody, KindRequestsBody, QueueBody, QueueDetailBody, WaitingBody, WindowUseBody,
};
pub use routes::schedules::{
    CatchUpBody, RetryBody, ScheduleBody, ScheduleOutcome, SchedulePatchBody, SchedulePutBody,
    ScheduleStatusBody, SpecBody,
};
pub use routes::sessions::SessionBody;
pub use routes::tasks::body::{IntervalBody, TaskBody, TaskPage, TaskTypeBody, TimingBody};
pub use routes::tasks::{AdmissionBody, Canceled, SubmitBody, Submitted};
pub use server::{
    DEFAULT_ADDR, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SHUTDOWN_TIMEOUT, ServeError, Server, ServerBuilder, Stopper,
};
pub use state::{Access, AppState, AppStateError, DEFAULT_BODY_LIMIT, DEFAULT_READY_WAIT};
pub use submission::{Checked, SubmitCheck};
pub use views::{
    Confirmation, DEFAULT_EVENT_RING, DEFAULT_PUBLISH_EVERY, EventRing, RequestCounts, STATE_TAGS,
    TaskRow, TaskRows, VIEW_RESULT_MAX, Views, ViewsHandle, publish_views, result_of, state_tag,
};
pub use waits::{RECENT_WAITS, RecentWaits, WaitSummary};
