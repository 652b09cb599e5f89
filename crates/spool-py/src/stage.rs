//! Where a Python runtime's loop is — not built, idle, running, serving, closed — and
//! how a call reaches it from any Python thread without deadlocking on the GIL.
//!
//! The lock on the stage is only ever held for a moment: a run takes the runtime out
//! and leaves a handle behind, so calls from other threads while it runs (or serves) go
//! through the handle to the loop, with the GIL let go while they wait. The loop runs on
//! a thread of its own while the calling thread waits for it, the GIL let go, checking
//! for signals: Ctrl-C stops the run and raises `KeyboardInterrupt` in the caller,
//! rather than inside an agent's code (where it would become the task's failure).

use std::sync::{Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use spool_runtime::{RunReport, Runtime, RuntimeBuilder, RuntimeHandle};

/// Where the loop is.
pub(crate) enum Stage {
    /// Not built yet (built by the first use; `serve` builds it with views).
    Building(RuntimeBuilder),
    /// Built, and not running: calls go to it directly.
    Idle(Runtime),
    /// Taken out by a run on some thread: calls go through its handle.
    Running(RuntimeHandle),
    /// Running on a thread of its own, under an HTTP server.
    Serving {
        handle: RuntimeHandle,
        server: Option<spool_http::Server>,
        thread: Option<JoinHandle<Runtime>>,
    },
    /// Closed.
    Closed,
}

/// The stage behind its lock.
pub(crate) struct Stages(Mutex<Stage>);

pub(crate) fn closed() -> PyErr {
    PyRuntimeError::new_err("the runtime is closed")
}

pub(crate) fn failed(what: &str, error: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("{what}: {error}"))
}

/// How long a run waits between looks at the signals.
const SIGNALS_EVERY: Duration = Duration::from_millis(100);

/// How a run ends: when idle, or not; by a deadline, or not.
#[derive(Copy, Clone, Debug)]
pub(crate) struct RunUntil {
    pub(crate) idle: bool,
    pub(crate) deadline: Option<Instant>,
}

impl Stages {
    pub(crate) fn new(builder: RuntimeBuilder) -> Stages {
        Stages(Mutex::new(Stage::Building(builder)))
    }

    /// The stage, locked. The lock is only held for a moment by anyone, so a thread that
    /// finds it taken waits with the GIL let go.
    pub(crate) fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Stage>> {
        loop {
            match self.0.try_lock() {
                Ok(stage) => return Ok(stage),
                Err(TryLockError::Poisoned(_)) => return Err(closed()),
                Err(TryLockError::WouldBlock) => {
                    py.detach(|| std::thread::sleep(Duration::from_micros(200)))
                }
            }
        }
    }

    /// Builds the runtime if it was not, leaving it idle.
    fn build(stage: &mut Stage) -> PyResult<()> {
        if let Stage::Building(_) = stage {
            let Stage::Building(builder) = std::mem::replace(stage, Stage::Closed) else {
                return Err(closed());
            };
            *stage = Stage::Idle(builder.try_build().map_err(|e| failed("cannot start", e))?);
        }
        Ok(())
    }

    /// Runs `direct` on the idle runtime (building it first if need be), or `via` on a
    /// handle to the loop when it runs elsewhere, the GIL let go while it waits.
    /// `direct` must be quick and must not call Python.
    pub(crate) fn on_loop<R: Send>(
        &self,
        py: Python<'_>,
        direct: impl FnOnce(&mut Runtime) -> PyResult<R>,
        via: impl FnOnce(&RuntimeHandle) -> PyResult<R> + Send,
    ) -> PyResult<R> {
        let handle = {
            let mut stage = self.lock(py)?;
            Self::build(&mut stage)?;
            match &mut *stage {
                Stage::Idle(runtime) => return direct(runtime),
                Stage::Running(handle) | Stage::Serving { handle, .. } => handle.clone(),
                Stage::Building(_) | Stage::Closed => return Err(closed()),
            }
        };
        py.detach(|| via(&handle))
    }

