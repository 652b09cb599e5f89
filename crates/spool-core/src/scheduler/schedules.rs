//! Schedules in the scheduler: the operations (journaled inputs), a schedule's timer
//! firing, a run starting (overlap policy, session, task made through the registry)
//! and a run ending (status, session messages, auto-pause, the next buffered fire).
//! The data and the decisions that need no task are in `crate::schedule`.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::timers::TimerKind;
use super::{Scheduler, TaskPhase};
use crate::id::TaskId;
use crate::journal::ScheduleOp;
use crate::registry::TaskRegistry;
use crate::schedule::{
    Anchor, Entry, FireOutcome, Overlap, RunRef, RunResult, ScheduleDef, ScheduleError,
    ScheduleInfo, SchedulePatch, ScheduleStatus, SessionInfo, SessionLimits, SessionMode,
    SessionTrimmer, Trimmer, due_fires,
};
use crate::state::{CancelReason, TaskState};
use crate::task::NewTask;
use crate::time::Time;

impl Scheduler {
    /// Gives the scheduler the task types schedules make their runs of (a restored
    /// scheduler keeps the registry it was restored with).
    pub fn set_registry(&mut self, registry: TaskRegistry) {
        self.registry = Some(registry);
    }

    /// The task types schedules make their runs of, if it was given them.
    pub fn registry(&self) -> Option<&TaskRegistry> {
        self.registry.as_ref()
    }

    /// Tells the scheduler that its time `now` is the wall-clock instant `wall`
    /// (journaled). Schedules fire by the wall clock: the runtime calls this when it
    /// starts (after a restore, the time it was down shows here as fires due at once,
    /// which the catch-up policy handles) and from time to time; a test calls it once
    /// to say where its virtual time starts.
    pub fn set_wall_clock(&mut self, now: Time, wall: Timestamp) {
        self.journal_schedule(now, ScheduleOp::WallClock(wall));
        self.advance(now);
        self.schedules.anchor = Some(Anchor { at: self.now, wall });
        let indexes: Vec<u32> = self.schedules.by_slug.values().copied().collect();
        for index in indexes {
            self.set_schedule_timer(index, true);
        }
        self.end_input();
    }

    /// The wall-clock instant of the scheduler's time now, if it was told one.
    pub fn wall_clock(&self) -> Option<Timestamp> {
        self.schedules.anchor.map(|a| a.wall(self.now))
    }

    /// Every schedule with its status, by slug.
    pub fn schedules(&self) -> Vec<ScheduleInfo> {
        self.schedules.list()
    }

    /// The schedule named `slug`, with its status.
    pub fn schedule(&self, slug: &str) -> Option<ScheduleInfo> {
        self.schedules.find(slug).map(|(_, e)| e.info())
    }

    /// The schedule and nominal fire time a run still going was started for: `(slug,
    /// fire)` (`None` for a task that is not a schedule's run going, or whose schedule
    /// was deleted).
    pub fn schedule_run(&self, task: TaskId) -> Option<(String, Timestamp)> {
        let run = self.schedules.runs.get(&task)?;
        let entry = self.schedules.get_uid(run.index, run.uid)?;
        Some((entry.def.slug.clone(), run.nominal))
    }

