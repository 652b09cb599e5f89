//! What the scheduler shows: `queue_state` and `queue_details` for dashboards, and
//! the `debug scheduler` table.
//!
//! A request is *in flight* from the moment it is out (let go by its kind's gate, or
//! made, for a kind without limits) until it is answered; a request waiting at a gate
//! (for room under a cap or a window, behind its agent's cap, or for a 429 back-off to
//! end) is *held*, and counts apart. The driver takes every request out at the end of
//! the input that let it go, so "out" is "handed to the driver for an executor", and
//! the counts here agree with each gate's own count at every moment.

use std::fmt::Write as _;
use std::time::Duration;

use std::borrow::Cow;

use super::{Body, InFlightRequest, Scheduler, TaskEntry, TaskInfo, TaskPhase};
use crate::id::{AgentId, RequestKey, TaskId};
use crate::kind::Kind;
use crate::limiter::AgentKindLimits;
use crate::pending::Out;
use crate::priority::Priority;
use crate::state::{TaskState, WaitReason};
use crate::stats::Stats;
use crate::time::Time;

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
    /// Requests in flight: out (let go by their kind's gate, or made, for a kind
    /// without limits) and not answered. Held requests are not counted: a kind's
    /// count never exceeds its cap.
    pub in_flight: usize,
    /// Requests held back: waiting at their kind's gate (for room under its cap or a
    /// window, or for a 429 back-off to end) or behind their agent's cap. Made and not
    /// answered, but not in flight.
    pub held_requests: usize,
    /// The same two counts for each request kind with any, by kind.
    pub by_kind: Vec<KindRequests>,
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

