//! Schedules on the threaded runtime: the wall clock told to the core (at start, and
//! when it drifts from the monotonic clock) and read back as a scheduler time's
//! instant, and the schedule operations, on the loop's thread and through a handle,
//! each acknowledged once its entry is durable.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use spool_core::{
    FireOutcome, ScheduleDef, ScheduleError, ScheduleInfo, SchedulePatch, Scheduler, SessionInfo,
    TaskError, Time,
};

use crate::clock::wall_of;
use crate::error::RuntimeError;
use crate::handle::RuntimeHandle;
use crate::run_loop::Runtime;

/// How often, at most, the loop compares the wall clock with the monotonic clock once
/// schedules are in use (and so how long it waits, at most, with nothing to do). A
/// difference of more than a second is told to the core.
pub const WALL_CLOCK_CHECK: Duration = Duration::from_secs(3);

/// How far the wall clock may drift from where the monotonic clock says it is before
/// the core is told the wall clock again.
const WALL_CLOCK_DRIFT: Duration = Duration::from_secs(1);

impl Runtime {
    /// The wall-clock instant of the scheduler's time `at`: by the wall clock the core
    /// was told (the one schedules fire by), else by the runtime's wall clock read now.
    /// A task's submission (`TaskInfo::created_at`) or deadline reads in it; after a
    /// restart on a store, a task submitted before it keeps its submission's instant.
    /// `None` only out of the wall clock's range.
    pub fn wall_time(&self, at: Time) -> Option<Timestamp> {
        match self.core.wall_clock() {
            Some(wall) => wall_of(wall, self.core.now(), at),
            None => wall_of(self.wall_clock.now(), self.clock.now(), at),
        }
    }

    /// A task's error as a person reads it ([`TaskError::describe`]): a missed
    /// deadline in wall-clock time and from the task's submission at `submitted`.
    pub fn describe_error(&self, error: &TaskError, submitted: Time) -> String {
        error.describe(submitted, |t| self.wall_time(t))
    }
}

impl Runtime {
    /// Tells the core that its time now is the wall-clock instant now (journaled).
    pub(crate) fn anchor_wall_clock(&mut self) {
        let now = self.clock.now();
        self.core.set_wall_clock(now, self.wall_clock.now());
        self.wall_checked = Instant::now();
        self.forward_journal();
    }

    /// If the core has a wall clock and it was last compared more than
    /// [`WALL_CLOCK_CHECK`] ago: compares it with the real one, and tells the core
    /// again if they are more than [`WALL_CLOCK_DRIFT`] apart. Returns whether it did
    /// (nothing is journaled when nothing drifted).
    pub(crate) fn check_wall_clock(&mut self, now: Time) -> bool {
        // A runtime without schedules pays one branch a turn, not a clock read.
        let Some(core_wall) = self.core.wall_clock() else {
            return false;
        };
        if self.wall_checked.elapsed() < WALL_CLOCK_CHECK {
            return false;
        }
        self.wall_checked = Instant::now();
        let wall = self.wall_clock.now();
        // The core's wall clock is at its own time; the loop's clock may be ahead.
        let ahead = now
            .as_duration()
            .saturating_sub(self.core.now().as_duration());
        let expected = core_wall.checked_add(ahead).unwrap_or(Timestamp::MAX);
        let drift = wall.duration_since(expected).unsigned_abs();
        if drift <= WALL_CLOCK_DRIFT {
            return false;
        }
        tracing::info!(?drift, "the wall clock moved; schedules follow it");
        self.core.set_wall_clock(now, wall);
        self.forward_journal();
        true
    }

    /// When the loop should next compare the clocks, if the core has a wall clock.
    pub(crate) fn wall_clock_deadline(&self) -> Option<Instant> {
        self.core
            .wall_clock()
            .map(|_| self.wall_checked + WALL_CLOCK_CHECK)
    }

    /// Runs a schedule operation at `now`, telling the core the wall clock first if it
    /// has none yet, and writes what it journaled.
    fn schedule_at<T>(&mut self, now: Time, op: impl FnOnce(&mut Scheduler, Time) -> T) -> T {
        if self.core.wall_clock().is_none() {
            self.core.set_wall_clock(now, self.wall_clock.now());
            self.wall_checked = Instant::now();
        }
        let out = op(&mut self.core, now);
        self.forward_journal();
        out
    }

