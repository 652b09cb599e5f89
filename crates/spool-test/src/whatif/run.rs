//! A what-if run: the workload's arrivals submitted to a fresh scheduler at their
//! recorded times, and each request answered after its recorded latency, in virtual
//! time. Everything due at one instant happens in sequence-number order.

use std::collections::BTreeMap;

use spool_core::{
    Config, NewTask, OutboundRequest, RequestError, RequestKey, Response, Scheduler, TaskId, Time,
};

use super::stats::{Counts, Observer, UnmatchedRequest};
use super::{Answered, InputKind, RunStats, Workload};

/// Turns in a row at one instant with nothing done after which a run stops.
const MAX_IDLE_TURNS: u32 = 1000;

/// Something due at a moment of the run.
#[derive(Debug)]
enum Due {
    /// The workload's input with this index.
    Input(usize),
    /// An answer to hand to the scheduler.
    Answer(RequestKey, Answered),
}

/// The run going on.
struct Run<'w> {
    workload: &'w Workload,
    scheduler: Scheduler,
    /// What is due, by (time, sequence number).
    due: BTreeMap<(Time, u64), Due>,
    /// The next sequence number.
    seq: u64,
    /// Each task of this run, by id, as the recorded task it stands for (`None`: one
    /// the recorded run did not have).
    tasks: BTreeMap<TaskId, Option<TaskId>>,
    /// The recorded tasks this run has, the other way round.
    recorded: BTreeMap<TaskId, TaskId>,
    /// Children each recorded task has spawned in this run so far.
    spawned: BTreeMap<TaskId, usize>,
    /// Answers given so far, by (recorded task, request number).
    used: BTreeMap<(TaskId, u32), usize>,
    observer: Observer,
    counts: Counts,
    unmatched: Vec<UnmatchedRequest>,
}

/// Runs `workload` under `config` (see [`Workload::run_under`]).
pub(super) fn run(workload: &Workload, config: Config) -> RunStats {
    let mut scheduler = Scheduler::new(config);
    scheduler.record_trace(true);
    let mut run = Run {
        workload,
        scheduler,
        due: BTreeMap::new(),
        seq: 0,
        tasks: BTreeMap::new(),
        recorded: BTreeMap::new(),
        spawned: BTreeMap::new(),
        used: BTreeMap::new(),
        observer: Observer::default(),
        counts: Counts::default(),
        unmatched: Vec::new(),
    };
    for (index, input) in workload.inputs.iter().enumerate() {
        run.push(input.at, Due::Input(index));
    }
    run.until_quiet();
    let policy = run.scheduler.policy_name();
    run.observer
        .finish(&run.scheduler, run.counts, policy, run.unmatched)
}

