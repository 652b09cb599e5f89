//! The scheduler's invariants, checked on demand: the cross-part consistency a restore
//! checks of a snapshot, and what must hold of the live state between two inputs —
//! counts that agree with the tasks, no limit exceeded, no request of an ended task in
//! flight, timers that name live tasks. Nothing here runs unless it is called: tests
//! and the simulation call it after every input; the hot loop never does.

use std::collections::BTreeMap;

use super::Scheduler;
use super::table::{TaskEntry, TaskPhase};
use super::timers::TimerKind;
use crate::id::{AgentId, TaskId};
use crate::kind::Kind;
use crate::limiter::Quotas;
use crate::snapshot::SnapshotError;
use crate::time::Time;

/// An invariant of the scheduler that does not hold, from
/// [`Scheduler::check_invariants`]: which one, and the task, request, gate or count it
/// found wrong. Any of these is a bug in the scheduler (or a state put together by
/// hand).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvariantError {
    /// The parts do not hang together as a snapshot's must: the checks a restore makes
    /// (every id named is in the table, each queue holds exactly the tasks in the
    /// phase that puts them there, held requests wait at their own kind's gate).
    #[error("the scheduler's parts do not hang together: {0}")]
    Inconsistent(String),
    /// A count the scheduler keeps differs from the count its tasks give.
    #[error("the scheduler counts {kept} {what}, but its tasks give {actual}")]
    Count {
        /// What is counted.
        what: String,
        /// The count kept.
        kept: usize,
        /// The count the tasks give.
        actual: usize,
    },
    /// A task's own count of requests in flight differs from its requests.
    #[error("task {task} counts {kept} requests in flight, but has {actual}")]
    TaskInFlight {
        /// The task.
        task: TaskId,
        /// Its count.
        kept: u32,
        /// Its requests in flight.
        actual: u32,
    },
    /// A limit is exceeded.
    #[error("{limit} is exceeded: {value}, over its limit of {max}")]
    OverLimit {
        /// The limit, in words (`the llm gate's requests in flight`).
        limit: String,
        /// What there is.
        value: u64,
        /// The most the limit allows.
        max: u64,
    },
    /// An ended task still has a request in flight.
    #[error("task {task} has ended, but its request {number} is still in flight")]
    EndedWithRequest {
        /// The task.
        task: TaskId,
        /// The request's number.
        number: u32,
    },
    /// A standing timer names a task that is not live.
    #[error("a {kind} timer standing at {at} names task {task}, which is not live")]
    TimerOfEndedTask {
        /// The timer's kind (`sleep`, `deadline`).
        kind: &'static str,
        /// When it falls.
        at: Time,
        /// The task it names.
        task: TaskId,
    },
    /// A task waits behind a cap on running tasks that has room, and no task under
    /// that cap is back in the slot queue to take it: it would wait for a slot forever.
    #[error("task {task} waits behind {cap}, which has room, and no task under it is queued")]
    Stranded {
        /// The task.
        task: TaskId,
        /// The cap (`agent `a1`'s cap on running tasks`).
        cap: String,
    },
    /// A live task sleeps with no timer standing to wake it.
    #[error("task {task} sleeps until {until}, but no timer stands for it")]
    SleepWithoutTimer {
        /// The task.
        task: TaskId,
        /// When its sleep ends.
        until: Time,
    },
}

