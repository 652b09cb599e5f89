//! `spool inspect`: the task table of a snapshot, of a journal as it ends, of a store
//! (an SQLite file, or a PostgreSQL database read without its writer lock), or of a
//! running server ([`server`], through its HTTP API).

mod server;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use spool_core::{JOURNAL_MAGIC, Journal, MAGIC, Snapshot};
use spool_durable::{DurableError, StoreSizes};

use crate::cli::InspectArgs;
use crate::cli::location::{DATABASE_URL_VAR, Location};
use crate::stored::{Access, Failure, open_durable};
use crate::terminal::safe;

/// What `spool inspect` can read.
#[derive(Debug)]
pub(crate) enum Source {
    /// An encoded snapshot.
    Snapshot(Snapshot),
    /// A journal: the state it ends in (its start with every entry replayed), how many
    /// entries it has, and, if they could not be replayed here, its starting snapshot
    /// instead and why not.
    Journal(Snapshot, usize, Option<String>),
    /// A store: its run as of the last entry (or of the latest checkpoint, if the
    /// entries after it cannot be replayed here), how many entries follow the
    /// checkpoint, whether they were replayed, and the store's sizes.
    Store(Snapshot, usize, bool, StoreSizes),
}

/// Why `spool inspect` could not read a file or a store: what was wrong, named with
/// the file's path or the store's name.
#[derive(Debug, thiserror::Error)]
#[error("{name}: {failure}")]
pub(crate) struct ReadError {
    name: String,
    failure: ReadFailure,
}

