//! What a Python agent yields, and the `cx` it makes them with.
//!
//! `cx.llm(...)`, `cx.tool(...)`, `cx.all(...)`, `cx.sleep(...)` only describe a step: the
//! agent yields (or awaits) the description and the driver in [`crate::agent`] turns it
//! into spool's own future, so that the requests a poll makes are numbered in the order
//! the agent yields them. `cx.spawn(...)` is the exception: a child starts when it is
//! spawned, as in Rust, and the agent yields its [`Child`] to wait for it.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;
use spool_core::{ChildHandle, Cx as CoreCx, Kind, NewTask, TaskRegistry};

use crate::convert::{from_py, to_py};
use crate::options::{priority, seconds};

/// A request an agent yields: its kind (`llm`, `tool:NAME`, `confirm`, or a custom
/// kind) and its payload.
#[pyclass(frozen, module = "spool._native", name = "Request")]
#[derive(Debug)]
pub(crate) struct PyRequest {
    pub(crate) kind: Kind,
    pub(crate) payload: Value,
}

#[pymethods]
impl PyRequest {
    /// The request's kind, as spool names it: `llm`, `tool:search`, `confirm`, ...
    #[getter]
    fn kind(&self) -> String {
        self.kind.to_string()
    }

    /// The request's payload, as JSON.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.payload)
    }

    fn __repr__(&self) -> String {
        format!("Request({}, {})", self.kind, self.payload)
    }

    fn __await__(slf: Bound<'_, Self>) -> Awaiting {
        Awaiting::new(slf.into_any().unbind())
    }
}

/// Several requests at once; the agent receives their answers as a list, in order.
#[pyclass(frozen, module = "spool._native", name = "All")]
#[derive(Debug)]
pub(crate) struct PyAll {
    pub(crate) requests: Vec<(Kind, Value)>,
    pub(crate) return_exceptions: bool,
}

#[pymethods]
impl PyAll {
    fn __repr__(&self) -> String {
        format!("All({} requests)", self.requests.len())
    }

    fn __await__(slf: Bound<'_, Self>) -> Awaiting {
        Awaiting::new(slf.into_any().unbind())
    }
}

/// A pause, in the scheduler's time (virtual under `TestScheduler`).
#[pyclass(frozen, module = "spool._native", name = "Sleep")]
#[derive(Debug)]
pub(crate) struct PySleep {
    pub(crate) duration: Duration,
}

#[pymethods]
impl PySleep {
    fn __repr__(&self) -> String {
        format!("Sleep({:?})", self.duration)
    }

    fn __await__(slf: Bound<'_, Self>) -> Awaiting {
        Awaiting::new(slf.into_any().unbind())
    }
}

/// A child task, running from the moment it was spawned. Yield (or await) it to wait
/// for its result; a child that failed raises its `TaskError` there.
#[pyclass(frozen, module = "spool._native", name = "Child")]
#[derive(Debug)]
pub(crate) struct PyChild {
    pub(crate) id: u64,
    pub(crate) handle: Mutex<Option<ChildHandle>>,
}

#[pymethods]
impl PyChild {
    /// The child's task id.
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    fn __repr__(&self) -> String {
        format!("Child({})", self.id)
    }

    fn __await__(slf: Bound<'_, Self>) -> Awaiting {
        Awaiting::new(slf.into_any().unbind())
    }
}

impl PyChild {
    /// Puts back the handle of a child that `join_any` waited on and that had not ended.
    pub(crate) fn give_back(&self, handle: ChildHandle) {
        if let Ok(mut slot) = self.handle.lock() {
            *slot = Some(handle);
        }
    }

    /// The handle to wait on; an error if the child was already waited for.
    pub(crate) fn take(&self) -> PyResult<ChildHandle> {
        let mut slot = self
            .handle
            .lock()
            .map_err(|_| PyRuntimeError::new_err("child handle poisoned"))?;
        slot.take().ok_or_else(|| {
            PyRuntimeError::new_err(format!(
                "child {} was already waited for: yield a child once",
                self.id
            ))
        })
    }
}

/// Waiting for several children: all of them (their results in order) or the first to
/// end (`(id, result)`).
#[pyclass(frozen, module = "spool._native", name = "Join")]
#[derive(Debug)]
pub(crate) struct PyJoin {
    pub(crate) children: Vec<Py<PyChild>>,
    pub(crate) any: bool,
}

