//! The cases every durable backend passes, each a function of the [`Backend`] under
//! test, and [`conformance!`], which makes one `#[test]` of each for a backend.

pub mod crash;
pub mod damage;
pub mod history;
pub mod journal;
pub mod many;
pub mod parts;
pub mod recovery;
pub mod tasks;
pub mod writer;

use serde_json::json;
use spool_core::{Config, JournalEntry, NewTask, Response, Scheduler, Time};
use spool_durable::{CrashAt, DurableError, DurableStore, History, WallClock};

use tasks::{Worker, prose};

/// A durable backend under test: how the suite opens, finds and damages its stores.
pub trait Backend: Sync {
    /// "sqlite" or "postgres", for messages.
    fn kind(&self) -> &'static str;
    /// Opens the store called `name` as its writer, creating it empty the first time:
    /// each test uses names of its own (e.g. "parts_vs_whole"), so tests run in parallel.
    fn open(&self, name: &str, options: &Options) -> Result<Box<dyn DurableStore>, DurableError>;
    /// Opens the store called `name` to read only, beside its writer.
    fn open_read_only(&self, name: &str) -> Result<Box<dyn DurableStore>, DurableError>;
    /// What a child process passes to `open_located` to open the same store.
    fn locate(&self, name: &str) -> String;
    /// Changes the closed store `name` behind its back.
    fn damage(&self, name: &str, damage: Damage);
}

/// How the suite opens a store.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// How many checkpoints to keep (`None`: the backend's default).
    pub keep_checkpoints: Option<usize>,
    /// Where the writer ends the process, for the crash cases.
    pub crash_at: Option<CrashAt>,
    /// How much history to keep (`None`: none, [`History::off`]; the history cases
    /// set it).
    pub history: Option<History>,
    /// The wall clock the store stamps checkpoints with (`None`: the system's).
    pub clock: Option<WallClock>,
}

/// A change made to a closed store behind its back: each must be found when the store
/// is read, as a typed error naming the row.
#[derive(Clone, Copy, Debug)]
pub enum Damage {
    /// Flip one byte of journal entry seq's stored body.
    EntryByte(u64),
    /// Flip one byte of task id's stored row (a checkpoint in parts).
    TaskRowByte(u64),
    /// Flip one byte of checkpoint id's stored header or snapshot.
    CheckpointByte(u64),
    /// Flip one byte of the kept old row of `task` written by checkpoint `since`.
    KeptTaskRowByte {
        /// The task.
        task: u64,
        /// The checkpoint that wrote the row.
        since: u64,
    },
    /// Change the head row (its last entry number + 1).
    HeadByte,
    /// Give entry `from` the number `to`.
    RenumberEntry {
        /// The entry's number.
        from: u64,
        /// Its new number.
        to: u64,
    },
    /// Swap the stored bodies of two entries.
    SwapEntries(u64, u64),
    /// Delete an entry.
    DeleteEntry(u64),
}

/// Makes one `#[test]` of every case of the suite for the backend `$backend` (an
/// expression of a type that implements [`Backend`]), named as the case.
macro_rules! conformance {
    ($backend:expr) => {
        $crate::suite::conformance!(@cases $backend;
            journal::numbering_and_checkpoints,
            journal::kept_checkpoints_and_recover_from,
            journal::an_empty_store,
            writer::a_second_writer_is_refused,
            writer::maker_and_counts,
            recovery::a_run_recovers_with_its_keys,
            parts::parts_and_whole_recover_the_same_snapshot,
            damage::every_damage_is_a_typed_error,
            many::a_hundred_thousand_live_tasks_recover,
            crash::crashes_lose_nothing_acknowledged,
            history::history_in_parts_replays_as_one_journal,
            history::history_retention_by_age_and_size,
            history::a_damaged_kept_row_is_named,
            history::a_reader_reads_history_while_the_writer_writes,
            history::a_new_journal_keeps_the_history_before_it,
        );
    };
    (@cases $backend:expr; $($module:ident :: $case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::suite::$module::$case(&$backend);
            }
        )*
    };
}
pub(crate) use conformance;

/// A scheduler holding `workers` workers, each with a log of `log_len` bytes of prose
/// (seeded by `seed`), encoded as a snapshot.
pub fn snapshot(workers: u32, log_len: usize, seed: u64) -> Vec<u8> {
    let mut scheduler = Scheduler::new(Config::new());
    for i in 0..workers {
        let mut worker = Worker::new(&format!("worker-{i}"), 10, None);
        worker.log.push(prose(seed * 1000 + u64::from(i), log_len));
        scheduler.submit(Time::ZERO, NewTask::new(worker)).unwrap();
    }
    scheduler.snapshot().unwrap().encode().unwrap()
}

/// A small entry: a timeout at `ms` milliseconds.
pub fn tick(ms: u64) -> JournalEntry {
    JournalEntry::Timeout {
        at: Time::from_nanos(ms * 1_000_000),
    }
}

/// An entry carrying `text` (an answer): large when `text` is.
pub fn answer(text: &str) -> JournalEntry {
    let mut scheduler = Scheduler::new(Config::new());
    let _ = scheduler
        .submit(Time::ZERO, NewTask::new(Worker::new("w", 1, None)))
        .unwrap();
    let _ = scheduler.step(Time::ZERO);
    let out = scheduler.poll_request().unwrap();
    JournalEntry::answer(Time::ZERO, &Response::ok(out.key, json!(text)))
}

/// Opens the store `name` of `backend` with the default options, failing the test
/// with the backend's kind in the message.
pub fn open(backend: &dyn Backend, name: &str) -> Box<dyn DurableStore> {
    backend
        .open(name, &Options::default())
        .unwrap_or_else(|e| panic!("{}: cannot open {name}: {e}", backend.kind()))
}
