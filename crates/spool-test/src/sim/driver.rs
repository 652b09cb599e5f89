//! One simulated run: a driver of the core scheduler in virtual time, its executors
//! played from the seed, the workload's tasks submitted and its faults injected at
//! their moments, `check_invariants` after every input, and the observer watching what
//! goes out and comes back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;
use spool_core::{
    CancelReason, Config, Journal, JournalEntry, Kind, NewTask, RequestError, RequestKey, Response,
    Scheduler, SeededRng, Snapshot, TaskId, TaskRegistry, TaskState, Time, TraceEvent,
};

use super::agent::{SimAgent, registry};
use super::observer::Observer;
use super::report::{SimFailure, Violation};
use super::workload::{CrashFrom, FaultKind, Workload, priority};

/// Inputs after which a run that has not ended is taken as stuck.
const MAX_INPUTS: u64 = 100_000;

/// How a run ended: what the two runs are compared by, and its figures.
#[derive(Debug)]
pub(crate) struct Ending {
    pub(crate) states: Vec<(TaskId, TaskState)>,
    pub(crate) trace_hash: u64,
    pub(crate) events: usize,
    pub(crate) inputs: u64,
    pub(crate) faults: BTreeMap<&'static str, u64>,
}

/// A request with an executor: answered at `due`.
#[derive(Debug)]
struct Outstanding {
    key: RequestKey,
    kind: Kind,
    due: Time,
}

/// The checkpoint a crash from parts restores from: the header, a row per task, and
/// how many journal entries came before it.
#[derive(Debug, Default)]
struct Checkpoint {
    header: Vec<u8>,
    rows: BTreeMap<TaskId, Vec<u8>>,
    entries: usize,
}

/// The driver of one run.
pub(crate) struct Driver<'w> {
    workload: &'w Workload,
    rng: SeededRng,
    s: Scheduler,
    now: Time,
    /// Whether crashes (and checkpoints) happen: `false` for the straight run.
    crashes: bool,
    registry: TaskRegistry,
    out: Vec<Outstanding>,
    /// 429s still to give, and their `Retry-After`.
    storm: (u32, u64),
    malformed: bool,
    events: Vec<TraceEvent>,
    observer: Observer,
    /// The journal from the run's start (with crashes only).
    journal: Option<Journal>,
    checkpoint: Option<Checkpoint>,
    inputs: u64,
    faults: BTreeMap<&'static str, u64>,
    /// Requests with executors when the process crashed: a restored scheduler may
    /// hand them out again, once.
    resent: BTreeSet<RequestKey>,
}

