//! `spool replay --check`: a recorded run checked against this build's task types.

use std::process::ExitCode;

use spool_core::{Journal, Scheduler};

use crate::agent::registry;

/// Checks `journal` against the built-in task types: exit 0 when every recorded
/// request is asked again the same, 1 at the first that differs (shown as task, step,
/// request, what was recorded and what is asked now) or when the journal does not
/// replay.
pub(super) fn run(journal: &Journal) -> ExitCode {
    let report = match Scheduler::check_journal(journal, &registry()) {
        Ok(report) => report,
        Err(error) => {
            eprintln!(
                "spool replay: the journal does not replay: {}",
                crate::terminal::safe(&error.to_string())
            );
            return ExitCode::FAILURE;
        }
    };
    match report.divergence {
        None => {
            let endings = if report.endings > 0 {
                format!(", {} endings the same", report.endings)
            } else {
                String::new()
            };
            outln!(
                "checked {} entries: {} recorded answers asked again the same{endings}{}",
                report.entries,
                report.compared,
                if report.unchecked > 0 {
                    format!(
                        " ({} answers recorded without a request digest, not compared)",
                        report.unchecked
                    )
                } else {
                    String::new()
                }
            );
            ExitCode::SUCCESS
        }
        Some(divergence) => {
            // Line by line: what the recording and the code asked is shown safe for a
            // terminal, each on its line.
            for line in divergence.to_string().lines() {
                outln!("{}", crate::terminal::safe(line));
            }
            ExitCode::FAILURE
        }
    }
}