/// What was wrong with the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadFailure {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// A journal or snapshot that does not decode (`what` says which part).
    #[error("{what}{source}")]
    Decode {
        what: &'static str,
        source: spool_core::DecodeError,
    },
    /// A store that cannot be opened or read.
    #[error(transparent)]
    Store(#[from] spool_store::StoreError),
    /// A store of another backend that cannot be read.
    #[error(transparent)]
    Durable(#[from] DurableError),
    /// A store that holds no run.
    #[error("the store holds no run yet")]
    EmptyStore,
}

/// Reads `path` as a snapshot, a journal or a store.
pub(crate) fn read(path: &Path) -> Result<Source, ReadError> {
    read_source(path).map_err(|failure| ReadError {
        name: path.display().to_string(),
        failure,
    })
}

fn read_source(path: &Path) -> Result<Source, ReadFailure> {
    let decode = |what: &'static str| move |source| ReadFailure::Decode { what, source };
    let bytes = std::fs::read(path)?;
    if bytes.starts_with(&JOURNAL_MAGIC) {
        let journal = Journal::decode(&bytes).map_err(decode(""))?;
        let start = Snapshot::decode(&journal.start).map_err(decode("its starting snapshot: "))?;
        let entries = journal.entries.len();
        // Replayed with the task types of this build (the demo's and the built-in
        // agent's); a journal of other types is shown as it starts.
        let ended = spool_core::Scheduler::replay(&journal, &crate::agent::registry())
            .map_err(|e| e.to_string())
            .and_then(|replay| replay.scheduler.snapshot().map_err(|e| e.to_string()));
        return Ok(match ended {
            Ok(end) => Source::Journal(end, entries, None),
            Err(why) => Source::Journal(start, entries, Some(why)),
        });
    }
    if bytes.starts_with(&MAGIC) || !bytes.starts_with(b"SQLite format 3\0") {
        let snapshot = Snapshot::decode(&bytes).map_err(decode(""))?;
        return Ok(Source::Snapshot(snapshot));
    }
    let store = spool_store::Store::open(path)?;
    let journal = store.recover()?.ok_or(ReadFailure::EmptyStore)?;
    let sizes = store.sizes()?;
    stored(&journal, sizes)
}

/// What a store holds: `journal` (from its latest checkpoint) as of its last entry,
/// and its `sizes`.
fn stored(journal: &Journal, sizes: StoreSizes) -> Result<Source, ReadFailure> {
    let start = Snapshot::decode(&journal.start).map_err(|source| ReadFailure::Decode {
        what: "its latest checkpoint: ",
        source,
    })?;
    // The entries after the checkpoint are replayed when this build knows the task
    // types (the demo's); otherwise the checkpoint is shown as it is.
    let now = spool_core::Scheduler::replay(journal, &crate::agent::registry())
        .ok()
        .and_then(|replay| replay.scheduler.snapshot().ok());
    Ok(match now {
        Some(now) => Source::Store(now, journal.entries.len(), true, sizes),
        None => Source::Store(start, journal.entries.len(), false, sizes),
    })
}

/// One task of the table.
#[derive(Debug)]
struct Row {
    id: u64,
    agent: String,
    type_name: String,
    priority: String,
    age: Duration,
    /// `Ready`, `Waiting(llm)`, `Completed(ok)`...
    state: String,
}

/// The counters the table ends with.
#[derive(Debug, serde::Deserialize)]
struct Counters {
    submitted: u64,
    polls: u64,
    requests: u64,
    answers: u64,
    rate_limited: u64,
}

/// Prints the table of tasks of `snapshot` and the totals.
pub(crate) fn print(out: &mut impl Write, snapshot: &Snapshot) -> std::io::Result<()> {
    let rows: Vec<Row> = snapshot
        .rows()
        .into_iter()
        .map(|row| Row {
            id: row.id.get(),
            agent: row.agent,
            type_name: row.type_name,
            priority: row.priority.to_string(),
            age: row.age,
            state: row.state,
        })
        .collect();
    let stats = snapshot.stats();
    let counters = Counters {
        submitted: stats.submitted,
        polls: stats.polls,
        requests: stats.requests,
        answers: stats.answers,
        rate_limited: stats.rate_limited,
    };
    print_rows(out, &rows, &counters, &snapshot.now().to_string())
}

/// Prints the table of `rows` and the totals, as of `now`. Agent names, task types and
/// states came from submitters: their control characters are printed visibly
/// ([`safe`]).
fn print_rows(
    out: &mut impl Write,
    rows: &[Row],
    counters: &Counters,
    now: &str,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<8} {:<16} {:<16} {:<9} {:<10} STATE",
        "ID", "AGENT", "TYPE", "PRIORITY", "AGE"
    )?;
    for row in rows {
        writeln!(
            out,
            "{:<8} {:<16} {:<16} {:<9} {:<10} {}",
            row.id,
            safe(&row.agent),
            safe(&row.type_name),
            row.priority,
            format!("{:.3}s", row.age.as_secs_f64()),
            safe(&row.state)
        )?;
    }
    let count = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| f(r)).count();
    writeln!(
        out,
        "tasks: {} ({} live: {} ready, {} waiting; {} completed ok, {} failed, {} canceled) at {}",
        rows.len(),
        count(&|r| !r.state.starts_with("Completed") && !r.state.starts_with("Canceled")),
        count(&|r| r.state == "Ready"),
        count(&|r| r.state.starts_with("Waiting")),
        count(&|r| r.state == "Completed(ok)"),
        count(&|r| r.state.starts_with("Completed(error")),
        count(&|r| r.state.starts_with("Canceled")),
        now
    )?;
    writeln!(
        out,
        "counters: {} submitted, {} polls, {} requests, {} answers, {} rate limited",
        counters.submitted,
        counters.polls,
        counters.requests,
        counters.answers,
        counters.rate_limited
    )
}

/// `spool inspect PATH`, `spool inspect --postgres URL` (or with none of them
/// `SPOOL_DATABASE_URL`), or `spool inspect --addr URL`.
pub(crate) fn run(args: &InspectArgs) -> ExitCode {
    let env = || {
        std::env::var(DATABASE_URL_VAR)
            .ok()
            .filter(|url| !url.trim().is_empty())
    };
    if args.token_file.is_some() && args.addr.is_none() {
        return Failure::Usage(crate::schedule::TOKEN_WITHOUT_ADDR.to_owned())
            .report("spool inspect");
    }
    match (&args.path, &args.addr, &args.postgres) {
        (Some(path), _, _) => show(read(path)),
        (None, Some(addr), _) => server::run(addr, args.token_file.as_deref()),
        (None, None, Some(url)) => show_store(&Location::Postgres(url.clone())),
        (None, None, None) => match env() {
            Some(url) => show_store(&Location::Postgres(url)),
            None => Failure::Usage(NO_SOURCE.to_owned()).report("spool inspect"),
        },
    }
}

/// The usage error of `spool inspect` given nothing to read.
const NO_SOURCE: &str = "nothing to inspect: name a store, a snapshot or a journal file, a \
     store with --postgres URL (or SPOOL_DATABASE_URL), or a running server with --addr URL";

