//! Histories and forks on the test scheduler: a task's steps read back from the
//! journal; a fork from a past step reuses the recorded answers (nothing is sent for
//! them), takes an edited one, and runs live from there; the original is untouched.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{
    AsyncTask, Cx, Edit, ForkError, HistoryEnd, HistoryError, NewTask, Outcome, RequestError,
    Scheduler, StepEnd, TaskError, TaskId, TaskRegistry, TaskState,
};
use spool_test::{TestForkError, TestScheduler};

/// Asks the LLM five times, each time with every answer so far, sleeping a second
/// between turns, and returns the answers.
async fn writer(cx: Cx, input: Value) -> Outcome {
    let mut answers: Vec<Value> = Vec::new();
    for turn in 1..=5 {
        let reply = cx
            .llm(json!({"topic": input, "turn": turn, "so_far": answers}))
            .await?;
        answers.push(reply);
        cx.sleep(Duration::from_secs(1)).await;
    }
    Ok(json!(answers))
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_async("writer", writer)
}

/// What the LLM was sent: the task, the request's number, the payload.
type Seen = Arc<Mutex<Vec<(TaskId, u32, Value)>>>;

/// A test scheduler whose LLM answers `answer N` and notes every payload it is sent
/// with the task that sent it.
fn mocked() -> (TestScheduler, Seen) {
    let mut ts = TestScheduler::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = Arc::clone(&seen);
    let mut n = 0;
    ts.mock_llm_fn(move |out| {
        n += 1;
        noted.lock().unwrap().push((
            out.key.task(),
            out.key.number(),
            out.request.payload.value().clone(),
        ));
        Ok(json!(format!("answer {n}")))
    });
    (ts, seen)
}

fn run_original() -> (TestScheduler, Seen, TaskId) {
    let (mut ts, seen) = mocked();
    ts.record_journal().unwrap();
    let id = ts.spawn(AsyncTask::replayable("writer", json!("rust"), writer));
    ts.run_until_quiet();
    (ts, seen, id)
}

fn sent_by(seen: &Mutex<Vec<(TaskId, u32, Value)>>, task: TaskId) -> Vec<u32> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(t, _, _)| *t == task)
        .map(|(_, n, _)| *n)
        .collect()
}

