//! The thread-local frame an async task's future sees during one poll, and the
//! adapter around the poll: it stages the task's answers in the frame before the poll,
//! and hands what the future asked for to the task's [`TaskContext`] afterwards.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::id::TaskId;
use crate::request::{Answer, Request};
use crate::state::Outcome;
use crate::task::Patches;
use crate::task::{NewTask, Step, TaskContext};
use crate::time::Time;

thread_local! {
    /// One per thread, reused by every async task polled on it: only a task's own
    /// answers and child outcomes are swapped in and out, never the whole frame.
    static FRAME: RefCell<Frame> = const { RefCell::new(Frame::EMPTY) };
}

/// What the future sees and produces during one poll. It holds nothing of the
/// scheduler's: requests are staged here and recorded on the task after the poll, so a
/// future that panics leaves the task's pending set, its counters and the outbox as
/// they were before the poll.
#[derive(Debug)]
pub(super) struct Frame {
    /// Whether a task is being polled on this thread.
    pub(super) active: bool,
    pub(super) task: Option<TaskId>,
    pub(super) now: Time,
    /// The number the next staged request gets: the one the task gives it afterwards.
    next_request: u32,
    pub(super) next_task: u64,
    /// The first request made in this poll: most polls make one, and an `Option` costs
    /// less to fill and empty than a `Vec`.
    request: Option<Request>,
    /// The requests made after it in this poll, in order.
    more_requests: Vec<Request>,
    /// An answer that arrived for this poll, in an `Option` for the same reason.
    answer: Option<Answer>,
    /// The other answers that have arrived and were not taken yet: this poll's, and
    /// those kept from earlier polls.
    answers: Vec<Answer>,
    /// Requests whose futures were dropped before their answer was taken.
    abandoned: Vec<u32>,
    /// Deadlines of the sleeps still pending after this poll.
    pub(super) deadlines: Vec<Time>,
    /// Children spawned in this poll.
    pub(super) spawns: Vec<NewTask>,
    /// Children awaited in this poll.
    pub(super) joins: Vec<TaskId>,
    /// Outcomes of children that ended and were not taken yet.
    pub(super) results: Vec<(TaskId, Outcome)>,
    /// Requests an `all` group still waits for, polled in this poll.
    pub(super) all_pending: Vec<u32>,
    /// Children a `join_all` still waits for, polled in this poll.
    pub(super) all_children_pending: Vec<TaskId>,
    /// Wakers that combinators (such as `FuturesUnordered`) handed to the futures
    /// inside them, by what each waits for: woken before the poll in which it arrived,
    /// so such combinators poll the right inner future. The task's own top-level
    /// waker is a no-op and never registered.
    wakers: Vec<(Wake, Waker)>,
    /// The task's code-version decisions, lent by the task for the poll.
    pub(super) patches: Patches,
    /// While a fork's tape plays, the changes whose new branch its origin took.
    pub(super) tape_patches: Option<Vec<String>>,
}

/// What a registered waker waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    Answer(u32),
    Deadline(Time),
    Child(TaskId),
}

impl Frame {
    const EMPTY: Frame = Frame {
        active: false,
        task: None,
        now: Time::ZERO,
        next_request: 0,
        next_task: 0,
        request: None,
        more_requests: Vec::new(),
        answer: None,
        answers: Vec::new(),
        abandoned: Vec::new(),
        deadlines: Vec::new(),
        spawns: Vec::new(),
        joins: Vec::new(),
        results: Vec::new(),
        all_pending: Vec::new(),
        all_children_pending: Vec::new(),
        wakers: Vec::new(),
        patches: Patches {
            decided: Vec::new(),
            unjournaled: 0,
        },
        tape_patches: None,
    };

    /// Stages `request`, made by the future in this poll; returns the number the task
    /// will give it.
    pub(super) fn stage(&mut self, request: Request) -> u32 {
        let number = self.next_request;
        self.next_request += 1;
        if self.request.is_none() {
            self.request = Some(request);
        } else {
            self.more_requests.push(request);
        }
        number
    }

    /// Takes the answer to request `number`, if it has arrived.
    pub(super) fn take_answer(&mut self, number: u32) -> Option<Answer> {
        if self.answer.as_ref().is_some_and(|a| a.number == number) {
            return self.answer.take();
        }
        let i = self.answers.iter().position(|a| a.number == number)?;
        Some(self.answers.swap_remove(i))
    }

    /// Remembers `waker` for `what`, unless it is the no-op top-level waker.
    pub(super) fn register(&mut self, what: Wake, waker: &Waker) {
        if waker.will_wake(Waker::noop()) {
            return;
        }
        match self.wakers.iter_mut().find(|(w, _)| *w == what) {
            Some((_, old)) => old.clone_from(waker),
            None => self.wakers.push((what, waker.clone())),
        }
    }