    /// Runs the loop on a thread of its own until `until` says, this thread waiting
    /// without the GIL and looking at the signals: a signal's exception (Ctrl-C's
    /// `KeyboardInterrupt`) stops the run and is raised here once the loop has stopped.
    pub(crate) fn run(
        &self,
        py: Python<'_>,
        until: RunUntil,
    ) -> PyResult<(RunReport, Option<String>)> {
        let mut runtime = {
            let mut stage = self.lock(py)?;
            Self::build(&mut stage)?;
            match std::mem::replace(&mut *stage, Stage::Closed) {
                Stage::Idle(runtime) => {
                    *stage = Stage::Running(runtime.handle());
                    runtime
                }
                other @ Stage::Running(_) => {
                    *stage = other;
                    return Err(PyRuntimeError::new_err(
                        "the runtime is running already (on another thread): one run at a time",
                    ));
                }
                other @ Stage::Serving { .. } => {
                    *stage = other;
                    return Err(PyRuntimeError::new_err(
                        "the runtime is serving: its loop runs on its own thread until \
                         the server stops",
                    ));
                }
                Stage::Building(_) | Stage::Closed => return Err(closed()),
            }
        };
        let handle = runtime.handle();
        let (done, finished) = crossbeam_channel::bounded::<()>(1);
        let worker = std::thread::Builder::new()
            .name("spool-loop".into())
            .spawn(move || {
                let report = match (until.idle, until.deadline) {
                    (true, None) => runtime.run_until_idle(),
                    (true, Some(at)) => runtime.run_until_idle_by(at),
                    (false, Some(at)) => runtime.run_until(at),
                    (false, None) => runtime.run(),
                };
                let _ = done.send(());
                (runtime, report)
            })
            .map_err(|e| failed("cannot start the loop", e))?;
        let mut interrupted = None;
        loop {
            match py.detach(|| finished.recv_timeout(SIGNALS_EVERY)) {
                Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if interrupted.is_none()
                        && let Err(signal) = py.check_signals()
                    {
                        // The loop stops at its next turn; what it took in is kept.
                        let _ = handle.shutdown();
                        interrupted = Some(signal);
                    }
                }
            }
        }
        let joined = py.detach(|| worker.join());
        let mut stage = self.lock(py)?;
        let (runtime, report) = match joined {
            Ok(done) => done,
            Err(_) => {
                *stage = Stage::Closed;
                return Err(PyRuntimeError::new_err(
                    "the runtime's loop panicked; the runtime is closed (a store keeps what \
                     it was given)",
                ));
            }
        };
        let journal_error = runtime.journal_error().map(ToString::to_string);
        if matches!(*stage, Stage::Closed) {
            // Closed by another thread while it ran: it stays closed.
            drop(stage);
            py.detach(move || drop(runtime));
        } else {
            *stage = Stage::Idle(runtime);
            drop(stage);
        }
        match interrupted {
            Some(signal) => Err(signal),
            None => Ok((report, journal_error)),
        }
    }

    /// Takes the builder to serve with, or says why the runtime cannot serve now.
    pub(crate) fn take_builder(&self, py: Python<'_>) -> PyResult<RuntimeBuilder> {
        let mut stage = self.lock(py)?;
        match std::mem::replace(&mut *stage, Stage::Closed) {
            Stage::Building(builder) => Ok(builder),
            other => {
                *stage = other;
                Err(PyRuntimeError::new_err(
                    "serve must be called before the runtime is first used (submit, a run, \
                     state, schedules): the HTTP API's views are set up when it is built",
                ))
            }
        }
    }

    /// Puts a stage back (a served runtime, or a built one whose server did not start).
    pub(crate) fn set(&self, py: Python<'_>, to: Stage) -> PyResult<()> {
        *self.lock(py)? = to;
        Ok(())
    }

    /// Closes: stops a served runtime's server and loop, drops the runtime (its
    /// executors and its writer, which flushes the store). Returns the store's failure,
    /// if it had one. A running loop is asked to stop, and left to its run.
    pub(crate) fn close(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let stage = std::mem::replace(&mut *self.lock(py)?, Stage::Closed);
        Ok(stop(py, stage))
    }

    /// As [`close`](Stages::close), for a drop: without Python's errors.
    pub(crate) fn close_on_drop(&mut self) {
        let stage = match self.0.get_mut() {
            Ok(stage) => std::mem::replace(stage, Stage::Closed),
            Err(_) => return,
        };
        if matches!(stage, Stage::Closed) {
            return;
        }
        Python::attach(|py| {
            stop(py, stage);
        });
    }
}

/// Stops what `stage` holds with the GIL let go (executor threads may be waiting for it
/// to call a Python tool, and stopping waits for them).
fn stop(py: Python<'_>, stage: Stage) -> Option<String> {
    // A builder holds no threads (and a run in progress has the runtime): nothing to do.
    let (idle, serving, running) = match stage {
        Stage::Idle(runtime) => (Some(runtime), None, None),
        Stage::Serving {
            handle,
            server,
            thread,
        } => (None, Some((handle, server, thread)), None),
        Stage::Running(handle) => (None, None, Some(handle)),
        Stage::Building(_) | Stage::Closed => (None, None, None),
    };
    py.detach(move || {
        if let Some(handle) = running {
            let _ = handle.shutdown();
        }
        let mut idle = idle;
        let mut error = idle.as_mut().and_then(last_checkpoint);
        drop(idle);
        if let Some((handle, server, thread)) = serving {
            let _ = handle.shutdown();
            let mut runtime = thread.and_then(|t| t.join().ok());
            error = runtime.as_mut().and_then(last_checkpoint);
            // The runtime goes before the server: a request still waiting on the loop
            // is answered 503 rather than waiting for ever.
            drop(runtime);
            if let Some(server) = server {
                server.shutdown();
            }
        }
        error
    })
}

/// Writes a last checkpoint before a runtime on a store closes, and says the store's
/// failure if it has one. The checkpoint keeps each live Python task's record of what it
/// asked — the request it waits on too, which the journal does not hold — so that code
/// changed at that request is found when the store is opened again.
fn last_checkpoint(runtime: &mut Runtime) -> Option<String> {
    if let Some(error) = runtime.journal_error() {
        return Some(error.to_string());
    }
    runtime.checkpoint().err().map(|e| e.to_string())
}
