//! The OpenAI-compatible chat-completions executor: `POST {base}/v1/chat/completions`
//! with a blocking `ureq` client on the executor's own threads (no async runtime).
//!
//! What it does with each answer:
//!
//! - 2xx: the answer is normalized (see [`OpenAiExecutor`]) and its `usage.total_tokens`
//!   goes back to the scheduler's tokens-per-window limiter
//!   ([`Response::with_tokens_used`]).
//! - 429: [`RequestError::RateLimited`] with the delay the provider asked for
//!   ([`rate_limit_delay`]); the executor does not retry: the scheduler backs the whole
//!   kind off and sends the request again with the same key.
//! - 5xx and connection errors: retried here with jittered exponential back-off, at
//!   most [`OpenAiConfig::max_retries`] times, then [`RequestError::Failed`]. The
//!   retries are counted ([`OpenAiExecutor::attempts`]), so that what the endpoint saw
//!   can be reconciled with the requests the scheduler sent.
//! - a timeout: [`RequestError::Timeout`], not retried.
//! - a body that is not the expected JSON: [`RequestError::Malformed`] quoting the
//!   first 200 bytes received.
//! - any other status: [`RequestError::Failed`] with the status and a quote of the body.

use crate::json_type;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};
use spool_core::{CancelSignal, OutboundRequest, RequestError, RequestKey, Response};
use spool_core::{Executor, Replies};

/// How much of a body an error message quotes, in bytes.
const QUOTE_BYTES: usize = 200;
/// The largest answer body read, in bytes; a larger one is `Malformed`.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// The longest slice a retry's pause sleeps before it looks for a cancel signal.
const CANCEL_CHECK: Duration = Duration::from_millis(25);
/// How long a cancel signal for a request this executor never saw is remembered.
const CANCEL_MEMORY: Duration = Duration::from_secs(600);

/// The header that carries the request's idempotency key unless configured otherwise.
pub const DEFAULT_REQUEST_KEY_HEADER: &str = "X-Spool-Request-Key";

/// How to reach an OpenAI-compatible chat-completions endpoint, and how hard to try.
///
/// `base_url` may or may not end in `/v1`: `http://host:8000` and `http://host:8000/v1`
/// both post to `http://host:8000/v1/chat/completions`; a URL that already ends in
/// `/chat/completions` is used as it is, and a query string (`?api-version=...`) is kept
/// after the path. See [`endpoint`](OpenAiConfig::endpoint).
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_exec::OpenAiConfig;
///
/// let config = OpenAiConfig::new("http://127.0.0.1:8000", "gpt-4o-mini")
///     .api_key("sk-test")
///     .timeout(Duration::from_secs(30))
///     .max_retries(2)
///     .workers(16);
/// assert_eq!(config.endpoint(), "http://127.0.0.1:8000/v1/chat/completions");
/// assert_eq!(
///     OpenAiConfig::new("https://api.example.com/v1/", "m").endpoint(),
///     "https://api.example.com/v1/chat/completions"
/// );
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The provider's base URL, with or without `/v1`.
    pub base_url: String,
    /// The model asked for, unless a request's payload names its own `model`.
    pub model: String,
    /// Sent as `Authorization: Bearer {key}` when set.
    pub api_key: Option<String>,
    /// How long one attempt may take, from connecting to the last byte of the answer
    /// (default 120 s). A timeout is answered as [`RequestError::Timeout`], not retried.
    pub timeout: Duration,
    /// How many times a request is sent again after a 5xx or a connection error
    /// (default 3; 0: never).
    pub max_retries: u32,
    /// The pause before the first retry (default 500 ms); doubled per further retry,
    /// then jittered: each pause is uniform between half of it and all of it.
    pub retry_base: Duration,
    /// The longest pause between retries (default 8 s), also capping a 5xx's
    /// `Retry-After`.
    pub retry_max: Duration,
    /// Worker threads to run the executor on (default 8): give it to the runtime as
    /// `.pool(Kind::Llm, config.workers, move || executor.clone())`. The most requests
    /// at the provider at once. Cap them below that with
    /// `RequestLimits::max_in_flight(Kind::Llm, n)`.
    pub workers: usize,
    /// The header that carries the request's key (`task:number`, the same when the
    /// scheduler sends a request again), default [`DEFAULT_REQUEST_KEY_HEADER`];
    /// `None` sends none.
    pub request_key_header: Option<String>,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .field("retry_max", &self.retry_max)
            .field("workers", &self.workers)
            .field("request_key_header", &self.request_key_header)
            .finish()
    }
}