    /// Every session, by id.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let sessions = &self.schedules.sessions;
        sessions
            .by_id
            .keys()
            .filter_map(|id| sessions.info(id))
            .collect()
    }

    /// The session `id`.
    pub fn session(&self, id: &str) -> Option<SessionInfo> {
        self.schedules.sessions.info(id)
    }

    /// How much a session keeps ([`Config::session_limits`](crate::Config::session_limits);
    /// a restored scheduler keeps its snapshot's).
    pub fn session_limits(&self) -> SessionLimits {
        self.schedules.limits
    }

    /// Trims sessions over their limits with `trimmer` instead of the default rule
    /// ([`trim_session`](crate::trim_session)); `None`: the default rule. It is not in
    /// snapshots or journals (it is code, as the registry is): give a restored or
    /// replaying scheduler the same one before it goes on
    /// ([`Scheduler::replay_with`](crate::Scheduler::replay_with)).
    pub fn set_session_trimmer(&mut self, trimmer: Option<Arc<dyn SessionTrimmer>>) {
        self.schedules.trimmer = Trimmer(trimmer);
    }

    /// Creates the schedule `def.slug`, or replaces it whole (its status, session and
    /// counts stay; its next fire is worked out again if its spec or state changed).
    /// Returns whether it was created.
    ///
    /// # Errors
    /// A [`ScheduleError`]: a bad slug or input, a task type the registry does not
    /// know (or that refuses the input), no wall clock yet. Nothing changes then.
    pub fn put_schedule(&mut self, now: Time, def: ScheduleDef) -> Result<bool, ScheduleError> {
        let wall = self.check_schedule(now, &def)?;
        self.journal_schedule(now, ScheduleOp::Put(def.clone()));
        self.advance(now);
        let created = self.put_checked(def, wall);
        self.end_input();
        Ok(created)
    }

    /// Creates the schedule `def.slug` only if no schedule has that slug; returns whether
    /// it did (`false`: one exists, left as it is, and nothing is journaled). `def` is
    /// checked first either way: one that [`put_schedule`](Scheduler::put_schedule)
    /// refuses is refused here too, whether or not the slug is taken.
    ///
    /// # Errors
    /// As [`put_schedule`](Scheduler::put_schedule). Nothing changes then.
    pub fn create_schedule(&mut self, now: Time, def: ScheduleDef) -> Result<bool, ScheduleError> {
        self.check_schedule(now, &def)?;
        if self.schedules.find(&def.slug).is_some() {
            return Ok(false);
        }
        self.put_schedule(now, def)
    }

    /// Changes the fields `patch` gives of schedule `slug`; returns it as it is now.
    ///
    /// # Errors
    /// [`ScheduleError::NotFound`], or as [`put_schedule`](Scheduler::put_schedule).
    pub fn patch_schedule(
        &mut self,
        now: Time,
        slug: &str,
        patch: SchedulePatch,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let (_, entry) = self
            .schedules
            .find(slug)
            .ok_or_else(|| ScheduleError::NotFound(slug.to_owned()))?;
        let def = patch.apply(&entry.def);
        let wall = self.check_schedule(now, &def)?;
        self.journal_schedule(
            now,
            ScheduleOp::Patch {
                slug: slug.to_owned(),
                patch,
            },
        );
        self.advance(now);
        self.put_checked(def, wall);
        self.end_input();
        self.schedule(slug)
            .ok_or_else(|| ScheduleError::NotFound(slug.to_owned()))
    }

    /// Deletes schedule `slug`. Its runs going go on (their results are kept as any
    /// task's); its session stays.
    ///
    /// # Errors
    /// [`ScheduleError::NotFound`].
    pub fn delete_schedule(&mut self, now: Time, slug: &str) -> Result<(), ScheduleError> {
        if self.schedules.find(slug).is_none() {
            return Err(ScheduleError::NotFound(slug.to_owned()));
        }
        self.journal_schedule(now, ScheduleOp::Delete(slug.to_owned()));
        self.advance(now);
        self.schedules.remove(slug);
        self.end_input();
        Ok(())
    }

    /// Pauses schedule `slug`: it fires nothing until resumed (a run going goes on).
    ///
    /// # Errors
    /// [`ScheduleError::NotFound`].
    pub fn pause_schedule(&mut self, now: Time, slug: &str) -> Result<(), ScheduleError> {
        let patch = SchedulePatch {
            enabled: Some(false),
            ..SchedulePatch::default()
        };
        self.patch_schedule(now, slug, patch).map(|_| ())
    }

    /// Resumes schedule `slug`: it fires from its next fire after now (the fires while
    /// it was paused are not run, nor counted missed).
    ///
    /// # Errors
    /// [`ScheduleError::NotFound`].
    pub fn resume_schedule(&mut self, now: Time, slug: &str) -> Result<(), ScheduleError> {
        let patch = SchedulePatch {
            enabled: Some(true),
            ..SchedulePatch::default()
        };
        self.patch_schedule(now, slug, patch).map(|_| ())
    }

    /// Runs schedule `slug` now, through its overlap policy and session as a fire
    /// would; its timing does not change.
    ///
    /// # Errors
    /// [`ScheduleError::NotFound`], [`ScheduleError::NoWallClock`].
    pub fn trigger_schedule(
        &mut self,
        now: Time,
        slug: &str,
    ) -> Result<FireOutcome, ScheduleError> {
        let anchor = self.schedules.anchor.ok_or(ScheduleError::NoWallClock)?;
        let Some((index, _)) = self.schedules.find(slug) else {
            return Err(ScheduleError::NotFound(slug.to_owned()));
        };
        self.journal_schedule(now, ScheduleOp::Trigger(slug.to_owned()));
        self.advance(now);
        let wall = anchor.wall(self.now);
        let outcome = self.offer_run(index, wall, wall);
        self.set_schedule_timer(index, false);
        self.end_input();
        Ok(outcome)
    }

    /// Deletes session `id`. A schedule that used it makes a new one at its next run
    /// (its status says so).
    ///
    /// # Errors
    /// [`ScheduleError::NoSession`]; [`ScheduleError::SessionBusy`] while a task
    /// uses it.
    pub fn delete_session(&mut self, now: Time, id: &str) -> Result<(), ScheduleError> {
        let session = self
            .schedules
            .sessions
            .by_id
            .get(id)
            .ok_or_else(|| ScheduleError::NoSession(id.to_owned()))?;
        if let Some(holder) = session.holder {
            return Err(ScheduleError::SessionBusy {
                id: id.to_owned(),
                holder,
            });
        }
        self.journal_schedule(now, ScheduleOp::DeleteSession(id.to_owned()));
        self.advance(now);
        self.schedules.sessions.by_id.remove(id);
        self.end_input();
        Ok(())
    }

    /// Applies a journaled schedule operation (replay).
    pub(crate) fn apply_schedule_op(&mut self, at: Time, op: &ScheduleOp) {
        let _ = match op {
            ScheduleOp::WallClock(wall) => {
                self.set_wall_clock(at, *wall);
                Ok(())
            }
            ScheduleOp::Put(def) => self.put_schedule(at, def.clone()).map(|_| ()),
            ScheduleOp::Patch { slug, patch } => {
                self.patch_schedule(at, slug, patch.clone()).map(|_| ())
            }
            ScheduleOp::Delete(slug) => self.delete_schedule(at, slug),
            ScheduleOp::Trigger(slug) => self.trigger_schedule(at, slug).map(|_| ()),
            ScheduleOp::DeleteSession(id) => self.delete_session(at, id),
        };
    }

    /// Checks `def` against the registry (making one run's task from its input, with
    /// an empty session, and dropping it); returns the wall clock now.
    fn check_schedule(&self, now: Time, def: &ScheduleDef) -> Result<Timestamp, ScheduleError> {
        def.check()?;
        let anchor = self.schedules.anchor.ok_or(ScheduleError::NoWallClock)?;
        // The wall clock at the time of the operation (the scheduler moves to it).
        let now = now.max(self.now);
        let unknown = || ScheduleError::UnknownType {
            slug: def.slug.clone(),
            task_type: def.task_type.clone(),
        };
        let registry = self.registry.as_ref().ok_or_else(unknown)?;
        if !registry.knows(&def.task_type) {
            return Err(unknown());
        }
        let session = (def.session != SessionMode::Fresh).then(|| ("s-0".to_owned(), Vec::new()));
        let input = run_input(&def.input, &def.slug, anchor.wall(now), session);
        registry
            .make(&def.task_type, &input)
            .map_err(|e| ScheduleError::BadInput {
                slug: def.slug.clone(),
                reason: e.to_string(),
            })?;
        Ok(anchor.wall(now))
    }

    /// Puts a checked `def` in the table at wall-clock `wall`; returns whether it is
    /// new.
    fn put_checked(&mut self, def: ScheduleDef, wall: Timestamp) -> bool {
        let index = match self.schedules.find(&def.slug) {
            Some((index, _)) => index,
            None => {
                let uid = self.schedules.next_uid();
                let status = ScheduleStatus {
                    next_run: def.spec.next_after(wall).filter(|_| def.enabled),
                    ..ScheduleStatus::default()
                };
                let entry = Entry {
                    uid,
                    def,
                    created_at: wall,
                    updated_at: wall,
                    status,
                    timer: Time::MAX,
                    timer_seq: 0,
                };
                let index = self.schedules.add(entry);
                self.set_schedule_timer(index, false);
                return true;
            }
        };
        if let Some(entry) = self.schedules.get_mut(index) {
            let retime = entry.def.spec != def.spec || (def.enabled && !entry.def.enabled);
            if retime || entry.status.next_run.is_none() && def.enabled {
                entry.status.next_run = def.spec.next_after(wall);
            }
            if def.enabled {
                entry.status.paused_reason = None;
            } else {
                entry.status.next_run = None;
            }
            entry.def = def;
            entry.updated_at = wall;
        }
        self.set_schedule_timer(index, false);
        false
    }

    /// Sets the timer of the schedule at `index` for the next thing it has to do
    /// (`again`: even if it is set for that time already, as after a new anchor).
    fn set_schedule_timer(&mut self, index: u32, again: bool) {
        let Some(anchor) = self.schedules.anchor else {
            return;
        };
        let now = self.now;
        let wall = anchor.wall(now);
        let Some(entry) = self.schedules.get_mut(index) else {
            return;
        };
        let at = entry
            .wake_at(wall)
            .map_or(Time::MAX, |w| anchor.time(w, now));
        if at == entry.timer && !again {
            return;
        }
        entry.timer = at;
        if at != Time::MAX {
            let uid = entry.uid;
            self.timers.set(TimerKind::Schedule, at, index, TaskId(uid));
            entry.timer_seq = self.timers.seq();
        }
    }

    /// The timer of the schedule at `index` fired: a busy run's retry, a buffered
    /// fire's turn, and the fires due, in that order.
    pub(super) fn fire_schedule(&mut self, index: u32) {
        let Some(anchor) = self.schedules.anchor else {
            return;
        };
        let wall = anchor.wall(self.now);
        let Some(entry) = self.schedules.get_mut(index) else {
            return;
        };
        entry.timer = Time::MAX;
        if let Some((nominal, at)) = entry.status.retry
            && at <= wall
        {
            entry.status.retry = None;
            self.begin_run(index, nominal, wall);
        }
        self.start_buffered(index, wall);
        let Some(entry) = self.schedules.get_mut(index) else {
            return;
        };
        if let Some(first) = entry
            .status
            .next_run
            .filter(|t| entry.def.enabled && *t <= wall)
        {
            let fire = due_fires(&entry.def.spec, entry.def.catch_up, first, wall);
            entry.status.missed += fire.missed;
            entry.status.next_run = fire.next;
            for nominal in fire.run {
                self.offer_run(index, nominal, wall);
            }
        }
        self.set_schedule_timer(index, true);
    }

    /// Starts the first buffered fire of the schedule at `index` if no run is going.
    fn start_buffered(&mut self, index: u32, wall: Timestamp) {
        let Some(entry) = self.schedules.get_mut(index) else {
            return;
        };
        if entry.status.running.is_empty() && !entry.status.buffered.is_empty() {
            let nominal = entry.status.buffered.remove(0);
            self.begin_run(index, nominal, wall);
        }
    }

    /// A fire for `nominal` at wall-clock `wall`, through the overlap policy (a fire
    /// waiting for its session counts as a run going).
    fn offer_run(&mut self, index: u32, nominal: Timestamp, wall: Timestamp) -> FireOutcome {
        let Some(entry) = self.schedules.get_mut(index) else {
            return FireOutcome::Skipped;
        };
        let status = &mut entry.status;
        let going = !status.running.is_empty() || status.retry.is_some();
        if going {
            match entry.def.overlap {
                Overlap::Skip => {
                    status.missed += 1;
                    return FireOutcome::Skipped;
                }
                Overlap::BufferOne | Overlap::BufferAll => {
                    let room = match entry.def.overlap {
                        Overlap::BufferOne => 1,
                        _ => crate::schedule::MAX_BUFFERED,
                    };
                    if status.buffered.len() < room {
                        status.buffered.push(nominal);
                        return FireOutcome::Buffered;
                    }
                    status.missed += 1;
                    return FireOutcome::Skipped;
                }
                Overlap::CancelOther => {
                    // The runs it replaces did not fail: they end canceled, with their
                    // session let go, and their schedule's status does not count them.
                    status.retry = None;
                    let running = std::mem::take(&mut status.running);
                    for task in &running {
                        let run = self.schedules.runs.remove(task);
                        if let Some(session) = run
                            .and_then(|r| r.session)
                            .and_then(|sid| self.schedules.sessions.by_id.get_mut(&sid))
                            && session.holder == Some(*task)
                        {
                            session.holder = None;
                        }
                    }
                    for task in running {
                        let live = self
                            .tasks
                            .find(task)
                            .filter(|(_, t)| t.phase != TaskPhase::Done);
                        if let Some((task_index, _)) = live {
                            self.cancel_at_index(task_index, CancelReason::Requested);
                        }
                    }
                }
                Overlap::AllowAll => {}
            }
        }
        self.begin_run(index, nominal, wall)
    }

    /// Starts a run of the schedule at `index` for `nominal`: its session (made if
    /// needed; busy: the run waits `busy_retry`), its task made through the registry
    /// and admitted.
    fn begin_run(&mut self, index: u32, nominal: Timestamp, wall: Timestamp) -> FireOutcome {
        let Some(entry) = self.schedules.get_mut(index) else {
            return FireOutcome::Skipped;
        };
        let def = entry.def.clone();
        let uid = entry.uid;
        let known = entry.status.session.clone();
        let (session, note) = self.run_session(&def.session, known, wall);
        if let Some(delayed) =
            self.wait_for_busy_session(index, &def, session.as_deref(), nominal, wall)
        {
            return delayed;
        }
        let task = match self.make_run_task(&def, session.as_deref(), nominal) {
            Ok(task) => task,
            Err(reason) => return self.run_failed_to_start(index, nominal, wall, reason),
        };
        let id = TaskId(self.tasks.take_ids(1));
        self.record_run_start(index, id, nominal, wall, session.as_deref(), note);
        self.schedules.runs.insert(
            id,
            RunRef {
                index,
                uid,
                nominal,
                session,
            },
        );
        self.insert(id, task, None, &[]);
        FireOutcome::Started(id)
    }

    /// The session a run in `mode` uses, made if needed (a persistent session `known`
    /// that is gone is made again), with a note saying so when it was gone.
    fn run_session(
        &mut self,
        mode: &SessionMode,
        known: Option<String>,
        wall: Timestamp,
    ) -> (Option<String>, Option<String>) {
        let sessions = &mut self.schedules.sessions;
        match mode {
            SessionMode::Fresh => (None, None),
            SessionMode::Persist => match known {
                Some(id) if sessions.by_id.contains_key(&id) => (Some(id), None),
                Some(gone) => {
                    let id = sessions.make(None, wall);
                    let note = format!("session {gone} was gone; made session {id}");
                    (Some(id), Some(note))
                }
                None => (Some(sessions.make(None, wall)), None),
            },
            SessionMode::Shared(id) => (Some(sessions.make(Some(id), wall)), None),
        }
    }

    /// If another task holds the run's `session`, the run of the schedule at `index`
    /// for `nominal` waits: it tries again `busy_retry` after `wall`, and the status
    /// says why ([`FireOutcome::Delayed`]). `None`: the session is free (or there is
    /// none).
    fn wait_for_busy_session(
        &mut self,
        index: u32,
        def: &ScheduleDef,
        session: Option<&str>,
        nominal: Timestamp,
        wall: Timestamp,
    ) -> Option<FireOutcome> {
        let id = session?;
        let holder = self
            .schedules
            .sessions
            .by_id
            .get(id)
            .and_then(|s| s.holder)?;
        let at = wall
            .checked_add(SignedDuration::try_from(def.busy_retry).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        let Some(entry) = self.schedules.get_mut(index) else {
            return Some(FireOutcome::Skipped);
        };
        entry.status.retry = Some((nominal, at));
        entry.status.last_result = Some(RunResult::Error);
        entry.status.last_error = Some(format!(
            "session {id} is busy (task {holder} is using it); the run for {nominal} tries again at {at}"
        ));
        Some(FireOutcome::Delayed(at))
    }

    /// The run's task: made through the registry from the schedule's input (with the
    /// `session`'s messages), checked to fit in the table, with the schedule's agent
    /// and priority. `Err`: why it could not be made.
    fn make_run_task(
        &self,
        def: &ScheduleDef,
        session: Option<&str>,
        nominal: Timestamp,
    ) -> Result<NewTask, String> {
        let messages = session.map(|id| {
            let messages = self
                .schedules
                .sessions
                .by_id
                .get(id)
                .map(|s| s.messages.clone())
                .unwrap_or_default();
            (id.to_owned(), messages)
        });
        let input = run_input(&def.input, &def.slug, nominal, messages);
        let body = match &self.registry {
            Some(registry) => registry
                .make(&def.task_type, &input)
                .map_err(|e| e.to_string())?,
            None => {
                return Err(format!(
                    "the task type {:?} is not registered",
                    def.task_type
                ));
            }
        };
        self.check_room(1).map_err(|e| e.to_string())?;
        let mut task = NewTask::boxed(body);
        if let Some(agent) = def.agent.clone() {
            task = task.agent(agent);
        }
        if let Some(priority) = def.priority {
            task = task.priority(priority);
        }
        Ok(task)
    }

    /// Run `id` of the schedule at `index`, for `nominal`, starts at `wall`: it holds
    /// its `session`,
    /// and the schedule's status counts it (with `note`, if the session was made
    /// again, as its last error).
    fn record_run_start(
        &mut self,
        index: u32,
        id: TaskId,
        nominal: Timestamp,
        wall: Timestamp,
        session: Option<&str>,
        note: Option<String>,
    ) {
        if let Some(s) = session.and_then(|sid| self.schedules.sessions.by_id.get_mut(sid)) {
            s.holder = Some(id);
        }
        let Some(entry) = self.schedules.get_mut(index) else {
            return;
        };
        let status = &mut entry.status;
        status.running.push(id);
        status.runs += 1;
        status.last_run = Some(wall);
        status.last_fire = Some(nominal);
        if let Some(session) = session {
            status.session = Some(session.to_owned());
        }
        if let Some(note) = note {
            status.last_error = Some(note);
        }
    }

    /// A run could not start: recorded as a failed run.
    fn run_failed_to_start(
        &mut self,
        index: u32,
        nominal: Timestamp,
        wall: Timestamp,
        reason: String,
    ) -> FireOutcome {
        if let Some(entry) = self.schedules.get_mut(index) {
            entry.status.last_run = Some(wall);
            entry.status.last_fire = Some(nominal);
            record_result(entry, Err(format!("the run could not start: {reason}")));
        }
        FireOutcome::Failed(reason)
    }

    /// Task `id` (at index `task_index`) ended: if it was a schedule's run, its
    /// session is let go (with the run's messages added if it completed), and its
    /// schedule's status says how it went.
    pub(super) fn schedule_run_ended(&mut self, id: TaskId, task_index: u32) {
        let Some(run) = self.schedules.runs.remove(&id) else {
            return;
        };
        let state = self
            .tasks
            .entries()
            .get(task_index as usize)
            .map(|t| t.state());
        let result = match state {
            Some(TaskState::Completed(Ok(value))) => Ok(value),
            Some(TaskState::Completed(Err(error))) => Err(error.to_string()),
            Some(TaskState::Canceled(reason)) => Err(reason.to_string()),
            _ => Err("the run ended".to_owned()),
        };
        let wall = self.wall_clock().unwrap_or(Timestamp::UNIX_EPOCH);
        if let Some(session) = run
            .session
            .as_ref()
            .and_then(|sid| self.schedules.sessions.by_id.get_mut(sid))
        {
            if session.holder == Some(id) {
                session.holder = None;
            }
            if let Ok(output) = &result
                && let Some(messages) = output.get("messages").and_then(Value::as_array)
            {
                session.messages.extend(messages.iter().cloned());
                session.updated_at = wall;
            }
        }
        if let Some(sid) = &run.session {
            self.schedules.trim(sid);
        }
        let Some(entry) = self
            .schedules
            .get_mut(run.index)
            .filter(|e| e.uid == run.uid)
        else {
            return;
        };
        entry.status.running.retain(|t| *t != id);
        record_result(entry, result.map(|_| ()));
        self.set_schedule_timer(run.index, false);
    }
}

