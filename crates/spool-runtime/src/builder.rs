//! `RuntimeBuilder`: a runtime's configuration, starting point, journal and executors.

use std::collections::VecDeque;
use std::fmt;

use crossbeam_channel::{Receiver, Sender};

use spool_core::{
    Config, Executor, Journal, JournalSink, Kind, PolicyChoice, ReplayError, RestoreError,
    Scheduler, Snapshot, TaskRegistry,
};

use crate::clock::{Clock, WallClock};
use crate::error::RuntimeError;
use crate::progress::{Progress, ProgressRoute};
use crate::run_loop::journaling::{JournalSettings, Journaling};
use crate::run_loop::observe::{Observer, Observing};
use crate::run_loop::publish::{Publication, Publisher};
use crate::run_loop::{Inbound, Runtime};
use crate::worker::{Executors, Factory, Route};

/// The environment variable that turns the round-trip check on when `1` or `true`
/// ([`RuntimeBuilder::check_round_trip`]).
pub(crate) const CHECK_ROUND_TRIP_VAR: &str = "SPOOL_CHECK_ROUND_TRIP";

/// How long a runtime keeps an ended task's result unless configured otherwise.
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(600);

/// Sets up a [`Runtime`]: its configuration, policy and executors.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::Kind;
/// use spool_runtime::{Runtime, from_fn};
///
/// let runtime = Runtime::builder()
///     .executor(Kind::Llm, from_fn(|_req| Ok(json!("hello"))))
///     .executor(Kind::tool("ls"), from_fn(|_req| Ok(json!(["a.txt"]))))
///     .build();
/// ```
pub struct RuntimeBuilder {
    config: Config,
    start: Option<Scheduler>,
    journal: Option<Box<dyn JournalSink>>,
    journal_trace: bool,
    checkpoint_every: Option<u64>,
    check_round_trip: bool,
    executors: Vec<(Route, String, usize, Factory)>,
    flush_at: usize,
    /// The task types schedules make their runs of, and whether the embedder gave
    /// them (then the wall clock is told at start, for the schedules to come).
    registry: Option<TaskRegistry>,
    registry_given: bool,
    wall_clock: WallClock,
    publisher: Option<Publisher>,
    /// Who watches the loop ([`RuntimeBuilder::observe`]).
    observer: Option<Box<dyn Observer>>,
    /// The embedder's session trimmer, given to the core (and to a replay).
    session_trimmer: Option<std::sync::Arc<dyn spool_core::SessionTrimmer>>,
    /// The watchers of the executors' progress ([`RuntimeBuilder::on_progress`]).
    progress: Vec<crate::progress::Watcher>,
    /// The store tasks' histories are read from ([`RuntimeBuilder::history`]).
    pub(crate) history_store: Option<std::sync::Arc<dyn spool_durable::DurableStore>>,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("config", &self.config)
            .field(
                "executors",
                &self.executors.iter().map(|e| &e.1).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// The scheduler's configuration.
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Token and cost budgets on LLM requests (see [`Budgets`](spool_core::Budgets));
    /// the same as setting them in the [`config`](RuntimeBuilder::config). A runtime
    /// going on from a journal ([`recover`](RuntimeBuilder::recover)) runs under them
    /// too, with the spend it had; without, it keeps the journal's.
    #[must_use]
    pub fn budgets(mut self, budgets: spool_core::Budgets) -> Self {
        self.config.budgets = Some(budgets);
        self
    }

    /// Trims schedules' sessions over their limits with `trimmer` instead of the
    /// default rule (see [`SessionTrimmer`](spool_core::SessionTrimmer)). Give it
    /// before [`recover`](RuntimeBuilder::recover), so that the replay trims as the
    /// recorded run did.
    #[must_use]
    pub fn session_trimmer(mut self, trimmer: impl spool_core::SessionTrimmer + 'static) -> Self {
        self.session_trimmer = Some(std::sync::Arc::new(trimmer));
        self
    }

    /// The run-queue policy (FIFO if not set); the same as setting it in the
    /// [`config`](RuntimeBuilder::config).
    #[must_use]
    pub fn policy(mut self, policy: PolicyChoice) -> Self {
        self.config.policy = policy;
        self
    }

    /// Serves `kind` with `executor` on a thread of its own.
    #[must_use]
    pub fn executor(self, kind: Kind, executor: impl Executor) -> Self {
        let mut once = Some(executor);
        self.add(Route::Exact(kind.clone()), kind.to_string(), 1, move || {
            let executor = once.take().expect("a one-thread executor is made once");
            Box::new(executor) as Box<dyn Executor>
        })
    }

    /// Serves `kind` with a pool of `workers` threads, each with an executor made by
    /// `make`; a batch of requests is split across the pool.
    #[must_use]
    pub fn pool<E, F>(self, kind: Kind, workers: usize, mut make: F) -> Self
    where
        E: Executor,
        F: FnMut() -> E + Send + 'static,
    {
        self.add(
            Route::Exact(kind.clone()),
            kind.to_string(),
            workers.max(1),
            move || Box::new(make()) as Box<dyn Executor>,
        )
    }

    /// Serves every tool that has no executor of its own with `executor`.
    #[must_use]
    pub fn tools(self, executor: impl Executor) -> Self {
        let mut once = Some(executor);
        self.add(Route::AllTools, "tool:*".to_owned(), 1, move || {
            let executor = once.take().expect("a one-thread executor is made once");
            Box::new(executor) as Box<dyn Executor>
        })
    }

    fn add(
        mut self,
        route: Route,
        name: String,
        workers: usize,
        factory: impl FnMut() -> Box<dyn Executor> + Send + 'static,
    ) -> Self {
        self.executors
            .push((route, name, workers, Box::new(factory)));
        self
    }

    /// How many requests for one executor are batched before they are sent while the
    /// loop is still polling tasks (default 256). Smaller sends sooner; larger sends fewer
    /// messages.
    #[must_use]
    pub fn flush_at(mut self, requests: usize) -> Self {
        self.flush_at = requests.max(1);
        self
    }

    /// The task types schedules make their runs of
    /// ([`Scheduler::set_registry`]); with it, the runtime tells the core the wall
    /// clock when it starts. [`restore`](RuntimeBuilder::restore) and
    /// [`recover`](RuntimeBuilder::recover) keep their registry for runs unless this
    /// gives another.
    #[must_use]
    pub fn registry(mut self, registry: TaskRegistry) -> Self {
        self.registry = Some(registry);
        self.registry_given = true;
        self
    }

    /// Reads the wall clock schedules fire by from `now` instead of the system's
    /// (`jiff::Timestamp::now`): for a test that moves the wall clock to see the
    /// runtime follow it (a suspend, a clock step), or a process that keeps its own.
    #[must_use]
    pub fn wall_clock(mut self, now: impl Fn() -> jiff::Timestamp + Send + Sync + 'static) -> Self {
        self.wall_clock = WallClock::new(now);
        self
    }

    /// Publishes the runtime to `f` from the loop's thread: at the end of a turn that
    /// changed something (an input taken, a task polled, a timer fired, a group made
    /// durable) once at least `every` has passed since the last publication, and
    /// when a run ends. A change within `every` of the last publication is published
    /// `every` after it, the loop waking for it. `f` gets the runtime and the trace
    /// events since its last call (the core records its trace from then on), to copy
    /// what readers on other threads need; it runs on the loop, so it should be quick.
    /// What it sees may include inputs not yet durable.
    ///
    /// # Example
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use spool_core::{NewTask, Step, task_fn};
    /// use spool_runtime::Runtime;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// let mut runtime = Runtime::builder()
    ///     .publish(Duration::from_millis(10), move |publication| {
    ///         let events = publication.take_events();
    ///         sink.lock().unwrap().extend(events.into_iter().map(|e| e.to.to_string()));
    ///     })
    ///     .build();
    /// runtime.submit(NewTask::new(task_fn("hi", |_cx| Step::done("hi")))).unwrap();
    /// runtime.run_until_idle();
    /// assert_eq!(*seen.lock().unwrap(), ["Ready", "Running", "Completed(ok)"]);
    /// ```
    #[must_use]
    pub fn publish(
        mut self,
        every: std::time::Duration,
        f: impl FnMut(&mut Publication<'_>) + Send + 'static,
    ) -> Self {
        self.publisher = Some(Publisher::new(every, Box::new(f)));
        self
    }

    /// Calls `watcher` with the progress of requests under way (a model's streamed
    /// tokens, from an executor that streams), on the executor's thread as it comes,
    /// and when such a request ends (its answer leaves for the loop, or the runtime
    /// cancels it or fails it for a dead executor). Progress is not journaled
    /// and changes no run; every piece of a request comes before its answer's trace
    /// events. Each call adds a watcher. Keep it quick: the executor waits for it.
    ///
    /// # Example
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use spool_runtime::{Progress, Runtime};
    ///
    /// let text = Arc::new(Mutex::new(String::new()));
    /// let seen = Arc::clone(&text);
    /// let runtime = Runtime::builder()
    ///     .on_progress(move |progress| {
    ///         if let Progress::Delta { delta, .. } = progress {
    ///             seen.lock().unwrap().push_str(&delta.text);
    ///         }
    ///     })
    ///     .build();
    /// # drop(runtime);
    /// ```
    #[must_use]
    pub fn on_progress(mut self, watcher: impl Fn(&Progress<'_>) + Send + Sync + 'static) -> Self {
        self.progress.push(std::sync::Arc::new(watcher));
        self
    }

    /// Tells `observer` what the loop does as it does it: each request let out, each
    /// answer taken, and the tasks' transitions once per turn (see [`Observer`]). The
    /// core records its trace from then on, as it does for a publisher. Without an
    /// observer the loop does none of this.
    #[must_use]
    pub fn observe(mut self, observer: impl Observer) -> Self {
        self.observer = Some(Box::new(observer));
        self
    }

    /// Goes on from `snapshot` (tasks rebuilt through `registry`) instead of an empty
    /// scheduler; requests that were with executors are sent again with the same keys.
    /// The snapshot's configuration replaces [`config`](RuntimeBuilder::config).
    /// Schedules' runs are made through `registry` too, and their fires missed while
    /// nothing ran are due at start (see [`Runtime::put_schedule`]).
    ///
    /// # Errors
    /// As [`Scheduler::restore`].
    pub fn restore(
        mut self,
        snapshot: &Snapshot,
        registry: &TaskRegistry,
    ) -> Result<Self, RestoreError> {
        let mut core = Scheduler::restore(snapshot, registry)?;
        core.resend_in_flight();
        self.start = Some(core);
        self.registry.get_or_insert_with(|| registry.clone());
        Ok(self)
    }

    /// Goes on from where a recorded run stopped: restores the journal's starting
    /// snapshot and applies every entry (the runtime's own journal, or a store's last
    /// checkpoint and the journal since), then sends again what was with executors.
    /// Schedules' runs are made through `registry` too; the wall clock is told again
    /// at start, so the fires missed while the process was down are due at once (the
    /// catch-up policy decides what runs).
    ///
    /// # Errors
    /// As [`Scheduler::replay`].
    pub fn recover(self, journal: &Journal, registry: &TaskRegistry) -> Result<Self, ReplayError> {
        let trimmer = self.session_trimmer.clone();
        let replay = Scheduler::replay_with(journal, registry, |core| {
            core.set_session_trimmer(trimmer);
        })?;
        Ok(self.recover_from(replay.scheduler, registry))
    }

    /// As [`recover`](RuntimeBuilder::recover), from a journal already replayed
    /// ([`Scheduler::replay`]'s scheduler): for an embedder that looks at what the
    /// journal holds (its limits, its tasks) before it decides how to go on, without
    /// replaying it twice.
    pub fn recover_from(mut self, replayed: Scheduler, registry: &TaskRegistry) -> Self {
        let mut core = replayed;
        // What the replay traced and counted was the recorded run's, not this one's.
        core.record_trace(false);
        core.trace_mut().take_events();
        core.trace_mut().take_answers();
        core.resend_in_flight();
        self.start = Some(core);
        self.registry.get_or_insert_with(|| registry.clone());
        self
    }

    /// Writes every input the runtime takes to `sink`, starting with a snapshot of
    /// where it starts: a journal to replay the run in `TestScheduler`, or a store's
    /// write-ahead log. Every task submitted must then be saveable
    /// ([`AgentTask::save`](spool_core::AgentTask::save)); one that is not is refused.
    #[must_use]
    pub fn journal(mut self, sink: impl JournalSink) -> Self {
        self.journal = Some(Box::new(sink));
        self
    }

    /// Also writes the trace events the run produces to the journal, so that a replay
    /// can say where it first differs.
    #[must_use]
    pub fn journal_trace(mut self, on: bool) -> Self {
        self.journal_trace = on;
        self
    }

    /// Hands the journal a checkpoint (a snapshot, or the tasks that changed for a sink
    /// that takes parts) at the end of the first loop turn after every `entries`
    /// entries, so a store can recover from it and forget what came before. With
    /// parts, when the last header was over 64 KiB a checkpoint also waits until the
    /// entries since the last one number at least (its size − 64 KiB) / 16 (a header
    /// follows the queues; this keeps a checkpoint's cost per step flat with a hundred
    /// thousand tasks ready).
    #[must_use]
    pub fn checkpoint_every(mut self, entries: u64) -> Self {
        self.checkpoint_every = Some(entries.max(1));
        self
    }

    /// Checks, before each checkpoint, that every live task's state round-trips: saved,
    /// restored through the registry ([`registry`](RuntimeBuilder::registry), or the one
    /// the runtime was restored with) and saved again it is the same bytes, and it holds
    /// no `Some(null)` that JSON would read back as `None` (see
    /// [`TaskRegistry::check_round_trip`]). A task that fails it fails the checkpoint,
    /// which is not written: [`Runtime::checkpoint`] returns the error
    /// ([`SnapshotError::RoundTrip`](spool_core::SnapshotError::RoundTrip), naming the
    /// task, its type and what differs), and a periodic checkpoint logs it. The tasks
    /// run on, and the journal keeps every entry since the last checkpoint written.
    /// Off by default, or on if the environment variable `SPOOL_CHECK_ROUND_TRIP` is
    /// `1` or `true` when [`Runtime::builder`] is called. It costs a save, a restore and
    /// a save of every live task at each checkpoint.
    #[must_use]
    pub fn check_round_trip(mut self, on: bool) -> Self {
        self.check_round_trip = on;
        self
    }

    /// Starts the executor threads and returns the runtime; for a runtime without a
    /// [`journal`](RuntimeBuilder::journal), whose start cannot fail. With a journal
    /// (a store on disk), use [`try_build`](RuntimeBuilder::try_build).
    ///
    /// # Panics
    /// Where [`try_build`](RuntimeBuilder::try_build) returns an error.
    pub fn build(self) -> Runtime {
        match self.try_build() {
            Ok(runtime) => runtime,
            Err(error) => panic!("{error}"),
        }
    }

    /// Starts the journal (writing its starting snapshot) and the executor threads,
    /// and returns the runtime.
    ///
    /// # Errors
    /// [`RuntimeError::JournalStart`] if the journal cannot start: its sink fails (a
    /// store that is damaged, full or read-only), or the starting scheduler holds a
    /// task that cannot be saved. [`RuntimeError::Spawn`] if the operating system
    /// refuses to start an executor thread. Nothing keeps running after an error.
    pub fn try_build(mut self) -> Result<Runtime, RuntimeError> {
        let (inbound_tx, inbound_rx) = crossbeam_channel::unbounded();
        let mut core = self.starting_core();
        // Budgets given run a scheduler going on from a journal too (its spend kept);
        // without, it keeps its own.
        if let Some(budgets) = self.config.budgets.clone() {
            core.set_budgets(Some(budgets));
        }
        let history = self.history_store.take().map(|store| {
            let registry = core.registry().cloned().unwrap_or_default();
            std::sync::Arc::new(crate::store_history::StoreHistory::new(store, registry))
        });
        // A runtime for schedules (given task types, or going on from a scheduler that
        // had a wall clock) tells the core the wall clock now, journaled: after a
        // restore, the time it was down shows as fires due at once.
        let anchor = self.registry_given || core.wall_clock().is_some();
        let settings = JournalSettings {
            trace: self.journal_trace,
            checkpoint_every: self.checkpoint_every,
            check_round_trip: self.check_round_trip,
        };
        let journaling = Journaling::start(self.journal.take(), settings, &mut core, &inbound_tx)
            .map_err(RuntimeError::JournalStart)?;
        if self.observer.is_some() {
            // The observer is handed the trace events of every turn.
            core.record_trace(true);
        }
        if self.publisher.is_some() {
            // The publisher hands the trace on: the core keeps it between publications,
            // and the ids of the tasks it removes (which the trace does not show).
            core.record_trace(true);
            core.log_removals(true);
        }
        // A runtime going on from a scheduler that knew the wall clock counts the time
        // the process was down: its tasks' ages and deadlines go on from their
        // submission as the wall clock does.
        let start_at =
            crate::clock::resumed_at(core.now(), core.wall_clock(), self.wall_clock.now());
        let clock = Clock::starting_at(start_at);
        let mut executors = Executors::new(self.flush_at);
        executors.watch_progress(ProgressRoute::new(std::mem::take(&mut self.progress)));
        for (route, name, workers, factory) in std::mem::take(&mut self.executors) {
            executors.start(route, name, workers, factory, &inbound_tx, clock)?;
        }
        let inbound = (inbound_tx, inbound_rx);
        let mut runtime = self.into_runtime(core, journaling, clock, executors, inbound);
        runtime.history = history;
        if anchor {
            runtime.anchor_wall_clock();
        }
        Ok(runtime)
    }

    /// The scheduler the runtime starts from (restored or replayed, or a new one with
    /// the configuration), given the registry and the session trimmer if they were set.
    fn starting_core(&mut self) -> Scheduler {
        let mut core = match self.start.take() {
            Some(core) => core,
            None => Scheduler::new(std::mem::take(&mut self.config)),
        };
        if let Some(registry) = self.registry.take() {
            core.set_registry(registry);
        }
        if self.session_trimmer.is_some() {
            core.set_session_trimmer(self.session_trimmer.take());
        }
        core
    }

    /// The runtime, from what was set up and started: nothing sent, committed or
    /// published yet.
    fn into_runtime(
        self,
        core: Scheduler,
        journaling: Journaling,
        clock: Clock,
        executors: Executors,
        (inbound_tx, inbound_rx): (Sender<Inbound>, Receiver<Inbound>),
    ) -> Runtime {
        Runtime {
            clock,
            core,
            journaling,
            inbound_tx,
            inbound_rx,
            executors,
            held: Vec::new(),
            flush_at: self.flush_at,
            shutdown: false,
            deferred: VecDeque::new(),
            turn_inputs: 0,
            turn_notices: 0,
            wall_checked: std::time::Instant::now(),
            clock_wake: false,
            wall_clock: self.wall_clock,
            publisher: self.publisher,
            publish_wake: false,
            history: None,
            observing: self
                .observer
                .map(|observer| Observing::new(observer, clock.now())),
        }
    }
}

impl Runtime {
    /// Starts setting up a runtime. Its scheduler starts from [`DEFAULT_RETENTION`]
    /// rather than keeping every result forever, so a long run has bounded memory;
    /// [`RuntimeBuilder::config`] replaces the whole configuration.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            config: Config::new().retention(DEFAULT_RETENTION),
            start: None,
            journal: None,
            journal_trace: false,
            checkpoint_every: None,
            check_round_trip: std::env::var(CHECK_ROUND_TRIP_VAR)
                .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
            executors: Vec::new(),
            flush_at: 256,
            registry: None,
            registry_given: false,
            wall_clock: WallClock::default(),
            publisher: None,
            observer: None,
            session_trimmer: None,
            progress: Vec::new(),
            history_store: None,
        }
    }
}

/// A builder can be made on one thread and built on another (a binding that builds
/// its runtime when first used, from whichever thread uses it).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<RuntimeBuilder>();
};
