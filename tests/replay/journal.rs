//! Journals: a run on the threaded runtime, recorded, replays to the same trace; a
//! changed task is caught at the first event that differs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use spool::{
    AgentTask, Kind, MemoryJournal, NewTask, Runtime, SavedTask, Scheduler, Step, TaskContext,
    TaskRegistry, TaskState, from_fn,
};

use crate::tasks::{Asker, registry};

/// Runs `count` askers on the runtime with an LLM that answers with a number drawn
/// from a counter (so answers differ from run to run of the executor, and only the
/// journal knows them), journaling with trace events.
fn recorded_run(count: u32) -> (MemoryJournal, Vec<(spool::TaskId, TaskState)>) {
    let journal = MemoryJournal::new();
    let counter = Arc::new(AtomicU64::new(1));
    let llm = from_fn(move |_request| Ok(json!(counter.fetch_add(1, Ordering::SeqCst))));
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, llm)
        .journal(journal.clone())
        .journal_trace(true)
        .build();
    let ids: Vec<_> = (0..count)
        .map(|i| {
            runtime
                .submit(NewTask::new(Asker::new(i % 4 + 1)))
                .unwrap()
                .id
        })
        .collect();
    runtime.run_until_idle();
    let states = ids
        .iter()
        .map(|id| (*id, runtime.task_state(*id).unwrap()))
        .collect();
    (journal, states)
}

/// The recorded run replays in the core to the very same trace (no divergence) and
/// the same final states, though the executor is not there to answer.
#[test]
fn a_recorded_runtime_run_replays_to_the_same_trace_and_results() {
    let (journal, states) = recorded_run(20);
    let journal = journal.journal().unwrap();
    let bytes = journal.encode().unwrap();
    let journal = spool::Journal::decode(&bytes).unwrap();
    let replay = Scheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    assert!(replay.events > 100, "{} events", replay.events);
    for (id, state) in states {
        assert_eq!(replay.scheduler.task_state(id), Some(state));
    }
}

/// Like `Asker`, but asks one question fewer: the same journal replayed against this
/// "changed code" diverges, and the replay names the first event that differs.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChangedAsker(Asker);

impl AgentTask for ChangedAsker {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if !self.0.asked && self.0.left > 1 {
            self.0.left -= 1;
        }
        self.0.poll(cx)
    }

    fn type_name(&self) -> &'static str {
        "asker"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

#[test]
fn a_replay_against_changed_code_reports_the_first_divergence() {
    let (journal, _) = recorded_run(3);
    let journal = journal.journal().unwrap();
    let changed = TaskRegistry::new().with("asker", |bytes| {
        let asker: Asker = SavedTask::decode_serde(bytes)?;
        Ok(Box::new(ChangedAsker(asker)) as Box<dyn AgentTask>)
    });
    let replay = Scheduler::replay(&journal, &changed).unwrap();
    let divergence = replay.divergence.expect("the changed task diverges");
    // Task 2 asks two questions in the recording; the changed code finishes it after
    // its first answer, so that is the first event that differs.
    let expected = divergence.expected.clone().expect("a recorded event");
    let got = divergence.got.clone().expect("a replayed event");
    assert!(
        expected.contains("task 2: Running -> Waiting(llm)"),
        "{expected}"
    );
    assert!(got.contains("task 2: Running -> Completed"), "{got}");
    assert!(
        expected.starts_with(&format!("#{} ", divergence.event)),
        "{expected}"
    );
    let text = divergence.to_string();
    assert!(
        text.starts_with(&format!(
            "the replay diverges at event #{}:",
            divergence.event
        )),
        "{text}"
    );
}
