//! A recorded run as a regression test: today's code checked against a journal.

use spool_core::{CheckReport, Journal, ReplayError, Scheduler, StepDivergence, TaskRegistry};

/// Why a recorded run does not pass [`check_journal`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalCheckError {
    /// Today's code asks for something other than the recorded run did.
    #[error("{0}")]
    Diverged(StepDivergence),
    /// The journal could not be replayed at all.
    #[error("the journal does not replay: {0}")]
    Replay(#[from] ReplayError),
}

/// Checks a recorded run against today's code (the task types in `registry`): its
/// inputs are taken again with the recorded answers as the cassette, and each
/// recorded answer's request is compared with the one the code makes now (see
/// [`Scheduler::check_journal`]). `Ok` with what was compared when every request
/// matches.
///
/// In a test, with a journal recorded by `spool demo --journal`, a `TestScheduler`'s
/// `journal()`, or read from a store's kept history:
///
/// ```
/// use serde_json::json;
/// use spool_core::{AsyncTask, Cx, Outcome, TaskRegistry, Value};
/// use spool_test::{TestScheduler, check_journal};
///
/// async fn agent(cx: Cx, topic: Value) -> Outcome {
///     Ok(cx.llm(json!({"about": topic})).await?)
/// }
/// let registry = TaskRegistry::new().with_async("agent", agent);
/// let mut ts = TestScheduler::new();
/// ts.mock_llm([json!("ok")]);
/// ts.record_journal().unwrap();
/// ts.spawn(AsyncTask::replayable("agent", json!("cats"), agent));
/// ts.run_until_quiet();
/// let journal = ts.journal().unwrap();
///
/// let report = check_journal(&journal, &registry).unwrap();
/// assert_eq!(report.compared, 1);
/// ```
///
/// # Errors
/// [`JournalCheckError::Diverged`] naming the task, step and request, with what was
/// recorded and what the code asks now; [`JournalCheckError::Replay`] when the journal
/// does not replay.
pub fn check_journal(
    journal: &Journal,
    registry: &TaskRegistry,
) -> Result<CheckReport, JournalCheckError> {
    let report = Scheduler::check_journal(journal, registry)?;
    match report.divergence {
        Some(divergence) => Err(JournalCheckError::Diverged(divergence)),
        None => Ok(report),
    }
}
