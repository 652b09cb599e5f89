//! The OpenAI-compatible chat-completions executor: `POST {base}/v1/chat/completions`
//! with a blocking `ureq` client on the executor's own threads (no async runtime).
//!
//! What it does with each answer:
//!
//! - 2xx: the answer is normalized (see [`OpenAiExecutor`]) and its `usage.total_tokens`
//!   goes back to the scheduler's tokens-per-window limiter
//!   ([`Response::with_tokens_used`]); its tokens in and out, with the model asked
//!   for, go to the budgets (`Response::with_usage`, in `usage`).
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
//!
//! The answers being read hold at most [`OpenAiConfig::max_total_answer_bytes`] at once
//! across the executor's clones (`budget`). No message, log line or `Debug` output
//! shows the URL's credentials (user, password, query values) or the API key: the
//! URL is shown through [`redact_url`], and every message is scrubbed of them.
//!
//! The files: `config` (where and how hard to try), `executor` (the executor and its
//! request loop), `attempt` (one POST and what its answer means, the pause before a
//! retry), `body` (what is posted, what an answer is normalized to), `budget` (the
//! bytes the answers being read hold) and `retry_after` (the delay a 429 asks for).

mod attempt;
mod body;
mod budget;
mod config;
mod executor;
mod retry_after;
mod stream;
mod usage;

// For the links in the docs above.
#[cfg(doc)]
use spool_core::{RequestError, Response};

pub use body::quote_body;
pub use budget::AnswerBytes;
pub use config::{
    ConfigError, DEFAULT_MAX_TOTAL_ANSWER_BYTES, DEFAULT_REQUEST_KEY_HEADER,
    MAX_TOTAL_ANSWER_BYTES_VAR, OpenAiConfig, redact_url,
};
pub use executor::{AttemptCounts, OpenAiExecutor};
pub use retry_after::{parse_reset_duration, parse_retry_after, rate_limit_delay};