/// A configuration that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `OPENAI_BASE_URL` is not set (or is empty).
    #[error("OPENAI_BASE_URL is not set: it names the OpenAI-compatible provider")]
    MissingBaseUrl,
    /// The base URL is not an `http://` or `https://` URL with a host.
    #[error("the base URL `{url}` is not usable: {reason}")]
    InvalidBaseUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No model is named.
    #[error("no model is named (OPENAI_MODEL or the default)")]
    MissingModel,
    /// A pool of no workers.
    #[error("the LLM executor needs at least one worker")]
    NoWorkers,
}

impl OpenAiConfig {
    /// A configuration with the defaults: no API key, a 120 s timeout, 3 retries from
    /// 500 ms up to 8 s, 8 workers, the request key sent in
    /// [`DEFAULT_REQUEST_KEY_HEADER`].
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(8),
            workers: 8,
            request_key_header: Some(DEFAULT_REQUEST_KEY_HEADER.to_owned()),
        }
    }

    /// From the environment: `OPENAI_BASE_URL` (required), `OPENAI_API_KEY` (optional)
    /// and `OPENAI_MODEL` (optional, else `default_model`); the rest as
    /// [`new`](OpenAiConfig::new). Empty variables count as unset.
    ///
    /// # Errors
    /// [`ConfigError::MissingBaseUrl`], or what [`validate`](OpenAiConfig::validate)
    /// finds.
    pub fn from_env(default_model: impl Into<String>) -> Result<OpenAiConfig, ConfigError> {
        OpenAiConfig::from_vars(default_model, |name| std::env::var(name).ok())
    }

    /// As [`from_env`](OpenAiConfig::from_env), reading the variables through `var`
    /// (for tests, or another source of settings).
    ///
    /// # Errors
    /// As [`from_env`](OpenAiConfig::from_env).
    ///
    /// # Example
    /// ```
    /// use spool_exec::{ConfigError, OpenAiConfig};
    ///
    /// let vars = |name: &str| match name {
    ///     "OPENAI_BASE_URL" => Some("http://127.0.0.1:8000/v1".to_owned()),
    ///     "OPENAI_API_KEY" => Some("sk-test".to_owned()),
    ///     _ => None,
    /// };
    /// let config = OpenAiConfig::from_vars("gpt-4o-mini", vars).unwrap();
    /// assert_eq!(config.model, "gpt-4o-mini");
    /// assert_eq!(config.api_key.as_deref(), Some("sk-test"));
    /// assert_eq!(OpenAiConfig::from_vars("m", |_| None), Err(ConfigError::MissingBaseUrl));
    /// ```
    pub fn from_vars(
        default_model: impl Into<String>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<OpenAiConfig, ConfigError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let base_url = set("OPENAI_BASE_URL").ok_or(ConfigError::MissingBaseUrl)?;
        let model = set("OPENAI_MODEL").unwrap_or_else(|| default_model.into());
        let mut config = OpenAiConfig::new(base_url.trim(), model.trim());
        config.api_key = set("OPENAI_API_KEY").map(|k| k.trim().to_owned());
        config.validate()?;
        Ok(config)
    }

    /// Sets the API key.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> OpenAiConfig {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the model.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> OpenAiConfig {
        self.model = model.into();
        self
    }

    /// Sets how long one attempt may take.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> OpenAiConfig {
        self.timeout = timeout;
        self
    }

    /// Sets how many times a 5xx or a connection error is retried.
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> OpenAiConfig {
        self.max_retries = retries;
        self
    }

    /// Sets the pause before the first retry.
    #[must_use]
    pub fn retry_base(mut self, pause: Duration) -> OpenAiConfig {
        self.retry_base = pause;
        self
    }

    /// Sets the longest pause between retries.
    #[must_use]
    pub fn retry_max(mut self, pause: Duration) -> OpenAiConfig {
        self.retry_max = pause;
        self
    }

    /// Sets the number of worker threads (at least 1).
    #[must_use]
    pub fn workers(mut self, workers: usize) -> OpenAiConfig {
        self.workers = workers;
        self
    }

    /// Sets the header that carries the request key, or none.
    #[must_use]
    pub fn request_key_header(mut self, header: Option<String>) -> OpenAiConfig {
        self.request_key_header = header;
        self
    }

    /// Checks the base URL (`http://` or `https://` with a host), the model (not
    /// empty) and the workers (at least 1).
    ///
    /// # Errors
    /// The first of [`ConfigError::InvalidBaseUrl`], [`ConfigError::MissingModel`],
    /// [`ConfigError::NoWorkers`] that applies.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = self.base_url.trim();
        let invalid = |reason: &str| ConfigError::InvalidBaseUrl {
            url: self.base_url.clone(),
            reason: reason.to_owned(),
        };
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| invalid("it must start with http:// or https://"))?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if host.is_empty() {
            return Err(invalid("it has no host"));
        }
        if url.contains(char::is_whitespace) {
            return Err(invalid("it contains white space"));
        }
        if self.model.trim().is_empty() {
            return Err(ConfigError::MissingModel);
        }
        if self.workers == 0 {
            return Err(ConfigError::NoWorkers);
        }
        Ok(())
    }

    /// The URL requests are posted to: the base URL's path, less a trailing `/`, with
    /// `/chat/completions` added if it ends in `/v1`, `/v1/chat/completions` added
    /// otherwise, and nothing added if it already ends in `/chat/completions`; a query
    /// string stays at the end.
    pub fn endpoint(&self) -> String {
        let url = self.base_url.trim();
        let (path, query) = match url.find('?') {
            Some(at) => url.split_at(at),
            None => (url, ""),
        };
        let path = path.trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            format!("{path}{query}")
        } else if path.ends_with("/v1") {
            format!("{path}/chat/completions{query}")
        } else {
            format!("{path}/v1/chat/completions{query}")
        }
    }
}

