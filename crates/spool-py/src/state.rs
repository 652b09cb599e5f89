//! Configuration from Python (policy and limits) and task states to Python.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use spool_core::{Config, Kind, PolicyChoice, RequestLimits, TaskLimits, TaskState};

use crate::convert::to_py;
use crate::errors;
use crate::options::seconds;

/// The scheduler's configuration from a policy name and a dict of limits (see
/// `spool.Limits`, which makes the dict).
pub(crate) fn config(policy: Option<&str>, limits: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    let mut config = Config::new();
    if let Some(policy) = policy {
        config = config.policy(match policy {
            "fifo" => PolicyChoice::Fifo,
            "priority" => PolicyChoice::Priority,
            "fair-share" | "fair_share" | "fair" => PolicyChoice::FairShare,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown policy {other:?}: use \"fifo\", \"priority\" or \"fair-share\""
                )));
            }
        });
    }
    let Some(limits) = limits else {
        return Ok(config);
    };
    let mut tasks = TaskLimits::new();
    let mut requests = RequestLimits::new();
    for (key, value) in limits.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        match key.as_str() {
            "max_running" => tasks = tasks.max_running(value.extract()?),
            "max_running_per_agent" => tasks = tasks.max_running_per_agent(value.extract()?),
            "max_queued" => tasks = tasks.max_queued(value.extract()?),
            "per_agent_in_flight" => requests = requests.per_agent_in_flight(value.extract()?),
            "in_flight" => {
                for (kind, max) in per_kind(&value)? {
                    requests = requests.max_in_flight(kind, max.extract()?);
                }
            }
            "rate" => {
                for (kind, pair) in per_kind(&value)? {
                    let (max, per) = window(&key, &pair)?;
                    requests = requests.window(kind, max, per);
                }
            }
            "tokens" => {
                for (kind, pair) in per_kind(&value)? {
                    let (max, per): (u64, f64) = pair.extract()?;
                    requests = requests.tokens(kind, max, seconds("tokens window", per)?);
                }
            }
            other => {
                return Err(PyValueError::new_err(format!("unknown limit {other:?}")));
            }
        }
    }
    Ok(config.limits(tasks).requests(requests))
}

/// `{kind: value}` with each kind read as spool names it (`llm`, `tool:search`, ...).
fn per_kind<'py>(value: &Bound<'py, PyAny>) -> PyResult<Vec<(Kind, Bound<'py, PyAny>)>> {
    let dict = value
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("a per-kind limit is a dict of kind to value"))?;
    let mut out = Vec::new();
    for (kind, v) in dict.iter() {
        let kind: String = kind.extract()?;
        let kind = kind
            .parse::<Kind>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        out.push((kind, v));
    }
    Ok(out)
}

fn window(what: &str, pair: &Bound<'_, PyAny>) -> PyResult<(u32, Duration)> {
    let (max, per): (u32, f64) = pair.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: give (requests, per seconds), as (60, 60.0)"
        ))
    })?;
    Ok((max, seconds(what, per)?))
}

/// A task's state as `(name, detail)`: `("completed", value)`, `("failed", TaskError)`,
/// `("canceled", reason)`, `("waiting", reason)`, `("ready", None)`, `("running", None)`,
/// or `("unknown", None)` for an id the runtime does not know (or no longer keeps).
pub(crate) fn state_to_py<'py>(
    py: Python<'py>,
    state: Option<&TaskState>,
) -> PyResult<Bound<'py, PyAny>> {
    let (name, detail): (&str, Bound<'py, PyAny>) = match state {
        None => ("unknown", py.None().into_bound(py)),
        Some(TaskState::Ready) => ("ready", py.None().into_bound(py)),
        Some(TaskState::Running) => ("running", py.None().into_bound(py)),
        Some(TaskState::Waiting(reason)) => {
            ("waiting", reason.to_string().into_pyobject(py)?.into_any())
        }
        Some(TaskState::Completed(Ok(value))) => ("completed", to_py(py, value)?),
        Some(TaskState::Completed(Err(error))) => (
            "failed",
            errors::task_error(py, error)
                .into_value(py)
                .into_bound(py)
                .into_any(),
        ),
        Some(TaskState::Canceled(reason)) => {
            ("canceled", reason.to_string().into_pyobject(py)?.into_any())
        }
    };
    Ok(PyTuple::new(py, [name.into_pyobject(py)?.into_any(), detail])?.into_any())
}
