//! The Python agents a runtime knows, as spool task types.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;
use spool_core::{NewTask, TaskRegistry};

use crate::agent::{AgentDef, drive};
use crate::convert::from_py;
use crate::options::{check_input, priority, seconds};

/// Task type names live as long as the process: spool's registry keys are
/// `&'static str`. Each distinct name is kept once, however many runtimes use it.
fn interned(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// An agent from Python: its name, its function, and its input schema (or `None`).
pub(crate) type AgentSpec = (String, Py<PyAny>, Option<Py<PyAny>>);

/// A tool from Python: its name, its argument schema, its function and its threads.
pub(crate) type ToolSpec = (String, Py<PyAny>, Py<PyAny>, usize);

/// The task types of `agents` (each `(name, function, input schema or None)`), and the
/// cell the agents' `cx.spawn` reads them from.
pub(crate) fn registry(
    agents: &[AgentSpec],
    py: Python<'_>,
) -> PyResult<(TaskRegistry, Arc<OnceLock<TaskRegistry>>)> {
    let cell: Arc<OnceLock<TaskRegistry>> = Arc::new(OnceLock::new());
    let mut registry = TaskRegistry::new();
    let mut seen = BTreeSet::new();
    for (name, func, schema) in agents {
        if name.is_empty() {
            return Err(PyValueError::new_err("an agent's name is empty"));
        }
        if !seen.insert(name.as_str()) {
            return Err(PyValueError::new_err(format!(
                "two agents are named `{name}`: give each its own name"
            )));
        }
        let name = interned(name);
        let def = Arc::new(AgentDef {
            name,
            func: func.clone_ref(py),
        });
        // Weak: the registry in the cell holds these closures, and the runtime that
        // owns the cell keeps it alive while it runs tasks.
        let spawn = Arc::downgrade(&cell);
        registry = registry.with_async(name, move |cx, input| {
            drive(cx, input, Arc::clone(&def), spawn.clone())
        });
        if let Some(schema) = schema {
            let schema = from_py(schema.bind(py))?;
            if !schema.is_null() {
                registry = registry.with_input_schema(name, schema);
            }
        }
    }
    // The runtime's copy and the agents' copy are clones: the makers are shared.
    let _ = cell.set(registry.clone());
    Ok((registry, cell))
}

/// A task of type `agent` made from `input`, with the options `submit` takes.
pub(crate) fn new_task(
    registry: &TaskRegistry,
    agent: &str,
    input: Value,
    options: &SubmitOptions,
) -> PyResult<NewTask> {
    if let Some(schema) = registry.input_schema(agent) {
        check_input(agent, schema, &input)?;
    }
    let body = registry
        .make(agent, &input)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut task = NewTask::boxed(body);
    if let Some(p) = &options.priority {
        task = task.priority(priority(p)?);
    }
    if let Some(tenant) = &options.tenant {
        task = task.agent(tenant.clone());
    }
    if let Some(d) = options.deadline {
        task = task.deadline(seconds("deadline", d)?);
    }
    if let Some(key) = &options.key {
        task = task.key(key.clone());
    }
    Ok(task)
}

/// A task of `agent` from `submit`'s arguments: the input (an object of the agent's
/// arguments; none is `{}`) and the options.
pub(crate) fn submitted(
    registry: &TaskRegistry,
    agent: &str,
    input: Option<&Bound<'_, PyAny>>,
    options: SubmitOptions,
) -> PyResult<NewTask> {
    let input = match input {
        Some(input) => from_py(input)?,
        None => Value::Object(Default::default()),
    };
    new_task(registry, agent, input, &options)
}

/// What `submit` takes besides the agent and its input.
#[derive(Debug, Default)]
pub(crate) struct SubmitOptions {
    pub(crate) priority: Option<String>,
    pub(crate) tenant: Option<String>,
    pub(crate) deadline: Option<f64>,
    pub(crate) key: Option<String>,
}