/// The LLM executor: serves `Kind::Llm` requests with an OpenAI-compatible
/// chat-completions provider. Clones share one connection pool and one set of cancel
/// signals, so a pool of workers is clones of one executor
/// (`RuntimeBuilder::pool(Kind::Llm, workers, move || executor.clone())`, as in the
/// example below).
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
/// ```no_run
/// use std::time::Duration;
/// use spool_core::{Config, Kind, RequestLimits};
/// use spool_exec::{OpenAiConfig, OpenAiExecutor};
/// use spool_runtime::Runtime;
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
/// // A pool of `workers` threads, each with a clone: they share one connection pool.
/// let workers = config.workers;
/// let executor = OpenAiExecutor::new(config);
/// let runtime = Runtime::builder()
///     .config(Config::new().requests(limits))
///     .pool(Kind::Llm, workers, move || executor.clone())
///     .build();
/// # Ok::<(), spool_exec::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct OpenAiExecutor {
    shared: Arc<Shared>,
}

struct Shared {
    config: OpenAiConfig,
    endpoint: String,
    /// Why the configuration cannot work, if it cannot.
    invalid: Option<String>,
    authorization: Option<String>,
    agent: ureq::Agent,
    /// Cancel signals not yet acted on, and when each came.
    canceled: Mutex<HashMap<RequestKey, Instant>>,
    /// POSTs made, retries among them, and 429s answered.
    attempts: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
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

/// How one attempt ended.
enum Attempt {
    /// The answer for the task, success or not: no retry.
    Done(Response),
    /// A 5xx or a connection error: worth another try, after at least `not_before`.
    Retry {
        what: String,
        not_before: Option<Duration>,
    },
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
                endpoint: config.endpoint(),
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

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
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

