//! One request's attempts: the state an executor's clones share, one POST and what its
//! answer means (an answer, or a retry), the jittered pause before a retry, and the
//! cancel signals looked at in between.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use spool_core::{Delta, RequestError, RequestKey, Response};

use super::body::{AnswerError, normalize, quote};
use super::budget::{AnswerBudget, Hold};
use super::config::{OpenAiConfig, redact_url, url_parts};
use super::retry_after::{parse_retry_after, rate_limit_delay};
use super::stream::{Numbering, StreamError, read_stream};

/// The largest answer body read, in bytes (or the answer budget, if less); a larger one
/// is `Malformed`.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// How much of an answer of unknown length is reserved and read at a time.
const READ_STEP: u64 = 64 * 1024;
/// The longest slice a retry's pause sleeps before it looks for a cancel signal.
const CANCEL_CHECK: Duration = Duration::from_millis(25);

/// What an executor and its clones share: one connection pool, one set of cancel
/// signals, one set of counts.
pub(super) struct Shared {
    pub(super) config: OpenAiConfig,
    /// The URL posted to, credentials and all: never put in a message.
    pub(super) post_url: String,
    /// The URL as messages and logs show it ([`redact_url`]).
    pub(super) endpoint: String,
    /// Raw text that would give credentials away, and what to show instead: every
    /// message made here goes through [`Shared::redact`].
    pub(super) secrets: Vec<(String, String)>,
    /// The bytes of the answers being read, across the clones.
    pub(super) budget: AnswerBudget,
    /// Why the configuration cannot work, if it cannot.
    pub(super) invalid: Option<String>,
    pub(super) authorization: Option<String>,
    pub(super) agent: ureq::Agent,
    /// Cancel signals not yet acted on, and when each came.
    pub(super) canceled: Mutex<HashMap<RequestKey, Instant>>,
    /// POSTs made, retries among them, and 429s answered.
    pub(super) attempts: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) rate_limited: AtomicU64,
}

/// How one attempt ended.
pub(super) enum Attempt {
    /// The answer for the task, success or not: no retry.
    Done(Response),
    /// A 5xx or a connection error: worth another try, after at least `not_before`.
    Retry {
        what: String,
        not_before: Option<Duration>,
    },
}

/// The text to scrub from messages for `config`: the URL posted to and the base URL
/// as given, their credentials (the user and password before the host, found as
/// [`redact_url`] finds them, the password alone, and the query string), and the API
/// key; each with what
/// to show instead. Longest first, so a URL is replaced whole before its parts are.
pub(super) fn secrets_of(config: &OpenAiConfig) -> Vec<(String, String)> {
    let mut secrets = Vec::new();
    for url in [config.post_url(), config.base_url.trim().to_owned()] {
        let shown = redact_url(&url);
        let parts = url_parts(&url);
        if let Some(user_info) = parts.user_info {
            secrets.push((user_info.to_owned(), "***@".to_owned()));
            // The password alone, as a message may quote it (e.g. taken for a port).
            let password = user_info[..user_info.len() - 1].split_once(':');
            if let Some((_, password)) = password {
                secrets.push((password.to_owned(), "***".to_owned()));
            }
        }
        if parts.ambiguous {
            // Where the password ends cannot be told: what comes before the first `?`
            // or `#`, and all from it on, are hidden too.
            let after = &url[parts.scheme.len()..];
            secrets.push((parts.head.to_owned(), "***".to_owned()));
            secrets.push((after[parts.head.len()..].to_owned(), "***".to_owned()));
        } else if let Some(at) = url.find('?') {
            let query = &url[at..];
            let query = &query[..query.find('#').unwrap_or(query.len())];
            let shown_at = shown.find('?').unwrap_or(shown.len());
            let shown_query = &shown[shown_at..];
            let shown_query = &shown_query[..shown_query.find('#').unwrap_or(shown_query.len())];
            secrets.push((query.to_owned(), shown_query.to_owned()));
        }
        secrets.push((url, shown));
    }
    if let Some(key) = config.api_key.as_deref().filter(|key| !key.is_empty()) {
        secrets.push((key.to_owned(), "***".to_owned()));
    }
    secrets.retain(|(raw, shown)| raw.len() > 1 && raw != shown);
    secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    secrets.dedup();
    secrets
}

/// `text` with each of `secrets` (as [`secrets_of`] gives them, longest first)
/// replaced by what is shown instead.
fn scrub(secrets: &[(String, String)], mut text: String) -> String {
    for (raw, shown) in secrets {
        if text.contains(raw.as_str()) {
            text = text.replace(raw.as_str(), shown);
        }
    }
    text
}

