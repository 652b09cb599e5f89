//! What the tests share: a fresh database, SQL behind the store's back, journal entries
//! and a scheduler of small tasks to take snapshots of.

use postgres::{Client, NoTls};
use serde::{Deserialize, Serialize};
use spool_core::{AgentTask, Config, JournalEntry, NewTask, SavedTask, Scheduler, StateError};
use spool_core::{Step, TaskContext, TaskId, Time};

/// The URL of a new, empty database named `name` in the binary's cluster.
pub(crate) fn database(name: &str) -> String {
    spool_pgtest::PgCluster::shared()
        .create_database(name)
        .unwrap_or_else(|e| panic!("database {name}: {e}"))
}

/// A client of the database at `url`, to look at or change a store behind its back.
pub(crate) fn sql(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// A journal entry told apart by `n`.
pub(crate) fn entry(n: u64) -> JournalEntry {
    JournalEntry::Timeout {
        at: Time::from_nanos(n),
    }
}

/// A task that yields `left` times, then ends.
#[derive(Serialize, Deserialize)]
pub(crate) struct Counter {
    left: u32,
}

impl AgentTask for Counter {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            Step::done("done")
        } else {
            Step::Yield
        }
    }

    fn type_name(&self) -> &'static str {
        "counter"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// A scheduler holding `tasks` counters of 100 steps, not yet run.
pub(crate) fn scheduler(tasks: u32) -> Scheduler {
    let mut scheduler = Scheduler::new(Config::new());
    for _ in 0..tasks {
        scheduler
            .submit(Time::ZERO, NewTask::new(Counter { left: 100 }))
            .expect("submitted");
    }
    scheduler
}

/// Runs `steps` steps of `scheduler`.
pub(crate) fn run(scheduler: &mut Scheduler, steps: usize) {
    for _ in 0..steps {
        if scheduler.step(Time::ZERO).is_none() {
            break;
        }
    }
}

/// `scheduler`'s whole snapshot, encoded.
pub(crate) fn snapshot(scheduler: &Scheduler) -> Vec<u8> {
    scheduler
        .snapshot()
        .expect("a snapshot")
        .encode()
        .expect("encoded")
}

/// Submits to `scheduler` a counter of `steps` steps; returns its id.
pub(crate) fn add_counter(scheduler: &mut Scheduler, steps: u32) -> TaskId {
    scheduler
        .submit(Time::ZERO, NewTask::new(Counter { left: steps }))
        .expect("submitted")
        .id
}
