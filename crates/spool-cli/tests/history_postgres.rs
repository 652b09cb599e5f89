//! Histories and forks on the threaded runtime over a PostgreSQL store, read through a
//! read-only connection beside the writer: the same as on SQLite.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use spool_core::{
    AsyncTask, Cx, Edit, Kind, NewTask, Outcome, TaskId, TaskRegistry, TaskState, from_fn,
};
use spool_durable::DurableStore;
use spool_pgtest::PgCluster;
use spool_postgres::PgStore;
use spool_runtime::{Runtime, TaskHistoryError};

/// Asks the LLM five times, each time with every answer so far, and returns the
/// answers.
async fn writer(cx: Cx, input: Value) -> Outcome {
    let mut answers: Vec<Value> = Vec::new();
    for turn in 1..=5 {
        let reply = cx
            .llm(json!({"topic": input, "turn": turn, "so_far": answers}))
            .await?;
        answers.push(reply);
    }
    Ok(json!(answers))
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_async("writer", writer)
}

/// What the LLM was sent: the task and the request's number.
type Seen = Arc<Mutex<Vec<(TaskId, u32)>>>;

/// A runtime on the store at `url` (going on from what it holds), its LLM answering
/// `answer N` and noting what it is sent, its histories read through a read-only
/// connection.
fn runtime(url: &str, seen: &Seen) -> Runtime {
    let store = PgStore::connect(url).unwrap();
    let reader: Arc<dyn DurableStore> = Arc::new(PgStore::connect_read_only(url).unwrap());
    let noted = Arc::clone(seen);
    let mut builder = Runtime::builder().registry(registry()).executor(
        Kind::Llm,
        from_fn(move |out| {
            let mut seen = noted.lock().unwrap();
            seen.push((out.key.task(), out.key.number()));
            Ok(json!(format!("answer {}", seen.len())))
        }),
    );
    if let Some(journal) = store.recover().unwrap() {
        builder = builder.recover(&journal, &registry()).unwrap();
    }
    builder
        .journal(store)
        .checkpoint_every(3)
        .history(reader)
        .try_build()
        .unwrap()
}

fn sent_by(seen: &Seen, task: TaskId) -> Vec<u32> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t == task)
        .map(|(_, n)| *n)
        .collect()
}

#[test]
fn a_fork_on_postgres_reuses_the_recorded_answers_and_survives_a_restart() {
    let url = PgCluster::shared().create_database("history_fork").unwrap();
    let seen = Seen::default();
    let mut rt = runtime(&url, &seen);
    let task = NewTask::new(AsyncTask::replayable("writer", json!("rust"), writer));
    let id = rt.submit(task).unwrap().id;
    rt.run_until_idle();
    let original = rt.history(id).unwrap();
    assert_eq!(original.steps.len(), 6);
    let edit = Edit::Answer {
        request: 3,
        result: Ok(json!("EDITED")),
    };
    let fork = rt.fork(id, 3, edit).unwrap();
    rt.run_until_idle();
    assert_eq!(sent_by(&seen, fork), [4, 5]);
    let forked = TaskState::Completed(Ok(json!([
        "answer 1", "answer 2", "EDITED", "answer 6", "answer 7"
    ])));
    assert_eq!(rt.task_state(fork), Some(forked.clone()));
    let fork_history = rt.history(fork).unwrap();
    assert_eq!(fork_history.origin.map(|o| (o.task, o.step)), Some((id, 3)));
    assert_eq!(
        rt.history(TaskId::from_raw(99)).unwrap_err(),
        TaskHistoryError::UnknownTask {
            task: TaskId::from_raw(99)
        }
    );

    drop(rt);
    let mut rt = runtime(&url, &seen);
    rt.run_until_idle();
    assert_eq!(rt.task_state(fork), Some(forked));
    assert_eq!(rt.history(id).unwrap(), original);
    assert_eq!(rt.history(fork).unwrap(), fork_history);
}