/// `spool inspect --postgres URL`: the store read only, so that it is read while a
/// server writes it.
fn show_store(location: &Location) -> ExitCode {
    let store = match open_durable(location, Access::Read) {
        Ok(store) => store,
        Err(failure) => return failure.report("spool inspect"),
    };
    let read = || -> Result<Source, ReadFailure> {
        let journal = store.recover()?.ok_or(ReadFailure::EmptyStore)?;
        stored(&journal, store.sizes()?)
    };
    show(read().map_err(|failure| ReadError {
        name: location.name(),
        failure,
    }))
}

/// Prints what was read, or why it could not be.
fn show(source: Result<Source, ReadError>) -> ExitCode {
    let source = match source {
        Ok(source) => source,
        Err(error) => {
            eprintln!("spool inspect: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let printed = match &source {
        Source::Snapshot(snapshot) => print(&mut out, snapshot),
        Source::Journal(state, entries, None) => writeln!(
            out,
            "a journal of {entries} entries; the state it ends in, as of entry {entries} of \
             {entries}:"
        )
        .and_then(|()| print(&mut out, state)),
        Source::Journal(start, entries, Some(why)) => writeln!(
            out,
            "a journal of {entries} entries; the journal's start: its entries cannot be \
             replayed here because {}:",
            safe(why)
        )
        .and_then(|()| print(&mut out, start)),
        Source::Store(run, entries, replayed, sizes) => writeln!(
            out,
            "a store ({} bytes stored for {} bytes of snapshots and entries); {}:",
            sizes.stored(),
            sizes.plain(),
            if *replayed {
                format!("its run as of its last entry (latest checkpoint + {entries} entries)")
            } else {
                format!(
                    "its latest checkpoint ({entries} entries after it, of task types this \
                     build cannot replay)"
                )
            }
        )
        .and_then(|()| print(&mut out, run)),
    };
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => crate::output::failed("spool inspect", &error),
    }
}

#[cfg(test)]
mod tests {
    use spool_core::{Config, NewTask, Scheduler, Time};

    use crate::agent::ReactAgent;

    /// An agent name and a task type that would retitle the terminal and turn it red
    /// are printed with their control characters spelled out.
    #[test]
    fn control_characters_in_the_table_are_printed_visibly() {
        let mut scheduler = Scheduler::new(Config::new());
        let agent = ReactAgent::new("a".to_owned(), "question".to_owned());
        scheduler
            .submit(
                Time::ZERO,
                NewTask::new(agent).agent("\u{1b}]0;pwned\u{7}\u{1b}[31mevil"),
            )
            .expect("the task is admitted");
        let snapshot = scheduler.snapshot().expect("a snapshot");
        let mut out = Vec::new();
        super::print(&mut out, &snapshot).expect("printed");
        let out = String::from_utf8(out).expect("UTF-8");
        assert!(!out.contains(['\u{1b}', '\u{7}']), "{out:?}");
        let row = out.lines().nth(1).expect("a row");
        assert!(row.contains(" \\x1b]0;pwned\\x07\\x1b[31mevil "), "{row:?}");
    }

    /// A task type this build does not know: a journal of it cannot be replayed here.
    #[derive(serde::Serialize)]
    struct Mystery;

    impl spool_core::AgentTask for Mystery {
        fn poll(&mut self, _cx: &mut spool_core::TaskContext<'_>) -> spool_core::Step {
            spool_core::Step::done(serde_json::Value::Null)
        }

        fn type_name(&self) -> &'static str {
            "mystery"
        }

        fn save(&self) -> Result<spool_core::SavedTask, spool_core::StateError> {
            spool_core::SavedTask::serde(self)
        }
    }

    /// A journal whose entries cannot be replayed with this build's task types is
    /// shown as it starts, saying so and why.
    #[test]
    fn a_journal_of_unknown_task_types_is_shown_as_it_starts_and_says_why() {
        let mut scheduler = Scheduler::new(Config::new());
        scheduler
            .submit(Time::ZERO, NewTask::new(Mystery).agent("m"))
            .expect("the task is admitted");
        let journal = spool_core::Journal::starting_from(&scheduler).expect("a journal");
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("mystery.journal");
        std::fs::write(&path, journal.encode().expect("encoded")).expect("written");
        let source = super::read(&path).expect("read");
        let super::Source::Journal(start, 0, Some(why)) = &source else {
            panic!("expected the journal's start, got {source:?}");
        };
        assert_eq!(start.rows().len(), 1);
        assert!(why.contains("mystery"), "{why}");
    }
}
