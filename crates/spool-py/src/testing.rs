//! `spool.testing.TestScheduler`: the core driven step by step in virtual time, with
//! mocks for the executors — spool's `TestScheduler` with Python agents.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use serde_json::Value;
use spool_core::{Kind, OutboundRequest, RequestError, Snapshot, TaskId, TaskRegistry};
use spool_exec::FunctionTools;
use spool_test::{Mock, TestScheduler};

use crate::convert::from_py;
use crate::executors::call_python;
use crate::registry::{AgentSpec, SubmitOptions, ToolSpec, registry, submitted};
use crate::runtime::PyConfirmation;
use crate::state::{config, state_to_py};

/// The test scheduler; see `spool.testing.TestScheduler`.
#[pyclass(unsendable, module = "spool._native", name = "TestScheduler")]
pub(crate) struct PyTestScheduler {
    inner: TestScheduler,
    registry: TaskRegistry,
    /// Kept so that the agents' `cx.spawn` finds the registry for as long as this lives.
    _cell: Arc<OnceLock<TaskRegistry>>,
    tools: Vec<(String, Value, Arc<Py<PyAny>>)>,
}

/// A mock's answers from Python: a callable (called with each request's payload), a
/// list (a script, in order; an exception in it a failed request), or one value.
fn mock_of(py: Python<'_>, answers: &Bound<'_, PyAny>) -> PyResult<Mock> {
    if answers.is_callable() {
        let func = Arc::new(answers.clone().unbind());
        return Ok(Mock::Fn(Box::new(move |request: &OutboundRequest| {
            call_python(&func, request.request.payload.value())
        })));
    }
    if let Ok(list) = answers.cast::<PyList>() {
        let mut script = VecDeque::new();
        for item in list.iter() {
            script.push_back(answer_of(py, &item)?);
        }
        return Ok(Mock::Script(script));
    }
    Ok(Mock::Fixed(from_py(answers)?))
}

/// One scripted answer: a value, or an exception as a failed request.
fn answer_of(py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<Result<Value, RequestError>> {
    if item.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        let err = PyErr::from_value(item.clone());
        return Ok(Err(crate::errors::request_error_of(py, &err)));
    }
    Ok(Ok(from_py(item)?))
}

/// Runs `f`, turning the test scheduler's replay check failing (a panic naming the
/// task and the poll where a Python task, replayed from its record, asked for something
/// else) into `spool.Nondeterminism`, and any other panic into `RuntimeError`.
fn checked<R>(py: Python<'_>, f: impl FnOnce() -> R) -> PyResult<R> {
    // The check's panic is this function's to report: the default hook would print it
    // (with a backtrace) on top of the exception.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "the test scheduler panicked".to_owned());
        match replayed_at(&message) {
            Some((task, poll)) => crate::errors::nondeterminism_text(py, task, poll, &message),
            None => PyRuntimeError::new_err(message),
        }
    })
}

