//! `spool.Runtime`: the threaded runtime with Python agents, in memory or on a store.
//!
//! The runtime is built when it is first used: `serve` needs the views the HTTP API
//! reads published from the loop, which must be asked for before the loop is built, so
//! a runtime that is served is built by `serve`, and any other by its first `submit` or
//! run. Recovery happens at construction, so that a store that does not replay fails
//! there.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;
use spool_core::{Config, RequestKey, Scheduler, TaskId, TaskRegistry};
use spool_durable::DurableStore;
use spool_runtime::{Runtime, RuntimeHandle};

use crate::convert::{from_py, to_py};
use crate::errors::{replay_error, store_error};
use crate::executors::{PyExecutor, ToolDef, install};
use crate::options::seconds;
use crate::registry::{AgentSpec, SubmitOptions, ToolSpec, registry, submitted};
use crate::schedules;
use crate::stage::{RunUntil, Stage, Stages, closed, failed};
use crate::state::{config, state_to_py};

/// What a store of Python agents records as its maker: another program's store (a
/// `spool run` store, an application's) is refused, and they refuse this one.
const MAKER: &str = "spool for Python";

/// Journal entries between two checkpoints of a store.
const CHECKPOINT_EVERY: u64 = 500;

/// The runtime; see `spool.Runtime`.
#[pyclass(module = "spool._native", name = "Runtime")]
pub(crate) struct PyRuntime {
    stages: Stages,
    registry: TaskRegistry,
    /// Where the agents' `cx.spawn` finds the registry; kept for as long as this lives.
    _cell: Arc<OnceLock<TaskRegistry>>,
    /// The store, kept for its name; dropped by `close`, which lets it go (its lock too).
    store: Mutex<Option<Arc<dyn DurableStore>>>,
}

/// A confirmation a task waits for; answer it with `Runtime.answer`.
#[pyclass(frozen, module = "spool._native", name = "Confirmation")]
#[derive(Debug)]
pub(crate) struct PyConfirmation {
    pub(crate) key: RequestKey,
    pub(crate) question: Value,
}

#[pymethods]
impl PyConfirmation {
    /// The task that asks.
    #[getter]
    fn task(&self) -> u64 {
        self.key.task().get()
    }

    /// The request's number within the task.
    #[getter]
    fn request(&self) -> u32 {
        self.key.number()
    }

    /// The question.
    #[getter]
    fn question<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.question)
    }

    fn __repr__(&self) -> String {
        format!(
            "Confirmation(task={}, request={}, question={})",
            self.key.task(),
            self.key.number(),
            self.question
        )
    }
}

impl PyRuntime {
    /// Runs `direct` on the idle runtime or `via` on a handle to its loop; refused from
    /// an agent's own code (it would wait for itself).
    fn on_loop<R: Send>(
        &self,
        py: Python<'_>,
        direct: impl FnOnce(&mut Runtime) -> PyResult<R>,
        via: impl FnOnce(&RuntimeHandle) -> PyResult<R> + Send,
    ) -> PyResult<R> {
        crate::stepping::not_from_an_agent("the runtime")?;
        self.stages.on_loop(py, direct, via)
    }

    /// Runs the loop until `until` says; the report as a dict.
    fn run<'py>(&self, py: Python<'py>, until: RunUntil) -> PyResult<Bound<'py, PyDict>> {
        crate::stepping::not_from_an_agent("the runtime")?;
        let (report, journal_error) = self.stages.run(py, until)?;
        if let Some(error) = journal_error {
            return Err(store_error(&format!("the store failed: {error}")));
        }
        let out = PyDict::new(py);
        out.set_item("steps", report.steps)?;
        out.set_item("elapsed", report.elapsed.as_secs_f64())?;
        Ok(out)
    }
}

impl Drop for PyRuntime {
    /// A runtime collected without `close` is closed here, the GIL let go while it
    /// stops: its executor threads may be waiting for the GIL to call a Python tool.
    fn drop(&mut self) {
        self.stages.close_on_drop();
        let store = self.store.get_mut().ok().and_then(Option::take);
        if store.is_some() {
            Python::attach(|py| py.detach(move || drop(store)));
        }
    }
}

