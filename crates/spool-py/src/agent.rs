//! A Python agent as a spool task: its generator (or coroutine) driven by a Rust future.
//!
//! The future is an async task made with `AsyncTask::replayable`, registered with
//! `TaskRegistry::with_async`: spool keeps its input and what each poll received, and
//! after a restart makes the generator again from the input and feeds it the recorded
//! answers — so a Python task is as durable as a Rust one, and a generator that now
//! yields something else than was recorded fails the restore with the core's
//! `Nondeterminism`, naming the poll.
//!
//! Each step takes the GIL for as long as the agent's own code runs: the driver sends
//! the previous answer in, the agent runs to its next `yield`, and the driver turns what
//! it yielded into spool's future and lets go of the GIL while spool waits.

use std::sync::{Arc, OnceLock, Weak};

use pyo3::exceptions::{PyStopIteration, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde_json::Value;
use spool_core::{
    ChildHandle, Cx, Kind, Outcome, Request, RequestError, TaskError, TaskId, TaskRegistry,
};

use crate::convert::{from_py, to_py};
use crate::cx::{PyAll, PyChild, PyCx, PyJoin, PyRequest, PySleep};
use crate::errors;
use crate::stepping::Stepping;

/// A Python agent: its name and the function that makes its generator.
#[derive(Debug)]
pub(crate) struct AgentDef {
    pub(crate) name: &'static str,
    pub(crate) func: Py<PyAny>,
}

/// What the agent yielded, taken out of Python.
enum Yielded {
    Request(Kind, Value),
    All(Vec<(Kind, Value)>, bool),
    Sleep(std::time::Duration),
    Join(ChildHandle),
    JoinAll(Vec<ChildHandle>),
    JoinAny(Vec<Py<PyChild>>, Vec<ChildHandle>),
}

/// Where the agent is after a step.
enum Advanced {
    Yielded(Yielded),
    Returned(Value),
    Failed(TaskError),
    /// The agent yielded something spool cannot run: thrown back into it at once.
    Refused(PyErr),
}

/// What the agent is given back at its next step.
enum Resume {
    Value(Value),
    Request(Result<Value, RequestError>),
    All(Vec<Result<Value, RequestError>>, bool),
    Child(Outcome),
    Children(Vec<Outcome>),
    Any(Option<(TaskId, Outcome)>),
    Throw(PyErr),
}

/// The generator, closed when the task ends or is dropped (canceled), so its `finally`
/// blocks run then, with the GIL.
struct Running(Option<Py<PyAny>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(generator) = self.0.take() {
            Python::attach(|py| {
                let _closing = Stepping::enter(u64::MAX);
                if let Err(e) = generator.bind(py).call_method0("close") {
                    e.write_unraisable(py, Some(generator.bind(py)));
                }
            });
        }
    }
}

/// The task: runs `def` on `input` until it returns.
pub(crate) async fn drive(
    cx: Cx,
    input: Value,
    def: Arc<AgentDef>,
    registry: Weak<OnceLock<TaskRegistry>>,
) -> Outcome {
    let Some(registry) = registry.upgrade() else {
        return Err(TaskError::failed("the runtime that made this task is gone"));
    };
    let task = cx.task_id().get();
    let generator = match Python::attach(|py| {
        let _stepping = Stepping::enter(task);
        start(py, &def, cx, &input, registry)
    }) {
        Started::Returned(outcome) => return outcome,
        Started::Running(generator) => Running(Some(generator)),
    };
    let mut resume = Resume::Value(Value::Null);
    loop {
        let step = Python::attach(|py| {
            let _stepping = Stepping::enter(task);
            let generator = generator.0.as_ref().map(|g| g.bind(py));
            match generator {
                Some(generator) => advance(py, generator, resume),
                None => Advanced::Failed(TaskError::failed("the agent's generator is gone")),
            }
        });
        resume = match step {
            Advanced::Returned(value) => return Ok(value),
            Advanced::Failed(error) => return Err(error),
            Advanced::Refused(error) => Resume::Throw(error),
            Advanced::Yielded(Yielded::Request(kind, payload)) => {
                Resume::Request(cx.request(Request::new(kind, payload)).await)
            }
            Advanced::Yielded(Yielded::All(requests, return_exceptions)) => {
                let futures = requests
                    .into_iter()
                    .map(|(kind, payload)| cx.request(Request::new(kind, payload)))
                    .collect();
                Resume::All(cx.all(futures).await, return_exceptions)
            }
            Advanced::Yielded(Yielded::Sleep(duration)) => {
                cx.sleep(duration).await;
                Resume::Value(Value::Null)
            }
            Advanced::Yielded(Yielded::Join(child)) => Resume::Child(child.await),
            Advanced::Yielded(Yielded::JoinAll(children)) => {
                Resume::Children(cx.join_all(children).await)
            }
            Advanced::Yielded(Yielded::JoinAny(owners, children)) => {
                let mut join = cx.join_any(children);
                let ended = (&mut join).await;
                // The children that had not ended can be waited for again.
                let ended_id = ended.as_ref().map(|(id, _)| *id);
                Python::attach(|py| {
                    for (owner, handle) in owners.iter().zip(join.into_children()) {
                        if Some(handle.id()) != ended_id {
                            owner.bind(py).get().give_back(handle);
                        }
                    }
                });
                Resume::Any(ended)
            }
        };
    }
}

enum Started {
    Returned(Outcome),
    Running(Py<PyAny>),
}

