//! Real executors for spool, plugged into the runtime's channels:
//!
//! - [`OpenAiExecutor`]: an OpenAI-compatible chat-completions LLM over HTTP (a
//!   blocking `ureq` client on the executor's own threads, no async runtime);
//! - [`ProcessTool`]: a tool that runs a command, with a timeout, output caps and the
//!   whole process group killed when the work is canceled;
//! - [`FunctionTools`]: Rust closures as tools, their arguments checked against a JSON
//!   schema before they run.
//!
//! Each reports failures as typed [`RequestError`](spool_core::RequestError)s that the
//! task receives and can act on; none panics on what a server or a process sends back.

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod function;
mod llm;
mod process;
mod schema;

pub use function::FunctionTools;
pub use llm::{
    AnswerBytes, AttemptCounts, ConfigError, DEFAULT_MAX_TOTAL_ANSWER_BYTES,
    DEFAULT_REQUEST_KEY_HEADER, MAX_TOTAL_ANSWER_BYTES_VAR, OpenAiConfig, OpenAiExecutor,
    parse_reset_duration, parse_retry_after, quote_body, rate_limit_delay, redact_url,
};
pub use process::{ProcessConfig, ProcessTool};
pub use schema::{Schema, SchemaError, Violation};

/// A JSON value's type, for error messages ("expected a string, got a number").
pub(crate) fn json_type(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