#[pymethods]
impl PyRuntime {
    #[new]
    #[pyo3(signature = (agents, tools, executors, store=None, postgres=None, policy=None, limits=None, checkpoint_every=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        agents: Vec<AgentSpec>,
        tools: Vec<ToolSpec>,
        executors: Vec<Py<PyExecutor>>,
        store: Option<std::path::PathBuf>,
        postgres: Option<String>,
        policy: Option<&str>,
        limits: Option<&Bound<'_, PyDict>>,
        checkpoint_every: Option<u64>,
    ) -> PyResult<PyRuntime> {
        let (registry, cell) = registry(&agents, py)?;
        let tools = tools
            .into_iter()
            .map(|(name, schema, func, workers)| {
                Ok(ToolDef {
                    name,
                    schema: from_py(schema.bind(py))?,
                    func: Arc::new(func),
                    workers,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let config: Config = config(policy, limits)?;
        let mut builder = Runtime::builder().config(config).registry(registry.clone());
        builder = install(builder, &tools, &executors, py)?;
        let store: Option<Arc<dyn DurableStore>> = match (store, postgres) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "give a store file or a PostgreSQL URL, not both",
                ));
            }
            (Some(path), None) => Some(Arc::from(
                py.detach(|| spool_store::Store::open(&path))
                    .map(|s| Box::new(s) as Box<dyn DurableStore>)
                    .map_err(|e| store_error(&e.to_string()))?,
            )),
            (None, Some(url)) => Some(Arc::from(
                py.detach(|| spool_postgres::PgStore::connect(&url))
                    .map(|s| Box::new(s) as Box<dyn DurableStore>)
                    .map_err(|e| store_error(&e.to_string()))?,
            )),
            (None, None) => None,
        };
        if let Some(store) = &store {
            let maker = py
                .detach(|| store.claim_maker(MAKER))
                .map_err(|e| store_error(&e.to_string()))?;
            if maker != MAKER {
                return Err(store_error(&format!(
                    "{} was made by {maker}, not by {MAKER}: use a store of its own",
                    store.name()
                )));
            }
            let journal = py
                .detach(|| store.recover())
                .map_err(|e| store_error(&e.to_string()))?;
            if let Some(journal) = journal {
                // Today's agents are checked against what the store recorded first: a
                // generator that now yields something else fails here, naming the step.
                let report = Scheduler::check_journal(&journal, &registry)
                    .map_err(|e| replay_error(py, &e))?;
                if let Some(divergence) = report.divergence {
                    return Err(crate::errors::divergence(py, &divergence));
                }
                builder = builder
                    .recover(&journal, &registry)
                    .map_err(|e| replay_error(py, &e))?;
            }
            builder = builder
                .journal(store.sink())
                .checkpoint_every(checkpoint_every.unwrap_or(CHECKPOINT_EVERY));
        }
        Ok(PyRuntime {
            stages: Stages::new(builder),
            registry,
            _cell: cell,
            store: Mutex::new(store),
        })
    }

    /// Submits a task of the agent `agent` with `input`; returns its id.
    #[pyo3(signature = (agent, input=None, *, priority=None, tenant=None, deadline=None, key=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        py: Python<'_>,
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
        // The task goes to whichever side runs; `via` is only called when `direct` is not.
        let task = Mutex::new(Some(task));
        let take = || {
            task.lock()
                .ok()
                .and_then(|mut t| t.take())
                .ok_or_else(closed)
        };
        let submission = self.on_loop(
            py,
            |rt| rt.submit(take()?).map_err(|e| failed("cannot submit", e)),
            |handle| {
                handle
                    .submit(take()?)
                    .map_err(|e| failed("cannot submit", e))
            },
        )?;
        Ok(submission.id.get())
    }

    /// Runs the loop until no task can make progress (every task ended, or waiting on
    /// a confirmation), or until `timeout` seconds have passed; returns what it did.
    #[pyo3(signature = (timeout=None))]
    fn run_until_idle<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let deadline = match timeout {
            Some(t) => Some(Instant::now() + seconds("timeout", t)?),
            None => None,
        };
        self.run(
            py,
            RunUntil {
                idle: true,
                deadline,
            },
        )
    }

    /// Runs the loop for `seconds` (timers and schedules fire in real time meanwhile).
    fn run_for<'py>(&self, py: Python<'py>, seconds: f64) -> PyResult<Bound<'py, PyDict>> {
        let deadline = Instant::now() + crate::options::seconds("seconds", seconds)?;
        self.run(
            py,
            RunUntil {
                idle: false,
                deadline: Some(deadline),
            },
        )
    }

    /// The state of task `id`: `(state, value)` — see `spool.Runtime.state`.
    fn state<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Bound<'py, PyAny>> {
        let id_ = TaskId::from_raw(id);
        let state = self.on_loop(
            py,
            |rt| Ok(rt.task_state(id_)),
            |handle| {
                handle
                    .query(move |rt: &Runtime| rt.task_state(id_))
                    .map_err(|e| failed("cannot read the task", e))
            },
        )?;
        state_to_py(py, state.as_ref())
    }

    /// Cancels task `id` (and its children).
    fn cancel(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        let id = TaskId::from_raw(id);
        self.on_loop(
            py,
            |rt| rt.cancel(id).map_err(|e| failed("cannot cancel", e)),
            |handle| handle.cancel(id).map_err(|e| failed("cannot cancel", e)),
        )
    }

    /// The confirmations tasks wait for.
    fn confirmations(&self, py: Python<'_>) -> PyResult<Vec<PyConfirmation>> {
        let pending = self.on_loop(
            py,
            |rt| Ok(rt.pending_confirmations().to_vec()),
            |handle| {
                handle
                    .pending_confirmations()
                    .map_err(|e| failed("cannot read confirmations", e))
            },
        )?;
        Ok(pending
            .into_iter()
            .map(|p| PyConfirmation {
                key: p.key,
                question: p.question,
            })
            .collect())
    }

    /// Answers a confirmation with `value`.
    fn answer(
        &self,
        py: Python<'_>,
        confirmation: &PyConfirmation,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let value = from_py(value)?;
        let key = confirmation.key;
        // Answering does not wait for the loop: the answer is taken at its next turn.
        let handle = self.on_loop(py, |rt| Ok(rt.handle()), |handle| Ok(handle.clone()))?;
        handle
            .answer(key, value)
            .map_err(|e| failed("cannot answer", e))
    }

    /// Makes (or replaces) the schedule `slug` that starts `agent` with `input`: at the
    /// times of `cron` (in `tz`), every `every` seconds, or once `at` an instant.
    /// Returns whether it was made (`False`: replaced).
    #[pyo3(signature = (slug, agent, input=None, *, cron=None, tz=None, every=None, at=None, session=None, overlap=None, tenant=None, priority=None, enabled=true, pause_after_failures=None))]
    #[allow(clippy::too_many_arguments)]
    fn schedule(
        &self,
        py: Python<'_>,
        slug: String,
        agent: String,
        input: Option<&Bound<'_, PyAny>>,
        cron: Option<String>,
        tz: Option<String>,
        every: Option<f64>,
        at: Option<String>,
        session: Option<String>,
        overlap: Option<String>,
        tenant: Option<String>,
        priority: Option<String>,
        enabled: bool,
        pause_after_failures: Option<u32>,
    ) -> PyResult<bool> {
        let given = schedules::Given {
            slug,
            agent,
            input: schedules::input_of(input)?,
            cron,
            tz,
            every,
            at,
            session,
            overlap,
            tenant,
            priority,
            enabled,
            pause_after_failures,
        };
        let def = schedules::definition(given, &self.registry)?;
        let def = Mutex::new(Some(def));
        let take = || {
            def.lock()
                .ok()
                .and_then(|mut d| d.take())
                .ok_or_else(closed)
        };
        self.on_loop(
            py,
            |rt| {
                rt.put_schedule(take()?)
                    .map_err(|e| failed("cannot schedule", e))
            },
            |handle| {
                handle
                    .put_schedule(take()?)
                    .map_err(|e| failed("cannot schedule", e))
            },
        )
    }

    /// Every schedule, with its status (as the HTTP API shows them).
    fn schedules<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let all = self.on_loop(
            py,
            |rt| Ok(rt.schedules()),
            |handle| {
                handle
                    .schedules()
                    .map_err(|e| failed("cannot read schedules", e))
            },
        )?;
        all.iter().map(|info| schedules::as_py(py, info)).collect()
    }

    /// Deletes, pauses, resumes or runs now (`what`) the schedule `slug`.
    fn schedule_do(&self, py: Python<'_>, what: &str, slug: String) -> PyResult<()> {
        let fail = |e: &dyn std::fmt::Display| failed(&format!("cannot {what} `{slug}`"), e);
        let direct = |rt: &mut Runtime| {
            match what {
                "delete" => rt.delete_schedule(&slug),
                "pause" => rt.pause_schedule(&slug),
                "resume" => rt.resume_schedule(&slug),
                _ => rt.trigger_schedule(&slug).map(|_| ()),
            }
            .map_err(|e| fail(&e))
        };
        let via = |handle: &RuntimeHandle| {
            match what {
                "delete" => handle.delete_schedule(&slug),
                "pause" => handle.pause_schedule(&slug),
                "resume" => handle.resume_schedule(&slug),
                _ => handle.trigger_schedule(&slug).map(|_| ()),
            }
            .map_err(|e| fail(&e))
        };
        if !matches!(what, "delete" | "pause" | "resume" | "run") {
            return Err(PyValueError::new_err(format!(
                "unknown schedule action {what:?}"
            )));
        }
        self.on_loop(py, direct, via)
    }

    /// Serves the HTTP API on `addr` with `token`, the loop on a thread of its own;
    /// returns the address it listens on.
    #[pyo3(signature = (addr, token))]
    fn serve(&self, py: Python<'_>, addr: &str, token: String) -> PyResult<String> {
        crate::stepping::not_from_an_agent("the runtime")?;
        let addr: SocketAddr = addr
            .parse()
            .map_err(|e| PyValueError::new_err(format!("address {addr:?}: {e}")))?;
        let builder = self.stages.take_builder(py)?;
        let (builder, views) = spool_http::publish_views(
            builder,
            spool_http::DEFAULT_PUBLISH_EVERY,
            spool_http::DEFAULT_EVENT_RING,
        );
        let (builder, deltas) = spool_http::publish_deltas(builder, spool_http::DEFAULT_DELTA_RING);
        let mut runtime = match builder.try_build() {
            Ok(runtime) => runtime,
            Err(e) => {
                self.stages.set(py, Stage::Closed)?;
                return Err(failed("cannot start", e));
            }
        };
        let handle = runtime.handle();
        let state = spool_http::AppState::new(handle.clone(), self.registry.clone(), views, token)
            .map_err(|e| failed("cannot set up the API", e))?
            .with_deltas(deltas);
        let server = match py.detach(|| spool_http::Server::builder().addr(addr).start(state)) {
            Ok(server) => server,
            Err(e) => {
                // Still usable: run it, or serve again on another address.
                self.stages.set(py, Stage::Idle(runtime))?;
                return Err(failed("cannot serve", e));
            }
        };
        let bound = server.addr();
        let thread = std::thread::Builder::new()
            .name("spool-loop".into())
            .spawn(move || {
                runtime.run();
                runtime
            })
            .map_err(|e| failed("cannot start the loop", e))?;
        self.stages.set(
            py,
            Stage::Serving {
                handle,
                server: Some(server),
                thread: Some(thread),
            },
        )?;
        Ok(bound.to_string())
    }

    /// Stops the runtime: a served one stops its server and its loop; what the store
    /// holds is flushed. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        crate::stepping::not_from_an_agent("the runtime")?;
        let error = self.stages.close(py)?;
        // The store goes last, after the runtime's writer has flushed into it.
        let store = self.store.lock().ok().and_then(|mut s| s.take());
        py.detach(|| drop(store));
        match error {
            Some(error) => Err(store_error(&format!("the store failed: {error}"))),
            None => Ok(()),
        }
    }

    /// The store's name (its path or URL without password), if it has one.
    #[getter]
    fn store_name(&self) -> Option<String> {
        self.store
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.name()))
    }

    /// The names of the agents it runs.
    #[getter]
    fn agents(&self) -> Vec<String> {
        self.registry
            .type_names()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }
}