#[pymethods]
impl PyJoin {
    fn __repr__(&self) -> String {
        let what = if self.any { "any" } else { "all" };
        format!("Join({what} of {} children)", self.children.len())
    }

    fn __await__(slf: Bound<'_, Self>) -> Awaiting {
        Awaiting::new(slf.into_any().unbind())
    }
}

/// What `await step` runs: yields the step once to the driver, then returns what the
/// driver sent back (or raises what it threw, which Python does for an iterator that
/// has no `throw`).
#[pyclass(module = "spool._native")]
#[derive(Debug)]
pub(crate) struct Awaiting {
    step: Option<Py<PyAny>>,
}

impl Awaiting {
    fn new(step: Py<PyAny>) -> Awaiting {
        Awaiting { step: Some(step) }
    }
}

#[pymethods]
impl Awaiting {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.send(py, py.None())
    }

    fn send(&mut self, py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
        match self.step.take() {
            Some(step) => Ok(step),
            None => {
                let _ = py;
                Err(PyStopIteration::new_err((value,)))
            }
        }
    }
}

/// The agent's handle on spool, passed as its first argument.
#[pyclass(frozen, module = "spool._native", name = "Cx")]
#[derive(Debug)]
pub(crate) struct PyCx {
    pub(crate) core: CoreCx,
    pub(crate) task: u64,
    pub(crate) registry: Arc<OnceLock<TaskRegistry>>,
}

/// A payload from a positional dict and keyword fields (not both).
fn payload(
    what: &str,
    given: Option<&Bound<'_, PyAny>>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Value> {
    match (given, fields.filter(|f| !f.is_empty())) {
        (Some(_), Some(_)) => Err(PyTypeError::new_err(format!(
            "{what}: give the payload as one value or as keyword fields, not both"
        ))),
        (Some(value), None) => from_py(value),
        (None, Some(fields)) => from_py(fields.as_any()),
        (None, None) => Ok(Value::Object(Default::default())),
    }
}

fn kind(name: &str) -> PyResult<Kind> {
    name.parse::<Kind>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymethods]
impl PyCx {
    /// Asks the model: `cx.llm(messages=[...], model=..., tools=[...])`, or one dict.
    #[pyo3(signature = (payload=None, **fields))]
    fn llm(
        &self,
        payload: Option<&Bound<'_, PyAny>>,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyRequest> {
        Ok(PyRequest {
            kind: Kind::Llm,
            payload: self::payload("cx.llm", payload, fields)?,
        })
    }

    /// Calls the tool `name` with `args` (a dict, or keyword arguments).
    #[pyo3(signature = (name, args=None, **fields))]
    fn tool(
        &self,
        name: &str,
        args: Option<&Bound<'_, PyAny>>,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyRequest> {
        if name.is_empty() {
            return Err(PyValueError::new_err("cx.tool: the tool's name is empty"));
        }
        Ok(PyRequest {
            kind: Kind::tool(name.to_owned()),
            payload: self::payload("cx.tool", args, fields)?,
        })
    }

    /// Asks a person: the answer is whatever they reply (`True`/`False` for a yes/no).
    fn confirm(&self, question: &Bound<'_, PyAny>) -> PyResult<PyRequest> {
        Ok(PyRequest {
            kind: Kind::Confirm,
            payload: from_py(question)?,
        })
    }

    /// A request of any kind (`"llm"`, `"tool:NAME"`, `"confirm"` or a custom kind
    /// that an executor serves).
    #[pyo3(signature = (kind, payload=None))]
    fn request(&self, kind: &str, payload: Option<&Bound<'_, PyAny>>) -> PyResult<PyRequest> {
        Ok(PyRequest {
            kind: self::kind(kind)?,
            payload: match payload {
                Some(p) => from_py(p)?,
                None => Value::Null,
            },
        })
    }

