//! spool's errors as Python exceptions, and Python exceptions as a task's error.
//!
//! The exception classes live in `spool/_errors.py`; an exception made from a spool error
//! carries that error's JSON in `_spool_json`, so an exception the agent lets through
//! ends the task with the very error spool gave it (a `RequestError` as
//! [`TaskError::RequestFailed`], a child's `TaskError` as itself). Any other exception
//! ends the task [`TaskError::Failed`] with its type and message — not where it was
//! raised, which moves with every edit of the file while a replay must find the same
//! ending; the traceback goes to the `spool` logger instead.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use spool_core::{RequestError, TaskError};

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("spool._errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// An exception made by `spool._errors.FACTORY(json, message)`; a failure to make it
/// is returned in its place (it says what went wrong, too).
fn made(py: Python<'_>, factory: &str, json: String, message: String) -> PyErr {
    let attempt = || -> PyResult<PyErr> {
        let exception = module(py)?.getattr(factory)?.call1((json, message))?;
        Ok(PyErr::from_value(exception))
    };
    attempt().unwrap_or_else(|e| e)
}

/// `error` as a `spool.RequestError` (the subclass for its kind).
pub(crate) fn request_error(py: Python<'_>, error: &RequestError) -> PyErr {
    let json = serde_json::to_string(error).unwrap_or_default();
    made(py, "_request_error", json, error.to_string())
}

/// `error` as a `spool.TaskError` (the subclass for its kind).
pub(crate) fn task_error(py: Python<'_>, error: &TaskError) -> PyErr {
    let json = serde_json::to_string(error).unwrap_or_default();
    made(py, "_task_error", json, error.to_string())
}

/// The error a task ends with when its code raises `err`.
pub(crate) fn into_task_error(py: Python<'_>, err: PyErr) -> TaskError {
    let value = err.value(py);
    if let Ok(json) = value.getattr("_spool_json")
        && let Ok(text) = json.extract::<String>()
    {
        let kind = value
            .getattr("_spool_what")
            .ok()
            .and_then(|k| k.extract::<String>().ok());
        match kind.as_deref() {
            Some("request") => {
                if let Ok(error) = serde_json::from_str::<RequestError>(&text) {
                    return TaskError::RequestFailed { error };
                }
            }
            Some("task") => {
                if let Ok(error) = serde_json::from_str::<TaskError>(&text) {
                    return error;
                }
            }
            _ => {}
        }
    }
    log_traceback(py, &err);
    TaskError::failed(describe_plain(py, &err))
}

/// Logs `err` with its traceback to Python's `spool` logger, at WARNING.
fn log_traceback(py: Python<'_>, err: &PyErr) {
    let attempt = || -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("spool",))?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("exc_info", err.value(py))?;
        logger.call_method(
            "warning",
            ("an agent raised %s", describe_plain(py, err)),
            Some(&kwargs),
        )?;
        Ok(())
    };
    if let Err(e) = attempt() {
        e.write_unraisable(py, None);
    }
}

/// `TypeName: message` for a Python exception.
pub(crate) fn describe_plain(py: Python<'_>, err: &PyErr) -> String {
    let type_name = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let message = err
        .value(py)
        .str()
        .map(|s| s.to_string())
        .unwrap_or_default();
    if message.is_empty() {
        type_name
    } else {
        format!("{type_name}: {message}")
    }
}

/// `TypeName: message (file:line in function)` for a Python exception.
pub(crate) fn describe(py: Python<'_>, err: &PyErr) -> String {
    let mut text = describe_plain(py, err);
    if let Some(place) = raised_at(py, err) {
        text.push_str(&format!(" ({place})"));
    }
    text
}

/// Where the exception was raised: the innermost frame of its traceback.
fn raised_at(py: Python<'_>, err: &PyErr) -> Option<String> {
    let traceback = err.traceback(py)?;
    let frames = py
        .import("traceback")
        .ok()?
        .getattr("extract_tb")
        .ok()?
        .call1((traceback,))
        .ok()?;
    let last = frames.get_item(-1).ok()?;
    let file: String = last.getattr("filename").ok()?.extract().ok()?;
    let line: u64 = last.getattr("lineno").ok()?.extract().ok()?;
    let name: String = last.getattr("name").ok()?.extract().ok()?;
    let file = std::path::Path::new(&file)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or(file);
    Some(format!("{file}:{line} in {name}"))
}

/// A store that could not be opened, read or written: `spool.StoreError`.
pub(crate) fn store_error(message: &str) -> PyErr {
    Python::attach(|py| made(py, "_store_error", String::new(), message.to_owned()))
}

/// A store (or journal) that does not replay with today's agents: `spool.Nondeterminism`
/// when an agent asks for something else than it recorded, else `spool.ReplayError`.
pub(crate) fn replay_error(py: Python<'_>, error: &spool_core::ReplayError) -> PyErr {
    if let spool_core::ReplayError::Nondeterminism(n) = error {
        // The request that differs, from how the record shows it ("request 2 llm ...").
        let request = n.recorded.iter().chain(&n.got).find_map(|shown| {
            shown
                .strip_prefix("request ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        });
        let json = serde_json::json!({
            "task": n.task.get(),
            "step": n.step,
            "request": request,
            "recorded": n.recorded.join("; "),
            "got": n.got.join("; "),
        });
        return made(py, "_nondeterminism", json.to_string(), n.to_string());
    }
    made(py, "_replay_error", String::new(), error.to_string())
}

/// Today's code asks for something else than a store recorded: `spool.Nondeterminism`.
pub(crate) fn divergence(py: Python<'_>, d: &spool_core::StepDivergence) -> PyErr {
    let json = serde_json::json!({
        "task": d.task.get(),
        "step": d.step,
        "request": d.request,
        "recorded": d.recorded,
        "got": d.got,
    });
    made(py, "_nondeterminism", json.to_string(), d.to_string())
}

/// The request error an exception stands for: a `spool.RequestError`'s own (a
/// `spool.RateLimited` is a 429 spool backs off from), else a failure saying the
/// exception's type, message and where it was raised.
pub(crate) fn request_error_of(py: Python<'_>, err: &PyErr) -> RequestError {
    let value = err.value(py);
    if let Ok(what) = value.getattr("_spool_what")
        && what.extract::<String>().is_ok_and(|w| w == "request")
        && let Ok(json) = value.getattr("_spool_json")
        && let Ok(text) = json.extract::<String>()
        && let Ok(error) = serde_json::from_str::<RequestError>(&text)
    {
        return error;
    }
    RequestError::failed(describe(py, err))
}

/// `spool.Nondeterminism` for task `task` at poll `poll`, with `message` as its words.
pub(crate) fn nondeterminism_text(py: Python<'_>, task: u64, poll: u64, message: &str) -> PyErr {
    let json = serde_json::json!({
        "task": task,
        "step": poll,
        "request": null,
        "recorded": "",
        "got": "",
    });
    made(py, "_nondeterminism", json.to_string(), message.to_owned())
}
