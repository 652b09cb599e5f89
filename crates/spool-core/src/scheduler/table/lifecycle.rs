//! The task lifecycle: the phases a task goes through and the only ways between them.
//! A task's phase changes only through the methods here, each of which names the
//! phases it may leave (`TRANSITIONS` lists them all):
//!
//! | method | from | to | when |
//! |---|---|---|---|
//! | `transition_to_running` | Ready | Running | the run queue hands it to a step |
//! | `transition_to_ready` | Running, Waiting | Ready | it yielded, joined a child already ended, or what it waited for came |
//! | `transition_to_waiting` | Running | Waiting | its poll left it waiting on requests, a timer or children |
//! | `admit` | Blocked, Queued | Ready | a new or unblocked task enters (a child, or a task given a slot) |
//! | `transition_to_queued` | Blocked | Queued | a new or unblocked task waits for a slot |
//! | `transition_to_blocked` | Blocked | Blocked | a new task waits for its dependencies |
//! | `transition_to_waiting_unstarted` | Blocked | Waiting | a new child whose dependency failed, before it ends |
//! | `transition_to_done` | any but Done | Done | it ends: returned, failed, canceled, rejected, past its deadline |
//!
//! A new entry is made `Blocked`: the phase in which nothing runs it, queues it or
//! counts it as running; submission moves it on before the input ends. A restored
//! entry takes the phase its record names; that is not a transition.
//!
//! An illegal transition is a bug in the scheduler, never the fault of an input. Debug
//! builds (every test, and the simulator's runs) stop at it, naming the task and both
//! phases. Release builds never panic over it:
//! - the transitions of the hot loop (`transition_to_running`, `transition_to_ready`,
//!   `transition_to_waiting`: two or three per step) are checked in debug builds only.
//!   Each follows, a few lines up, a guard of its caller that tests the very phase it
//!   leaves (the run queue's entry is `Ready`; the task polled is `Running`; a task is
//!   woken only when `Waiting`), and a second test there costs instructions on every
//!   step for a fact already known;
//! - the others (admission and ending: a few in a task's life) go through
//!   [`TaskTable::transition`], which checks them in release builds too: an illegal one
//!   is refused — the task stays in its phase — and counted
//!   ([`TaskTable::refused_transitions`]), for invariant checks to report.

use super::TaskPhase::{Blocked, Done, Queued, Ready, Running, Waiting};
use super::{TaskEntry, TaskPhase, TaskTable};
use crate::id::TaskId;

/// One transition of the table: the phases it may leave, and the phase it enters.
#[derive(Debug)]
pub(in crate::scheduler) struct Transition {
    /// The method that makes it.
    pub(in crate::scheduler) name: &'static str,
    /// The phases it may leave.
    pub(in crate::scheduler) from: &'static [TaskPhase],
    /// The phase it enters.
    pub(in crate::scheduler) to: TaskPhase,
    /// `from` as a bit set over `TaskPhase as u8`, for a test of one instruction.
    mask: u8,
}

impl Transition {
    const fn new(name: &'static str, from: &'static [TaskPhase], to: TaskPhase) -> Transition {
        let mut mask = 0;
        let mut i = 0;
        while i < from.len() {
            mask |= 1 << from[i] as u8;
            i += 1;
        }
        Transition {
            name,
            from,
            to,
            mask,
        }
    }

    /// Whether a task in `phase` may make this transition.
    #[inline(always)]
    fn allows(&self, phase: TaskPhase) -> bool {
        self.mask & (1 << phase as u8) != 0
    }
}

const RUN: Transition = Transition::new("transition_to_running", &[Ready], Running);
const READY: Transition = Transition::new("transition_to_ready", &[Running, Waiting], Ready);
const WAIT: Transition = Transition::new("transition_to_waiting", &[Running], Waiting);
const ADMIT: Transition = Transition::new("admit", &[Blocked, Queued], Ready);
const QUEUE: Transition = Transition::new("transition_to_queued", &[Blocked], Queued);
const BLOCK: Transition = Transition::new("transition_to_blocked", &[Blocked], Blocked);
const UNSTARTED: Transition =
    Transition::new("transition_to_waiting_unstarted", &[Blocked], Waiting);