impl<'w> Driver<'w> {
    /// A driver of `workload`, its executors played from `seed`.
    pub(crate) fn new(seed: u64, workload: &'w Workload, crashes: bool) -> Driver<'w> {
        let config = Config::new()
            .record_trace(true)
            .policy(workload.policy_choice())
            .limits(workload.limits.task_limits())
            .requests(workload.limits.request_limits());
        Driver {
            workload,
            rng: SeededRng::new(seed),
            s: Scheduler::new(config),
            now: Time::ZERO,
            crashes,
            registry: registry(),
            out: Vec::new(),
            storm: (0, 0),
            malformed: false,
            events: Vec::new(),
            observer: Observer::default(),
            journal: None,
            checkpoint: None,
            inputs: 0,
            faults: BTreeMap::new(),
            resent: BTreeSet::new(),
        }
    }

    /// The failure `violation`, here and now.
    fn fail(&self, violation: Violation) -> SimFailure {
        SimFailure {
            input: self.inputs,
            at: self.now,
            crashed_run: self.crashes,
            violation,
        }
    }

    /// Runs the workload to its end.
    pub(crate) fn run(mut self) -> Result<Ending, SimFailure> {
        if self.crashes {
            let start = Journal::starting_from(&self.s)
                .map_err(|e| self.fail(Violation::Restore(e.to_string())))?;
            self.journal = Some(start);
            self.s.record_journal(true);
        }
        let workload = self.workload;
        let (mut next_task, mut next_fault) = (0, 0);
        loop {
            self.settle()?;
            let submitted = next_task == workload.tasks.len();
            if submitted && self.s.live_len() == 0 {
                break;
            }
            if self.inputs > MAX_INPUTS {
                let live = self.s.live_len();
                return Err(self.fail(Violation::Stuck(format!("{live} tasks live"))));
            }
            let moment = |ms: u64| Time::ZERO + Duration::from_millis(ms);
            let next = [
                workload.tasks.get(next_task).map(|t| moment(t.at)),
                workload.faults.get(next_fault).map(|f| moment(f.at)),
                self.out.iter().map(|o| o.due).min(),
                self.s.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else {
                let live = self.s.live_len();
                let what = format!(
                    "{live} tasks live, and nothing to wake them:\n{}",
                    self.s.debug_table()
                );
                return Err(self.fail(Violation::Stuck(what)));
            };
            self.now = self.now.max(next);
            while let Some(fault) = workload.faults.get(next_fault) {
                if moment(fault.at) > self.now {
                    break;
                }
                next_fault += 1;
                self.inject(&fault.kind)?;
            }
            while let Some(task) = workload.tasks.get(next_task) {
                if moment(task.at) > self.now {
                    break;
                }
                next_task += 1;
                let mut new = NewTask::new(SimAgent::new(task.script.clone()))
                    .agent(format!("a{}", task.agent))
                    .priority(priority(task.priority));
                if let Some(ms) = task.deadline {
                    new = new.deadline(Duration::from_millis(ms));
                }
                let submitted = self.s.submit(self.now, new);
                if let Err(error) = submitted {
                    return Err(self.fail(Violation::Stuck(format!("submit refused: {error}"))));
                }
                self.input()?;
            }
            self.answer_due()?;
            if self.s.poll_timeout().is_some_and(|at| at <= self.now) {
                self.s.handle_timeout(self.now);
                self.input()?;
            }
        }
        self.finish()
    }

    /// After an input: the invariants, the trace events to the observer, the journal
    /// entries to the journal.
    fn input(&mut self) -> Result<(), SimFailure> {
        self.inputs += 1;
        if let Err(error) = self.s.check_invariants() {
            return Err(self.fail(Violation::Invariant(error)));
        }
        let events = self.s.trace_mut().take_events();
        for event in &events {
            if let Err(violation) = self.observer.event(event) {
                return Err(self.fail(violation));
            }
        }
        if let Some(journal) = self.journal.as_mut() {
            while let Some(entry) = self.s.poll_journal() {
                journal.entries.push(entry);
            }
            // The events too: a replay compares its own with them.
            let recorded = events.iter().cloned().map(JournalEntry::Event);
            journal.entries.extend(recorded);
        }
        self.events.extend(events);
        self.take()
    }

    /// Polls ready tasks until none is.
    fn settle(&mut self) -> Result<(), SimFailure> {
        while self.s.step(self.now).is_some() {
            self.input()?;
        }
        Ok(())
    }

    /// Takes every cancel signal and request out, as a driver does after each input:
    /// a request is out from the input that let it go, and its limits count it from
    /// then.
    fn take(&mut self) -> Result<(), SimFailure> {
        // Cancel signals first: a request canceled no longer counts against its
        // limits, and the room it left may already have let another go.
        let mut took = false;
        while let Some(cancel) = self.s.poll_cancel() {
            took = true;
            self.observer.settled(cancel.key);
            self.resent.remove(&cancel.key);
            self.out.retain(|o| o.key != cancel.key);
        }
        while let Some(out) = self.s.poll_request() {
            took = true;
            let key = out.key;
            if self.resent.remove(&key) {
                continue;
            }
            let agent = self.s.task(key.task()).map(|t| t.agent).unwrap_or_default();
            let limits = &self.workload.limits;
            let tokens = out.request.tokens;
            let kind = out.request.kind.clone();
            if let Err(v) = self
                .observer
                .sent(limits, self.now, key, &kind, tokens, &agent)
            {
                return Err(self.fail(v));
            }
            let due = self.now + Duration::from_millis(5 + self.rng.below(300));
            self.out.push(Outstanding { key, kind, due });
        }
        // Taking changes nothing the invariants read; checked again all the same.
        match self.s.check_invariants() {
            Err(error) if took => Err(self.fail(Violation::Invariant(error))),
            _ => Ok(()),
        }
    }

    /// Delivers every answer due by now, in the order due (then by key).
    fn answer_due(&mut self) -> Result<(), SimFailure> {
        let now = self.now;
        let mut due: Vec<Outstanding> = Vec::new();
        let mut i = 0;
        while i < self.out.len() {
            if self.out[i].due <= now {
                due.push(self.out.remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|o| (o.due, o.key));
        for o in due {
            let result = if o.kind == Kind::Llm && self.storm.0 > 0 {
                self.storm.0 -= 1;
                self.reached("429 storm");
                Err(RequestError::RateLimited {
                    retry_after: Some(Duration::from_millis(self.storm.1)),
                })
            } else if self.malformed {
                self.malformed = false;
                self.reached("malformed answer");
                Ok(json!("<html>502 Bad Gateway</html>"))
            } else {
                Ok(json!({ "answer": o.key.number() }))
            };
            let malformed = matches!(&result, Ok(v) if v.is_string());
            self.answer(Response::new(o.key, result.clone()))?;
            if malformed {
                // The same answer again: it must not reach the task twice.
                self.answer(Response::new(o.key, result))?;
            }
        }
        Ok(())
    }

    /// Hands `response` to the scheduler.
    fn answer(&mut self, response: Response) -> Result<(), SimFailure> {
        let key = response.key;
        self.observer.settled(key);
        self.resent.remove(&key);
        let delivery = self.s.handle_response(self.now, response);
        if delivery == spool_core::Delivery::Delivered
            && let Err(violation) = self.observer.delivered(key)
        {
            return Err(self.fail(violation));
        }
        self.input()
    }

    /// Counts a fault class reached.
    fn reached(&mut self, class: &'static str) {
        *self.faults.entry(class).or_default() += 1;
    }

    /// Injects a fault.
    fn inject(&mut self, fault: &FaultKind) -> Result<(), SimFailure> {
        match fault {
            FaultKind::Storm { count, retry_after } => self.storm = (*count, *retry_after),
            FaultKind::Timeout => {
                if !self.out.is_empty() {
                    let o = self.out.remove(0);
                    self.reached("timeout");
                    let error = RequestError::Timeout {
                        after: Duration::from_secs(30),
                    };
                    self.answer(Response::err(o.key, error))?;
                }
            }
            FaultKind::ExecutorDeath => {
                let (dead, alive) = std::mem::take(&mut self.out)
                    .into_iter()
                    .partition(|o| o.kind == Kind::Llm);
                self.out = alive;
                let dead: Vec<Outstanding> = dead;
                if !dead.is_empty() {
                    self.reached("executor death");
                }
                for o in dead {
                    let error = RequestError::ExecutorDied {
                        kind: "llm".to_owned(),
                        message: "the executor's thread panicked".to_owned(),
                    };
                    self.answer(Response::err(o.key, error))?;
                }
            }
            FaultKind::Malformed => self.malformed = true,
            FaultKind::Cancel(n) => {
                let made = &self.observer.made;
                if !made.is_empty() {
                    let id = made[*n as usize % made.len()];
                    if self.s.cancel(self.now, id, CancelReason::Requested).is_ok() {
                        self.reached("cancellation");
                    }
                    self.input()?;
                }
            }
            FaultKind::ClockJump(ms) => {
                self.reached("clock jump");
                self.now = self.now + Duration::from_millis(*ms);
            }
            FaultKind::Checkpoint if self.crashes => self.checkpoint()?,
            FaultKind::Crash(from) if self.crashes => self.crash(*from)?,
            FaultKind::Checkpoint | FaultKind::Crash(_) => {}
        }
        Ok(())
    }

    /// Writes the checkpoint's parts: the rows changed since the last over its rows.
    fn checkpoint(&mut self) -> Result<(), SimFailure> {
        let parts = self
            .s
            .snapshot_changes()
            .map_err(|e| self.fail(Violation::Restore(e.to_string())))?;
        let entries = self.journal.as_ref().map_or(0, |j| j.entries.len());
        let mut checkpoint = match self.checkpoint.take() {
            Some(old) if !parts.full => old,
            _ => Checkpoint::default(),
        };
        checkpoint.header = parts.header;
        for id in parts.removed {
            checkpoint.rows.remove(&id);
        }
        checkpoint.rows.extend(parts.rows);
        checkpoint.entries = entries;
        self.checkpoint = Some(checkpoint);
        Ok(())
    }

    /// The process crashes and the scheduler is restored `from` a snapshot, the last
    /// checkpoint's parts and the journal since, or the whole journal; the executors
    /// keep the requests they had, and answer them to the restored scheduler. It must
    /// be the scheduler that crashed: the same trace hash, and then the same run.
    fn crash(&mut self, from: CrashFrom) -> Result<(), SimFailure> {
        let restore_error = |e: String| Violation::Restore(format!("{from:?}: {e}"));
        let restored = match from {
            CrashFrom::Snapshot => self.restore_snapshot(),
            CrashFrom::Parts => {
                if self.checkpoint.is_none() {
                    self.checkpoint()?;
                }
                self.replay_parts()
            }
            CrashFrom::Journal => self.replay(None),
        };
        let mut restored = restored.map_err(|e| self.fail(restore_error(e)))?;
        let (was, is) = (self.s.trace().hash(), restored.trace().hash());
        if was != is {
            let what = format!("restored from {from:?}, its trace hash is {is:x}, not {was:x}");
            return Err(self.fail(Violation::Diverged(what)));
        }
        // The restored scheduler's trace holds what a replay did again: not news.
        let _ = restored.trace_mut().take_events();
        restored.record_journal(true);
        self.s = restored;
        // Restored from a journal, it hands out again what it handed out since the
        // journal's start (taking a request is not an input): the executors that have
        // them de-duplicate by key. Restored from a snapshot, it hands out none again.
        self.resent = match from {
            CrashFrom::Snapshot => BTreeSet::new(),
            CrashFrom::Parts | CrashFrom::Journal => self.out.iter().map(|o| o.key).collect(),
        };
        self.reached(match from {
            CrashFrom::Snapshot => "crash-restore from a snapshot",
            CrashFrom::Parts => "crash-restore from parts",
            CrashFrom::Journal => "crash-restore from the journal",
        });
        self.input()
    }

    /// A scheduler restored from the scheduler's snapshot, through its bytes.
    fn restore_snapshot(&self) -> Result<Scheduler, String> {
        let bytes = self
            .s
            .snapshot()
            .and_then(|s| s.encode())
            .map_err(|e| e.to_string())?;
        let snapshot = Snapshot::decode(&bytes).map_err(|e| e.to_string())?;
        Scheduler::restore(&snapshot, &self.registry).map_err(|e| e.to_string())
    }

    /// A scheduler restored from the checkpoint's parts and the journal since.
    fn replay_parts(&self) -> Result<Scheduler, String> {
        let checkpoint = self.checkpoint.as_ref().ok_or("no checkpoint")?;
        let rows = checkpoint
            .rows
            .iter()
            .map(|(id, row)| (*id, row.as_slice()));
        let snapshot = Snapshot::from_parts(&checkpoint.header, rows).map_err(|e| e.to_string())?;
        let start = snapshot.encode().map_err(|e| e.to_string())?;
        self.replay(Some((start, checkpoint.entries)))
    }

    /// A scheduler replayed from the journal: from its start, or from `start` with the
    /// entries from the index given.
    fn replay(&self, start: Option<(Vec<u8>, usize)>) -> Result<Scheduler, String> {
        let journal = self.journal.as_ref().ok_or("no journal")?;
        let journal = match start {
            None => journal.clone(),
            Some((start, from)) => Journal {
                start,
                entries: journal.entries.get(from..).unwrap_or_default().to_vec(),
            },
        };
        let replay = Scheduler::replay(&journal, &self.registry).map_err(|e| e.to_string())?;
        if let Some(divergence) = replay.divergence {
            return Err(divergence.to_string());
        }
        Ok(replay.scheduler)
    }

    /// The run's end: the observer's last checks, and how every task ended.
    fn finish(self) -> Result<Ending, SimFailure> {
        if let Err(violation) = self.observer.finish(&self.events) {
            return Err(self.fail(violation));
        }
        let states = self
            .observer
            .made
            .iter()
            .map(|id| (*id, self.s.task_state(*id).unwrap_or(TaskState::Ready)))
            .collect();
        Ok(Ending {
            states,
            trace_hash: self.s.trace().hash(),
            events: self.events.len(),
            inputs: self.inputs,
            faults: self.faults,
        })
    }
}