    /// Several requests at once: yields their answers as a list, in order. A failed
    /// request raises its `RequestError` (the first in order), unless
    /// `return_exceptions=True`, which puts each error in its place in the list.
    #[pyo3(signature = (requests, return_exceptions=false))]
    fn all(&self, requests: &Bound<'_, PyAny>, return_exceptions: bool) -> PyResult<PyAll> {
        let mut out = Vec::new();
        for item in requests.try_iter()? {
            let item = item?;
            let request = item.cast::<PyRequest>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "cx.all takes requests made by cx (cx.llm, cx.tool, ...), not {}",
                    item.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?;
            let request = request.get();
            out.push((request.kind.clone(), request.payload.clone()));
        }
        Ok(PyAll {
            requests: out,
            return_exceptions,
        })
    }

    /// A pause of `seconds`.
    fn sleep(&self, seconds: f64) -> PyResult<PySleep> {
        Ok(PySleep {
            duration: self::seconds("cx.sleep", seconds)?,
        })
    }

    /// Starts the agent `agent` as a child of this task, with `input` (a dict of its
    /// arguments). It runs from now on; yield the returned child to wait for it.
    #[pyo3(signature = (agent, input=None, *, priority=None, deadline=None, key=None))]
    fn spawn(
        &self,
        agent: &str,
        input: Option<&Bound<'_, PyAny>>,
        priority: Option<&str>,
        deadline: Option<f64>,
        key: Option<String>,
    ) -> PyResult<PyChild> {
        crate::stepping::in_step(self.task, "cx.spawn")?;
        let input = match input {
            Some(input) => from_py(input)?,
            None => Value::Object(Default::default()),
        };
        let registry = self
            .registry
            .get()
            .ok_or_else(|| PyRuntimeError::new_err("cx.spawn: the runtime is not ready"))?;
        if let Some(schema) = registry.input_schema(agent) {
            crate::options::check_input(agent, schema, &input)?;
        }
        let body = registry
            .make(agent, &input)
            .map_err(|e| PyValueError::new_err(format!("cx.spawn: {e}")))?;
        let mut task = NewTask::boxed(body);
        if let Some(p) = priority {
            task = task.priority(self::priority(p)?);
        }
        if let Some(d) = deadline {
            task = task.deadline(seconds("cx.spawn deadline", d)?);
        }
        if let Some(k) = key {
            task = task.key(k);
        }
        let handle = self.core.spawn(task);
        Ok(PyChild {
            id: handle.id().get(),
            handle: Mutex::new(Some(handle)),
        })
    }

    /// Waits for every child in `children`: yields their results, in order. A child
    /// that failed raises its `TaskError` (the first in order).
    fn join_all(&self, children: &Bound<'_, PyAny>) -> PyResult<PyJoin> {
        Ok(PyJoin {
            children: children_of(children)?,
            any: false,
        })
    }

    /// Waits for the first of `children` to end: yields `(id, result)`, or raises that
    /// child's `TaskError`.
    fn join_any(&self, children: &Bound<'_, PyAny>) -> PyResult<PyJoin> {
        Ok(PyJoin {
            children: children_of(children)?,
            any: true,
        })
    }

    /// The scheduler's time, in seconds from its start (virtual under `TestScheduler`).
    fn now(&self) -> PyResult<f64> {
        crate::stepping::in_step(self.task, "cx.now")?;
        Ok(self.core.now().as_nanos() as f64 / 1e9)
    }

    /// This task's id.
    #[getter]
    fn task_id(&self) -> u64 {
        self.task
    }

    /// Whether this run takes the new branch of the code change `name`: `True` in a
    /// run started by code that has the change, `False` in one replayed from a record
    /// made before it. The first answer for a name sticks for the task's life.
    fn patched(&self, name: &str) -> PyResult<bool> {
        crate::stepping::in_step(self.task, "cx.patched")?;
        Ok(self.core.patched(name))
    }

    fn __repr__(&self) -> String {
        format!("Cx(task {})", self.task)
    }
}

fn children_of(children: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyChild>>> {
    let mut out: Vec<Py<PyChild>> = Vec::new();
    for item in children.try_iter()? {
        let item = item?;
        let child = item.cast::<PyChild>().map_err(|_| {
            PyTypeError::new_err("join_all/join_any take children made by cx.spawn")
        })?;
        let id = child.get().id;
        if out.iter().any(|c| c.get().id == id) {
            return Err(PyValueError::new_err(format!(
                "child {id} is named twice: wait for each child once"
            )));
        }
        out.push(child.clone().unbind());
    }
    Ok(out)
}