    /// Runs one request to its answer: the attempts, the retries between them.
    /// Blocks the calling thread.
    fn complete(&self, key: RequestKey, payload: &Value) -> Response {
        let shared = &*self.shared;
        if let Some(invalid) = &shared.invalid {
            return Response::err(key, RequestError::failed(invalid.clone()));
        }
        let body = match request_body(payload, &shared.config.model) {
            Ok(body) => body,
            Err(message) => return Response::err(key, RequestError::InvalidArguments { message }),
        };
        let mut attempts = 0u32;
        loop {
            if shared.take_canceled(key) {
                return Response::err(key, RequestError::Canceled);
            }
            attempts += 1;
            if attempts > 1 {
                shared.retries.fetch_add(1, Ordering::Relaxed);
            }
            let (what, not_before) = match shared.attempt(key, &body) {
                Attempt::Done(response) => return response,
                Attempt::Retry { what, not_before } => (what, not_before),
            };
            if attempts > shared.config.max_retries {
                let message = format!(
                    "POST {} failed after {attempts} attempt{}; the last: {what}",
                    shared.endpoint,
                    if attempts == 1 { "" } else { "s" },
                );
                tracing::warn!(key = %key, %message, "LLM request failed");
                return Response::err(key, RequestError::Failed { message });
            }
            let pause = shared
                .pause_before_retry(attempts)
                .max(not_before.unwrap_or_default())
                .min(shared.config.retry_max);
            tracing::debug!(key = %key, attempt = attempts, ?pause, %what, "LLM request: retrying");
            if shared.sleep_unless_canceled(key, pause) {
                return Response::err(key, RequestError::Canceled);
            }
        }
    }
}

impl Executor for OpenAiExecutor {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let response = self.complete(request.key, request.request.payload.value());
        // Answer at once: the rest of this batch may take a while.
        let _ = replies.replier().send(response);
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

impl Shared {
    fn lock_canceled(&self) -> MutexGuard<'_, HashMap<RequestKey, Instant>> {
        self.canceled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `key` was canceled; forgets the signal.
    fn take_canceled(&self, key: RequestKey) -> bool {
        let mut canceled = self.lock_canceled();
        !canceled.is_empty() && canceled.remove(&key).is_some()
    }

    /// Sleeps `pause`, looking for a cancel signal now and then; true if one came.
    fn sleep_unless_canceled(&self, key: RequestKey, pause: Duration) -> bool {
        let end = Instant::now() + pause;
        loop {
            if self.take_canceled(key) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(CANCEL_CHECK));
        }
    }

    /// The jittered pause before retry `retry` (1 for the first): `retry_base ×
    /// 2^(retry − 1)`, at most `retry_max`, then uniform between half of it and all.
    fn pause_before_retry(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(30);
        let full = self
            .config
            .retry_base
            .saturating_mul(1u32 << doublings)
            .min(self.config.retry_max);
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(retry);
        let unit = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
        full.mul_f64(0.5 + 0.5 * unit)
    }

    fn attempt(&self, key: RequestKey, body: &[u8]) -> Attempt {
        let mut request = self
            .agent
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .header("accept", "application/json");
        if let Some(auth) = &self.authorization {
            request = request.header("authorization", auth);
        }
        if let Some(header) = &self.config.request_key_header {
            request = request.header(header.as_str(), key.to_string());
        }
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let mut response = match request.send(body) {
            Ok(response) => response,
            Err(error) => return self.transport_error(key, error),
        };
        let status = response.status();
        let read = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec();
        let code = status.as_u16();
        let status_text = match status.canonical_reason() {
            Some(reason) => format!("HTTP {code} {reason}"),
            None => format!("HTTP {code}"),
        };
        if code == 429 {
            let headers = response
                .headers()
                .iter()
                .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
            let retry_after = rate_limit_delay(headers, SystemTime::now());
            self.rate_limited.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(key = %key, ?retry_after, "LLM request: 429, backing off");
            return Attempt::Done(Response::err(
                key,
                RequestError::RateLimited { retry_after },
            ));
        }
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(ureq::Error::BodyExceedsLimit(limit)) => {
                return Attempt::Done(Response::err(
                    key,
                    RequestError::Malformed {
                        message: format!("the answer is larger than {limit} bytes"),
                    },
                ));
            }
            Err(error) => return self.transport_error(key, error),
        };
        if status.is_server_error() {
            let not_before = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            return Attempt::Retry {
                what: format!("{status_text}: {}", quote(&bytes)),
                not_before,
            };
        }
        if !status.is_success() {
            return Attempt::Done(Response::err(
                key,
                RequestError::failed(format!(
                    "POST {} answered {status_text}: {}",
                    self.endpoint,
                    quote(&bytes)
                )),
            ));
        }
        Attempt::Done(match normalize(&bytes) {
            Ok((value, tokens)) => {
                let response = Response::ok(key, value);
                match tokens {
                    Some(tokens) => response.with_tokens_used(tokens),
                    None => response,
                }
            }
            Err(AnswerError::Malformed(message)) => {
                Response::err(key, RequestError::Malformed { message })
            }
            Err(AnswerError::Provider) => Response::err(
                key,
                RequestError::failed(format!(
                    "POST {} answered {status_text} with an error: {}",
                    self.endpoint,
                    quote(&bytes)
                )),
            ),
        })
    }