/// Records how a run went on its schedule: counts, last result and error, and the
/// pause after too many failures in a row.
fn record_result(entry: &mut Entry, result: Result<(), String>) {
    let status = &mut entry.status;
    match result {
        Ok(()) => {
            status.last_result = Some(RunResult::Success);
            status.last_error = None;
            status.consecutive_failures = 0;
        }
        Err(error) => {
            status.last_result = Some(RunResult::Error);
            status.last_error = Some(error);
            status.consecutive_failures += 1;
            if let Some(limit) = entry.def.pause_after_failures
                && status.consecutive_failures >= limit
                && entry.def.enabled
            {
                entry.def.enabled = false;
                status.next_run = None;
                status.paused_reason =
                    Some(format!("paused itself after {limit} failed runs in a row"));
            }
        }
    }
}

/// A run's input: the schedule's; if it is a JSON object, with
/// `"schedule": {"slug", "fire"}` (the nominal fire time, RFC 3339) added, and
/// `"session": {"id", "messages"}` when the run has a session.
fn run_input(
    input: &Value,
    slug: &str,
    fire: Timestamp,
    session: Option<(String, Vec<Value>)>,
) -> Value {
    let mut input = input.clone();
    if let Some(object) = input.as_object_mut() {
        object.insert(
            "schedule".to_owned(),
            serde_json::json!({ "slug": slug, "fire": fire.to_string() }),
        );
        if let Some((id, messages)) = session {
            // The messages are moved in, not copied again.
            object.insert(
                "session".to_owned(),
                serde_json::json!({ "id": id, "messages": Value::Array(messages) }),
            );
        }
    }
    input
}

#[cfg(test)]
mod tests;
