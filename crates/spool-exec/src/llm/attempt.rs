//! One request's attempts: the state an executor's clones share, one POST and what its
//! answer means (an answer, or a retry), the jittered pause before a retry, and the
//! cancel signals looked at in between.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use spool_core::{RequestError, RequestKey, Response};

use super::body::{AnswerError, normalize, quote};
use super::config::OpenAiConfig;
use super::retry_after::{parse_retry_after, rate_limit_delay};

/// The largest answer body read, in bytes; a larger one is `Malformed`.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// The longest slice a retry's pause sleeps before it looks for a cancel signal.
const CANCEL_CHECK: Duration = Duration::from_millis(25);

/// What an executor and its clones share: one connection pool, one set of cancel
/// signals, one set of counts.
pub(super) struct Shared {
    pub(super) config: OpenAiConfig,
    pub(super) endpoint: String,
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

impl Shared {
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

    pub(super) fn attempt(&self, key: RequestKey, body: &[u8]) -> Attempt {
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