    /// Runs a schedule operation from the loop's own thread, and returns once what it
    /// journaled is durable (as [`submit`](Runtime::submit) does).
    fn schedule_op<T>(&mut self, op: impl FnOnce(&mut Scheduler, Time) -> T) -> T {
        let now = self.clock.now();
        let out = self.schedule_at(now, op);
        self.route();
        self.settle();
        out
    }

    /// Creates schedule `def.slug`, or replaces it whole (its status and session
    /// stay); returns whether it was created. With a journal, returns once the
    /// operation is durable. Its runs are made through the registry the runtime was
    /// built with ([`RuntimeBuilder::registry`](crate::RuntimeBuilder::registry)).
    ///
    /// # Errors
    /// As [`Scheduler::put_schedule`]: a bad slug or input, an unknown task type.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use spool_core::{ScheduleDef, Spec, Step, TaskRegistry, task_fn};
    /// use spool_runtime::Runtime;
    ///
    /// let registry = TaskRegistry::new().with_input("hello", |_input| {
    ///     Ok(Box::new(task_fn("hello", |_cx| Step::done(json!({"messages": ["hi"]})))))
    /// });
    /// let mut runtime = Runtime::builder().registry(registry).build();
    /// let every = Spec::Every(Duration::from_secs(3600));
    /// let def = ScheduleDef::new("hourly-hello", every, "hello", json!({}));
    /// assert_eq!(runtime.put_schedule(def), Ok(true));
    /// let info = runtime.schedule("hourly-hello").unwrap();
    /// assert!(info.status.next_run.is_some());
    /// ```
    pub fn put_schedule(&mut self, def: ScheduleDef) -> Result<bool, ScheduleError> {
        self.schedule_op(|core, now| core.put_schedule(now, def))
    }

    /// Changes the fields `patch` gives of schedule `slug`; returns it as it is now,
    /// once durable.
    ///
    /// # Errors
    /// As [`Scheduler::patch_schedule`].
    pub fn patch_schedule(
        &mut self,
        slug: &str,
        patch: SchedulePatch,
    ) -> Result<ScheduleInfo, ScheduleError> {
        self.schedule_op(|core, now| core.patch_schedule(now, slug, patch))
    }

    /// Deletes schedule `slug` (its runs going go on), once durable.
    ///
    /// # Errors
    /// As [`Scheduler::delete_schedule`].
    pub fn delete_schedule(&mut self, slug: &str) -> Result<(), ScheduleError> {
        self.schedule_op(|core, now| core.delete_schedule(now, slug))
    }

    /// Pauses schedule `slug`, once durable.
    ///
    /// # Errors
    /// As [`Scheduler::pause_schedule`].
    pub fn pause_schedule(&mut self, slug: &str) -> Result<(), ScheduleError> {
        self.schedule_op(|core, now| core.pause_schedule(now, slug))
    }

    /// Resumes schedule `slug`, once durable.
    ///
    /// # Errors
    /// As [`Scheduler::resume_schedule`].
    pub fn resume_schedule(&mut self, slug: &str) -> Result<(), ScheduleError> {
        self.schedule_op(|core, now| core.resume_schedule(now, slug))
    }

    /// Runs schedule `slug` now, through its overlap policy and session; returns what
    /// the fire did, once durable (a run started is polled when the loop runs).
    ///
    /// # Errors
    /// As [`Scheduler::trigger_schedule`].
    pub fn trigger_schedule(&mut self, slug: &str) -> Result<FireOutcome, ScheduleError> {
        self.schedule_op(|core, now| core.trigger_schedule(now, slug))
    }

    /// Deletes session `id`, once durable.
    ///
    /// # Errors
    /// As [`Scheduler::delete_session`].
    pub fn delete_session(&mut self, id: &str) -> Result<(), ScheduleError> {
        self.schedule_op(|core, now| core.delete_session(now, id))
    }

    /// Every schedule with its status, by slug.
    pub fn schedules(&self) -> Vec<ScheduleInfo> {
        self.core.schedules()
    }

    /// The schedule named `slug`, with its status.
    pub fn schedule(&self, slug: &str) -> Option<ScheduleInfo> {
        self.core.schedule(slug)
    }

    /// Every session, by id.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.core.sessions()
    }

    /// The session `id`.
    pub fn session(&self, id: &str) -> Option<SessionInfo> {
        self.core.session(id)
    }
}

