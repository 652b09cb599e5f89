//! What the scheduler shows: `queue_state` and `queue_details` for dashboards, and
//! the `debug scheduler` table.

use std::fmt::Write as _;
use std::time::Duration;

use std::borrow::Cow;

use super::{Body, InFlightRequest, Scheduler, SlotPhase, TaskInfo, TaskSlot};
use crate::{AgentId, Kind, Priority, RequestKey, Stats, TaskId, TaskState, Time, WaitReason};

/// Counts of waiting tasks by what they wait for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitCounts {
    /// Waiting for requests.
    pub requests: usize,
    /// Waiting for a timer.
    pub timer: usize,
    /// Waiting for children.
    pub children: usize,
    /// Waiting for a slot.
    pub slot: usize,
    /// Waiting for dependencies.
    pub dependencies: usize,
}

/// The scheduler at a glance (`queue_state`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct QueueState {
    /// Tasks that have started and not ended (ready, being polled, or waiting on
    /// requests, timers or children).
    pub running: usize,
    /// Tasks waiting for a slot.
    pub queued: usize,
    /// Tasks waiting for dependencies.
    pub blocked: usize,
    /// Tasks in the run queue.
    pub ready: usize,
    /// Waiting tasks by reason.
    pub waiting: WaitCounts,
    /// Requests made and not answered.
    pub in_flight: usize,
    /// Requests held back by a limiter.
    pub held_requests: usize,
    /// Whether a rate limit holds anything back now: a 429 back-off, or requests
    /// waiting on a full request or token window, or tasks waiting on a full start
    /// window. (Requests waiting only for an in-flight cap are not rate limited.)
    pub rate_limited: bool,
    /// The latest end of a 429 back-off still running.
    pub backoff_until: Option<Time>,
    /// Each kind backing off after a 429 now, with the end of its back-off, by kind.
    pub backoffs: Vec<(Kind, Time)>,
    /// The counters.
    pub stats: Stats,
}

/// One task in [`Scheduler::queue_details`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct QueueDetail {
    /// The task.
    pub id: TaskId,
    /// Its agent.
    pub agent: AgentId,
    /// Its type.
    pub type_name: &'static str,
    /// Its level.
    pub priority: Priority,
    /// Its state.
    pub state: TaskState,
    /// Time since it was submitted.
    pub age: Duration,
    /// Ancestors.
    pub depth: u32,
    /// Iteration, from 1.
    pub iteration: u32,
    /// Its score under a policy that computes one.
    pub score: Option<i64>,
}

/// One request kind's gate in [`Scheduler::gates`]: what it has out, what waits at it,
/// and how full its limits are now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GateView {
    /// The request kind.
    pub kind: Kind,
    /// Requests of the kind with executors now.
    pub in_flight: u32,
    /// Its cap on requests in flight, if it has one.
    pub max_in_flight: Option<u32>,
    /// Requests held at the gate.
    pub held: usize,
    /// Requests sent in the current window, the window's maximum, and its length.
    pub window: Option<(u32, u32, Duration)>,
    /// Estimated tokens sent in the current window, the maximum, and its length.
    pub tokens: Option<(u64, u64, Duration)>,
    /// The end of its back-off after a 429, while it backs off.
    pub backoff_until: Option<Time>,
    /// 429s in a row since its last success.
    pub backoff_hits: u32,
}

impl Scheduler {
    /// Every request kind's gate, by kind (a kind has one once it is limited, or once a
    /// 429 backed it off). For dashboards: O(kinds + window entries).
    pub fn gates(&self) -> Vec<GateView> {
        let now = self.now;
        self.requests
            .gates
            .iter()
            .map(|(kind, gate)| GateView {
                kind: kind.clone(),
                in_flight: gate.in_flight,
                max_in_flight: gate.max_in_flight(),
                held: gate.held.len(),
                window: gate.window.as_ref().map(|w| w.use_at(now)),
                tokens: gate.tokens.as_ref().map(|w| w.use_at(now)),
                backoff_until: gate.backoff.active(now).then_some(gate.backoff.until),
                backoff_hits: gate.backoff.hits,
            })
            .collect()
    }

    /// The scheduler at a glance. O(n) in the tasks the table holds, ended ones
    /// included: for dashboards, not hot paths (see
    /// [`queue_state_of`](Scheduler::queue_state_of)).
    pub fn queue_state(&self) -> QueueState {
        self.queue_state_from(self.tasks.slots().iter().map(|(_, task)| task))
    }

