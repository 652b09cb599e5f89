//! Schedules on the test scheduler: the wall clock its virtual time starts at, the
//! task types runs are made of, and the schedule operations, each routing what it
//! started as [`TestScheduler::submit`] does.

use jiff::Timestamp;
use spool_core::{
    FireOutcome, ScheduleDef, ScheduleError, ScheduleInfo, SchedulePatch, SessionInfo, TaskRegistry,
};

use crate::TestScheduler;

impl TestScheduler {
    /// Says that the virtual time now is the wall-clock instant `wall` (schedules fire
    /// by the wall clock). Call it once, before the first schedule.
    ///
    /// # Example
    /// ```
    /// use spool_test::TestScheduler;
    ///
    /// let mut t = TestScheduler::new();
    /// t.set_wall_clock("2027-01-01T00:00:00Z".parse().unwrap());
    /// assert_eq!(t.wall_clock().unwrap().to_string(), "2027-01-01T00:00:00Z");
    /// ```
    pub fn set_wall_clock(&mut self, wall: Timestamp) {
        let now = self.now();
        self.core_mut().set_wall_clock(now, wall);
        self.route();
    }

    /// The wall-clock instant of the virtual time now, once it was set.
    pub fn wall_clock(&self) -> Option<Timestamp> {
        self.core().wall_clock()
    }

    /// The task types schedules make their runs of, and the round-trip check
    /// restores tasks through (see [`check_round_trip`](TestScheduler::check_round_trip)).
    pub fn set_registry(&mut self, registry: TaskRegistry) {
        self.core_mut().set_registry(registry);
    }

    /// [`Scheduler::put_schedule`](spool_core::Scheduler::put_schedule) now.
    ///
    /// # Errors
    /// As `put_schedule`.
    pub fn put_schedule(&mut self, def: ScheduleDef) -> Result<bool, ScheduleError> {
        let now = self.now();
        let out = self.core_mut().put_schedule(now, def);
        self.route();
        out
    }

    /// [`Scheduler::patch_schedule`](spool_core::Scheduler::patch_schedule) now.
    ///
    /// # Errors
    /// As `patch_schedule`.
    pub fn patch_schedule(
        &mut self,
        slug: &str,
        patch: SchedulePatch,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let now = self.now();
        let out = self.core_mut().patch_schedule(now, slug, patch);
        self.route();
        out
    }

    /// [`Scheduler::delete_schedule`](spool_core::Scheduler::delete_schedule) now.
    ///
    /// # Errors
    /// As `delete_schedule`.
    pub fn delete_schedule(&mut self, slug: &str) -> Result<(), ScheduleError> {
        let now = self.now();
        self.core_mut().delete_schedule(now, slug)
    }

    /// [`Scheduler::pause_schedule`](spool_core::Scheduler::pause_schedule) now.
    ///
    /// # Errors
    /// As `pause_schedule`.
    pub fn pause_schedule(&mut self, slug: &str) -> Result<(), ScheduleError> {
        let now = self.now();
        self.core_mut().pause_schedule(now, slug)
    }

    /// [`Scheduler::resume_schedule`](spool_core::Scheduler::resume_schedule) now.
    ///
    /// # Errors
    /// As `resume_schedule`.
    pub fn resume_schedule(&mut self, slug: &str) -> Result<(), ScheduleError> {
        let now = self.now();
        let out = self.core_mut().resume_schedule(now, slug);
        self.route();
        out
    }

    /// [`Scheduler::trigger_schedule`](spool_core::Scheduler::trigger_schedule) now.
    ///
    /// # Errors
    /// As `trigger_schedule`.
    pub fn trigger_schedule(&mut self, slug: &str) -> Result<FireOutcome, ScheduleError> {
        let now = self.now();
        let out = self.core_mut().trigger_schedule(now, slug);
        self.route();
        out
    }

    /// [`Scheduler::delete_session`](spool_core::Scheduler::delete_session) now.
    ///
    /// # Errors
    /// As `delete_session`.
    pub fn delete_session(&mut self, id: &str) -> Result<(), ScheduleError> {
        let now = self.now();
        self.core_mut().delete_session(now, id)
    }

    /// Every schedule with its status, by slug.
    pub fn schedules(&self) -> Vec<ScheduleInfo> {
        self.core().schedules()
    }

    /// The schedule named `slug`.
    pub fn schedule(&self, slug: &str) -> Option<ScheduleInfo> {
        self.core().schedule(slug)
    }

    /// Every session, by id.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.core().sessions()
    }

    /// The session `id`.
    pub fn session(&self, id: &str) -> Option<SessionInfo> {
        self.core().session(id)
    }
}
