//! The API's shared state: the runtime's handle (commands), the published views
//! (reads), the task registry (types and their input schemas), and the access rules.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use spool_core::{TaskId, TaskRegistry, Value};
use spool_exec::Schema;
use spool_runtime::RuntimeHandle;
use subtle::ConstantTimeEq;

use crate::views::ViewsHandle;

/// What a request needs to be let in.
#[derive(Clone)]
pub enum Access {
    /// Every request needs `Authorization: Bearer <token>` (but `GET /healthz` and the
    /// web page at `GET /`, which hold no data).
    Token(String),
    /// GETs are open; other methods need the token.
    PublicRead(String),
    /// No token at all (for an embedder that guards the router itself).
    Open,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token itself.
        f.write_str(match self {
            Access::Token(_) => "Token(..)",
            Access::PublicRead(_) => "PublicRead(..)",
            Access::Open => "Open",
        })
    }
}

impl Access {
    /// Whether `given` (the bearer token of a request, if any) lets in a request that
    /// `reads` only. Tokens are compared in constant time.
    pub(crate) fn allows(&self, given: Option<&str>, reads: bool) -> Result<(), &'static str> {
        self.allows_inner(given, reads)
    }

    /// Lets in a request with these `headers` and `method` as the API's routes do
    /// (reads are `GET` and `HEAD`), or says why not, as their `401`: for a server that
    /// answers some requests itself, in front of [`router`](crate::router)s.
    ///
    /// # Errors
    /// The `401` problem: no token, or not this one.
    pub fn check(
        &self,
        method: &axum::http::Method,
        headers: &axum::http::HeaderMap,
    ) -> Result<(), crate::Problem> {
        let reads = matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD);
        let given = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        self.allows_inner(given, reads)
            .map_err(crate::Problem::unauthorized)
    }

    fn allows_inner(&self, given: Option<&str>, reads: bool) -> Result<(), &'static str> {
        let token = match self {
            Access::Open => return Ok(()),
            Access::PublicRead(_) if reads => return Ok(()),
            Access::Token(token) | Access::PublicRead(token) => token,
        };
        let Some(given) = given else {
            return Err("this request needs the header `Authorization: Bearer <token>`");
        };
        if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            Ok(())
        } else {
            Err("the bearer token is not the server's")
        }
    }
}

/// The state every handler shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

/// What [`AppState`] holds.
pub(crate) struct Inner {
    pub(crate) handle: RuntimeHandle,
    pub(crate) registry: TaskRegistry,
    pub(crate) schemas: BTreeMap<String, Schema>,
    pub(crate) views: ViewsHandle,
    pub(crate) access: Access,
    pub(crate) body_limit: usize,
    pub(crate) prompt_type: Option<String>,
    /// Set when the server stops: event streams end, so the stop need not wait for
    /// clients that never hang up.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
    /// Submissions answered `429` (a full queue or task table).
    pub(crate) too_many: std::sync::atomic::AtomicU64,
    /// How long a read waits for the first publication of the views.
    pub(crate) ready_wait: std::time::Duration,
    /// The results too large for the views, as `GET /v1/tasks/{id}` reads them.
    pub(crate) large_results: Arc<LargeResults>,
    /// The pieces of answers under way, for the event stream.
    pub(crate) deltas: crate::deltas::DeltaHub,
}

/// How many reads of a result too large for the views may ask the loop at once: each
/// copies the result on the loop's thread.
pub(crate) const LARGE_RESULT_READS: usize = 1;

/// How many large results read from the loop are kept, at most.
pub(crate) const LARGE_RESULT_CACHE_ENTRIES: usize = 8;

/// How many bytes of JSON (as measured for the views) the large results kept may hold
/// together: 64 MiB. The most recent one is kept whatever its size.
pub(crate) const LARGE_RESULT_CACHE_BYTES: u64 = 64 << 20;

/// Reads of results too large for the views ([`VIEW_RESULT_MAX`](crate::views::VIEW_RESULT_MAX)),
/// which only the loop's table holds. Asking the loop copies the result on its thread;
/// so at most [`LARGE_RESULT_READS`] reads ask at once (the others wait their turn),
/// and the last results read are kept here behind an `Arc`, so that repeated reads of
/// one task cost one copy on the loop. A task's result does not change once it has
/// completed; one the views no longer have (evicted) is dropped here at the next read
/// from the loop.
pub(crate) struct LargeResults {
    reads: Arc<tokio::sync::Semaphore>,
    kept: std::sync::Mutex<KeptResults>,
    /// Reads that asked the loop.
    loop_reads: std::sync::atomic::AtomicU64,
}

