//! spool for Python: the extension module `spool._native`.
//!
//! Python agents are generators (or coroutines) that yield what their `cx` makes; each
//! is a spool task type whose future drives the generator (module `agent`), so the
//! scheduler, limits, journal, stores, server and test scheduler are spool's own. The
//! Python package (`python/spool`) wraps these classes with its decorators, type hints
//! and docstrings; see `docs/python.md`.

mod agent;
mod convert;
mod cx;
mod errors;
mod executors;
mod options;
mod registry;
mod runtime;
mod schedules;
mod stage;
mod state;
mod stepping;
mod testing;

use pyo3::prelude::*;

/// The module `spool._native`.
#[pymodule(gil_used = true)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<cx::PyCx>()?;
    m.add_class::<cx::PyRequest>()?;
    m.add_class::<cx::PyAll>()?;
    m.add_class::<cx::PySleep>()?;
    m.add_class::<cx::PyChild>()?;
    m.add_class::<cx::PyJoin>()?;
    m.add_class::<executors::PyExecutor>()?;
    m.add_class::<runtime::PyRuntime>()?;
    m.add_class::<runtime::PyConfirmation>()?;
    m.add_class::<testing::PyTestScheduler>()?;
    m.add_function(wrap_pyfunction!(executors::openai, m)?)?;
    m.add_function(wrap_pyfunction!(executors::subprocess, m)?)?;
    m.add_function(wrap_pyfunction!(executors::mcp, m)?)?;
    m.add_function(wrap_pyfunction!(executors::executor, m)?)?;
    m.add_function(wrap_pyfunction!(executors::fixed, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