    /// Wakes the registered wakers whose event has arrived.
    fn wake_arrived(&mut self) {
        if self.wakers.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.wakers.len() {
            let arrived = match self.wakers[i].0 {
                Wake::Answer(n) => {
                    self.answer.as_ref().is_some_and(|a| a.number == n)
                        || self.answers.iter().any(|a| a.number == n)
                }
                Wake::Deadline(t) => self.now >= t,
                Wake::Child(id) => self.results.iter().any(|(c, _)| *c == id),
            };
            if arrived {
                self.wakers.swap_remove(i).1.wake();
            } else {
                i += 1;
            }
        }
    }

    /// Ends the poll: the frame is left clean for the next task, its buffers empty.
    fn clear(&mut self) {
        self.active = false;
        self.task = None;
        self.request = None;
        self.more_requests.clear();
        self.answer = None;
        self.answers.clear();
        self.abandoned.clear();
        self.deadlines.clear();
        self.spawns.clear();
        self.joins.clear();
        self.results.clear();
        self.all_pending.clear();
        self.all_children_pending.clear();
        self.wakers.clear();
        self.patches = Patches::default();
        self.tape_patches = None;
    }
}

/// Runs `f` on this thread's frame.
///
/// # Panics
/// Outside a spool task's poll.
pub(super) fn with_frame<R>(f: impl FnOnce(&mut Frame) -> R) -> R {
    FRAME.with_borrow_mut(|frame| {
        assert!(
            frame.active,
            "a spool future was polled outside a spool task: `Cx` futures only work inside \
             an `async_task` polled by a spool scheduler, not on another executor"
        );
        f(frame)
    })
}

/// If the future panics: leaves the frame clean for the next task polled on this
/// thread, dropping what the poll staged. The task itself was not touched during the
/// poll, so it needs nothing given back. The normal path forgets the guard and hands
/// the staged work to the task instead; no `catch_unwind` is needed here (the
/// scheduler catches the panic and ends the task `Panicked`).
struct Unwind;

impl Drop for Unwind {
    fn drop(&mut self) {
        FRAME.with_borrow_mut(Frame::clear);
    }
}

/// What an async task keeps between polls: what arrived and was not taken yet.
#[derive(Debug, Default)]
pub(super) struct Kept {
    answers: Vec<Answer>,
    abandoned: Vec<u32>,
    results: Vec<(TaskId, Outcome)>,
    wakers: Vec<(Wake, Waker)>,
}

impl Kept {
    /// Lends what the task kept to the frame. Usually nothing: then nothing moves.
    fn lend(&mut self, frame: &mut Frame) {
        if !self.answers.is_empty() {
            std::mem::swap(&mut self.answers, &mut frame.answers);
        }
        if !self.abandoned.is_empty() {
            std::mem::swap(&mut self.abandoned, &mut frame.abandoned);
        }
        if !self.results.is_empty() {
            std::mem::swap(&mut self.results, &mut frame.results);
        }
        if !self.wakers.is_empty() {
            std::mem::swap(&mut self.wakers, &mut frame.wakers);
        }
    }

    /// Takes back what the task keeps, leaving the frame's buffers empty for the next
    /// task. Whatever is empty stays where it is.
    fn take_back(&mut self, frame: &mut Frame) {
        if !frame.answers.is_empty() {
            std::mem::swap(&mut self.answers, &mut frame.answers);
        }
        if !frame.abandoned.is_empty() {
            std::mem::swap(&mut self.abandoned, &mut frame.abandoned);
        }
        if !frame.results.is_empty() {
            std::mem::swap(&mut self.results, &mut frame.results);
        }
        if !frame.wakers.is_empty() {
            std::mem::swap(&mut self.wakers, &mut frame.wakers);
        }
    }
}

/// Polls `future` once: stages what the task received in the frame, polls, and
/// records on the task what the future asked for; `kept` is what the task kept from
/// earlier polls.
pub(super) fn poll(
    mut future: Pin<&mut (dyn Future<Output = Outcome> + Send)>,
    kept: &mut Kept,
    cx: &mut TaskContext<'_>,
) -> Step {
    FRAME.with_borrow_mut(|frame| frame.open(kept, cx));

    let unwind = Unwind;
    let poll = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    // Not unwinding: the staged work goes to the task below.
    std::mem::forget(unwind);

    let group_only = FRAME.with_borrow_mut(|frame| frame.close(kept, cx));
    match poll {
        Poll::Ready(outcome) => Step::Done(outcome),
        Poll::Pending if group_only => Step::Wait,
        // Otherwise spool cannot see which combination the future waits for, so any
        // answer, timer or joined child wakes it and the future decides.
        Poll::Pending => Step::WaitAny,
    }
}