/// The large results kept, oldest first, and their bytes together.
#[derive(Default)]
struct KeptResults {
    entries: std::collections::VecDeque<KeptResult>,
    bytes: u64,
}

/// One large result kept: the task's, with the length of its JSON.
struct KeptResult {
    task: TaskId,
    bytes: u64,
    value: Arc<Value>,
}

impl LargeResults {
    pub(crate) fn new() -> LargeResults {
        LargeResults {
            reads: Arc::new(tokio::sync::Semaphore::new(LARGE_RESULT_READS)),
            kept: std::sync::Mutex::new(KeptResults::default()),
            loop_reads: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeptResults> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Task `task`'s result if it is kept, its JSON `bytes` long (as its row in the
    /// views says); it becomes the most recent.
    pub(crate) fn get(&self, task: TaskId, bytes: u64) -> Option<Arc<Value>> {
        let mut kept = self.lock();
        let at = kept
            .entries
            .iter()
            .position(|e| e.task == task && e.bytes == bytes)?;
        let entry = kept.entries.remove(at)?;
        let value = entry.value.clone();
        kept.entries.push_back(entry);
        Some(value)
    }

    /// Waits for a turn to ask the loop; the turn ends when the permit is dropped.
    pub(crate) async fn turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // The semaphore is never closed.
        self.reads.clone().acquire_owned().await.ok()
    }

    /// Counts a read that asks the loop.
    pub(crate) fn count_loop_read(&self) {
        self.loop_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Keeps task `task`'s result, `bytes` of JSON, as the most recent; drops the
    /// results of tasks that `gone` says were evicted, then the oldest while more than
    /// [`LARGE_RESULT_CACHE_ENTRIES`] or [`LARGE_RESULT_CACHE_BYTES`] are kept.
    pub(crate) fn keep(
        &self,
        task: TaskId,
        bytes: u64,
        value: Arc<Value>,
        gone: impl Fn(TaskId) -> bool,
    ) {
        let mut kept = self.lock();
        let kept = &mut *kept;
        kept.entries.retain(|e| e.task != task && !gone(e.task));
        kept.entries.push_back(KeptResult { task, bytes, value });
        kept.bytes = kept.entries.iter().map(|e| e.bytes).sum();
        while kept.entries.len() > LARGE_RESULT_CACHE_ENTRIES
            || (kept.bytes > LARGE_RESULT_CACHE_BYTES && kept.entries.len() > 1)
        {
            if let Some(oldest) = kept.entries.pop_front() {
                kept.bytes -= oldest.bytes;
            }
        }
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("types", &self.registry.type_names())
            .field("access", &self.access)
            .field("body_limit", &self.body_limit)
            .finish_non_exhaustive()
    }
}

/// The default body limit: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// How long a read waits for the views' first publication by default before it is
/// answered `503`: 5 s.
pub const DEFAULT_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why an [`AppState`] could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppStateError {
    /// A task type's input schema is not one the checker takes.
    #[error("the input schema of task type `{task_type}` is not usable: {reason}")]
    BadSchema {
        /// The type.
        task_type: String,
        /// Why.
        reason: String,
    },
}

/// The input schemas of `registry`'s types, compiled.
pub(crate) fn compile_schemas(
    registry: &TaskRegistry,
) -> Result<BTreeMap<String, Schema>, AppStateError> {
    let mut schemas = BTreeMap::new();
    for name in registry.type_names() {
        if let Some(json) = registry.input_schema(name) {
            let schema = Schema::new(json.clone()).map_err(|e| AppStateError::BadSchema {
                task_type: name.to_owned(),
                reason: e.to_string(),
            })?;
            schemas.insert(name.to_owned(), schema);
        }
    }
    Ok(schemas)
}

impl AppState {
    /// The state of an API over the runtime behind `handle`, making tasks through
    /// `registry` (and checking inputs against its schemas), reading `views`
    /// ([`publish_views`](crate::views::publish_views)). Every request needs `token` unless
    /// [`access`](AppState::access) says otherwise.
    ///
    /// # Errors
    /// [`AppStateError::BadSchema`] if a registered input schema cannot be compiled.
    pub fn new(
        handle: RuntimeHandle,
        registry: TaskRegistry,
        views: ViewsHandle,
        token: impl Into<String>,
    ) -> Result<AppState, AppStateError> {
        let schemas = compile_schemas(&registry)?;
        Ok(AppState {
            inner: Arc::new(Inner {
                handle,
                registry,
                schemas,
                views,
                access: Access::Token(token.into()),
                body_limit: DEFAULT_BODY_LIMIT,
                prompt_type: None,
                closing: tokio::sync::watch::Sender::new(false),
                too_many: std::sync::atomic::AtomicU64::new(0),
                ready_wait: DEFAULT_READY_WAIT,
                large_results: Arc::new(LargeResults::new()),
                deltas: crate::deltas::DeltaHub::default(),
            }),
        })
    }

    fn inner_mut(&mut self) -> &mut Inner {
        // Set-up happens before the state is shared; a clone taken earlier keeps its
        // own copy of the settings.
        if Arc::get_mut(&mut self.inner).is_none() {
            let inner = &*self.inner;
            self.inner = Arc::new(Inner {
                handle: inner.handle.clone(),
                registry: inner.registry.clone(),
                schemas: inner.schemas.clone(),
                views: inner.views.clone(),
                access: inner.access.clone(),
                body_limit: inner.body_limit,
                prompt_type: inner.prompt_type.clone(),
                closing: inner.closing.clone(),
                too_many: std::sync::atomic::AtomicU64::new(0),
                ready_wait: inner.ready_wait,
                large_results: inner.large_results.clone(),
                deltas: inner.deltas.clone(),
            });
        }
        Arc::get_mut(&mut self.inner).expect("the state was just made unique")
    }

    /// The pieces of answers under way the event stream sends (`event: delta`), from
    /// [`publish_deltas`](crate::publish_deltas) on the runtime's builder. Without it
    /// the stream sends trace events only.
    #[must_use]
    pub fn with_deltas(mut self, deltas: crate::deltas::DeltaHub) -> AppState {
        self.inner_mut().deltas = deltas;
        self
    }

    /// Who is let in (default: every request needs the token).
    #[must_use]
    pub fn access(mut self, access: Access) -> AppState {
        self.inner_mut().access = access;
        self
    }

    /// The largest request body taken, in bytes (default [`DEFAULT_BODY_LIMIT`]);
    /// larger is `413`.
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> AppState {
        self.inner_mut().body_limit = bytes;
        self
    }

    /// How long a read (a `GET` of the API's data) made before the views' first
    /// publication waits for it before it is answered `503` with `Retry-After: 1`
    /// (default [`DEFAULT_READY_WAIT`]). Until then the views are empty, and an empty
    /// answer would say that there is nothing rather than that it is not known yet.
    #[must_use]
    pub fn ready_wait(mut self, wait: std::time::Duration) -> AppState {
        self.inner_mut().ready_wait = wait;
        self
    }

    /// How many reads of a task's result too large for the views
    /// ([`VIEW_RESULT_MAX`](crate::views::VIEW_RESULT_MAX)) asked the run loop for it, each a
    /// copy of the result on the loop's thread: repeated reads of one task are answered
    /// from a copy kept here, and at most one such read asks the loop at a time.
    pub fn large_result_loop_reads(&self) -> u64 {
        self.inner
            .large_results
            .loop_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the views have been published at least once.
    pub(crate) fn is_ready(&self) -> bool {
        *self.inner.views.subscribe().borrow() > 0
    }

    /// Waits, at most [`ready_wait`](AppState::ready_wait), for the views' first
    /// publication.
    ///
    /// # Errors
    /// A `503` problem with `Retry-After: 1` if it did not come in time.
    pub(crate) async fn await_ready(&self) -> Result<(), crate::problem::Problem> {
        let mut published = self.inner.views.subscribe();
        let first = published.wait_for(|generation| *generation > 0);
        match tokio::time::timeout(self.inner.ready_wait, first).await {
            Ok(Ok(_)) => Ok(()),
            // The sender is gone only with the runtime; it never published.
            Ok(Err(_)) | Err(_) => {
                let mut problem = crate::problem::Problem::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "starting",
                    "Starting",
                    "the server is starting: its views of the runtime are not published yet",
                );
                problem.retry_after = Some(1);
                Err(problem)
            }
        }
    }

    /// The task type a schedule given a `prompt` instead of a `task_type` runs, with
    /// input `{"prompt": ...}` (`spool serve`: its built-in `agent`).
    #[must_use]
    pub fn prompt_type(mut self, task_type: impl Into<String>) -> AppState {
        self.inner_mut().prompt_type = Some(task_type.into());
        self
    }

    /// Waits until the views show everything the loop took in before now: asks the
    /// loop (after whatever this request sent it) which publication it is at, and
    /// waits for the next, so a command's answer and the reads after it agree. Gives
    /// up after a second (the answer is still right; a read may lag).
    pub(crate) async fn caught_up(&self) -> Result<(), crate::problem::Problem> {
        let mut published = self.inner.views.subscribe();
        let at_loop = published.clone();
        let handle = self.inner.handle.clone();
        let seen =
            crate::call::blocking(move || handle.query(move |_| *at_loop.borrow())).await??;
        let wait = async {
            while *published.borrow_and_update() <= seen {
                if published.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), wait).await;
        Ok(())
    }

    /// Ends every event stream of this state (the server is stopping): a server
    /// started with [`ServerBuilder::start`](crate::ServerBuilder::start) does it when
    /// it drains; one started with
    /// [`start_app`](crate::ServerBuilder::start_app) calls it from its `on_drain`.
    pub fn close_streams(&self) {
        self.inner.closing.send_replace(true);
    }
}

/// Holds a read (`GET`/`HEAD`) back until the views' first publication (at most the
/// state's [`ready_wait`](AppState::ready_wait), then `503`): before it the views are
/// empty, and `[]` or zero counts would say that nothing is there.
pub(crate) async fn await_views(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let reads = matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    // What does not come from the views is answered at once.
    let from_views = !matches!(request.uri().path(), "/v1/openapi.json" | "/v1/task-types");
    if reads
        && from_views
        && !state.is_ready()
        && let Err(problem) = state.await_ready().await
    {
        return problem.into_response();
    }
    next.run(request).await
}

/// The token of an `Authorization` value in the `Bearer` scheme, whose name is
/// case-insensitive (RFC 9110, section 11.1): `Bearer t`, `bearer t`, `BEARER t`.
pub(crate) fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(large: &LargeResults) -> Vec<(u64, u64)> {
        large
            .lock()
            .entries
            .iter()
            .map(|e| (e.task.get(), e.bytes))
            .collect()
    }

    /// The large results kept are bounded in number and bytes (the most recent is
    /// kept whatever its size), found by task and length, and a task the views no
    /// longer have is dropped at the next keep.
    #[test]
    fn large_results_kept_are_bounded_and_dropped_when_gone() {
        let large = LargeResults::new();
        let value = Arc::new(Value::Null);
        let id = TaskId::from_raw;
        for n in 1..=10 {
            large.keep(id(n), 1_000, value.clone(), |_| false);
        }
        assert_eq!(
            kept(&large),
            (3..=10).map(|n| (n, 1_000)).collect::<Vec<_>>()
        );
        assert!(large.get(id(3), 1_000).is_some());
        assert!(large.get(id(3), 999).is_none());
        assert!(large.get(id(2), 1_000).is_none());
        // Task 3 was read last: it outlives 4 and 5.
        large.keep(id(11), 1_000, value.clone(), |t| t == id(9));
        assert_eq!(
            kept(&large),
            [
                (4, 1_000),
                (5, 1_000),
                (6, 1_000),
                (7, 1_000),
                (8, 1_000),
                (10, 1_000),
                (3, 1_000),
                (11, 1_000)
            ]
        );
        large.keep(
            id(12),
            LARGE_RESULT_CACHE_BYTES - 2_000,
            value.clone(),
            |_| false,
        );
        assert_eq!(
            kept(&large),
            [
                (3, 1_000),
                (11, 1_000),
                (12, LARGE_RESULT_CACHE_BYTES - 2_000)
            ]
        );
        large.keep(id(13), LARGE_RESULT_CACHE_BYTES + 1, value, |_| false);
        assert_eq!(kept(&large), [(13, LARGE_RESULT_CACHE_BYTES + 1)]);
    }
}