const END: Transition = Transition::new(
    "transition_to_done",
    &[Ready, Running, Waiting, Queued, Blocked],
    Done,
);

/// The transition table: every way a task's phase may change (the constants above, which
/// the methods below make; tests check that runs reach each and no other).
#[cfg(test)]
pub(in crate::scheduler) const TRANSITIONS: [&Transition; 8] = [
    &RUN, &READY, &WAIT, &ADMIT, &QUEUE, &BLOCK, &UNSTARTED, &END,
];

/// A transition the table does not allow, refused: the task stays in the phase it
/// was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("task {task} cannot go from {from:?} to {to:?} ({name} leaves only {allowed:?})")]
pub(in crate::scheduler) struct IllegalTransition {
    /// The task.
    pub(in crate::scheduler) task: TaskId,
    /// The phase it is in.
    pub(in crate::scheduler) from: TaskPhase,
    /// The phase it was to enter.
    pub(in crate::scheduler) to: TaskPhase,
    /// The method asked for it.
    pub(in crate::scheduler) name: &'static str,
    /// The phases that method may leave.
    pub(in crate::scheduler) allowed: &'static [TaskPhase],
}

impl TaskEntry {
    /// Ready → Running: the run queue handed the task to a step.
    #[inline(always)]
    #[track_caller]
    pub(in crate::scheduler) fn transition_to_running(&mut self) {
        self.go_unchecked(&RUN);
    }

    /// Running or Waiting → Ready: it yielded or joined a child already ended, or what
    /// it waited for came.
    #[inline(always)]
    #[track_caller]
    pub(in crate::scheduler) fn transition_to_ready(&mut self) {
        self.go_unchecked(&READY);
    }

    /// Running → Waiting: its poll left it waiting on requests, a timer or children.
    #[inline(always)]
    #[track_caller]
    pub(in crate::scheduler) fn transition_to_waiting(&mut self) {
        self.go_unchecked(&WAIT);
    }

    /// Blocked or Queued → Ready: a new or unblocked task enters the run queue (a
    /// spawned child, or a task given its slot). Through [`TaskTable::transition`].
    pub(in crate::scheduler) fn admit(&mut self) -> Result<(), IllegalTransition> {
        self.go(&ADMIT)
    }

    /// Blocked → Queued: a new or unblocked task waits for a slot. Through
    /// [`TaskTable::transition`].
    pub(in crate::scheduler) fn transition_to_queued(&mut self) -> Result<(), IllegalTransition> {
        self.go(&QUEUE)
    }

    /// Blocked → Blocked: a new task (made `Blocked`) waits for its dependencies.
    /// Through [`TaskTable::transition`].
    pub(in crate::scheduler) fn transition_to_blocked(&mut self) -> Result<(), IllegalTransition> {
        self.go(&BLOCK)
    }

    /// Blocked → Waiting: a new child whose dependency failed, just before it ends
    /// (`Waiting` has no queue counts for the ending to take back). Through
    /// [`TaskTable::transition`].
    pub(in crate::scheduler) fn transition_to_waiting_unstarted(
        &mut self,
    ) -> Result<(), IllegalTransition> {
        self.go(&UNSTARTED)
    }

    /// Any live phase → Done: the task ends. Through [`TaskTable::transition`].
    pub(in crate::scheduler) fn transition_to_done(&mut self) -> Result<(), IllegalTransition> {
        self.go(&END)
    }

    /// Makes `transition`, checked in debug builds only (see the module's comment).
    #[inline(always)]
    #[track_caller]
    fn go_unchecked(&mut self, transition: &'static Transition) {
        debug_assert!(
            transition.allows(self.phase),
            "{}",
            self.illegal(transition)
        );
        #[cfg(test)]
        reached::record(self.phase, transition.to);
        self.phase = transition.to;
    }

