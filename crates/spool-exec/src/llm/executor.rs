//! The executor: [`OpenAiExecutor`] and its clones, what they count, and one request
//! run to its answer, attempt after attempt.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use spool_core::{CancelSignal, Delta, OutboundRequest, RequestError, RequestKey, Response};
use spool_core::{Executor, Replies};

use super::attempt::{Attempt, Shared, secrets_of};
use super::body::request_body;
use super::budget::{AnswerBudget, AnswerBytes};
use super::config::OpenAiConfig;
use super::stream::Numbering;
use super::usage::with_usage;

/// How long a cancel signal for a request this executor never saw is remembered.
const CANCEL_MEMORY: Duration = Duration::from_secs(600);

/// The LLM executor: serves `Kind::Llm` requests with an OpenAI-compatible
/// chat-completions provider. Clones share one connection pool and one set of cancel
/// signals, so a pool of workers is clones of one executor
/// (`RuntimeBuilder::pool(Kind::Llm, workers, move || executor.clone())` in
/// `spool-runtime`, as `docs/executors.md` shows).
///
/// # What a task sends
///
/// A JSON object with `messages` (the chat so far) and, if the model may call tools,
/// `tools` (function definitions); every other field (`temperature`, `max_tokens`,
/// `tool_choice`, `response_format`, ...) is passed through as it is. The executor adds
/// `model` from its configuration unless the payload names one. `stream: true` is
/// refused with [`RequestError::InvalidArguments`], as is a payload without a
/// `messages` array.
///
/// ```json
/// {"messages": [{"role": "user", "content": "What is in notes.txt?"}],
///  "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {}}}],
///  "temperature": 0}
/// ```
///
/// # What the task receives
///
/// The first choice, normalized:
///
/// ```json
/// {"content": "text" | null,
///  "tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {"path": "notes.txt"}}],
///  "finish_reason": "tool_calls" | "stop" | ... | null,
///  "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20} | null}
/// ```
///
/// `tool_calls` is always an array (empty if the model called none); each call's
/// `arguments` is the parsed JSON when the model's argument string parses, else that
/// string as it came; `id` is null if the provider gave none. `content` given as an
/// array of text parts is joined into one string. The answer's `usage.total_tokens` is
/// reported with it, for the tokens-per-window limiter.
///
/// # Example
/// Under `spool_test::TestScheduler`, which runs the executor on virtual time (not
/// run here: it needs a provider).
/// ```no_run
/// use std::time::Duration;
/// use serde_json::json;
/// use spool_core::{Config, Kind, RequestLimits, TaskState, async_task};
/// use spool_exec::{OpenAiConfig, OpenAiExecutor};
/// use spool_test::TestScheduler;
///
/// // OPENAI_BASE_URL (required), OPENAI_API_KEY and OPENAI_MODEL (optional).
/// let config = OpenAiConfig::from_env("gpt-4o-mini")?
///     .timeout(Duration::from_secs(60))     // per attempt (default 120 s)
///     .max_retries(3)                       // after a 5xx or a connection error
///     .retry_base(Duration::from_millis(500))
///     .retry_max(Duration::from_secs(8))
///     .workers(16);                         // threads: requests at the provider at once
/// let limits = RequestLimits::new()
///     .max_in_flight(Kind::Llm, 8)
///     .tokens(Kind::Llm, 400_000, Duration::from_secs(60));
/// let mut scheduler = TestScheduler::with_config(Config::new().requests(limits));
/// scheduler.executor(Kind::Llm, OpenAiExecutor::new(config));
/// let id = scheduler.spawn(async_task("ask", |cx| async move {
///     let messages = json!([{"role": "user", "content": "Say hello."}]);
///     Ok(cx.llm(json!({"messages": messages})).await?)
/// }));
/// // `execute` blocks for the answer; it arrives at the next step.
/// scheduler.step_until_idle();
/// let TaskState::Completed(Ok(answer)) = scheduler.task_state(id) else {
///     panic!("no answer: {}", scheduler.task_state(id));
/// };
/// println!("{}", answer["content"]);
/// # Ok::<(), spool_exec::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct OpenAiExecutor {
    shared: Arc<Shared>,
}

/// What an [`OpenAiExecutor`] and its clones have sent to the endpoint so far
/// ([`OpenAiExecutor::attempts`]): the requests the endpoint saw, where the scheduler
/// sees only one answer per request sent.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptCounts {
    /// POSTs made: every attempt of every request, retries included.
    pub attempts: u64,
    /// Attempts that retried a request after a 5xx or a connection error (counted in
    /// `attempts` too).
    pub retries: u64,
    /// Answers that were 429s (the scheduler decides whether the request goes again).
    pub rate_limited: u64,
}

