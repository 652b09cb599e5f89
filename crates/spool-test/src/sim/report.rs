//! What a simulation gives: the run's figures, and the first invariant it broke.

use std::collections::BTreeMap;
use std::fmt;

use spool_core::{InvariantError, RequestKey, TaskId, Time};

/// An invariant of the run that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// [`Scheduler::check_invariants`](spool_core::Scheduler::check_invariants) failed.
    Invariant(InvariantError),
    /// A request went out past a limit, as the independent observer counts.
    Limit(String),
    /// A request was handed to an executor while it was still with one.
    SentTwice(RequestKey),
    /// A request's answer reached its task twice.
    AnsweredTwice(RequestKey),
    /// A task ended twice.
    EndedTwice(TaskId),
    /// A task never ended (or its end was never traced).
    NeverEnded(TaskId),
    /// A task's timeline does not tile its life.
    Timeline {
        /// The task.
        task: TaskId,
        /// What is wrong with it.
        reason: String,
    },
    /// A crash-restored run did not go on exactly as the run would have.
    Diverged(String),
    /// A crashed run could not be restored.
    Restore(String),
    /// The run stopped making progress with tasks live.
    Stuck(String),
    /// The scheduler panicked.
    Panicked(String),
}

impl Violation {
    /// The kind of violation, without its details: the shrinker keeps a smaller
    /// workload only if it breaks the same kind.
    pub fn class(&self) -> String {
        match self {
            Violation::Invariant(error) => {
                let text = format!("{error:?}");
                let name: String = text.chars().take_while(|c| c.is_alphanumeric()).collect();
                format!("invariant {name}")
            }
            Violation::Limit(_) => "limit".to_owned(),
            Violation::SentTwice(_) => "sent twice".to_owned(),
            Violation::AnsweredTwice(_) => "answered twice".to_owned(),
            Violation::EndedTwice(_) => "ended twice".to_owned(),
            Violation::NeverEnded(_) => "never ended".to_owned(),
            Violation::Timeline { .. } => "timeline".to_owned(),
            Violation::Diverged(_) => "diverged".to_owned(),
            Violation::Restore(_) => "restore".to_owned(),
            Violation::Stuck(_) => "stuck".to_owned(),
            Violation::Panicked(_) => "panicked".to_owned(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Invariant(error) => write!(f, "invariant broken: {error}"),
            Violation::Limit(what) => write!(f, "limit exceeded: {what}"),
            Violation::SentTwice(key) => write!(f, "request {key:?} sent while with an executor"),
            Violation::AnsweredTwice(key) => write!(f, "request {key:?} answered twice"),
            Violation::EndedTwice(task) => write!(f, "task {task} ended twice"),
            Violation::NeverEnded(task) => write!(f, "task {task} never ended"),
            Violation::Timeline { task, reason } => {
                write!(
                    f,
                    "the timeline of task {task} does not tile its life: {reason}"
                )
            }
            Violation::Diverged(what) => write!(f, "the crash-restored run diverged: {what}"),
            Violation::Restore(what) => write!(f, "the crashed run could not be restored: {what}"),
            Violation::Stuck(what) => write!(f, "the run is stuck: {what}"),
            Violation::Panicked(what) => write!(f, "the scheduler panicked: {what}"),
        }
    }
}

/// Where and how a run failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimFailure {
    /// The input after which it was found (inputs counted from 1).
    pub input: u64,
    /// The virtual time.
    pub at: Time,
    /// Whether it was the run with crashes (`false`: the straight run).
    pub crashed_run: bool,
    /// What broke.
    pub violation: Violation,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let run = if self.crashed_run {
            "the run with crashes"
        } else {
            "the straight run"
        };
        write!(
            f,
            "{} (in {run}, after input {} at {})",
            self.violation, self.input, self.at
        )
    }
}

/// What [`simulate`](super::simulate) gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Tasks made (children included).
    pub tasks: usize,
    /// Of them, completed with a value, failed, canceled.
    pub completed: usize,
    /// Failed (completed with an error).
    pub failed: usize,
    /// Canceled.
    pub canceled: usize,
    /// Inputs given to the scheduler in the run with crashes (each followed by
    /// `check_invariants`).
    pub inputs: u64,
    /// The trace's hash at the end (the same in both runs).
    pub trace_hash: u64,
    /// How many times each fault class was reached (it had something to act on).
    pub faults: BTreeMap<&'static str, u64>,
    /// The first invariant broken, if one was.
    pub failure: Option<SimFailure>,
}