    /// A `ureq` error: a timeout, a connection error worth a retry, or a failure.
    fn transport_error(&self, key: RequestKey, error: ureq::Error) -> Attempt {
        let timed_out = match &error {
            ureq::Error::Timeout(_) => true,
            ureq::Error::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        };
        if timed_out {
            return Attempt::Done(Response::err(
                key,
                RequestError::Timeout {
                    after: self.config.timeout,
                },
            ));
        }
        match error {
            ureq::Error::Io(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Protocol(_) => Attempt::Retry {
                what: format!("connection error: {error}"),
                not_before: None,
            },
            other => Attempt::Done(Response::err(
                key,
                RequestError::failed(format!("POST {} failed: {other}", self.endpoint)),
            )),
        }
    }
}

/// The body to post: the task's payload, with `model` added unless it names one.
fn request_body(payload: &Value, model: &str) -> Result<Vec<u8>, String> {
    let Value::Object(fields) = payload else {
        return Err(format!(
            "an LLM request's payload must be a JSON object with `messages`, not {}",
            json_type(payload)
        ));
    };
    if !matches!(fields.get("messages"), Some(Value::Array(_))) {
        return Err("an LLM request's payload must have a `messages` array".to_owned());
    }
    if fields.get("stream") == Some(&Value::Bool(true)) {
        return Err(
            "`stream: true` is not supported: the executor reads one whole answer".to_owned(),
        );
    }
    let body = if fields.contains_key("model") {
        serde_json::to_vec(fields)
    } else {
        let mut with_model = Map::with_capacity(fields.len() + 1);
        with_model.insert("model".to_owned(), Value::String(model.to_owned()));
        for (name, value) in fields {
            with_model.insert(name.clone(), value.clone());
        }
        serde_json::to_vec(&with_model)
    };
    body.map_err(|e| format!("the payload could not be encoded: {e}"))
}

enum AnswerError {
    Malformed(String),
    /// A 2xx body that is the provider's `{"error": ...}`.
    Provider,
}

/// Normalizes a chat-completions answer: the first choice's content and tool calls,
/// its finish reason, the usage; and the total tokens used, if reported.
fn normalize(bytes: &[u8]) -> Result<(Value, Option<u32>), AnswerError> {
    let malformed = |what: &str| AnswerError::Malformed(format!("{what}: {}", quote(bytes)));
    let answer: Value = serde_json::from_slice(bytes)
        .map_err(|e| malformed(&format!("the answer is not JSON ({e})")))?;
    let choice = answer.get("choices").and_then(|c| c.get(0));
    let Some(message) = choice
        .and_then(|c| c.get("message"))
        .filter(|m| m.is_object())
    else {
        if answer.get("error").is_some_and(|e| !e.is_null()) {
            return Err(AnswerError::Provider);
        }
        return Err(malformed("the answer has no `choices[0].message` object"));
    };
    let content = match message.get("content") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match part.get("text") {
                    Some(Value::String(t)) => text.push_str(t),
                    _ => return Err(malformed("a part of `message.content` has no text")),
                }
            }
            Value::String(text)
        }
        Some(_) => return Err(malformed("`message.content` is neither text nor null")),
    };
    let mut calls = Vec::new();
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (i, call) in list.iter().enumerate() {
                let function = call.get("function");
                let Some(Value::String(name)) = function.and_then(|f| f.get("name")) else {
                    return Err(malformed(&format!("tool call {i} has no `function.name`")));
                };
                let arguments = match function.and_then(|f| f.get("arguments")) {
                    None | Some(Value::Null) => json!({}),
                    Some(Value::String(raw)) => serde_json::from_str::<Value>(raw)
                        .unwrap_or_else(|_| Value::String(raw.clone())),
                    Some(other) => other.clone(),
                };
                let id = match call.get("id") {
                    Some(Value::String(id)) => Value::String(id.clone()),
                    _ => Value::Null,
                };
                calls.push(json!({"id": id, "name": name, "arguments": arguments}));
            }
        }
        Some(_) => return Err(malformed("`message.tool_calls` is not an array")),
    }
    let finish_reason = choice
        .and_then(|c| c.get("finish_reason"))
        .cloned()
        .unwrap_or(Value::Null);
    let usage = answer.get("usage").cloned().unwrap_or(Value::Null);
    let tokens = usage
        .get("total_tokens")
        .and_then(Value::as_u64)
        .or_else(|| {
            let prompt = usage.get("prompt_tokens").and_then(Value::as_u64)?;
            let completion = usage.get("completion_tokens").and_then(Value::as_u64)?;
            Some(prompt.saturating_add(completion))
        })
        .map(|t| u32::try_from(t).unwrap_or(u32::MAX));
    let value = json!({
        "content": content,
        "tool_calls": calls,
        "finish_reason": finish_reason,
        "usage": usage,
    });
    Ok((value, tokens))
}