impl Shared {
    /// `text` with every credential of the configuration replaced (see
    /// [`secrets_of`]).
    pub(super) fn redact(&self, text: String) -> String {
        scrub(&self.secrets, text)
    }

    /// The response with its error's message, if it has one, redacted.
    pub(super) fn redact_response(&self, mut response: Response) -> Response {
        if let Err(RequestError::Failed { message } | RequestError::Malformed { message }) =
            &mut response.result
        {
            *message = self.redact(std::mem::take(message));
        }
        response
    }

    pub(super) fn lock_canceled(&self) -> MutexGuard<'_, HashMap<RequestKey, Instant>> {
        self.canceled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `key` was canceled; forgets the signal.
    pub(super) fn take_canceled(&self, key: RequestKey) -> bool {
        let mut canceled = self.lock_canceled();
        !canceled.is_empty() && canceled.remove(&key).is_some()
    }

    /// Sleeps `pause`, looking for a cancel signal now and then; true if one came.
    pub(super) fn sleep_unless_canceled(&self, key: RequestKey, pause: Duration) -> bool {
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
    pub(super) fn pause_before_retry(&self, retry: u32) -> Duration {
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

    /// One POST of `body` for `key`, and what its answer means: a 429 is the answer at
    /// once (rate limited), a 5xx or a connection error is worth a retry, any other
    /// failure is the answer, and a success's body is normalized into the answer. A
    /// streamed success hands its pieces to `progress` as they come, numbered by
    /// `numbering`.
    pub(super) fn attempt(
        &self,
        key: RequestKey,
        body: &[u8],
        numbering: &mut Numbering,
        progress: &mut dyn FnMut(Delta),
    ) -> Attempt {
        let request = self.request(key);
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let mut response = match request.send(body) {
            Ok(response) => response,
            Err(error) => return self.transport_error(key, error),
        };
        let status = response.status();
        if self.config.stream && status.is_success() && is_event_stream(&response) {
            let status_text = status_text(status);
            return self.streamed(
                key,
                &mut response,
                started,
                &status_text,
                numbering,
                progress,
            );
        }
        // The answer's bytes are held (read, then normalized) within the budget.
        let read = self.read_body(&mut response, started + self.config.timeout);
        let status_text = status_text(status);
        if status.as_u16() == 429 {
            return self.rate_limited(key, &response);
        }
        let (bytes, _hold) = match read {
            Ok(read) => read,
            Err(error) => return self.unread(key, error),
        };
        if status.is_server_error() {
            return server_error(&response, &status_text, &bytes);
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
        Attempt::Done(self.answer(key, &status_text, &bytes))
    }

    /// Reads a streamed success (status `status_text`) within the budget, its pieces
    /// handed to `progress`: the answer assembled as a call without streaming gives
    /// it, or what the stream's failure means (as [`Shared::unread`] and
    /// [`Shared::answer`] say for a whole body).
    fn streamed(
        &self,
        key: RequestKey,
        response: &mut ureq::http::Response<ureq::Body>,
        started: Instant,
        status_text: &str,
        numbering: &mut Numbering,
        progress: &mut dyn FnMut(Delta),
    ) -> Attempt {
        let limit = MAX_BODY_BYTES.min(self.config.max_total_answer_bytes);
        let deadline = started + self.config.timeout;
        let Some(mut hold) = self.budget.reserve(READ_STEP.min(limit), deadline) else {
            return self.unread(key, BodyError::NoRoomInTime);
        };
        let reader = response.body_mut().with_config().limit(limit).reader();
        match read_stream(reader, &mut hold, limit, numbering, progress) {
            Ok((value, tokens)) => {
                let response = Response::ok(key, value);
                Attempt::Done(match tokens {
                    Some(tokens) => response.with_tokens_used(tokens),
                    None => response,
                })
            }
            Err(StreamError::TooLarge(limit)) => self.unread(key, BodyError::TooLarge(limit)),
            Err(StreamError::NoRoom { read }) => self.unread(
                key,
                BodyError::NoRoom {
                    read,
                    limit: self.config.max_total_answer_bytes,
                },
            ),
            Err(StreamError::Transport(error)) => self.unread(key, body_error(error, limit)),
            Err(StreamError::Malformed(message)) => {
                Attempt::Done(Response::err(key, RequestError::Malformed { message }))
            }
            Err(StreamError::Provider(quoted)) => Attempt::Done(Response::err(
                key,
                RequestError::failed(format!(
                    "POST {} answered {status_text} with an error: {quoted}",
                    self.endpoint
                )),
            )),
        }
    }

    /// The POST to the endpoint for `key`, with its headers: JSON in and out, the
    /// authorization if configured, and the request's key if a header is named for it.
    fn request(&self, key: RequestKey) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut request = self
            .agent
            .post(&self.post_url)
            .header("content-type", "application/json")
            .header(
                "accept",
                if self.config.stream {
                    "text/event-stream, application/json"
                } else {
                    "application/json"
                },
            );
        if let Some(auth) = &self.authorization {
            request = request.header("authorization", auth);
        }
        if let Some(header) = &self.config.request_key_header {
            request = request.header(header.as_str(), key.to_string());
        }
        request
    }

    /// A 429: the answer is [`RequestError::RateLimited`], with the pause the answer's
    /// headers ask for; counted.
    fn rate_limited(
        &self,
        key: RequestKey,
        response: &ureq::http::Response<ureq::Body>,
    ) -> Attempt {
        let headers = response
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let retry_after = rate_limit_delay(headers, SystemTime::now());
        self.rate_limited.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(key = %key, ?retry_after, "LLM request: 429, backing off");
        Attempt::Done(Response::err(
            key,
            RequestError::RateLimited { retry_after },
        ))
    }

    /// What an answer whose body was not read means: too large is malformed, no room
    /// in the budget is worth a retry, no room in time is a timeout, and a transport
    /// error is as [`Shared::transport_error`] says.
    fn unread(&self, key: RequestKey, error: BodyError) -> Attempt {
        match error {
            BodyError::TooLarge(limit) => Attempt::Done(Response::err(
                key,
                RequestError::Malformed {
                    message: format!("the answer is larger than {limit} bytes"),
                },
            )),
            BodyError::NoRoom { read, limit } => Attempt::Retry {
                what: format!(
                    "the answer outgrew the room left in the {limit}-byte budget of \
                     the LLM answers being read at once ({read} bytes read)"
                ),
                not_before: None,
            },
            BodyError::NoRoomInTime => Attempt::Done(Response::err(
                key,
                RequestError::Timeout {
                    after: self.config.timeout,
                },
            )),
            BodyError::Transport(error) => self.transport_error(key, error),
        }
    }

    /// The answer of a success (status `status_text`) with body `bytes`: its value and
    /// tokens used, or why it is malformed or the provider's error.
    fn answer(&self, key: RequestKey, status_text: &str, bytes: &[u8]) -> Response {
        match normalize(bytes) {
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
                    quote(bytes)
                )),
            ),
        }
    }

    /// A `ureq` error: a timeout, a connection error worth a retry, or a failure.
    pub(super) fn transport_error(&self, key: RequestKey, error: ureq::Error) -> Attempt {
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
        let what = self.redact(describe(&error));
        match error {
            ureq::Error::Io(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Protocol(_) => Attempt::Retry {
                what: format!("connection error: {what}"),
                not_before: None,
            },
            _ => Attempt::Done(Response::err(
                key,
                RequestError::failed(format!("POST {} failed: {what}", self.endpoint)),
            )),
        }
    }

    /// Reads the answer's body within the budget: an answer of known length reserves
    /// it whole (waiting until `deadline` for room), one of unknown length a step at a
    /// time. The bytes come with their hold, given back when it is dropped.
    fn read_body(
        &self,
        response: &mut ureq::http::Response<ureq::Body>,
        deadline: Instant,
    ) -> Result<(Vec<u8>, Hold<'_>), BodyError> {
        let limit = MAX_BODY_BYTES.min(self.config.max_total_answer_bytes);
        let budget = self.config.max_total_answer_bytes;
        let known = response.body().content_length();
        if let Some(length) = known
            && length > limit
        {
            return Err(BodyError::TooLarge(limit));
        }
        let first = known.unwrap_or(READ_STEP).min(limit);
        let mut hold = self
            .budget
            .reserve(first, deadline)
            .ok_or(BodyError::NoRoomInTime)?;
        let mut reader = response.body_mut().with_config().limit(limit).reader();
        let mut bytes = Vec::with_capacity(usize::try_from(first).unwrap_or(0));
        loop {
            // Room for the next step: what is held less what is read.
            let room = hold.bytes() - bytes.len() as u64;
            if room == 0 {
                if known.is_some() || bytes.len() as u64 >= limit {
                    // The whole answer is read, unless it goes on past its length or
                    // the limit, which the reader reports.
                    let mut probe = [0u8; 1];
                    match std::io::Read::read(&mut reader, &mut probe) {
                        Ok(0) => break,
                        Ok(_) => return Err(BodyError::TooLarge(limit)),
                        Err(error) => return Err(body_error(error, limit)),
                    }
                }
                let step = READ_STEP.min(limit - bytes.len() as u64);
                if !hold.grow(step) {
                    return Err(BodyError::NoRoom {
                        read: bytes.len() as u64,
                        limit: budget,
                    });
                }
                continue;
            }
            // Capacity for exactly the room held, so the bytes allocated are the bytes
            // reserved (growing the buffer by doubling would hold up to twice that).
            bytes.reserve_exact(usize::try_from(room).unwrap_or(usize::MAX));
            let mut taken = std::io::Read::take(&mut reader, room);
            match std::io::Read::read_to_end(&mut taken, &mut bytes) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => return Err(body_error(error, limit)),
            }
        }
        Ok((bytes, hold))
    }
}

