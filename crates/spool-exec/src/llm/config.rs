//! How to reach an OpenAI-compatible endpoint and how hard to try ([`OpenAiConfig`]),
//! read from code or from the environment, and what makes a configuration unusable.

use std::fmt;
use std::time::Duration;

/// The header that carries the request's idempotency key unless configured otherwise.
pub const DEFAULT_REQUEST_KEY_HEADER: &str = "X-Spool-Request-Key";

/// The most bytes the answers being read may hold at once across an executor and its
/// clones (a pool's workers) unless configured otherwise: 256 MiB.
pub const DEFAULT_MAX_TOTAL_ANSWER_BYTES: u64 = 256 * 1024 * 1024;

/// The variable [`OpenAiConfig::from_env`] reads
/// [`max_total_answer_bytes`](OpenAiConfig::max_total_answer_bytes) from.
pub const MAX_TOTAL_ANSWER_BYTES_VAR: &str = "SPOOL_LLM_MAX_TOTAL_BYTES";

/// How to reach an OpenAI-compatible chat-completions endpoint, and how hard to try.
///
/// `base_url` may or may not end in `/v1`: `http://host:8000` and `http://host:8000/v1`
/// both post to `http://host:8000/v1/chat/completions`; a URL that already ends in
/// `/chat/completions` is used as it is, and a query string (`?api-version=...`) is kept
/// after the path. See [`endpoint`](OpenAiConfig::endpoint).
///
/// Credentials in the URL (`http://user:password@host/...`, `?api-key=...`) are sent
/// as they are (the user and password as `Authorization: Basic`, unless an
/// [`api_key`](OpenAiConfig::api_key) is set), and never shown: every message, log
/// line and `Debug` output shows the URL through [`redact_url`].
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
    /// (default 120 s). A timeout is answered as
    /// [`RequestError::Timeout`](spool_core::RequestError::Timeout), not retried.
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
    /// The most bytes the answers being read may hold at once, across the executor and
    /// its clones (a pool's workers): default [`DEFAULT_MAX_TOTAL_ANSWER_BYTES`]. An
    /// answer whose length is known waits (within the attempt's timeout) until its
    /// bytes fit; one of unknown length (chunked) is read in steps, and a step that
    /// does not fit ends the attempt, retried as a connection error. One answer is
    /// read up to 64 MiB or this budget, whichever is less; a longer one is
    /// [`RequestError::Malformed`](spool_core::RequestError::Malformed).
    pub max_total_answer_bytes: u64,
    /// Whether answers are streamed (default `false`): each request is sent with
    /// `stream: true` and `stream_options: {"include_usage": true}`, the answer is read
    /// as Server-Sent Events as it comes, each piece is handed to the driver as
    /// progress ([`Delta`](spool_core::Delta)), and the pieces are assembled into the
    /// same answer a call without streaming gives. Without it a request is sent with
    /// neither `stream` nor `stream_options` (a provider answers with one JSON body
    /// then). A payload's own `stream` and `stream_options` are dropped or replaced
    /// either way: this setting decides.
    pub stream: bool,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &redact_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .field("retry_max", &self.retry_max)
            .field("workers", &self.workers)
            .field("request_key_header", &self.request_key_header)
            .field("max_total_answer_bytes", &self.max_total_answer_bytes)
            .field("stream", &self.stream)
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
        /// The URL given, with its credentials replaced ([`redact_url`]).
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
    /// The answer budget is not a whole number of bytes above zero.
    #[error("SPOOL_LLM_MAX_TOTAL_BYTES is `{value}`: it must be a whole number of bytes above 0")]
    InvalidAnswerBudget {
        /// The value given.
        value: String,
    },
}