    /// Makes `transition` if the table allows it from the task's phase; otherwise
    /// leaves the phase as it is.
    #[inline(always)]
    fn go(&mut self, transition: &'static Transition) -> Result<(), IllegalTransition> {
        if !transition.allows(self.phase) {
            return Err(self.illegal(transition));
        }
        #[cfg(test)]
        reached::record(self.phase, transition.to);
        self.phase = transition.to;
        Ok(())
    }

    /// `transition`, refused for this task.
    fn illegal(&self, transition: &'static Transition) -> IllegalTransition {
        IllegalTransition {
            task: self.id,
            from: self.phase,
            to: transition.to,
            name: transition.name,
            allowed: transition.from,
        }
    }
}

impl TaskTable {
    /// Makes one of the checked transitions (`go`: [`TaskEntry::admit`],
    /// [`TaskEntry::transition_to_queued`], ...) of the task at `index` (it must be
    /// there), noted as changed if changes are tracked; returns the task. An illegal
    /// transition stops a debug build; a release build refuses it (the phase stays) and
    /// counts it.
    #[inline(always)]
    #[track_caller]
    pub(in crate::scheduler) fn transition(
        &mut self,
        index: u32,
        go: impl FnOnce(&mut TaskEntry) -> Result<(), IllegalTransition>,
    ) -> &mut TaskEntry {
        self.transition_at::<true>(index, go)
    }

    /// [`transition`](TaskTable::transition), when this same input already noted the
    /// task as changed (as [`entry_mut_noted`](TaskTable::entry_mut_noted)): not noted
    /// again.
    #[inline(always)]
    #[track_caller]
    pub(in crate::scheduler) fn transition_noted(
        &mut self,
        index: u32,
        go: impl FnOnce(&mut TaskEntry) -> Result<(), IllegalTransition>,
    ) -> &mut TaskEntry {
        self.transition_at::<false>(index, go)
    }

    #[inline(always)]
    #[track_caller]
    fn transition_at<const NOTE: bool>(
        &mut self,
        index: u32,
        go: impl FnOnce(&mut TaskEntry) -> Result<(), IllegalTransition>,
    ) -> &mut TaskEntry {
        if let (true, Some(changes)) = (NOTE, self.changes.as_deref_mut()) {
            changes.mark(index);
        }
        let Some(task) = self.slab.get_mut(index as usize) else {
            panic!("no task at index {index}");
        };
        let result = go(task);
        debug_assert!(result.is_ok(), "{}", refusal(&result));
        if result.is_err() {
            self.refused += 1;
        }
        task
    }

    /// How many checked transitions were refused (see [`TaskTable::transition`]):
    /// nonzero only in a release build whose scheduler has a bug.
    pub(in crate::scheduler) fn refused_transitions(&self) -> u64 {
        self.refused
    }
}

/// What a refused transition's message says (empty for one made).
fn refusal(result: &Result<(), IllegalTransition>) -> String {
    result.err().map(|e| e.to_string()).unwrap_or_default()
}

/// Test builds only: every transition made on this thread, by (from, to), so that a
/// test can show which transitions of the table its scenarios reach. Per thread, as
/// each test runs on its own.
#[cfg(test)]
pub(in crate::scheduler) mod reached {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::TaskPhase;

    thread_local! {
        static REACHED: RefCell<BTreeMap<(u8, u8), u64>> = const { RefCell::new(BTreeMap::new()) };
    }

    /// Counts a transition from `from` to `to`.
    pub(super) fn record(from: TaskPhase, to: TaskPhase) {
        REACHED.with(|r| *r.borrow_mut().entry((from as u8, to as u8)).or_default() += 1);
    }

    /// The transitions made on this thread since they were last taken, by
    /// `(from as u8, to as u8)`, with how many times each was made.
    pub(in crate::scheduler) fn take() -> BTreeMap<(u8, u8), u64> {
        REACHED.with(|r| std::mem::take(&mut *r.borrow_mut()))
    }
}

#[cfg(test)]
mod tests;