/// Whether the answer is Server-Sent Events (a provider that does not stream answers
/// with one JSON body instead, read as such).
fn is_event_stream(response: &ureq::http::Response<ureq::Body>) -> bool {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// A status as messages show it: `HTTP 503 Service Unavailable`, or `HTTP 599`.
fn status_text(status: ureq::http::StatusCode) -> String {
    let code = status.as_u16();
    match status.canonical_reason() {
        Some(reason) => format!("HTTP {code} {reason}"),
        None => format!("HTTP {code}"),
    }
}

/// A 5xx (status `status_text`, body `bytes`): worth a retry, not before the pause its
/// `retry-after` header asks for, if any.
fn server_error(
    response: &ureq::http::Response<ureq::Body>,
    status_text: &str,
    bytes: &[u8],
) -> Attempt {
    let not_before = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    Attempt::Retry {
        what: format!("{status_text}: {}", quote(bytes)),
        not_before,
    }
}

/// Why an answer's body was not read.
enum BodyError {
    /// Longer than the largest answer read.
    TooLarge(u64),
    /// An answer of unknown length needed more room than the budget had left.
    NoRoom {
        read: u64,
        limit: u64,
    },
    /// No room came for it within the attempt's timeout.
    NoRoomInTime,
    Transport(ureq::Error),
}

/// A read error of the body: past the limit, or the transport's.
fn body_error(error: std::io::Error, limit: u64) -> BodyError {
    match ureq::Error::from(error) {
        ureq::Error::BodyExceedsLimit(_) => BodyError::TooLarge(limit),
        other => BodyError::Transport(other),
    }
}

/// A `ureq` error in words, without the text of the variants that may quote the
/// request's URL (ureq's own `Display` does for some).
fn describe(error: &ureq::Error) -> String {
    match error {
        ureq::Error::BadUri(_) => "the URL is not one the client can post to".to_owned(),
        ureq::Error::Http(_) => "the request could not be made".to_owned(),
        ureq::Error::RequireHttpsOnly(_) => "the client only posts to https:// URLs".to_owned(),
        ureq::Error::Io(io) => format!("io: {io}"),
        ureq::Error::Other(_) => "the client failed".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a message holding `text` shows for a configuration with base URL `base`.
    fn scrubbed(base: &str, text: &str) -> String {
        scrub(&secrets_of(&OpenAiConfig::new(base, "m")), text.to_owned())
    }

    /// A password holding `/`, `@`, `?` or `#` is scrubbed whole from a message, as
    /// the URL is shown ([`redact_url`]): the user info runs to the last `@` before any
    /// `?` or `#`, or to the last `@` of all when one comes after them.
    #[test]
    fn a_password_holding_url_delimiters_is_scrubbed_whole() {
        for (base, text, shown) in [
            (
                "http://user:ab/cd@h:1/v1",
                "dns error for user:ab/cd@h:1 (user:ab)",
                "dns error for ***@h:1 (user:ab)",
            ),
            (
                "http://user:a@b/c@h/v1",
                "bad authority user:a@b/c@h",
                "bad authority ***@h",
            ),
            (
                "http://user:ab?cd@h/v1",
                "invalid port `ab?cd@h` in user:ab?cd@h/v1",
                "invalid port `***@h` in ***@h/v1",
            ),
            (
                "http://user:ab#cd@h/v1",
                "invalid port in user:ab#cd@h and user:ab",
                "invalid port in ***@h and ***",
            ),
            (
                "http://h/v1?key=K&to=a@b",
                "GET h/v1?key=K&to=a@b.c",
                "GET ***@b.c",
            ),
        ] {
            assert_eq!(scrubbed(base, text), shown, "{base}");
        }
    }
}