/// `(task, poll)` from a message saying "task T does not replay: at poll P".
fn replayed_at(message: &str) -> Option<(u64, u64)> {
    const AT: &str = " does not replay: at poll ";
    let at = message.find(AT)?;
    let before = &message[..at];
    let task = &before[before.rfind("task ")? + 5..];
    let poll: String = message[at + AT.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((task.trim().parse().ok()?, poll.parse().ok()?))
}

fn kind(name: &str) -> PyResult<Kind> {
    name.parse::<Kind>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymethods]
impl PyTestScheduler {
    #[new]
    #[pyo3(signature = (agents, tools, policy=None, limits=None, check_replay=true))]
    fn new(
        py: Python<'_>,
        agents: Vec<AgentSpec>,
        tools: Vec<ToolSpec>,
        policy: Option<&str>,
        limits: Option<&Bound<'_, PyDict>>,
        check_replay: bool,
    ) -> PyResult<PyTestScheduler> {
        let (registry, cell) = registry(&agents, py)?;
        let mut inner = TestScheduler::with_config(config(policy, limits)?);
        // After each step the task polled is saved and replayed from its record: a
        // nondeterministic agent shows at the step where it parts.
        inner.check_round_trip(check_replay);
        PyTestScheduler::made(py, inner, (registry, cell), tools)
    }

    /// Answers LLM requests: a list (in order), a callable of the payload, or a value.
    fn mock_llm(&mut self, py: Python<'_>, answers: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.mock(Kind::Llm, mock_of(py, answers)?);
        Ok(())
    }

    /// Answers the tool `name` (instead of its Python function, if it has one).
    fn mock_tool(
        &mut self,
        py: Python<'_>,
        name: &str,
        answers: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.inner
            .mock(Kind::tool(name.to_owned()), mock_of(py, answers)?);
        Ok(())
    }

    /// Answers requests of `kind` (`"llm"`, `"tool:NAME"`, `"confirm"`, a custom kind),
    /// each `latency` seconds after it was asked, in virtual time.
    #[pyo3(signature = (kind, answers, latency=0.0))]
    fn mock(
        &mut self,
        py: Python<'_>,
        kind: &str,
        answers: &Bound<'_, PyAny>,
        latency: f64,
    ) -> PyResult<()> {
        let latency = crate::options::seconds("latency", latency)?;
        self.inner
            .mock_with_latency(self::kind(kind)?, mock_of(py, answers)?, latency);
        Ok(())
    }

    /// Holds every request of `kind` until the test answers it.
    fn hold(&mut self, kind: &str) -> PyResult<()> {
        self.inner.hold(self::kind(kind)?);
        Ok(())
    }

    /// Submits a task of `agent` with `input`; returns its id. It runs at the next step.
    #[pyo3(signature = (agent, input=None, *, priority=None, tenant=None, deadline=None, key=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        agent: &str,
        input: Option<&Bound<'_, PyAny>>,
        priority: Option<String>,
        tenant: Option<String>,
        deadline: Option<f64>,
        key: Option<String>,
    ) -> PyResult<u64> {
        let options = SubmitOptions {
            priority,
            tenant,
            deadline,
            key,
        };
        let task = submitted(&self.registry, agent, input, options)?;
        Ok(self.inner.submit(task).get())
    }

    /// Polls one ready task; `False` when none was ready.
    fn step(&mut self, py: Python<'_>) -> PyResult<bool> {
        checked(py, || self.inner.step())
    }

    /// Steps until no task is ready (time does not move); returns the steps taken.
    fn step_until_idle(&mut self, py: Python<'_>) -> PyResult<usize> {
        checked(py, || self.inner.step_until_idle())
    }

    /// Moves virtual time on by `seconds`, firing what falls due, and steps.
    fn advance(&mut self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let by = crate::options::seconds("advance", seconds)?;
        checked(py, || self.inner.advance(by))
    }

    /// Steps and moves time to each next timer until nothing is left to do but what
    /// waits on the test; returns the virtual time then, in seconds.
    fn run_until_quiet(&mut self, py: Python<'_>) -> PyResult<f64> {
        checked(py, || self.inner.run_until_quiet().as_nanos() as f64 / 1e9)
    }

    /// The virtual time, in seconds.
    fn now(&self) -> f64 {
        self.inner.now().as_nanos() as f64 / 1e9
    }

    /// The state of task `id` as `(state, detail)`; see `spool.Runtime.state`.
    fn state<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Bound<'py, PyAny>> {
        let state = self.inner.core().task_state(TaskId::from_raw(id));
        state_to_py(py, state.as_ref())
    }

    /// Cancels task `id` (and its children).
    fn cancel(&mut self, id: u64) -> PyResult<()> {
        self.inner
            .cancel(TaskId::from_raw(id))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The requests held for the test (held kinds, and confirmations), oldest first.
    fn held(&self) -> Vec<PyConfirmation> {
        self.inner
            .held_requests()
            .iter()
            .map(|h| PyConfirmation {
                key: h.request.key,
                question: h.request.request.payload.value().clone(),
            })
            .collect()
    }

    /// Answers a held request with `value` (an exception: a failed request).
    fn answer(
        &mut self,
        py: Python<'_>,
        held: &PyConfirmation,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        let result = answer_of(py, value)?;
        Ok(format!("{:?}", self.inner.respond(held.key, result)))
    }

    /// The trace: one line per event, as spool's `TestScheduler::trace` writes it.
    fn trace(&self) -> String {
        self.inner.trace()
    }

    /// The trace's events, one string each.
    fn trace_events(&self) -> Vec<String> {
        self.inner
            .trace_events()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// A hash of the trace: equal for equal runs.
    fn trace_hash(&self) -> u64 {
        self.inner.trace_hash()
    }

    /// The requests sent so far, in order: `(task, number, kind)`.
    fn sent<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for sent in self.inner.sent_requests() {
            list.append((
                sent.key.task().get(),
                sent.key.number(),
                sent.kind.to_string(),
            ))?;
        }
        Ok(list)
    }

    /// The whole scheduler as snapshot bytes.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let snapshot = checked(py, || self.inner.snapshot())?
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let bytes = snapshot
            .encode()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// A test scheduler restored from `snapshot` bytes with today's `agents`; mocks are
    /// not in a snapshot: set them again. An agent whose generator now yields something
    /// else than it recorded raises `spool.Nondeterminism`.
    #[staticmethod]
    #[pyo3(signature = (snapshot, agents, tools))]
    fn restore(
        py: Python<'_>,
        snapshot: &[u8],
        agents: Vec<AgentSpec>,
        tools: Vec<ToolSpec>,
    ) -> PyResult<PyTestScheduler> {
        let (registry, cell) = registry(&agents, py)?;
        let snapshot = Snapshot::decode(snapshot)
            .map_err(|e| PyValueError::new_err(format!("the snapshot does not read: {e}")))?;
        let inner = TestScheduler::restore(&snapshot, &registry).map_err(|e| match e {
            spool_core::RestoreError::Nondeterminism(n) => {
                crate::errors::replay_error(py, &spool_core::ReplayError::Nondeterminism(n))
            }
            other => PyValueError::new_err(format!("the snapshot does not restore: {other}")),
        })?;
        PyTestScheduler::made(py, inner, (registry, cell), tools)
    }
}