/// One request kind's requests in [`QueueState::by_kind`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindRequests {
    /// The request kind.
    pub kind: Kind,
    /// Its requests out and not answered (as [`QueueState::in_flight`]).
    pub in_flight: usize,
    /// Its requests held back (as [`QueueState::held_requests`]).
    pub held: usize,
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
    /// Requests of the kind let go by the gate and not answered (in flight): never
    /// more than its cap.
    pub in_flight: u32,
    /// Its cap on requests in flight, if it has one.
    pub max_in_flight: Option<u32>,
    /// Requests waiting at the gate (not counting those parked behind their agent's
    /// cap, which [`QueueState::by_kind`] counts as held too).
    pub held: usize,
    /// Requests sent in the current window, the window's maximum, and its length.
    pub window: Option<(u32, u32, Duration)>,
    /// Estimated tokens sent in the current window, the maximum, and its length.
    pub tokens: Option<(u64, u64, Duration)>,
    /// The end of its back-off after a 429, while it backs off.
    pub backoff_until: Option<Time>,
    /// 429s in a row since its last success.
    pub backoff_hits: u32,
    /// Each agent's limits on the kind ([`RequestLimits::agent_limit`](crate::RequestLimits::agent_limit)),
    /// if agents are limited in it.
    pub agent_limits: Option<AgentKindLimits>,
    /// Requests waiting apart for their agent's share of the kind (not in `held`).
    pub waiting_for_agents: usize,
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
                held: gate
                    .held
                    .iter()
                    .filter(|(_, _, key)| self.held_live(*key))
                    .count(),
                window: gate.window.as_ref().map(|w| w.use_at(now)),
                tokens: gate.tokens.as_ref().map(|w| w.use_at(now)),
                backoff_until: gate.backoff.active(now).then_some(gate.backoff.until),
                backoff_hits: gate.backoff.hits,
                agent_limits: gate.quotas.as_deref().map(|q| q.common()),
                waiting_for_agents: gate.quotas.as_deref().map_or(0, |q| {
                    q.iter()
                        .flat_map(|(_, quota)| quota.parked.iter())
                        .filter(|(_, _, key)| self.held_live(*key))
                        .count()
                }),
            })
            .collect()
    }

    /// The scheduler at a glance. O(n) in the tasks the table holds, ended ones
    /// included: for dashboards, not hot paths (see
    /// [`queue_state_of`](Scheduler::queue_state_of)).
    pub fn queue_state(&self) -> QueueState {
        let state = self.queue_state_from(self.tasks.entries().iter().map(|(_, task)| task));
        debug_assert_eq!(
            (self.outbox.held, self.outbox.sent()),
            (state.held_requests, state.in_flight),
            "the counts of requests held and sent kept as they change differ from the tasks'"
        );
        state
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
        let (index, task) = self.tasks.find(id)?;
        (task.phase != TaskPhase::Done).then(|| self.detail(id, index, task))
    }

    fn queue_state_from<'a>(&'a self, tasks: impl Iterator<Item = &'a TaskEntry>) -> QueueState {
        let now = self.now;
        let mut waiting = WaitCounts::default();
        let mut by_kind: Vec<KindRequests> = Vec::new();
        for task in tasks {
            for p in task.pending.as_slice() {
                let (out, held) = match p.out() {
                    Some(Out::Unsent) => (0, 1),
                    Some(_) => (1, 0),
                    None => continue,
                };
                // Kinds are few: a short list searched in order beats a map here.
                match by_kind.iter_mut().find(|k| k.kind == p.kind) {
                    Some(k) => {
                        k.in_flight += out;
                        k.held += held;
                    }
                    None => by_kind.push(KindRequests {
                        kind: p.kind.clone(),
                        in_flight: out,
                        held,
                    }),
                }
            }
            if task.phase == TaskPhase::Waiting {
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
        by_kind.sort_by(|a, b| a.kind.cmp(&b.kind));
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
                let tokens = super::gates::estimated_tokens(self.tasks.entries(), key);
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
            in_flight: by_kind.iter().map(|k| k.in_flight).sum(),
            held_requests: by_kind.iter().map(|k| k.held).sum(),
            by_kind,
            rate_limited,
            backoff_until,
            backoffs,
            stats: self.stats.clone(),
        }
    }

    /// One row per live task, in the policy's order: the order the run-queue policy
    /// would pick them in if every one of them were waiting to go now. Fifo: by
    /// submission; priority: by level, then by submission; computed: by score; fair
    /// share: the agent with the smallest share of running tasks first; an embedder's
    /// policy: its own order. The order is found by asking the policy itself: every
    /// live task goes, in submission order, into a new queue of the same policy (told
    /// which tasks hold a slot), and the rows come in the order that queue gives them
    /// back. O(n log n) in the live tasks (and, for
    /// [`PolicyChoice::Custom`](crate::PolicyChoice::Custom), one more call of its
    /// factory): for dashboards, not hot paths.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use spool_core::{Config, NewTask, PolicyChoice, Priority, Scheduler, Step, Time, task_fn};
    ///
    /// let waits = || task_fn("waits", |cx| {
    ///     cx.sleep(Duration::from_secs(60));
    ///     Step::Wait
    /// });
    /// for (policy, order) in [(PolicyChoice::Fifo, [1, 2, 3]), (PolicyChoice::Priority, [2, 1, 3])] {
    ///     let mut scheduler = Scheduler::new(Config::new().policy(policy));
    ///     scheduler.submit(Time::ZERO, NewTask::new(waits())).unwrap();
    ///     scheduler.submit(Time::ZERO, NewTask::new(waits()).priority(Priority::High)).unwrap();
    ///     scheduler.submit(Time::ZERO, NewTask::new(waits()).priority(Priority::Low)).unwrap();
    ///     let ids: Vec<u64> = scheduler.queue_details().iter().map(|d| d.id.get()).collect();
    ///     assert_eq!(ids, order);
    /// }
    /// ```
    pub fn queue_details(&self) -> Vec<QueueDetail> {
        self.queue_details_of(self.tasks.by_id.keys().copied())
    }

    /// [`queue_details`](Scheduler::queue_details) over the tasks `live` names (ids not
    /// in the table, or of ended tasks, are left out), in the policy's order: for a
    /// caller that keeps the ids of the live tasks, as
    /// [`queue_state_of`](Scheduler::queue_state_of).
    pub fn queue_details_of(&self, live: impl IntoIterator<Item = TaskId>) -> Vec<QueueDetail> {
        let mut tasks: Vec<(TaskId, u32)> = live
            .into_iter()
            .filter_map(|id| {
                let (index, task) = self.tasks.find(id)?;
                (task.phase != TaskPhase::Done).then_some((id, index))
            })
            .collect();
        // Submission order: ids only grow.
        tasks.sort_unstable_by_key(|(id, _)| *id);
        tasks.dedup_by_key(|(id, _)| *id);
        self.in_policy_order(&tasks)
            .into_iter()
            .map(|(id, index)| self.detail(id, index, &self.tasks.entries()[index as usize]))
            .collect()
    }

    /// `tasks` (live, by id) in the order a new queue of the scheduler's policy gives
    /// them back, each pushed as it would be queued now; any the policy does not give
    /// back follow by id.
    fn in_policy_order(&self, tasks: &[(TaskId, u32)]) -> Vec<(TaskId, u32)> {
        let now = self.now;
        let mut queue = self.policy.build();
        for (_, index) in tasks {
            let task = &self.tasks.entries()[*index as usize];
            if task.holds_slot {
                queue.task_started(task.agent);
            }
        }
        for (seq, (_, index)) in (1u64..).zip(tasks) {
            let task = &self.tasks.entries()[*index as usize];
            let weight = self.ready.weight(task.agent);
            queue.push(&task.queue_entry(*index, seq, now, weight));
        }
        let mut placed = vec![false; tasks.len()];
        let mut order = Vec::with_capacity(tasks.len());
        while order.len() < tasks.len() {
            let Some(next) = queue.pop(now) else {
                break;
            };
            // Given back a task it was given, once: an embedder's policy is trusted
            // for nothing more.
            if let Ok(at) = tasks.binary_search_by_key(&next.task, |(id, _)| *id)
                && !std::mem::replace(&mut placed[at], true)
            {
                order.push(tasks[at]);
            }
        }
        for (task, placed) in tasks.iter().zip(placed) {
            if !placed {
                order.push(*task);
            }
        }
        order
    }

    /// Whether held request `key`'s task is live and the request still waits.
    fn held_live(&self, key: RequestKey) -> bool {
        super::gates::held_request(self.tasks.entries(), key).is_some()
    }

    fn detail(&self, id: TaskId, index: u32, task: &TaskEntry) -> QueueDetail {
        let now = self.now;
        let weight = self.ready.weight(task.agent);
        let entry = task.queue_entry(index, 0, now, weight);
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

/// `45s`, `5m`, `2h`: whole units, short enough for a table column.
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
            .by_id
            .iter()
            .map(move |(id, index)| self.info(*id, &self.tasks.entries()[*index as usize]))
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

    fn info(&self, id: TaskId, t: &TaskEntry) -> TaskInfo {
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
            // Sent and not answered: held requests are not in flight.
            in_flight: t.pending.as_slice().iter().filter(|p| p.sent()).count() as u32,
        }
    }

    /// Every request in flight, by key: what executors (or a human, for confirmations)
    /// still owe an answer to.
    pub fn in_flight(&self) -> Vec<InFlightRequest> {
        let mut out = Vec::new();
        for index in self.tasks.by_id.values() {
            let t = &self.tasks.entries()[*index as usize];
            for p in t.pending.as_slice() {
                if let Some(request) = p.request() {
                    out.push(InFlightRequest {
                        key: RequestKey::new(t.id, p.number, *index),
                        request,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        CancelReason, Config, NewTask, PolicyChoice, Request, RequestLimits, Step, task_fn,
    };

    /// A task that asks one LLM question, then waits for ever.
    fn asker() -> NewTask {
        let mut asked = false;
        NewTask::new(task_fn("asker", move |cx| {
            if !std::mem::replace(&mut asked, true) {
                cx.request(Request::llm(json!("question")));
            }
            Step::Wait
        }))
    }

    fn llm_capped_at(cap: u32) -> Scheduler {
        Scheduler::new(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, cap)))
    }

    /// Six requests under a cap of four: four are in flight, two held, and the queue's
    /// counts say so, as the gate does, whether or not the driver took them yet.
    #[test]
    fn in_flight_counts_only_requests_out_and_held_ones_apart() {
        let mut scheduler = llm_capped_at(4);
        let ids: Vec<TaskId> = (0..6)
            .map(|_| scheduler.submit(Time::ZERO, asker()).unwrap().id)
            .collect();
        while scheduler.step(Time::ZERO).is_some() {}
        let counts = |s: &Scheduler| {
            let q = s.queue_state();
            let gate = &s.gates()[0];
            (q.in_flight, q.held_requests, gate.in_flight, gate.held)
        };
        assert_eq!(counts(&scheduler), (4, 2, 4, 2));
        let per_task: Vec<u32> = ids
            .iter()
            .filter_map(|id| scheduler.task(*id))
            .map(|t| t.in_flight)
            .collect();
        assert_eq!(per_task, [1, 1, 1, 1, 0, 0]);
        let sent: Vec<RequestKey> = std::iter::from_fn(|| scheduler.poll_request())
            .map(|out| out.key)
            .collect();
        assert_eq!(sent.len(), 4);
        assert_eq!(counts(&scheduler), (4, 2, 4, 2));
        assert_eq!(
            scheduler.queue_state().by_kind,
            [KindRequests {
                kind: Kind::Llm,
                in_flight: 4,
                held: 2
            }]
        );
        // A held request whose task ends is held no more, though its key stays in the
        // gate's queue until it reaches the head.
        let held_task = ids[5];
        assert!(sent.iter().all(|key| key.task() != held_task));
        scheduler
            .cancel(Time::ZERO, held_task, CancelReason::Requested)
            .unwrap();
        assert_eq!(counts(&scheduler), (4, 1, 4, 1));
        assert_eq!(scheduler.in_flight_len(), 5);
        // An answer makes room: the last held request goes, and nothing is held.
        let _ = scheduler.handle_response(Time::ZERO, crate::Response::new(sent[0], Ok(json!(1))));
        assert_eq!(counts(&scheduler), (4, 0, 4, 0));
    }

    /// Kinds without limits: every request made is in flight at once, by kind.
    #[test]
    fn without_limits_every_request_made_is_in_flight() {
        let mut scheduler = Scheduler::new(Config::new());
        for _ in 0..3 {
            scheduler.submit(Time::ZERO, asker()).unwrap();
        }
        while scheduler.step(Time::ZERO).is_some() {}
        let q = scheduler.queue_state();
        assert_eq!((q.in_flight, q.held_requests), (3, 0));
        assert_eq!(
            q.by_kind,
            [KindRequests {
                kind: Kind::Llm,
                in_flight: 3,
                held: 0
            }]
        );
    }

    /// A task that sleeps for ever (a minute at a time).
    fn sleeper(name: &'static str) -> impl crate::AgentTask {
        task_fn(name, |cx| {
            cx.sleep(Duration::from_secs(60));
            Step::Wait
        })
    }

    fn ids_in_order(policy: PolicyChoice, levels: &[Priority]) -> Vec<u64> {
        let mut scheduler = Scheduler::new(Config::new().policy(policy));
        for level in levels {
            scheduler
                .submit(Time::ZERO, NewTask::new(sleeper("waits")).priority(*level))
                .unwrap();
        }
        while scheduler.step(Time::ZERO).is_some() {}
        // Submitted after the others were polled: still placed by the policy.
        scheduler
            .submit(
                Time::ZERO,
                NewTask::new(sleeper("late")).priority(Priority::Critical),
            )
            .unwrap();
        let details = scheduler.queue_details();
        assert_eq!(
            scheduler.queue_details_of(details.iter().rev().map(|d| d.id)),
            details,
            "the order does not depend on the order the ids come in"
        );
        details.iter().map(|d| d.id.get()).collect()
    }

    /// The rows come in the policy's order: fifo by submission whatever the levels,
    /// priority by level then submission.
    #[test]
    fn queue_details_follow_the_policys_order() {
        use Priority::{High, Low, Normal};
        let levels = [Low, High, Normal, High];
        assert_eq!(ids_in_order(PolicyChoice::Fifo, &levels), [1, 2, 3, 4, 5]);
        assert_eq!(
            ids_in_order(PolicyChoice::Priority, &levels),
            [5, 2, 4, 3, 1]
        );
    }

    /// Fair share: the agent with the smaller share of running tasks first, then
    /// levels within an agent.
    #[test]
    fn queue_details_under_fair_share_put_the_agent_with_less_running_first() {
        let mut scheduler = Scheduler::new(Config::new().policy(PolicyChoice::FairShare));
        let waits = || NewTask::new(sleeper("waits"));
        for (agent, level) in [
            ("a", Priority::Normal),
            ("a", Priority::Normal),
            ("a", Priority::High),
            ("b", Priority::Low),
        ] {
            scheduler
                .submit(Time::ZERO, waits().agent(agent).priority(level))
                .unwrap();
        }
        while scheduler.step(Time::ZERO).is_some() {}
        let ids: Vec<u64> = scheduler
            .queue_details()
            .iter()
            .map(|d| d.id.get())
            .collect();
        // Every task holds a slot: a runs three, b one. b's task goes first; then a's,
        // its High one before its Normal ones.
        assert_eq!(ids, [4, 3, 1, 2]);
    }
}
