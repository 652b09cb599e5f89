//! `spool replay`: replays a journal of the demo and reports the trace hash and the
//! first divergence from the recorded run, if any; with a what-if option, runs the
//! journal's workload under other scheduling rules instead ([`whatif`]).

mod check;
mod whatif;

use std::path::Path;
use std::process::ExitCode;

use spool_core::{Journal, Scheduler};

use crate::agent::registry;
use crate::cli::location::Location;
use crate::cli::replay::ReplayArgs;
use crate::stored::{Access, open_durable};

/// `spool replay JOURNAL [what-if options]`: a what-if run when any what-if option is
/// given (see [`whatif::run`]), else the replay of the journal against its recording.
pub(crate) fn run(args: &ReplayArgs) -> ExitCode {
    if args.what_if.history_given() {
        eprintln!(
            "spool replay: --history is an option of a store (spool run, spool serve), not of a replay"
        );
        return ExitCode::from(2);
    }
    if args.what_if.given() {
        return whatif::run(&args.journal, &args.what_if);
    }
    let journal = match load(&args.journal) {
        Ok(journal) => journal,
        Err(code) => return code,
    };
    if let Some(file) = &args.save {
        return save(&journal, file);
    }
    if args.check {
        return check::run(&journal);
    }
    check(&journal)
}

/// Writes `journal` to `file`: exit 0, or 1 with the reason.
fn save(journal: &Journal, file: &Path) -> ExitCode {
    let written = journal
        .encode()
        .map_err(|e| e.to_string())
        .and_then(|bytes| std::fs::write(file, bytes).map_err(|e| e.to_string()));
    match written {
        Ok(()) => {
            outln!(
                "wrote {} entries to {}",
                journal.entries.len(),
                file.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("spool replay: cannot write {}: {error}", file.display());
            ExitCode::FAILURE
        }
    }
}

/// The first bytes of an SQLite file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The journal at `path`: a journal file, or a store's kept history from its oldest
/// checkpoint (an SQLite file, or a `postgres://` URL). `Err` is the exit code (1),
/// the reason said.
fn load(path: &Path) -> Result<Journal, ExitCode> {
    let text = path.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return kept_history(&Location::Postgres(text.into_owned()));
    }
    let bytes = std::fs::read(path).map_err(|error| {
        eprintln!("spool replay: cannot read {}: {error}", path.display());
        ExitCode::FAILURE
    })?;
    if bytes.starts_with(SQLITE_MAGIC) {
        return kept_history(&Location::Sqlite(path.to_path_buf()));
    }
    Journal::decode(&bytes).map_err(|error| {
        eprintln!("spool replay: {}: {error}", path.display());
        ExitCode::FAILURE
    })
}

/// The history the store at `location` keeps, from its oldest checkpoint, as one
/// journal.
fn kept_history(location: &Location) -> Result<Journal, ExitCode> {
    let fail = |error: String| {
        eprintln!("spool replay: {}", crate::terminal::safe(&error));
        ExitCode::FAILURE
    };
    let store = open_durable(location, Access::Read).map_err(|f| fail(f.to_string()))?;
    let name = location.name();
    let segments = store
        .segments()
        .map_err(|e| fail(format!("cannot read the store {name}: {e}")))?;
    let Some(oldest) = segments.first() else {
        return Err(fail(format!("the store {name} holds no journal")));
    };
    store
        .recover_from(oldest.checkpoint)
        .map_err(|e| fail(format!("cannot read the store {name}: {e}")))
}

/// Replays `journal` and compares its trace with the recorded one: exit 0 when the
/// replay matches the recording, 1 when it diverges or cannot be replayed.
fn check(journal: &Journal) -> ExitCode {
    let replay = match Scheduler::replay(journal, &registry()) {
        Ok(replay) => replay,
        Err(error) => {
            eprintln!(
                "spool replay: {}",
                crate::terminal::safe(&error.to_string())
            );
            return ExitCode::FAILURE;
        }
    };
    outln!(
        "replayed {} entries: {} trace events, trace hash {:016x}",
        journal.entries.len(),
        replay.events,
        replay.trace_hash
    );
    match replay.divergence {
        None => {
            outln!("no divergence from the recorded run");
            ExitCode::SUCCESS
        }
        Some(divergence) => {
            outln!("{}", crate::terminal::safe(&divergence.to_string()));
            ExitCode::from(1)
        }
    }
}
