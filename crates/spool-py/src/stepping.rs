//! Which task's agent code runs on this thread now: `cx` works only inside its own
//! task's step, and a runtime refuses calls from the code of agents it runs.

use std::cell::Cell;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

thread_local! {
    /// The task whose agent code runs on this thread now (0: none; `u64::MAX`: an
    /// agent's code outside a step, as a `finally` run when its generator is closed).
    static STEPPING: Cell<u64> = const { Cell::new(0) };
}

/// Marks agent code running on this thread for as long as it lives.
pub(crate) struct Stepping(u64);

impl Stepping {
    pub(crate) fn enter(task: u64) -> Stepping {
        Stepping(STEPPING.with(|s| s.replace(task)))
    }
}

impl Drop for Stepping {
    fn drop(&mut self) {
        STEPPING.with(|s| s.set(self.0));
    }
}

/// Refused from an agent's own code: `what` (the runtime running it) would wait for the
/// step that calls it, for ever.
pub(crate) fn not_from_an_agent(what: &str) -> PyResult<()> {
    if STEPPING.with(Cell::get) == 0 {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(format!(
        "an agent's code cannot call {what} that runs it (it would wait for itself): \
         make requests with cx, and start more work with cx.spawn"
    )))
}

/// Refused outside task `task`'s own step: `cx` only works while its task runs.
pub(crate) fn in_step(task: u64, what: &str) -> PyResult<()> {
    if STEPPING.with(Cell::get) == task {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(format!(
        "{what} works only while task {task} runs a step (inside its agent's code), not \
         from another thread, a stored cx, or a finally run when the task is closed"
    )))
}
