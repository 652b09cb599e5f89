//! Values from Python that several parts take: priorities, seconds, and an agent's
//! input checked against its schema.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;
use spool_core::Priority;

/// A priority from Python: `"low"`, `"normal"`, `"high"`, `"critical"`.
pub(crate) fn priority(name: &str) -> PyResult<Priority> {
    Ok(match name {
        "low" => Priority::Low,
        "normal" => Priority::Normal,
        "high" => Priority::High,
        "critical" => Priority::Critical,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown priority {other:?}: use \"low\", \"normal\", \"high\" or \"critical\""
            )));
        }
    })
}

/// Seconds from Python as a duration; a negative or non-finite number is refused.
pub(crate) fn seconds(what: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite number of seconds, at least 0; got {value}"
        ))
    })
}

/// Checks `input` against the agent's input schema (from its type hints).
pub(crate) fn check_input(agent: &str, schema: &Value, input: &Value) -> PyResult<()> {
    let schema = spool_exec::Schema::new(schema.clone())
        .map_err(|e| PyValueError::new_err(format!("agent `{agent}`: {e}")))?;
    schema.check(input).map_err(|violations| {
        let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
        PyValueError::new_err(format!(
            "the input of `{agent}` does not fit its parameters: {}",
            listed.join("; ")
        ))
    })
}