impl OpenAiConfig {
    /// A configuration with the defaults: no API key, a 120 s timeout, 3 retries from
    /// 500 ms up to 8 s, 8 workers, the request key sent in
    /// [`DEFAULT_REQUEST_KEY_HEADER`], answers held up to
    /// [`DEFAULT_MAX_TOTAL_ANSWER_BYTES`] at once.
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
            max_total_answer_bytes: DEFAULT_MAX_TOTAL_ANSWER_BYTES,
            stream: false,
        }
    }

    /// From the environment: `OPENAI_BASE_URL` (required), `OPENAI_API_KEY` (optional),
    /// `OPENAI_MODEL` (optional, else `default_model`) and `SPOOL_LLM_MAX_TOTAL_BYTES`
    /// (optional, [`max_total_answer_bytes`](OpenAiConfig::max_total_answer_bytes));
    /// the rest as [`new`](OpenAiConfig::new). Empty variables count as unset.
    ///
    /// # Errors
    /// [`ConfigError::MissingBaseUrl`], [`ConfigError::InvalidAnswerBudget`], or what
    /// [`validate`](OpenAiConfig::validate) finds.
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
        if let Some(value) = set(MAX_TOTAL_ANSWER_BYTES_VAR) {
            config.max_total_answer_bytes = value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|bytes| *bytes > 0)
                .ok_or(ConfigError::InvalidAnswerBudget { value })?;
        }
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

    /// Streams answers, or not ([`stream`](OpenAiConfig::stream)).
    #[must_use]
    pub fn stream(mut self, stream: bool) -> OpenAiConfig {
        self.stream = stream;
        self
    }

    /// Sets the most bytes the answers being read may hold at once (at least 1).
    #[must_use]
    pub fn max_total_answer_bytes(mut self, bytes: u64) -> OpenAiConfig {
        self.max_total_answer_bytes = bytes;
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
            url: redact_url(&self.base_url),
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
        if self.max_total_answer_bytes == 0 {
            return Err(ConfigError::InvalidAnswerBudget {
                value: "0".to_owned(),
            });
        }
        Ok(())
    }

    /// The URL requests are posted to, as it may be shown: credentials replaced by
    /// [`redact_url`]. The URL is the base URL's path, less a trailing `/`, with
    /// `/chat/completions` added if it ends in `/v1`, `/v1/chat/completions` added
    /// otherwise, and nothing added if it already ends in `/chat/completions`; a query
    /// string stays at the end.
    ///
    /// # Example
    /// ```
    /// use spool_exec::OpenAiConfig;
    ///
    /// let config = OpenAiConfig::new("http://user:pw@127.0.0.1:8000/v1?api-key=K", "m");
    /// assert_eq!(
    ///     config.endpoint(),
    ///     "http://***@127.0.0.1:8000/v1/chat/completions?api-key=***"
    /// );
    /// ```
    pub fn endpoint(&self) -> String {
        redact_url(&self.post_url())
    }

    /// The URL requests are posted to, credentials and all (never shown).
    pub(super) fn post_url(&self) -> String {
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

/// `url` taken apart as far as [`redact_url`] and the scrubbing of messages need.
pub(super) struct UrlParts<'a> {
    /// Up to and with `://`; empty when there is none.
    pub(super) scheme: &'a str,
    /// The user and password, with the `@` that ends them: everything after the scheme
    /// up to the last `@` before any `?` or `#` (a password may hold an unencoded `/`
    /// or `@`); when an `@` comes after a `?` or `#` too, up to the last `@` of all.
    pub(super) user_info: Option<&'a str>,
    /// Whether an `@` comes after a `?` or `#`: a password may then hold an unencoded
    /// `?` or `#`, and where the host is cannot be told.
    pub(super) ambiguous: bool,
    /// Everything after the scheme and before the first `?` or `#` (user info
    /// included).
    pub(super) head: &'a str,
    /// What follows the user info: host, port, path, query and fragment.
    pub(super) rest: &'a str,
}

