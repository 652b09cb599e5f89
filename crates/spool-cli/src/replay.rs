//! `spool replay`: replays a journal of the demo and reports the trace hash and the
//! first divergence from the recorded run, if any.

use std::path::Path;
use std::process::ExitCode;

use spool_core::{Journal, Scheduler};

use crate::agent::registry;

/// `spool replay PATH`: exit 0 when the replay matches the recording, 1 when it
/// diverges or the journal cannot be read or replayed.
pub(crate) fn run(path: &Path) -> ExitCode {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) => {
            eprintln!("spool replay: cannot read {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let journal = match Journal::decode(&bytes) {
        Ok(journal) => journal,
        Err(error) => {
            eprintln!("spool replay: {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let replay = match Scheduler::replay(&journal, &registry()) {
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