impl Frame {
    /// Opens the frame for a poll of `cx`'s task: what the task kept from earlier
    /// polls, and what it received since (answers, children's results), are staged
    /// for its future, and the wakers of what arrived are woken.
    #[inline(always)]
    fn open(&mut self, kept: &mut Kept, cx: &mut TaskContext<'_>) {
        self.active = true;
        self.task = Some(cx.task);
        self.now = cx.now;
        self.next_request = *cx.next_request;
        self.next_task = *cx.next_task;
        // Each poll starts from its own task's decisions, never what a task polled
        // before left (one that panicked does not close its frame).
        self.patches = cx
            .family
            .as_mut()
            .map(|family| std::mem::take(&mut family.patches))
            .unwrap_or_default();
        self.tape_patches = cx
            .family
            .as_ref()
            .and_then(|family| family.fork.as_ref())
            .and_then(|fork| fork.tape.playing_patches())
            .map(<[String]>::to_vec);
        kept.lend(self);
        // The answers move to the frame, except those nobody awaits any more.
        while let Some(answer) = cx.take_answer() {
            match self.abandoned.iter().position(|n| *n == answer.number) {
                Some(i) => {
                    self.abandoned.swap_remove(i);
                }
                None if self.answer.is_none() => self.answer = Some(answer),
                None => self.answers.push(answer),
            }
        }
        while let Some(result) = cx.take_any_child_result() {
            self.results.push(result);
        }
        self.wake_arrived();
    }

    /// Closes the frame after the poll: what the future asked for goes to the task,
    /// what it did not take back to `kept`. Gives whether the future waits only on
    /// `Cx::all` and `Cx::join_all` groups (then it resumes once, when all arrived).
    #[inline(always)]
    fn close(&mut self, kept: &mut Kept, cx: &mut TaskContext<'_>) -> bool {
        self.issue(cx);
        if !self.patches.decided.is_empty() {
            cx.family.get_or_insert_with(Default::default).patches =
                std::mem::take(&mut self.patches);
        }
        // Answers the future did not take in this poll are kept for a later one.
        if let Some(answer) = self.answer.take() {
            self.answers.push(answer);
        }
        kept.take_back(self);
        self.active = false;
        self.task = None;
        let groups_only = self.waits_on_groups_only(cx);
        self.deadlines.clear();
        self.all_pending.clear();
        self.all_children_pending.clear();
        groups_only
    }

    /// Hands the task what the future asked for in this poll: its requests and spawns,
    /// the children it awaits, its earliest deadline.
    #[inline(always)]
    fn issue(&mut self, cx: &mut TaskContext<'_>) {
        // In the order the future made them, so each gets the number it was told.
        if let Some(request) = self.request.take() {
            cx.request(request);
            if !self.more_requests.is_empty() {
                for request in self.more_requests.drain(..) {
                    cx.request(request);
                }
            }
        }
        debug_assert_eq!(*cx.next_request, self.next_request);
        if !self.spawns.is_empty() {
            for child in self.spawns.drain(..) {
                cx.spawn(child);
            }
        }
        // The task waits for exactly the children its future awaited in this poll:
        // a child no future awaits any more (the loser of a `join_any`) is let go.
        if let Some(family) = cx.family.as_mut() {
            family.joined.clear();
            for child in self.joins.drain(..) {
                cx.join(child);
            }
        } else {
            self.joins.clear();
        }
        match self.deadlines.iter().min() {
            Some(deadline) => cx.sleep_until(*deadline),
            None => cx.cancel_timer(),
        }
    }

    /// Whether all the future waits on is covered by `Cx::all` and `Cx::join_all`
    /// groups — every request in flight in one, every joined child in one, no sleep:
    /// then it needs all of them.
    #[inline(always)]
    fn waits_on_groups_only(&mut self, cx: &TaskContext<'_>) -> bool {
        let joined = cx.family.as_ref().map_or(0, |f| f.joined.len());
        // As sets: a child or request awaited by two groups counts once.
        if self.all_pending.len() > 1 {
            self.all_pending.sort_unstable();
            self.all_pending.dedup();
        }
        if self.all_children_pending.len() > 1 {
            self.all_children_pending.sort_unstable();
            self.all_children_pending.dedup();
        }
        (!self.all_pending.is_empty() || !self.all_children_pending.is_empty())
            && self.deadlines.is_empty()
            && self.all_pending.len() as u32 == cx.in_flight()
            && self.all_children_pending.len() == joined
    }
}

/// Forgets request `number`, whose future was dropped before its answer was taken: its
/// answer, now or later, is discarded. Does nothing outside a poll (a future dropped
/// with its task).
pub(super) fn abandon(number: u32) {
    let _ = FRAME.try_with(|frame| {
        if let Ok(mut frame) = frame.try_borrow_mut()
            && frame.active
            && frame.take_answer(number).is_none()
        {
            frame.abandoned.push(number);
        }
    });
}