impl Scheduler {
    /// Checks every invariant of the scheduler, between two inputs: the cross-part
    /// consistency a [`restore`](Scheduler::restore) checks of a snapshot (run on the
    /// scheduler's own data, with live bodies left unsaved, so that any task will do);
    /// that the counts kept (tasks live, ready, waiting for a slot or dependencies,
    /// holding a slot by agent and type; requests in flight, held, counted at each gate
    /// and by each agent) agree with the tasks; that no limit is exceeded (a gate's cap
    /// and request window, an agent's cap, `max_running` and the per-agent and per-type
    /// caps on running tasks); that no ended task has a request in flight; and that
    /// every standing sleep or deadline timer names a live task, and every sleeping
    /// task has its timer.
    ///
    /// It reads the whole table: call it from tests and simulations, not a hot loop.
    /// It changes nothing.
    ///
    /// # Errors
    /// The first [`InvariantError`] found, in the order above.
    ///
    /// # Example
    /// ```
    /// use spool_core::{Config, NewTask, Scheduler, Step, Time, task_fn};
    ///
    /// let mut scheduler = Scheduler::new(Config::new());
    /// scheduler.submit(Time::ZERO, NewTask::new(task_fn("t", |_cx| Step::done(1)))).unwrap();
    /// assert_eq!(scheduler.check_invariants(), Ok(()));
    /// while scheduler.step(Time::ZERO).is_some() {
    ///     assert_eq!(scheduler.check_invariants(), Ok(()));
    /// }
    /// ```
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        self.check_parts()?;
        self.check_task_counts()?;
        self.check_request_counts()?;
        self.check_request_limits()?;
        self.check_slot_limits()?;
        self.check_timers()
    }

    /// The checks a restore makes of a snapshot, on the scheduler's own data.
    fn check_parts(&self) -> Result<(), InvariantError> {
        let data = match self.unsaved_data() {
            Ok(data) => data,
            // A custom policy that cannot list its queue has no snapshot data to check.
            Err(SnapshotError::Policy(_)) => return Ok(()),
            Err(error) => return Err(InvariantError::Inconsistent(error.to_string())),
        };
        data.check().map_err(InvariantError::Inconsistent)?;
        super::snapshot::consistent(&data, self).map_err(InvariantError::Inconsistent)
    }

    /// The live tasks in the table, by id.
    fn live_tasks(&self) -> impl Iterator<Item = &TaskEntry> {
        self.tasks
            .by_id
            .values()
            .map(|index| &self.tasks.entries()[*index as usize])
            .filter(|task| task.phase != TaskPhase::Done)
    }

    /// Tasks live, ready, waiting for a slot or for dependencies; and that ended tasks
    /// have nothing in flight.
    fn check_task_counts(&self) -> Result<(), InvariantError> {
        let in_phase = |phase: TaskPhase| self.live_tasks().filter(|t| t.phase == phase).count();
        let by_id = self.tasks.by_id.len();
        count("tasks in the table", self.tasks.entries().len(), by_id)?;
        count("live tasks", self.tasks.live(), self.live_tasks().count())?;
        count("ready tasks", self.ready.len, in_phase(TaskPhase::Ready))?;
        count(
            "tasks running between inputs",
            0,
            in_phase(TaskPhase::Running),
        )?;
        // A phase transition the lifecycle's table refused (release builds only).
        count(
            "phase transitions refused",
            self.tasks.refused_transitions() as usize,
            0,
        )?;
        count(
            "tasks waiting for a slot",
            self.slots.waiting(),
            in_phase(TaskPhase::Queued),
        )?;
        count(
            "tasks waiting for dependencies",
            self.slots.blocked(),
            in_phase(TaskPhase::Blocked),
        )?;
        for task in self.tasks.entries().iter().map(|(_, t)| t) {
            if task.phase != TaskPhase::Done {
                continue;
            }
            if let Some(p) = task.pending.as_slice().iter().find(|p| p.in_flight()) {
                return Err(InvariantError::EndedWithRequest {
                    task: task.id,
                    number: p.number,
                });
            }
        }
        Ok(())
    }

    /// Requests in flight (in all, by task), held back, counted at each gate and by
    /// each agent.
    fn check_request_counts(&self) -> Result<(), InvariantError> {
        let mut in_flight = 0;
        let mut held = 0;
        let mut at_gate: BTreeMap<&Kind, u32> = BTreeMap::new();
        let mut by_agent: BTreeMap<AgentId, u32> = BTreeMap::new();
        let mut by_share: BTreeMap<(&Kind, AgentId), u32> = BTreeMap::new();
        for task in self.live_tasks() {
            let pending = task.pending.as_slice();
            let mine = pending.iter().filter(|p| p.in_flight()).count() as u32;
            if mine != task.in_flight {
                return Err(InvariantError::TaskInFlight {
                    task: task.id,
                    kept: task.in_flight,
                    actual: mine,
                });
            }
            in_flight += mine as usize;
            held += pending.iter().filter(|p| p.unsent()).count();
            for p in pending.iter().filter(|p| p.counted()) {
                *at_gate.entry(&p.kind).or_default() += 1;
                *by_agent.entry(task.agent).or_default() += 1;
                *by_share.entry((&p.kind, task.agent)).or_default() += 1;
            }
        }
        count("requests in flight", self.outbox.in_flight, in_flight)?;
        count("requests held back", self.outbox.held, held)?;
        for (kind, gate) in &self.requests.gates {
            let actual = at_gate.get(kind).copied().unwrap_or(0);
            count(
                &format!("requests in flight through the `{kind}` gate"),
                gate.in_flight as usize,
                actual as usize,
            )?;
            for (agent, quota) in gate.quotas.iter().flat_map(|q| q.iter()) {
                let actual = by_share.get(&(kind, agent)).copied().unwrap_or(0);
                count(
                    &format!(
                        "requests of kind `{kind}` in flight of agent `{}`",
                        self.agent_name(agent)
                    ),
                    quota.in_flight as usize,
                    actual as usize,
                )?;
            }
        }
        for agent in (0..self.tasks.agent_count() as u32).map(AgentId) {
            let actual = by_agent.get(&agent).copied().unwrap_or(0);
            count(
                &format!("requests in flight of agent `{}`", self.agent_name(agent)),
                self.requests.agent_in_flight(agent) as usize,
                actual as usize,
            )?;
        }
        Ok(())
    }

    /// Each gate's cap and request window, each agent's cap.
    fn check_request_limits(&self) -> Result<(), InvariantError> {
        for (kind, gate) in &self.requests.gates {
            if let Some(max) = gate.max_in_flight() {
                over(
                    || format!("the `{kind}` gate's requests in flight"),
                    gate.in_flight.into(),
                    max.into(),
                )?;
            }
            if let Some(window) = &gate.window {
                let (used, max, per) = window.use_at(self.now);
                over(
                    || format!("the `{kind}` gate's window of {per:?}"),
                    used.into(),
                    max.into(),
                )?;
            }
            if let Some(quotas) = gate.quotas.as_deref() {
                self.check_quotas(kind, quotas)?;
            }
        }
        for agent in (0..self.tasks.agent_count() as u32).map(AgentId) {
            if let Some(cap) = self.requests.agent_cap(agent) {
                over(
                    || format!("agent `{}`'s requests in flight", self.agent_name(agent)),
                    self.requests.agent_in_flight(agent).into(),
                    cap.max(1).into(),
                )?;
            }
        }
        Ok(())
    }

    /// Each agent's share of `kind`: its requests in flight within its cap, its window
    /// within its maximum.
    fn check_quotas(&self, kind: &Kind, quotas: &Quotas) -> Result<(), InvariantError> {
        for (agent, quota) in quotas.iter() {
            let name = self.agent_name(agent);
            if let Some(max) = quotas.limits_of(agent).max_in_flight {
                over(
                    || format!("agent `{name}`'s requests of kind `{kind}` in flight"),
                    quota.in_flight.into(),
                    max.max(1).into(),
                )?;
            }
            if let Some(window) = &quota.window {
                let (used, max, per) = window.use_at(self.now);
                over(
                    || format!("agent `{name}`'s window of {per:?} for kind `{kind}`"),
                    used.into(),
                    max.into(),
                )?;
            }
        }
        Ok(())
    }

    /// Tasks holding a slot, in all, by agent and by type: counted as the tasks say,
    /// and within `max_running` and the per-agent and per-type caps.
    fn check_slot_limits(&self) -> Result<(), InvariantError> {
        let Some(queue) = self.slots.queue.as_ref() else {
            return Ok(());
        };
        let holding: Vec<&TaskEntry> = self.live_tasks().filter(|t| t.holds_slot).collect();
        count("tasks holding a slot", queue.running, holding.len())?;
        let limits = self.slots.limits();
        if let Some(max) = limits.max_running {
            over(
                || "max_running".to_owned(),
                holding.len() as u64,
                max as u64,
            )?;
        }
        for agent in (0..self.tasks.agent_count() as u32).map(AgentId) {
            let name = self.agent_name(agent);
            let actual = holding.iter().filter(|t| t.agent == agent).count();
            let kept = queue.per_agent.get(agent.0 as usize).copied().unwrap_or(0);
            count(
                &format!("tasks of agent `{name}` holding a slot"),
                kept as usize,
                actual,
            )?;
            if let Some(max) = self.slots.limits_of(agent).0 {
                let limit = || format!("agent `{name}`'s running tasks");
                over(limit, actual as u64, max as u64)?;
            }
        }
        let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
        for task in &holding {
            *by_type.entry(task.live_type_name()).or_default() += 1;
        }
        for (name, kept) in &queue.per_type {
            let actual = by_type.get(name).copied().unwrap_or(0);
            count(
                &format!("tasks of type `{name}` holding a slot"),
                *kept,
                actual,
            )?;
        }
        for (name, max) in &limits.max_running_per_type {
            let actual = by_type.get(name.as_str()).copied().unwrap_or(0);
            let limit = || format!("type `{name}`'s running tasks");
            over(limit, actual as u64, *max as u64)?;
        }
        self.check_parked(queue)
    }

    /// Every task held back by a cap on running tasks waits behind a cap that is full,
    /// or one under the cap is back in the slot queue (it takes the room, or is held
    /// back again): otherwise nothing would let it back.
    fn check_parked(&self, queue: &super::slots::SlotQueue) -> Result<(), InvariantError> {
        let queued_in = |index: u32, id: TaskId| {
            self.tasks
                .entries()
                .get(index as usize)
                .filter(|t| t.id == id && t.phase == TaskPhase::Queued)
        };
        let Some(in_queue) = queue.order.policy.queued() else {
            return Ok(());
        };
        let back: Vec<&TaskEntry> = in_queue
            .iter()
            .filter_map(|(_, t)| queued_in(t.index, t.task))
            .collect();
        for (cap, parked) in &queue.parked {
            let Some(task) = parked.iter().find_map(|(_, t)| queued_in(t.index, t.task)) else {
                continue;
            };
            let (full, under, name) = match cap {
                super::slots::Cap::Agent(agent) => {
                    let running = queue.per_agent.get(agent.0 as usize).copied().unwrap_or(0);
                    let max = self.slots.limits_of(*agent).0.unwrap_or(usize::MAX);
                    let under = back.iter().any(|t| t.agent == *agent);
                    let name =
                        format!("agent `{}`'s cap on running tasks", self.agent_name(*agent));
                    (running as usize >= max.max(1), under, name)
                }
                super::slots::Cap::Type(type_name) => {
                    let running = queue.per_type.get(type_name).copied().unwrap_or(0);
                    let limits = self.slots.limits();
                    let max = limits.max_running_per_type.get(*type_name).copied();
                    let under = back.iter().any(|t| t.live_type_name() == *type_name);
                    let name = format!("type `{type_name}`'s cap on running tasks");
                    (running >= max.unwrap_or(usize::MAX).max(1), under, name)
                }
            };
            if !full && !under {
                return Err(InvariantError::Stranded {
                    task: task.id,
                    cap: name,
                });
            }
        }
        Ok(())
    }

    /// Every standing sleep or deadline timer names a live task, and every live task
    /// that sleeps has a standing sleep timer.
    fn check_timers(&self) -> Result<(), InvariantError> {
        let stands = |t: &super::timers::Timer| self.stands(t);
        let sleeps = self.timers.standing(TimerKind::Sleep, stands);
        let deadlines = self.timers.standing(TimerKind::Deadline, stands);
        let named = sleeps
            .iter()
            .map(|t| ("sleep", t))
            .chain(deadlines.iter().map(|t| ("deadline", t)));
        for (kind, timer) in named {
            let live = self
                .tasks
                .entries()
                .get(timer.index as usize)
                .is_some_and(|t| t.id == timer.task && t.phase != TaskPhase::Done);
            if !live {
                return Err(InvariantError::TimerOfEndedTask {
                    kind,
                    at: timer.at,
                    task: timer.task,
                });
            }
        }
        for task in self.live_tasks() {
            if task.timer != Time::MAX && !sleeps.iter().any(|t| t.task == task.id) {
                return Err(InvariantError::SleepWithoutTimer {
                    task: task.id,
                    until: task.timer,
                });
            }
        }
        Ok(())
    }
}