impl RuntimeHandle {
    /// Runs a schedule operation on the loop's thread and waits for its result, which
    /// the loop sends once the operation's entry is durable.
    fn schedule_call<T, F>(&self, op: F) -> Result<T, RuntimeError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler, Time) -> Result<T, ScheduleError> + Send + 'static,
    {
        self.call_durable(move |runtime, now| runtime.schedule_at(now, op))
    }

    /// [`Runtime::put_schedule`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn put_schedule(&self, def: ScheduleDef) -> Result<bool, RuntimeError> {
        self.schedule_call(move |core, now| core.put_schedule(now, def))
    }

    /// Creates schedule `def.slug` only if no schedule has that slug, from another
    /// thread ([`Scheduler::create_schedule`]): the look-up and the creation are one
    /// turn of the loop, so no other operation comes between them. Returns `true` once
    /// the new schedule is durable, `false` if a schedule of that slug exists (it is
    /// left as it is).
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if `def` was refused (as
    /// [`Runtime::put_schedule`]), whether or not the slug is taken.
    pub fn create_schedule(&self, def: ScheduleDef) -> Result<bool, RuntimeError> {
        self.schedule_call(move |core, now| core.create_schedule(now, def))
    }

    /// Replaces schedule `slug` whole with what `change` makes of its definition, from
    /// another thread: the read and the replacement are one turn of the loop, so no
    /// other operation comes between them. Its slug stays whatever `change` does with
    /// it; its status and session stay, as [`Runtime::put_schedule`] keeps them.
    /// Returns the schedule as it is now, once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`]: no schedule is named
    /// `slug`, or the new definition was refused (then nothing changed).
    pub fn replace_schedule<F>(&self, slug: &str, change: F) -> Result<ScheduleInfo, RuntimeError>
    where
        F: FnOnce(ScheduleDef) -> ScheduleDef + Send + 'static,
    {
        let slug = slug.to_owned();
        self.schedule_call(move |core, now| {
            let info = core
                .schedule(&slug)
                .ok_or_else(|| ScheduleError::NotFound(slug.clone()))?;
            let mut def = change(info.def);
            def.slug.clone_from(&slug);
            core.put_schedule(now, def)?;
            core.schedule(&slug)
                .ok_or_else(|| ScheduleError::NotFound(slug.clone()))
        })
    }

    /// [`Runtime::patch_schedule`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn patch_schedule(
        &self,
        slug: &str,
        patch: SchedulePatch,
    ) -> Result<ScheduleInfo, RuntimeError> {
        let slug = slug.to_owned();
        self.schedule_call(move |core, now| core.patch_schedule(now, &slug, patch))
    }

    /// [`Runtime::delete_schedule`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn delete_schedule(&self, slug: &str) -> Result<(), RuntimeError> {
        let slug = slug.to_owned();
        self.schedule_call(move |core, now| core.delete_schedule(now, &slug))
    }

    /// [`Runtime::pause_schedule`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn pause_schedule(&self, slug: &str) -> Result<(), RuntimeError> {
        let slug = slug.to_owned();
        self.schedule_call(move |core, now| core.pause_schedule(now, &slug))
    }

    /// [`Runtime::resume_schedule`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn resume_schedule(&self, slug: &str) -> Result<(), RuntimeError> {
        let slug = slug.to_owned();
        self.schedule_call(move |core, now| core.resume_schedule(now, &slug))
    }

    /// [`Runtime::trigger_schedule`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn trigger_schedule(&self, slug: &str) -> Result<FireOutcome, RuntimeError> {
        let slug = slug.to_owned();
        self.schedule_call(move |core, now| core.trigger_schedule(now, &slug))
    }

    /// [`Runtime::delete_session`] from another thread: returns once durable.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Schedule`] if it was refused.
    pub fn delete_session(&self, id: &str) -> Result<(), RuntimeError> {
        let id = id.to_owned();
        self.schedule_call(move |core, now| core.delete_session(now, &id))
    }

    /// Every schedule with its status, by slug.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn schedules(&self) -> Result<Vec<ScheduleInfo>, RuntimeError> {
        self.query(Runtime::schedules)
    }

    /// The schedule named `slug`, with its status.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn schedule(&self, slug: &str) -> Result<Option<ScheduleInfo>, RuntimeError> {
        let slug = slug.to_owned();
        self.query(move |runtime| runtime.schedule(&slug))
    }

    /// Every session, by id.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>, RuntimeError> {
        self.query(Runtime::sessions)
    }

    /// The session `id`.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn session(&self, id: &str) -> Result<Option<SessionInfo>, RuntimeError> {
        let id = id.to_owned();
        self.query(move |runtime| runtime.session(&id))
    }
}
