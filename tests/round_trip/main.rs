//! Saved states that round-trip: a task whose state does not read back as it was is
//! caught by `TestScheduler` (at every step and snapshot) and by the runtime's opt-in
//! check (at every checkpoint), with a message naming the task, its type and what is
//! lost or where the bytes differ; and every task type registered in the project's
//! tests and examples passes.
#![allow(clippy::unwrap_used)]

mod registered;

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool::Kind;
use spool::{
    AgentTask, JournalError, MemoryJournal, NewTask, RoundTripError, Runtime, SavedTask,
    SnapshotError, StateError, Step, TaskContext, TaskRegistry, TestScheduler, from_fn,
};

/// A task that keeps an optional note, asks the LLM once, and ends saying whether it
/// has a note: with `Some(Value::Null)` it saves as `null`, reads back as `None` and
/// ends otherwise after a restore.
#[derive(Debug, Serialize, Deserialize)]
struct Noted {
    note: Option<Value>,
    asked: bool,
}

impl AgentTask for Noted {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if !self.asked {
            self.asked = true;
            cx.llm(json!("?"));
            return Step::Wait;
        }
        Step::done(self.note.is_some())
    }

    fn type_name(&self) -> &'static str {
        "noted"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Noted>("noted")
}

fn noted(note: Option<Value>) -> Noted {
    Noted { note, asked: false }
}

const LOSSY: &str = "task 1 (type `noted`) does not round-trip: `note` is a `Some` of \
                     `null`, which JSON saves as `null` and reads back as `None`";

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("a panic");
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast::<&str>()
            .map_or_else(|_| "?".to_owned(), |m| (*m).to_owned()),
    }
}

const HINT: &str = " (TestScheduler checks saved states at every snapshot and step; \
                    TestScheduler::check_round_trip(false) turns it off)";

/// The step that polls a lossy task fails the test, naming it, with a registry or
/// without one (the strict save needs none).
#[test]
fn test_scheduler_catches_a_lossy_state_at_the_step_that_polls_it() {
    for with_registry in [false, true] {
        let mut scheduler = TestScheduler::new();
        if with_registry {
            scheduler.set_registry(registry());
        }
        scheduler.mock_llm(["!"]);
        scheduler.spawn(noted(Some(Value::Null)));
        let message = panic_message(|| {
            scheduler.step();
        });
        assert_eq!(message, format!("{LOSSY}{HINT}"));
    }
}

/// A snapshot checks every live task first, polled or not.
#[test]
fn test_scheduler_catches_a_lossy_state_at_a_snapshot() {
    let mut scheduler = TestScheduler::new();
    scheduler.set_registry(registry());
    scheduler.spawn(noted(Some(Value::Null)));
    let message = panic_message(|| {
        let _ = scheduler.snapshot();
    });
    assert_eq!(message, format!("{LOSSY}{HINT}"));
    let message = panic_message(|| {
        let _ = scheduler.record_journal();
    });
    assert_eq!(message, format!("{LOSSY}{HINT}"));
}

/// What the check guards against: off, the lossy task ends otherwise after a restore.
#[test]
fn without_the_check_a_lossy_state_ends_otherwise_after_a_restore() {
    let mut scheduler = TestScheduler::new();
    scheduler.check_round_trip(false);
    scheduler.hold(Kind::Llm);
    let id = scheduler.spawn(noted(Some(Value::Null)));
    scheduler.step_until_idle();
    let mut restored = TestScheduler::restore(&scheduler.snapshot().unwrap(), &registry()).unwrap();
    restored.check_round_trip(false);
    for s in [&mut scheduler, &mut restored] {
        s.mock_llm(["!"]);
        let key = s.core_mut().poll_request().map(|r| r.key);
        let key = key.or_else(|| s.held_requests().first().map(|h| h.request.key));
        let _ = s.answer(key.unwrap(), "!");
        s.step_until_idle();
    }
    assert_eq!(
        scheduler.task_state(id),
        spool::TaskState::Completed(Ok(json!(true)))
    );
    assert_eq!(
        restored.task_state(id),
        spool::TaskState::Completed(Ok(json!(false)))
    );
}