impl fmt::Debug for OpenAiExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiExecutor")
            .field("endpoint", &self.shared.endpoint)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiExecutor {
    /// An executor for `config`, with a connection pool sized for its workers. A base
    /// URL that does not [`validate`](OpenAiConfig::validate) fails each request with
    /// [`RequestError::Failed`] saying why.
    pub fn new(config: OpenAiConfig) -> OpenAiExecutor {
        let workers = config.workers.max(1);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(config.timeout))
            .max_idle_connections(workers.max(10))
            .max_idle_connections_per_host(workers.max(3))
            .user_agent(concat!("spool-exec/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let authorization = config.api_key.as_ref().map(|key| format!("Bearer {key}"));
        OpenAiExecutor {
            shared: Arc::new(Shared {
                post_url: config.post_url(),
                endpoint: config.endpoint(),
                secrets: secrets_of(&config),
                budget: AnswerBudget::new(config.max_total_answer_bytes.max(1)),
                invalid: config.validate().err().map(|e| e.to_string()),
                authorization,
                agent,
                config,
                canceled: Mutex::new(HashMap::new()),
                attempts: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                rate_limited: AtomicU64::new(0),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.shared.config
    }

    /// The URL requests are posted to, as it may be shown: credentials replaced
    /// ([`redact_url`](crate::redact_url)).
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// The bytes the answers being read hold now across this executor and its clones,
    /// the most they have held at once, and the budget
    /// ([`OpenAiConfig::max_total_answer_bytes`]).
    ///
    /// # Example
    /// ```
    /// use spool_exec::{OpenAiConfig, OpenAiExecutor};
    ///
    /// let config = OpenAiConfig::new("http://127.0.0.1:8080", "m").max_total_answer_bytes(1 << 20);
    /// let held = OpenAiExecutor::new(config).answer_bytes();
    /// assert_eq!((held.limit, held.held, held.peak), (1 << 20, 0, 0));
    /// ```
    pub fn answer_bytes(&self) -> AnswerBytes {
        self.shared.budget.snapshot()
    }

    /// What this executor and its clones (a pool's workers) have sent so far.
    ///
    /// # Example
    /// ```
    /// use spool_exec::{OpenAiConfig, OpenAiExecutor};
    ///
    /// let executor = OpenAiExecutor::new(OpenAiConfig::new("http://127.0.0.1:8080", "m"));
    /// let counts = executor.attempts();
    /// assert_eq!((counts.attempts, counts.retries, counts.rate_limited), (0, 0, 0));
    /// ```
    pub fn attempts(&self) -> AttemptCounts {
        let shared = &*self.shared;
        AttemptCounts {
            attempts: shared.attempts.load(Ordering::Relaxed),
            retries: shared.retries.load(Ordering::Relaxed),
            rate_limited: shared.rate_limited.load(Ordering::Relaxed),
        }
    }

    /// Runs one request to its answer, its error's message redacted; a streamed
    /// answer's pieces go to `progress` as they come.
    fn complete(
        &self,
        key: RequestKey,
        payload: &Value,
        progress: &mut dyn FnMut(Delta),
    ) -> Response {
        let response = self.attempts_of(key, payload, progress);
        self.shared.redact_response(response)
    }

    /// Runs one request to its answer: the attempts, the retries between them.
    /// Blocks the calling thread.
    fn attempts_of(
        &self,
        key: RequestKey,
        payload: &Value,
        progress: &mut dyn FnMut(Delta),
    ) -> Response {
        let shared = &*self.shared;
        if let Some(invalid) = &shared.invalid {
            return Response::err(key, RequestError::failed(invalid.clone()));
        }
        let body = match request_body(payload, &shared.config.model, shared.config.stream) {
            Ok(body) => body,
            Err(message) => return Response::err(key, RequestError::InvalidArguments { message }),
        };
        let mut attempts = 0u32;
        let mut numbering = Numbering::default();
        loop {
            if shared.take_canceled(key) {
                return Response::err(key, RequestError::Canceled);
            }
            attempts += 1;
            if attempts > 1 {
                shared.retries.fetch_add(1, Ordering::Relaxed);
            }
            numbering.new_attempt();
            let (what, not_before) = match shared.attempt(key, &body, &mut numbering, progress) {
                Attempt::Done(response) => {
                    return with_usage(response, payload, &shared.config.model);
                }
                Attempt::Retry { what, not_before } => (what, not_before),
            };
            if attempts > shared.config.max_retries {
                let message = format!(
                    "POST {} failed after {attempts} attempt{}; the last: {what}",
                    shared.endpoint,
                    if attempts == 1 { "" } else { "s" },
                );
                let message = shared.redact(message);
                tracing::warn!(key = %key, %message, "LLM request failed");
                return Response::err(key, RequestError::Failed { message });
            }
            let pause = shared
                .pause_before_retry(attempts)
                .max(not_before.unwrap_or_default())
                .min(shared.config.retry_max);
            let what = shared.redact(what);
            tracing::debug!(key = %key, attempt = attempts, ?pause, %what, "LLM request: retrying");
            if shared.sleep_unless_canceled(key, pause) {
                return Response::err(key, RequestError::Canceled);
            }
        }
    }
}

impl Executor for OpenAiExecutor {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let replier = replies.replier();
        let key = request.key;
        // A streamed answer's pieces go to the driver as they come, before the answer.
        let mut progress = |delta: Delta| {
            let _ = replier.progress(key, delta);
        };
        let response = self.complete(key, request.request.payload.value(), &mut progress);
        // Answer at once: the rest of this batch may take a while.
        let _ = replier.send(response);
    }

    fn cancel(&mut self, signal: CancelSignal, _replies: &mut Replies<'_>) {
        let now = Instant::now();
        let mut canceled = self.shared.lock_canceled();
        if canceled.len() >= 1024 {
            canceled.retain(|_, at| now.duration_since(*at) < CANCEL_MEMORY);
        }
        canceled.insert(signal.key, now);
    }
}
