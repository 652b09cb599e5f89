//! A runtime on a store, as `spool run` and the `spool schedule` commands open it: the
//! store (its lock taken), what it holds recovered, the built-in task types for runs,
//! and every input journaled to it.

use std::fmt;
use std::path::Path;
use std::process::ExitCode;

use spool_core::{Journal, Scheduler};

use crate::limits::{Described, Limits, same_limits};
use spool_runtime::{Runtime, RuntimeBuilder};
use spool_store::Store;

use crate::demo::registry;

/// Journal entries between two checkpoints of a store.
const CHECKPOINT_EVERY: u64 = 500;

/// Why a command failed: its message, and the exit status it gives.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The command line does not fit (exit status 2, as clap's own errors).
    Usage(String),
    /// It could not do what it was asked (exit status 1); nothing was changed.
    Failed(String),
}

impl Failure {
    /// Prints the message, prefixed with `command`, and gives the exit status. The
    /// message may quote text from outside (a reason a run could not start): its
    /// control characters are written visibly.
    pub(crate) fn report(&self, command: &str) -> ExitCode {
        eprintln!("{command}: {}", crate::terminal::safe(&self.to_string()));
        match self {
            Failure::Usage(_) => ExitCode::from(2),
            Failure::Failed(_) => ExitCode::FAILURE,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(message) | Failure::Failed(message) => f.write_str(message),
        }
    }
}

/// A failure to run, with `what` said before `error`.
pub(crate) fn failed(what: &str, error: impl fmt::Display) -> Failure {
    Failure::Failed(format!("{what}: {error}"))
}

/// Opens the store at `path` (creating it) and builds a runtime on it with `builder`:
/// it goes on from what the store holds, makes schedules' runs of the built-in task
/// types, tells the core the wall clock, and journals every input to the store.
pub(crate) fn open_runtime(path: &Path, builder: RuntimeBuilder) -> Result<Runtime, Failure> {
    let (store, journal) = open_store(path)?;
    let mut builder = builder.registry(registry());
    if let Some(journal) = &journal {
        builder = builder
            .recover(journal, &registry())
            .map_err(|e| failed("cannot go on from the store", e))?;
    }
    journaled(builder, store)
}

/// As [`open_runtime`], under `limits` (which `builder` is configured with). A store
/// keeps the limits it runs under (they are in its snapshots, and a replay of its
/// journal needs them): without limit options it goes on under them; with options that
/// differ, they replace them if no task is live, and are refused if one is.
pub(crate) fn open_limited(
    path: &Path,
    builder: RuntimeBuilder,
    limits: &Limits,
) -> Result<Runtime, Failure> {
    if !limits.given {
        return open_runtime(path, builder);
    }
    let (store, journal) = open_store(path)?;
    let mut builder = builder.registry(registry());
    if let Some(journal) = &journal {
        let mut core = Scheduler::replay(journal, &registry())
            .map_err(|e| failed("cannot go on from the store", e))?
            .scheduler;
        if same_limits(&core, limits) {
            builder = builder.recover_from(core, &registry());
        } else {
            let old = Described(core.task_limits(), core.request_limits()).to_string();
            core.record_trace(false);
            core.trace_mut().take_events();
            let snapshot = core
                .snapshot()
                .map_err(|e| failed("cannot go on from the store", e))?;
            let Some(changed) = snapshot.with_limits(limits.tasks.clone(), limits.requests.clone())
            else {
                return Err(Failure::Failed(format!(
                    "the store {} has {} live tasks, started under {old}; limits change only \
                     when no task is live: start it without limit options (it keeps its \
                     limits) and let its tasks end, or use another store",
                    path.display(),
                    core.live_len()
                )));
            };
            tracing::info!(
                "the store {} ran under {old}; from now on under the options given",
                path.display()
            );
            builder = builder
                .restore(&changed, &registry())
                .map_err(|e| failed("cannot go on from the store", e))?;
        }
    }
    journaled(builder, store)
}

/// Opens the store at `path` (creating it) and reads what it holds.
fn open_store(path: &Path) -> Result<(Store, Option<Journal>), Failure> {
    let store = Store::open(path).map_err(|e| failed("cannot open the store", e))?;
    let journal = store
        .recover()
        .map_err(|e| failed("cannot read the store", e))?;
    Ok((store, journal))
}

/// Builds the runtime journaling to `store`, checkpointing every [`CHECKPOINT_EVERY`]
/// entries.
fn journaled(builder: RuntimeBuilder, store: Store) -> Result<Runtime, Failure> {
    builder
        .journal(store)
        .checkpoint_every(CHECKPOINT_EVERY)
        .try_build()
        .map_err(|e| failed("cannot start the runtime", e))
}

/// Reads the store at `path` without writing to it: the scheduler as of its last entry
/// (an empty one for a new store).
pub(crate) fn read_scheduler(path: &Path) -> Result<Scheduler, Failure> {
    if !path.exists() {
        return Err(Failure::Failed(format!(
            "there is no store at {}",
            path.display()
        )));
    }
    let store = Store::open(path).map_err(|e| failed("cannot open the store", e))?;
    match store
        .recover()
        .map_err(|e| failed("cannot read the store", e))?
    {
        None => Ok(Scheduler::new(spool_core::Config::new())),
        Some(journal) => Scheduler::replay(&journal, &registry())
            .map(|replay| replay.scheduler)
            .map_err(|e| failed("cannot read the store", e)),
    }
}