/// A decoder that does not read back what `save` wrote is caught by the bytes: the
/// message shows where they first differ.
#[test]
fn test_scheduler_catches_other_bytes_after_a_restore() {
    let drifting = TaskRegistry::new().with("noted", |bytes| {
        let mut task: Noted = SavedTask::decode_serde(bytes)?;
        task.asked = !task.asked;
        Ok(Box::new(task) as Box<dyn AgentTask>)
    });
    let mut scheduler = TestScheduler::new();
    scheduler.set_registry(drifting);
    scheduler.spawn(noted(Some(json!(1))));
    let message = panic_message(|| {
        let _ = scheduler.snapshot();
    });
    assert_eq!(
        message,
        format!(
            "task 1 (type `noted`) does not round-trip: saved, restored and saved again, its \
             state differs from byte 18 on (24 bytes, then 23): \
             `{{\"note\":1,\"asked\":false}}` became `{{\"note\":1,\"asked\":true}}`{HINT}"
        )
    );
}

/// Tasks that round-trip pass every check, and so do tasks that keep nothing.
#[test]
fn test_scheduler_passes_states_that_round_trip() {
    let mut scheduler = TestScheduler::new();
    scheduler.set_registry(registry());
    scheduler.mock_llm(["a", "b"]);
    let a = scheduler.spawn(noted(None));
    let b = scheduler.spawn(noted(Some(json!({"k": null}))));
    scheduler.snapshot().unwrap();
    scheduler.spawn(spool::task_fn("closure", |_| Step::done(0)));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(a),
        spool::TaskState::Completed(Ok(json!(false)))
    );
    assert_eq!(
        scheduler.task_state(b),
        spool::TaskState::Completed(Ok(json!(true)))
    );
}

/// The runtime's opt-in check refuses a checkpoint holding a lossy state, naming the
/// task; without it the checkpoint is written.
#[test]
fn the_runtime_check_refuses_a_checkpoint_with_a_lossy_state() {
    for on in [true, false] {
        let mut runtime = Runtime::builder()
            .registry(registry())
            .journal(MemoryJournal::new())
            .check_round_trip(on)
            .executor(Kind::Llm, from_fn(|_| Ok(json!("!"))))
            .build();
        let id = runtime
            .submit(NewTask::new(noted(Some(Value::Null))))
            .unwrap()
            .id;
        let checkpoint = runtime.checkpoint();
        if on {
            let expected = RoundTripError::Lossy {
                task: id,
                type_name: "noted".to_owned(),
                reason: "`note` is a `Some` of `null`, which JSON saves as `null` and reads \
                         back as `None`"
                    .to_owned(),
            };
            assert_eq!(
                checkpoint,
                Err(JournalError::Snapshot(SnapshotError::RoundTrip(expected)))
            );
            assert_eq!(
                checkpoint.unwrap_err().to_string(),
                format!("the scheduler could not be snapshotted for the journal: {LOSSY}")
            );
        } else {
            assert_eq!(checkpoint, Ok(()));
        }
        // The task runs on either way.
        runtime.run_until_idle();
        assert_eq!(
            runtime.task_state(id),
            Some(spool::TaskState::Completed(Ok(json!(true))))
        );
    }
}

/// An async task is checked by replay: made again from its input and fed its record,
/// it must ask for what it asked for. One that asks for something else each time it is
/// made (here, a number it counts itself) is caught at the step after its first poll.
#[test]
fn test_scheduler_replays_async_tasks_to_check_them() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let registry = TaskRegistry::new()
        .with_async("steady", |cx, input| async move {
            let first = cx.llm(input).await?;
            Ok(cx.llm(first).await?)
        })
        .with_async("drifting", |cx, _input| async move {
            let made = MADE.fetch_add(1, Ordering::Relaxed);
            Ok(cx.llm(json!({"made": made})).await?)
        });
    let mut scheduler = TestScheduler::new();
    scheduler.set_registry(registry.clone());
    scheduler.mock_llm_fn(|r| Ok(json!({"echo": r.request.payload.value()})));
    let steady = scheduler.submit(NewTask::boxed(
        registry.make("steady", &json!("q")).unwrap(),
    ));
    scheduler.snapshot().unwrap();
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(steady),
        spool::TaskState::Completed(Ok(json!({"echo": {"echo": "q"}})))
    );
    scheduler.submit(NewTask::boxed(
        registry.make("drifting", &json!(null)).unwrap(),
    ));
    let message = panic_message(|| {
        scheduler.step();
    });
    assert_eq!(
        message,
        format!(
            "task 2 (type `drifting`) does not round-trip: its state does not restore: task 2 \
             does not replay: at poll 0 it differs from its journal:\n  \
             recorded: request 1 llm {{\"made\":0}}\n  \
             now:      request 1 llm {{\"made\":1}}{HINT}"
        )
    );
}