/// Quotes the first 200 bytes of a body (cut on a character boundary, invalid UTF-8
/// replaced) in backticks, saying how long the whole was if it was cut.
///
/// # Example
/// ```
/// assert_eq!(spool_exec::quote_body(b"oops"), "`oops`");
/// assert_eq!(spool_exec::quote_body(b""), "an empty body");
/// let long = "x".repeat(300);
/// assert_eq!(
///     spool_exec::quote_body(long.as_bytes()),
///     format!("`{}`... (300 bytes in all)", "x".repeat(200))
/// );
/// ```
pub fn quote_body(bytes: &[u8]) -> String {
    quote(bytes)
}

fn quote(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "an empty body".to_owned();
    }
    let mut cut = bytes.len().min(QUOTE_BYTES);
    // Back off to the start of the character the cut would split (at most 3 bytes).
    for _ in 0..3 {
        if cut > 0 && cut < bytes.len() && bytes[cut] & 0b1100_0000 == 0b1000_0000 {
            cut -= 1;
        } else {
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes[..cut]);
    if cut < bytes.len() {
        format!("`{text}`... ({} bytes in all)", bytes.len())
    } else {
        format!("`{text}`")
    }
}

/// The delay a 429 asks for, from its headers (names compared without case), relative
/// to `now`:
///
/// 1. `retry-after-ms`: milliseconds (some providers send it beside `Retry-After`);
/// 2. `Retry-After`: seconds, or an HTTP date (a date in the past means no delay);
/// 3. the provider's rate-limit headers, `x-ratelimit-reset-requests` and
///    `x-ratelimit-reset-tokens` (durations such as `1s`, `6m0s`, `250ms`): the reset of
///    the budget whose `x-ratelimit-remaining-*` is 0, or the later of the two if
///    neither says.
///
/// `None` if none of them is present and readable.
///
/// # Example
/// ```
/// use std::time::{Duration, SystemTime};
/// use spool_exec::rate_limit_delay;
///
/// let now = SystemTime::now();
/// assert_eq!(rate_limit_delay([("Retry-After", "2")], now), Some(Duration::from_secs(2)));
/// let headers = [
///     ("x-ratelimit-remaining-requests", "0"),
///     ("x-ratelimit-reset-requests", "1s"),
///     ("x-ratelimit-remaining-tokens", "9000"),
///     ("x-ratelimit-reset-tokens", "6m0s"),
/// ];
/// assert_eq!(rate_limit_delay(headers, now), Some(Duration::from_secs(1)));
/// ```
pub fn rate_limit_delay<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    now: SystemTime,
) -> Option<Duration> {
    let mut retry_after_ms = None;
    let mut retry_after = None;
    let mut reset = [None, None];
    let mut exhausted = [false, false];
    for (name, value) in headers {
        let name = name.trim();
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("retry-after-ms") {
            retry_after_ms = retry_after_ms.or_else(|| seconds(value.trim(), 1000.0));
        } else if is("retry-after") {
            retry_after = retry_after.or_else(|| parse_retry_after(value, now));
        } else if is("x-ratelimit-reset-requests") {
            reset[0] = reset[0].or_else(|| parse_reset_duration(value));
        } else if is("x-ratelimit-reset-tokens") {
            reset[1] = reset[1].or_else(|| parse_reset_duration(value));
        } else if is("x-ratelimit-remaining-requests") {
            exhausted[0] = value.trim().parse::<f64>().is_ok_and(|n| n <= 0.0);
        } else if is("x-ratelimit-remaining-tokens") {
            exhausted[1] = value.trim().parse::<f64>().is_ok_and(|n| n <= 0.0);
        }
    }
    if retry_after_ms.is_some() {
        return retry_after_ms;
    }
    if retry_after.is_some() {
        return retry_after;
    }
    let spent: Option<Duration> = (0..2)
        .filter(|&i| exhausted[i])
        .filter_map(|i| reset[i])
        .max();
    spent.or_else(|| reset.iter().flatten().copied().max())
}

