//! Histories and forks on the threaded runtime over a PostgreSQL store, read through a
//! read-only connection beside the writer: the same as on SQLite.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// A cluster's shared token.
const TOKEN: &str = "history-cluster-token-0123456789";

/// On a cluster of two nodes, each holding a shard, a task's history and a fork of it
/// are answered through either node: the one holding the task's shard, or the other,
/// which passes the request on.
#[test]
fn a_cluster_answers_histories_and_forks_through_any_node() {
    use support::cluster::{Node, TestCluster, submit, wait_one_shard_each};
    let cluster = TestCluster::init("history_cluster", 2, TOKEN);
    let node = |name| {
        Node::new(&cluster.url, &cluster.token_file, name)
            .llm_latency_ms("0")
            .start()
    };
    let (a, b) = (node("node-a"), node("node-b"));
    let agent = support::client(Duration::from_secs(20));
    wait_one_shard_each(&agent, &a.addr, TOKEN, &["node-a", "node-b"]);
    // Agents enough that both shards get tasks.
    let ids: Vec<u64> = (0..6)
        .map(|i| {
            let body = json!({"type": "agent", "input": {"prompt": format!("p{i}")},
                "agent": format!("agent-{i}")});
            let (status, answer) = submit(&agent, &a.addr, TOKEN, &format!("h-{i}"), &body);
            assert_eq!(status, 202, "{answer}");
            answer["id"].as_u64().unwrap()
        })
        .collect();
    let shards: std::collections::BTreeSet<u64> = ids.iter().map(|id| id >> 44).collect();
    assert_eq!(shards.len(), 2, "{ids:?}");
    let completed = |addr: &str, id: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, task) = support::get(&agent, addr, TOKEN, &format!("/v1/tasks/{id}"));
            if status == 200 && task["state"] == "completed" {
                return task;
            }
            assert!(Instant::now() < deadline, "{status} {task}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    for &id in &ids {
        completed(&a.addr, id);
        let path = format!("/v1/tasks/{id}/history");
        let from_a = support::get_ok(&agent, &a.addr, TOKEN, &path);
        let from_b = support::get_ok(&agent, &b.addr, TOKEN, &path);
        assert_eq!(from_a, from_b);
        assert_eq!(from_a["task"], id);
        assert!(from_a["end"]["Completed"].is_object(), "{from_a}");
        // `spool history --postgres` reads the store of the task's own shard.
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
            .args([
                "history",
                "--postgres",
                &cluster.url,
                &id.to_string(),
                "--json",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "spool history {id}: {stderr}");
        let from_store: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(from_store, from_a, "spool history {id}");
    }
    // A fork through node b of a task of each shard: in its origin's shard.
    for id in [
        ids[0],
        *ids.iter().find(|id| *id >> 44 != ids[0] >> 44).unwrap(),
    ] {
        let mut answer = agent
            .post(format!("http://{}/v1/tasks/{id}/fork", b.addr))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .send_json(json!({"at": 1}))
            .unwrap();
        assert_eq!(answer.status(), 201);
        let forked: Value = answer.body_mut().read_json().unwrap();
        let fork = forked["id"].as_u64().unwrap();
        assert_eq!(fork >> 44, id >> 44, "{forked}");
        let task = completed(&a.addr, fork);
        assert_eq!(task["forked_from"], json!({"task": id, "step": 1}));
    }
    a.stop();
    b.stop();
}