    /// [`queue_state`](Scheduler::queue_state), looking only at the tasks `live` names
    /// for the counts of waiting tasks: a caller that keeps the ids of the live tasks
    /// (the HTTP API's views) spares the walk over every task the table holds, which
    /// grows with the ended ones kept for their retention. Given every live task, the
    /// same as `queue_state`; ids not in the table, or of ended tasks, count for
    /// nothing.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use spool_core::{NewTask, Scheduler, Step, Time, task_fn};
    ///
    /// let mut scheduler = Scheduler::new(Default::default());
    /// let sleeper = NewTask::new(task_fn("sleeper", |cx| {
    ///     cx.sleep(Duration::from_secs(60));
    ///     Step::Wait
    /// }));
    /// let id = scheduler.submit(Time::ZERO, sleeper).unwrap().id;
    /// while scheduler.step(Time::ZERO).is_some() {}
    /// assert_eq!(scheduler.queue_state_of([id]), scheduler.queue_state());
    /// assert_eq!(scheduler.queue_state_of([id]).waiting.timer, 1);
    /// ```
    pub fn queue_state_of(&self, live: impl IntoIterator<Item = TaskId>) -> QueueState {
        self.queue_state_from(
            live.into_iter()
                .filter_map(|id| self.tasks.find(id).map(|(_, task)| task)),
        )
    }

    /// One row of [`queue_details`](Scheduler::queue_details): task `id`'s, if it is
    /// in the table and live.
    pub fn queue_detail(&self, id: TaskId) -> Option<QueueDetail> {
        let (slot, task) = self.tasks.find(id)?;
        (task.phase != SlotPhase::Done).then(|| self.detail(id, slot, task))
    }

    fn queue_state_from<'a>(&'a self, tasks: impl Iterator<Item = &'a TaskSlot>) -> QueueState {
        let now = self.now;
        let mut waiting = WaitCounts::default();
        for task in tasks {
            if task.phase == SlotPhase::Waiting {
                match task.wait_reason() {
                    WaitReason::Request(_) | WaitReason::Requests(_) => waiting.requests += 1,
                    WaitReason::Timer => waiting.timer += 1,
                    WaitReason::Children(_) => waiting.children += 1,
                    WaitReason::Slot | WaitReason::Dependencies(_) => {}
                }
            }
        }
        waiting.slot = self.slots.waiting();
        waiting.dependencies = self.slots.blocked();
        let held = self.requests.held_len();
        let mut rate_limited = false;
        let mut backoff_until = None;
        let mut backoffs = Vec::new();
        for (kind, gate) in &self.requests.gates {
            if gate.backoff.active(now) {
                backoffs.push((kind.clone(), gate.backoff.until));
                backoff_until = Some(
                    backoff_until.map_or(gate.backoff.until, |t: Time| t.max(gate.backoff.until)),
                );
                rate_limited = true;
            } else if let Some(&(_, _, key)) = gate.held.peek() {
                let tokens = super::gates::estimated_tokens(self.tasks.slots(), key);
                rate_limited |= gate.rate_limited(now, tokens);
            }
        }
        if self.slots.start_window_limited(now) {
            rate_limited = true;
        }
        QueueState {
            running: self.tasks.live() - self.slots.queued(),
            queued: self.slots.waiting(),
            blocked: self.slots.blocked(),
            ready: self.ready.len,
            waiting,
            in_flight: self.outbox.in_flight,
            held_requests: held,
            rate_limited,
            backoff_until,
            backoffs,
            stats: self.stats.clone(),
        }
    }

    /// One row per live task, highest priority first, then by id.
    pub fn queue_details(&self) -> Vec<QueueDetail> {
        let mut rows: Vec<QueueDetail> = self
            .tasks
            .index
            .iter()
            .filter_map(|(id, slot)| {
                let task = &self.tasks.slots()[*slot as usize];
                (task.phase != SlotPhase::Done).then(|| self.detail(*id, *slot, task))
            })
            .collect();
        rows.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        rows
    }

    fn detail(&self, id: TaskId, slot: u32, task: &TaskSlot) -> QueueDetail {
        let now = self.now;
        let weight = self
            .ready
            .weights
            .get(task.agent.0 as usize)
            .copied()
            .unwrap_or(1);
        let entry = task.entry(slot, 0, now, weight);
        QueueDetail {
            id,
            agent: task.agent,
            type_name: task.live_type_name(),
            priority: task.priority,
            state: task.state(),
            age: now - task.created_at,
            depth: task.depth(),
            iteration: task.iteration(),
            score: self.ready.policy.score(&entry, now),
        }
    }

    /// The `debug scheduler` table: every live task with its priority (the
    /// computed score under that policy, else the level), age, depth, iteration, and
    /// whether it can run or what holds it. Highest priority first.
    pub fn debug_table(&self) -> String {
        let mut rows = self.queue_details();
        rows.sort_by(|a, b| {
            b.score
                .cmp(&a.score)
                .then(b.priority.cmp(&a.priority))
                .then(a.id.cmp(&b.id))
        });
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<8} {:<12} {:<9} {:<6} {:<6} {:<5} RUNNABLE",
            "ID", "TYPE", "PRIORITY", "AGE", "DEPTH", "ITER"
        );
        for row in rows {
            let priority = row
                .score
                .map_or_else(|| row.priority.to_string(), |s| s.to_string());
            let runnable = match &row.state {
                TaskState::Ready => "yes".to_owned(),
                TaskState::Running => "running".to_owned(),
                TaskState::Waiting(WaitReason::Slot) => "no (waiting for a slot)".to_owned(),
                TaskState::Waiting(WaitReason::Dependencies(1)) => {
                    "no (1 incomplete dependency)".to_owned()
                }
                TaskState::Waiting(WaitReason::Dependencies(n)) => {
                    format!("no ({n} incomplete dependencies)")
                }
                TaskState::Waiting(reason) => format!("no (waiting: {reason})"),
                state => format!("no ({state})"),
            };
            let _ = writeln!(
                out,
                "{:<8} {:<12} {:<9} {:<6} {:<6} {:<5} {}",
                row.id.get(),
                row.type_name,
                priority,
                short_age(row.age),
                row.depth,
                row.iteration,
                runnable
            );
        }
        out
    }
}