/// Reads a `Retry-After` value: whole or decimal seconds, or an HTTP date (taken
/// relative to `now`; a date in the past is no delay). `None` if it is neither. A
/// delay too long for a [`Duration`] (`u64::MAX` seconds and more) is
/// [`Duration::MAX`]: the scheduler's `max_wait` decides what to do with it.
///
/// # Example
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use spool_exec::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_770); // Sun, 06 Nov 1994 08:49:30 GMT
/// assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
///     Some(Duration::from_secs(7))
/// );
/// assert_eq!(parse_retry_after("soon", now), None);
/// assert_eq!(parse_retry_after("99999999999999999999999", now), Some(Duration::MAX));
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Some(delay) = seconds(value, 1.0) {
        return Some(delay);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `value` — digits with at most one `.` — divided by `per_second`, as a duration,
/// saturating at [`Duration::MAX`]; `None` if it is not such a number.
fn seconds(value: &str, per_second: f64) -> Option<Duration> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    if fraction.is_empty() && per_second == 1.0 {
        // Whole seconds, exactly, however many.
        return Some(whole.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let number: f64 = value.parse().ok()?;
    Some(Duration::try_from_secs_f64(number / per_second).unwrap_or(Duration::MAX))
}

/// Reads a rate-limit reset duration as providers send it (Go's duration format):
/// numbers with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`, in sequence (`6m0s`,
/// `1h2m3.5s`, `250ms`, `0.5s`); a bare number is seconds. `None` if it is not one.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_exec::parse_reset_duration;
///
/// assert_eq!(parse_reset_duration("6m0s"), Some(Duration::from_secs(360)));
/// assert_eq!(parse_reset_duration("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_reset_duration("1.5s"), Some(Duration::from_millis(1500)));
/// assert_eq!(parse_reset_duration("later"), None);
/// ```
pub fn parse_reset_duration(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let nanos = decimal_nanos(value, 1_000_000_000)?;
        return Some(from_nanos_saturating(nanos));
    }
    let mut total: u128 = 0;
    let mut rest = value;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per: u128 = match &rest[..unit_len] {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.saturating_add(decimal_nanos(number, nanos_per)?);
    }
    Some(from_nanos_saturating(total))
}

/// `nanos` nanoseconds, or [`Duration::MAX`] if that is longer.
fn from_nanos_saturating(nanos: u128) -> Duration {
    match u64::try_from(nanos / 1_000_000_000) {
        // The rest is below a billion: it fits.
        Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
        Err(_) => Duration::MAX,
    }
}

/// `number` (digits, at most one `.`) times `unit` nanoseconds, exactly (fractions of
/// a nanosecond dropped), saturating at `u128::MAX`; `None` if it is not a number.
fn decimal_nanos(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else if whole.bytes().all(|b| b.is_ascii_digit()) {
        whole.parse().unwrap_or(u128::MAX)
    } else {
        return None;
    };
    let mut nanos = whole.saturating_mul(unit);
    let fraction = &fraction[..fraction.len().min(18)];
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        nanos = nanos.saturating_add(digits * unit / 10u128.pow(fraction.len() as u32));
    }
    Some(nanos)
}