impl Run<'_> {
    /// Puts `what` due at `at`, after everything due at `at` already.
    fn push(&mut self, at: Time, what: Due) {
        self.due.insert((at, self.seq), what);
        self.seq += 1;
    }

    /// Moves virtual time to each next moment something is due (an input, an answer,
    /// or the scheduler's own timeout) until nothing is. At each moment the timers fire
    /// first, then everything due is handed over in sequence order, and then the tasks
    /// it made ready are polled — as a driver drains its completions before it polls.
    fn until_quiet(&mut self) {
        // Turns in a row at one instant in which nothing happened: the scheduler's
        // timeout keeps naming a moment that changes nothing. Never expected; bounded
        // so that such a bug ends the run (its live tasks are counted as live) instead
        // of hanging it.
        let mut idle = 0;
        let mut last = None;
        loop {
            let next_due = self.due.first_key_value().map(|((at, _), _)| *at);
            let timeout = self.scheduler.poll_timeout();
            let Some(now) = [next_due, timeout].into_iter().flatten().min() else {
                return;
            };
            let now = now.max(self.scheduler.now());
            if timeout.is_some_and(|at| at <= now) {
                self.scheduler.handle_timeout(now);
            }
            let mut moved = last != Some(now);
            last = Some(now);
            while let Some(entry) = self.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let what = entry.remove();
                self.take(now, what);
                moved = true;
            }
            moved |= self.settle(now);
            idle = if moved { 0 } else { idle + 1 };
            if idle > MAX_IDLE_TURNS {
                return;
            }
        }
    }

    /// Hands `what` to the scheduler at `now`.
    fn take(&mut self, now: Time, what: Due) {
        match what {
            Due::Input(index) => self.input(now, index),
            Due::Answer(key, Answered::Unroutable) => {
                let _ = self.scheduler.handle_unroutable(now, key);
            }
            Due::Answer(key, Answered::Result(result, tokens)) => {
                let mut response = Response::new(key, result);
                response.tokens_used = tokens;
                let _ = self.scheduler.handle_response(now, response);
            }
        }
    }

    /// The workload's input `index`: a submission, or a change to a task this run has.
    fn input(&mut self, now: Time, index: usize) {
        let workload = self.workload;
        let Some(input) = workload.inputs.get(index) else {
            return;
        };
        match &input.what {
            InputKind::Submit {
                first,
                tasks,
                fingerprints,
                batch,
            } => self.submit(now, *first, tasks, fingerprints, *batch),
            InputKind::Cancel { task, reason } => {
                if let Some(id) = self.recorded.get(task) {
                    let _ = self.scheduler.cancel(now, *id, reason.clone());
                }
            }
            InputKind::Deadline { task, deadline } => {
                if let Some(id) = self.recorded.get(task) {
                    let _ = self.scheduler.set_deadline(*id, *deadline);
                }
            }
        }
    }

    /// Submits the tasks of a recorded submission again: its `i`th task stands for
    /// the recorded task `first + i`. A task that cannot be rebuilt or submitted is
    /// left out (the workload rebuilt every task once already, so this is rare).
    fn submit(
        &mut self,
        now: Time,
        first: TaskId,
        saved: &[spool_core::SavedSubmission],
        fingerprints: &[Option<spool_core::Fingerprint>],
        batch: bool,
    ) {
        // Each task rebuilt, with the recorded task it stands for.
        let mut tasks = Vec::with_capacity(saved.len());
        let mut stands_for = Vec::with_capacity(saved.len());
        for (i, task) in saved.iter().enumerate() {
            let Ok(mut task) = task.restore(&self.workload.registry) else {
                continue;
            };
            if let Some(Some(fingerprint)) = fingerprints.get(i) {
                task = task.fingerprint(*fingerprint);
            }
            tasks.push(task);
            stands_for.push(TaskId::from_raw(first.get() + i as u64));
        }
        let ids: Vec<Option<TaskId>> = if batch {
            match self.scheduler.submit_all(now, tasks) {
                Ok(submitted) => submitted.into_iter().map(|s| Some(s.id)).collect(),
                Err(_) => Vec::new(),
            }
        } else {
            tasks
                .into_iter()
                .map(|task: NewTask| self.scheduler.submit(now, task).ok().map(|s| s.id))
                .collect()
        };
        for (id, recorded) in ids.into_iter().zip(stands_for) {
            if let Some(id) = id {
                self.stands_for(id, Some(recorded));
            }
        }
    }

    /// Notes that this run's task `id` stands for the recorded task `recorded`.
    fn stands_for(&mut self, id: TaskId, recorded: Option<TaskId>) {
        self.tasks.insert(id, recorded);
        if let Some(recorded) = recorded {
            self.recorded.insert(recorded, id);
        }
    }

    /// After the inputs at `now`: every ready task polled, the trace followed (a child
    /// stands for the recorded parent's child of the same rank), and the requests let
    /// go answered as recorded. Returns whether a task was polled or a request or
    /// cancel signal let go.
    fn settle(&mut self, now: Time) -> bool {
        let mut moved = false;
        while self.scheduler.step(now).is_some() {
            moved = true;
        }
        for (child, parent) in self.observer.take(&mut self.scheduler) {
            let recorded = self
                .tasks
                .get(&parent)
                .copied()
                .flatten()
                .and_then(|parent| {
                    let rank = self.spawned.entry(parent).or_default();
                    *rank += 1;
                    let children = self.workload.children.get(&parent)?;
                    children.get(*rank - 1).copied()
                });
            self.stands_for(child, recorded);
        }
        while let Some(out) = self.scheduler.poll_request() {
            self.send(now, out);
            moved = true;
        }
        while self.scheduler.poll_cancel().is_some() {
            moved = true;
        }
        moved
    }

    /// A request goes out at `now`: its recorded answer is due after its recorded
    /// latency; an unmatched one is answered at once with an error.
    fn send(&mut self, now: Time, out: OutboundRequest) {
        self.counts.requests += 1;
        let key = out.key;
        let recorded = self.tasks.get(&key.task()).copied().flatten();
        let answers = recorded
            .and_then(|task| Some((task, self.workload.answers.get(&(task, key.number()))?)));
        let Some((task, answers)) = answers else {
            self.unmatched.push(UnmatchedRequest {
                task: key.task(),
                number: key.number(),
                kind: out.request.kind.clone(),
            });
            let message = format!(
                "the recorded run has no answer to request {} of task {} ({}): it never sent it",
                key.number(),
                key.task(),
                out.request.kind
            );
            let answer = Answered::Result(Err(RequestError::Failed { message }), None);
            self.push(now, Due::Answer(key, answer));
            return;
        };
        let used = self.used.entry((task, key.number())).or_default();
        // The recorded run never saw it answered: it stays out here too.
        let Some(recorded) = answers.get(*used).or_else(|| answers.last()) else {
            return;
        };
        *used += 1;
        if recorded.answer.is_rate_limited() {
            self.counts.rate_limited += 1;
        }
        let at = now.saturating_add(recorded.latency);
        self.push(at, Due::Answer(key, recorded.answer.clone()));
    }
}