/// `45s`, `5m`, `2h`: whole units, as in the seed's table.
fn short_age(age: Duration) -> String {
    let secs = age.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m", secs / 60)
    } else {
        format!("{}h", secs / 3600)
    }
}

/// The listings: every task, every request in flight.
impl Scheduler {
    /// Every task in the table, by id.
    pub fn tasks(&self) -> impl Iterator<Item = TaskInfo> + '_ {
        self.tasks
            .index
            .iter()
            .map(move |(id, slot)| self.info(*id, &self.tasks.slots()[*slot as usize]))
    }

    /// Task `id`, if it is in the table: one row of [`tasks`](Scheduler::tasks), found
    /// by id (for views that copy only the tasks that changed).
    pub fn task(&self, id: TaskId) -> Option<TaskInfo> {
        let (_, t) = self.tasks.find(id)?;
        Some(self.info(id, t))
    }

    /// The kinds of task `id`'s requests in flight (made and not answered), in the
    /// order it made them; empty for a task not in the table.
    pub fn task_requests(&self, id: TaskId) -> Vec<Kind> {
        self.tasks.find(id).map_or_else(Vec::new, |(_, t)| {
            t.pending
                .as_slice()
                .iter()
                .filter(|p| p.in_flight())
                .map(|p| p.kind.clone())
                .collect()
        })
    }

    fn info(&self, id: TaskId, t: &TaskSlot) -> TaskInfo {
        TaskInfo {
            id,
            type_name: match &t.body {
                Body::Live(body) => Cow::Borrowed(body.type_name()),
                Body::Ended(ended) => ended.type_name.clone(),
            },
            agent: self.agent_name(t.agent).to_owned(),
            priority: t.priority,
            state: t.state(),
            created_at: t.created_at,
            in_flight: t.in_flight,
        }
    }

    /// Every request in flight, by key: what executors (or a human, for confirmations)
    /// still owe an answer to.
    pub fn in_flight(&self) -> Vec<InFlightRequest> {
        let mut out = Vec::new();
        for slot in self.tasks.index.values() {
            let t = &self.tasks.slots()[*slot as usize];
            for p in t.pending.as_slice() {
                if let Some(request) = p.request() {
                    out.push(InFlightRequest {
                        key: RequestKey::new(t.id, p.number, *slot),
                        request,
                    });
                }
            }
        }
        out
    }
}