#[test]
fn a_history_lists_each_step_with_what_it_received_and_asked() {
    let (mut ts, _, id) = run_original();
    let history = ts.history(id, &registry()).unwrap();
    assert_eq!(history.type_name, "writer");
    assert_eq!(history.input, Some(json!("rust")));
    assert_eq!(
        history.end,
        HistoryEnd::Completed(json!([
            "answer 1", "answer 2", "answer 3", "answer 4", "answer 5"
        ]))
    );
    // Each step: the answers it got, the requests it made, how it ended.
    let lines: Vec<String> = history
        .steps
        .iter()
        .map(|s| {
            let got: Vec<String> = s
                .answers
                .iter()
                .map(|a| format!("#{}={}", a.request, a.result.as_ref().unwrap()))
                .collect();
            let asked: Vec<String> = s
                .requests
                .iter()
                .map(|r| format!("#{} {}", r.number, r.kind))
                .collect();
            let end = match &s.end {
                StepEnd::Returned(_) => "returned".to_owned(),
                other => format!("{other:?}"),
            };
            format!(
                "{} @{}s got [{}] asked [{}] {}",
                s.step,
                s.at.as_nanos() / 1_000_000_000,
                got.join(" "),
                asked.join(" "),
                end
            )
        })
        .collect();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn a_fork_with_its_third_answer_edited_sends_only_what_follows() {
    let (mut ts, seen, id) = run_original();
    let original_state = ts.task_state(id);
    let original_history = ts.history(id, &registry()).unwrap();
    // Step 5 is the poll that received answer 3.
    assert_eq!(original_history.steps[5].answers[0].request, 3);
    let fork = ts
        .fork(
            id,
            5,
            Edit::Answer {
                request: 3,
                result: Ok(json!("EDITED")),
            },
            &registry(),
        )
        .unwrap();
    ts.run_until_quiet();
    // Requests 1-3 were answered from the tape: only 4 and 5 reached the LLM.
    assert_eq!(sent_by(&seen, fork), [4, 5]);
    let fourth = seen
        .lock()
        .unwrap()
        .iter()
        .find(|(t, n, _)| *t == fork && *n == 4)
        .map(|(_, _, p)| p.clone())
        .unwrap();
    assert_eq!(
        fourth,
        json!({"topic": "rust", "turn": 4, "so_far": ["answer 1", "answer 2", "EDITED"]})
    );
    assert_eq!(
        ts.task_state(fork),
        TaskState::Completed(Ok(json!([
            "answer 1", "answer 2", "EDITED", "answer 6", "answer 7"
        ])))
    );
    // The original is untouched: its state and history are what they were.
    assert_eq!(ts.task_state(id), original_state);
    assert_eq!(ts.history(id, &registry()).unwrap(), original_history);
    // The fork knows where it comes from, and its own history says so.
    let (origin, playback) = ts.core().fork_origin(fork).unwrap();
    assert_eq!((origin.task, origin.step), (id, 5));
    assert_eq!((playback.played, playback.diverged_at), (3, None));
    assert_eq!(ts.history(fork, &registry()).unwrap().origin, Some(origin));
}

#[test]
fn a_fork_without_an_edit_asks_again_from_its_step() {
    let (mut ts, seen, id) = run_original();
    let fork = ts.fork(id, 5, Edit::None, &registry()).unwrap();
    ts.run_until_quiet();
    assert_eq!(sent_by(&seen, fork), [3, 4, 5]);
}

#[test]
fn a_fork_with_another_input_goes_live_at_the_first_request_that_differs() {
    let (mut ts, seen, id) = run_original();
    let fork = ts
        .fork(id, 5, Edit::Input(json!("go")), &registry())
        .unwrap();
    ts.run_until_quiet();
    // Its first request already differs (another topic): all of it is live.
    assert_eq!(sent_by(&seen, fork), [1, 2, 3, 4, 5]);
    let (_, playback) = ts.core().fork_origin(fork).unwrap();
    assert_eq!((playback.played, playback.diverged_at), (0, Some(1)));
}

#[test]
fn a_fork_taken_apart_by_a_snapshot_mid_tape_ends_as_the_straight_one() {
    let straight = {
        let (mut ts, _, id) = run_original();
        let edit = Edit::Answer {
            request: 2,
            result: Err(RequestError::Failed {
                message: "no".into(),
            }),
        };
        let fork = ts.fork(id, 5, edit, &registry()).unwrap();
        ts.run_until_quiet();
        ts.task_state(fork)
    };
    let (mut ts, seen, id) = run_original();
    let edit = Edit::Answer {
        request: 2,
        result: Err(RequestError::Failed {
            message: "no".into(),
        }),
    };
    let fork = ts.fork(id, 5, edit, &registry()).unwrap();
    // The fork plays answer 1, then sleeps a second: its tape still holds the rest.
    ts.step_until_idle();
    let snapshot = ts.snapshot().unwrap();
    let core = Scheduler::restore(&snapshot, &registry()).unwrap();
    assert_eq!(core.fork_origin(fork), ts.core().fork_origin(fork));
    let (mut restored, _) = mocked();
    *restored.core_mut() = core;
    restored.run_until_quiet();
    assert_eq!(restored.task_state(fork), straight);
    // Answer 2 was edited to an error, which the writer gives up on.
    assert_eq!(
        straight,
        TaskState::Completed(Err(TaskError::RequestFailed {
            error: RequestError::Failed {
                message: "no".into()
            }
        }))
    );
    assert!(sent_by(&seen, fork).is_empty());
}

#[test]
fn bad_forks_say_what_was_wrong() {
    let (mut ts, _, id) = run_original();
    let err = |r: Result<TaskId, TestForkError>| r.unwrap_err().to_string();
    assert_eq!(
        err(ts.fork(id, 12, Edit::None, &registry())),
        ForkError::NoSuchStep {
            task: id,
            steps: 11,
            at: 12
        }
        .to_string()
    );
    assert_eq!(
        err(ts.fork(
            id,
            2,
            Edit::Answer {
                request: 4,
                result: Ok(json!(1))
            },
            &registry()
        )),
        "task 1 had not made request 4 before step 2"
    );
    assert_eq!(
        err(ts.fork(TaskId::from_raw(77), 0, Edit::None, &registry())),
        HistoryError::NotFound {
            task: TaskId::from_raw(77)
        }
        .to_string()
    );
    let mut unrecorded = TestScheduler::new();
    let other = unrecorded.spawn(AsyncTask::replayable("writer", json!(1), writer));
    assert_eq!(
        unrecorded.history(other, &registry()).unwrap_err(),
        HistoryError::NotRecorded
    );
}

/// An explicit task made from an input `{"topic": ...}`, saved in binary: asks the LLM
/// twice about its topic and returns the answers.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Asker {
    topic: String,
    answers: Vec<Value>,
}