/// Calls the agent's function with its `cx` and its input (an object's fields as keyword
/// arguments; `null` as none; anything else as one argument).
fn start(
    py: Python<'_>,
    def: &AgentDef,
    cx: Cx,
    input: &Value,
    registry: Arc<OnceLock<TaskRegistry>>,
) -> Started {
    let call = || -> PyResult<Bound<'_, PyAny>> {
        let pycx = Bound::new(
            py,
            PyCx {
                core: cx,
                task: cx.task_id().get(),
                registry,
            },
        )?;
        let func = def.func.bind(py);
        match input {
            Value::Object(fields) => {
                let kwargs = PyDict::new(py);
                for (k, v) in fields {
                    kwargs.set_item(k, to_py(py, v)?)?;
                }
                func.call((pycx,), Some(&kwargs))
            }
            Value::Null => func.call1((pycx,)),
            other => func.call1((pycx, to_py(py, other)?)),
        }
    };
    match call() {
        Err(e) => Started::Returned(Err(errors::into_task_error(py, e))),
        Ok(made) => {
            let is_coroutine =
                made.hasattr("send").unwrap_or(false) && made.hasattr("throw").unwrap_or(false);
            if is_coroutine {
                Started::Running(made.unbind())
            } else {
                // A plain function: its return value is the result.
                Started::Returned(from_py(&made).map_err(|e| {
                    TaskError::failed(format!(
                        "agent `{}` returned a value that is not JSON: {}",
                        def.name,
                        errors::describe_plain(py, &e)
                    ))
                }))
            }
        }
    }
}

/// Sends `resume` into the generator and reads what it does next.
fn advance(py: Python<'_>, generator: &Bound<'_, PyAny>, resume: Resume) -> Advanced {
    let sent = match resumed(py, resume) {
        Ok(value) => generator.call_method1("send", (value,)),
        Err(exception) => generator.call_method1("throw", (exception.into_value(py),)),
    };
    match sent {
        Ok(yielded) => match read(&yielded) {
            Ok(yielded) => Advanced::Yielded(yielded),
            Err(refused) => Advanced::Refused(refused),
        },
        Err(e) if e.is_instance_of::<PyStopIteration>(py) => {
            let value = e
                .value(py)
                .getattr("value")
                .unwrap_or_else(|_| py.None().into_bound(py));
            match from_py(&value) {
                Ok(value) => Advanced::Returned(value),
                Err(e) => Advanced::Failed(TaskError::failed(format!(
                    "the agent returned a value that is not JSON: {}",
                    errors::describe_plain(py, &e)
                ))),
            }
        }
        Err(e) => Advanced::Failed(errors::into_task_error(py, e)),
    }
}

/// The Python value to send in, or the exception to throw in.
fn resumed(py: Python<'_>, resume: Resume) -> Result<Bound<'_, PyAny>, PyErr> {
    let value = |v: &Value| to_py(py, v);
    let outcome = |o: &Outcome| match o {
        Ok(v) => value(v),
        Err(e) => Err(errors::task_error(py, e)),
    };
    match resume {
        Resume::Value(v) => value(&v),
        Resume::Request(Ok(v)) => value(&v),
        Resume::Request(Err(e)) => Err(errors::request_error(py, &e)),
        Resume::All(results, return_exceptions) => {
            let list = PyList::empty(py);
            for result in &results {
                match result {
                    Ok(v) => list.append(value(v)?)?,
                    Err(e) if return_exceptions => {
                        list.append(errors::request_error(py, e).into_value(py))?
                    }
                    Err(e) => return Err(errors::request_error(py, e)),
                }
            }
            Ok(list.into_any())
        }
        Resume::Child(o) => outcome(&o),
        Resume::Children(outcomes) => {
            let list = PyList::empty(py);
            for o in &outcomes {
                list.append(outcome(o)?)?;
            }
            Ok(list.into_any())
        }
        Resume::Any(None) => Ok(py.None().into_bound(py)),
        Resume::Any(Some((id, o))) => {
            let result = outcome(&o)?;
            Ok(PyTuple::new(py, [id.get().into_pyobject(py)?.into_any(), result])?.into_any())
        }
        Resume::Throw(e) => Err(e),
    }
}

/// What the agent yielded, or the `TypeError` to throw back when it is not a step.
fn read(yielded: &Bound<'_, PyAny>) -> Result<Yielded, PyErr> {
    if let Ok(request) = yielded.cast::<PyRequest>() {
        let request = request.get();
        return Ok(Yielded::Request(
            request.kind.clone(),
            request.payload.clone(),
        ));
    }
    if let Ok(all) = yielded.cast::<PyAll>() {
        let all = all.get();
        return Ok(Yielded::All(all.requests.clone(), all.return_exceptions));
    }
    if let Ok(sleep) = yielded.cast::<PySleep>() {
        return Ok(Yielded::Sleep(sleep.get().duration));
    }
    if let Ok(child) = yielded.cast::<PyChild>() {
        return Ok(Yielded::Join(child.get().take()?));
    }
    if let Ok(join) = yielded.cast::<PyJoin>() {
        let join = join.get();
        let py = yielded.py();
        let handles = join
            .children
            .iter()
            .map(|c| c.bind(py).get().take())
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(if join.any {
            Yielded::JoinAny(
                join.children.iter().map(|c| c.clone_ref(py)).collect(),
                handles,
            )
        } else {
            Yielded::JoinAll(handles)
        });
    }
    // Its type, not its repr: a repr may hold an address, and this message may become
    // the task's failure, which a replay must find the same.
    let shown = yielded
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Err(PyTypeError::new_err(format!(
        "an agent yields what its cx makes (cx.llm, cx.tool, cx.confirm, cx.all, cx.sleep, a \
         child from cx.spawn), not a value of type `{shown}`"
    )))
}