impl PyTestScheduler {
    /// `inner` with the agents of `registry` and the Python `tools` installed.
    fn made(
        py: Python<'_>,
        mut inner: TestScheduler,
        (registry, cell): (TaskRegistry, Arc<OnceLock<TaskRegistry>>),
        tools: Vec<ToolSpec>,
    ) -> PyResult<PyTestScheduler> {
        inner.set_registry(registry.clone());
        let tools = tools
            .into_iter()
            .map(|(name, schema, func, _)| Ok((name, from_py(schema.bind(py))?, Arc::new(func))))
            .collect::<PyResult<Vec<_>>>()?;
        let mut this = PyTestScheduler {
            inner,
            registry,
            _cell: cell,
            tools,
        };
        this.install_tools()?;
        Ok(this)
    }

    /// The Python tools, each as the executor of its kind (called on this thread).
    fn install_tools(&mut self) -> PyResult<()> {
        let mut functions = FunctionTools::new();
        for (name, schema, func) in &self.tools {
            let func = Arc::clone(func);
            functions = functions
                .register(name.clone(), schema.clone(), move |args: &Value| {
                    call_python(&func, args).map_err(|e| match e {
                        RequestError::Failed { message } => message,
                        other => other.to_string(),
                    })
                })
                .map_err(|e| PyValueError::new_err(format!("tool `{name}`: {e}")))?;
        }
        for (name, _, _) in &self.tools {
            self.inner
                .executor(Kind::tool(name.clone()), functions.clone());
        }
        Ok(())
    }
}