impl spool_core::AgentTask for Asker {
    fn poll(&mut self, cx: &mut spool_core::TaskContext<'_>) -> spool_core::Step {
        while let Some(answer) = cx.take_answer() {
            match answer.result {
                Ok(value) => self.answers.push(value),
                Err(error) => return spool_core::Step::fail(error.to_string()),
            }
        }
        if self.answers.len() == 2 {
            return spool_core::Step::done(json!(self.answers));
        }
        if cx.in_flight() == 0 {
            cx.llm(json!({"topic": self.topic, "turn": self.answers.len() + 1}));
        }
        spool_core::Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "asker"
    }

    fn save(&self) -> Result<spool_core::SavedTask, spool_core::StateError> {
        spool_core::SavedTask::binary(self)
    }
}

fn asker_registry() -> TaskRegistry {
    TaskRegistry::new()
        .with("asker", |bytes| {
            spool_core::SavedTask::decode_serde::<Asker>(bytes)
                .map(|task| Box::new(task) as Box<dyn spool_core::AgentTask>)
        })
        .with_input("asker", |input| {
            let topic = input["topic"].as_str().ok_or("`topic` must be a string")?;
            Ok(Box::new(Asker {
                topic: topic.to_owned(),
                answers: Vec::new(),
            }))
        })
}

#[test]
fn a_fork_with_another_input_is_made_from_it_as_a_submission_is() {
    let registry = asker_registry();
    let (mut ts, seen) = mocked();
    ts.record_journal().unwrap();
    let body = registry.make("asker", &json!({"topic": "rust"})).unwrap();
    let id = ts.submit(NewTask::boxed(body));
    ts.run_until_quiet();
    let fork = ts
        .fork(id, 0, Edit::Input(json!({"topic": "go"})), &registry)
        .unwrap();
    ts.run_until_quiet();
    assert_eq!(sent_by(&seen, fork), [1, 2]);
    assert_eq!(
        ts.task_state(fork),
        TaskState::Completed(Ok(json!(["answer 3", "answer 4"])))
    );
    let first = seen
        .lock()
        .unwrap()
        .iter()
        .find(|(t, n, _)| *t == fork && *n == 1)
        .map(|(_, _, p)| p.clone());
    assert_eq!(first, Some(json!({"topic": "go", "turn": 1})));
    // The fork is journaled as made: a replay of the journal makes it again.
    let journal = ts.journal().unwrap();
    let replay = TestScheduler::replay(&journal, &registry).unwrap();
    assert_eq!(replay.divergence, None);
    // An input the type refuses is the type's own words.
    let refused = ts
        .fork(id, 0, Edit::Input(json!({"topic": 7})), &registry)
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "a task of type `asker` could not be made: the task type \"asker\" refused its input: `topic` must be a string"
    );
}