/// Takes `url` apart (see [`UrlParts`]).
pub(super) fn url_parts(url: &str) -> UrlParts<'_> {
    let (scheme, after) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let head_end = after.find(['?', '#']).unwrap_or(after.len());
    let ambiguous = after[head_end..].contains('@');
    let at = if ambiguous {
        after.rfind('@')
    } else {
        after[..head_end].rfind('@')
    };
    let (user_info, rest) = match at {
        Some(at) => (Some(&after[..=at]), &after[at + 1..]),
        None => (None, after),
    };
    UrlParts {
        scheme,
        user_info,
        ambiguous,
        head: &after[..head_end],
        rest,
    }
}

/// Whether `authority` reads as a host with an optional port: a name or address of
/// letters, digits and `-._~%` (an IPv6 address in brackets may hold `:` too), then
/// `:` and digits, or nothing.
fn plausible_authority(authority: &str) -> bool {
    let name = |s: &str, colons: bool| {
        s.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '-' | '.' | '_' | '~' | '%')
                || (colons && c == ':')
        })
    };
    let (host_ok, port) = match authority.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((address, port)) => (name(address, true), port),
            None => return false,
        },
        None => match authority.find(':') {
            Some(at) => (name(&authority[..at], false), &authority[at..]),
            None => (name(authority, false), ""),
        },
    };
    host_ok
        && (port.is_empty()
            || port
                .strip_prefix(':')
                .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit())))
}

/// `url` as it may be shown: the user and password before the host become `***`
/// (`http://***@host/...`), and so does every query parameter's value (`?key=***`; a
/// parameter without `=` becomes `***` whole) and a fragment; the scheme, host, port
/// and path are kept. Text that is not a URL is handled the same way, from its start.
///
/// The user and password run to the last `@` before any `?` or `#`, so a password
/// holding an unencoded `/` or `@` is hidden whole (a path holding an `@` is hidden
/// with it). A URL that does not read as `scheme://[user@]host[:port][/path][?query]`
/// (an `@` after a `?` or `#`, as an unencoded `?` or `#` in a password gives, or a
/// host or port holding other characters) is shown as its scheme and `***` only.
///
/// # Example
/// ```
/// use spool_exec::redact_url;
///
/// assert_eq!(
///     redact_url("http://user:pw@127.0.0.1:8080/v1?api-key=K&x=1"),
///     "http://***@127.0.0.1:8080/v1?api-key=***&x=***"
/// );
/// assert_eq!(redact_url("https://api.example.com/v1"), "https://api.example.com/v1");
/// assert_eq!(redact_url("http://user:a/b@host/v1"), "http://***@host/v1");
/// assert_eq!(redact_url("http://user:a?b@host/v1"), "http://***");
/// ```
pub fn redact_url(url: &str) -> String {
    let parts = url_parts(url);
    let hidden = || format!("{}***", parts.scheme);
    if parts.ambiguous {
        return hidden();
    }
    let rest = parts.rest;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(authority_end);
    if !plausible_authority(authority) {
        return hidden();
    }
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    if parts.user_info.is_some() {
        out.push_str("***@");
    }
    out.push_str(authority);
    let (rest, fragment) = match rest.find('#') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (path, query) = match rest.find('?') {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    out.push_str(path);
    if let Some(query) = query {
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.find('=') {
                Some(at) => {
                    out.push_str(&pair[..=at]);
                    out.push_str("***");
                }
                None if pair.is_empty() => {}
                None => out.push_str("***"),
            }
        }
    }
    if !fragment.is_empty() {
        out.push_str("#***");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::super::body::request_body;

    /// The body sent for a payload that asks for streaming itself, with streaming on
    /// and off.
    fn sent(stream: bool) -> Value {
        let payload = json!({"messages": [], "stream": true,
            "stream_options": {"include_usage": false}});
        serde_json::from_slice(&request_body(&payload, "m", stream).unwrap()).unwrap()
    }

    #[test]
    fn without_streaming_a_request_has_neither_stream_nor_stream_options() {
        assert_eq!(sent(false), json!({"messages": [], "model": "m"}));
        assert_eq!(
            sent(true),
            json!({"messages": [], "model": "m", "stream": true,
                "stream_options": {"include_usage": true}})
        );
    }
}