/// `Ok` if the count `kept` of `what` is the `actual` one.
fn count(what: &str, kept: usize, actual: usize) -> Result<(), InvariantError> {
    if kept == actual {
        return Ok(());
    }
    Err(InvariantError::Count {
        what: what.to_owned(),
        kept,
        actual,
    })
}

/// `Ok` if `value` is within `max` for the limit `limit` names.
fn over(limit: impl FnOnce() -> String, value: u64, max: u64) -> Result<(), InvariantError> {
    if value <= max {
        return Ok(());
    }
    Err(InvariantError::OverLimit {
        limit: limit(),
        value,
        max,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::limiter::RequestLimits;
    use crate::request::Response;
    use crate::scheduler::Config;
    use crate::task::{NewTask, Step, task_fn};

    /// A scheduler with an LLM gate of cap 1 and two tasks that asked the LLM: one
    /// request out, one held at the gate, and a third task asleep.
    fn busy() -> (Scheduler, crate::id::RequestKey) {
        let limits = RequestLimits::new().max_in_flight(Kind::Llm, 1);
        let mut s = Scheduler::new(Config::new().requests(limits));
        for _ in 0..2 {
            let mut asked = false;
            let task = task_fn("ask", move |cx| {
                if asked {
                    return Step::done(1);
                }
                asked = true;
                cx.llm(json!("q"));
                Step::Wait
            });
            s.submit(Time::ZERO, NewTask::new(task)).unwrap();
        }
        let mut slept = false;
        let sleeper = task_fn("sleep", move |cx| {
            if slept {
                return Step::done(1);
            }
            slept = true;
            cx.sleep(Duration::from_secs(5));
            Step::Wait
        });
        s.submit(Time::ZERO, NewTask::new(sleeper)).unwrap();
        while s.step(Time::ZERO).is_some() {}
        let sent = s.poll_request().unwrap().key;
        assert!(s.poll_request().is_none());
        (s, sent)
    }

    #[test]
    fn a_scheduler_at_work_keeps_them_all() {
        let (mut s, sent) = busy();
        assert_eq!(s.check_invariants(), Ok(()));
        let delivery = s.handle_response(Time::ZERO, Response::ok(sent, json!("a")));
        assert_eq!(delivery, crate::request::Delivery::Delivered);
        assert_eq!(s.check_invariants(), Ok(()));
        // The answer freed the gate: the held request went.
        assert!(s.poll_request().is_some());
        assert_eq!(s.check_invariants(), Ok(()));
        while s.step(Time::ZERO).is_some() {
            assert_eq!(s.check_invariants(), Ok(()));
        }
        s.handle_timeout(Time::from_duration(Duration::from_secs(5)));
        assert_eq!(s.check_invariants(), Ok(()));
    }

    #[test]
    fn a_count_that_drifts_is_named_with_both_counts() {
        let (mut s, _) = busy();
        s.ready.len += 1;
        let error = s.check_invariants().unwrap_err();
        assert_eq!(
            error.to_string(),
            "the scheduler counts 1 ready tasks, but its tasks give 0"
        );
        s.ready.len -= 1;
        s.outbox.in_flight += 1;
        assert_eq!(
            s.check_invariants(),
            Err(InvariantError::Count {
                what: "requests in flight".to_owned(),
                kept: 3,
                actual: 2,
            })
        );
    }

    #[test]
    fn a_gate_past_its_cap_is_a_limit_exceeded() {
        let (mut s, _) = busy();
        // A second request counted out through the gate, as a gate that let one too
        // many go would have: the tasks agree, the cap does not.
        let index = s.tasks.by_id[&TaskId(2)];
        let task = s.tasks.entry_mut(index);
        let agent = task.agent;
        let p = &mut task.pending.as_mut_slice()[0];
        p.set_out(crate::pending::Out::Counted(0));
        s.outbox.held -= 1;
        s.requests.count(&Kind::Llm, agent);
        s.requests.gates.get_mut(&Kind::Llm).unwrap().held.clear();
        assert_eq!(
            s.check_invariants(),
            Err(InvariantError::OverLimit {
                limit: "the `llm` gate's requests in flight".to_owned(),
                value: 2,
                max: 1,
            })
        );
    }

    #[test]
    fn a_sleeping_task_without_its_timer_is_named() {
        let (mut s, _) = busy();
        let index = s.tasks.by_id[&TaskId(3)];
        let until = s.tasks.entries()[index as usize].timer;
        s.tasks.entry_mut(index).timer = until + Duration::from_secs(1);
        assert_eq!(
            s.check_invariants(),
            Err(InvariantError::SleepWithoutTimer {
                task: TaskId(3),
                until: until + Duration::from_secs(1),
            })
        );
    }

    #[test]
    fn a_queue_that_does_not_hold_its_tasks_is_inconsistent() {
        let (mut s, _) = busy();
        let index = s.tasks.by_id[&TaskId(3)];
        s.tasks.entry_mut(index).phase = TaskPhase::Blocked;
        s.slots.count_blocked(AgentId::DEFAULT);
        assert_eq!(
            s.check_invariants(),
            Err(InvariantError::Inconsistent(
                "task 3 waits for dependencies but has none".to_owned()
            ))
        );
    }
}
