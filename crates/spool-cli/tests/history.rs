//! Histories and forks on the threaded runtime, over the HTTP API and from the command
//! line: a task's steps read back from its SQLite store; a fork from a past step reuses
//! the recorded answers (nothing reaches the executor for them), takes an edited one,
//! and runs live from there; the original is untouched; and all of it is the same
//! after the runtime is dropped and recovered from the store.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::{
    AsyncTask, Cx, Edit, Kind, NewTask, Outcome, TaskId, TaskRegistry, TaskState, from_fn,
};
use spool_durable::{DurableStore, History};
use spool_runtime::{Runtime, RuntimeBuilder, RuntimeHandle, TaskHistoryError};
use spool_store::{Store, StoreOptions};

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

fn task(topic: &str) -> NewTask {
    NewTask::new(AsyncTask::replayable("writer", json!(topic), writer))
}

/// What the LLM was sent: the task, the request's number, the payload.
type Seen = Arc<Mutex<Vec<(TaskId, u32, Value)>>>;

/// A runtime builder whose LLM answers `answer N` (N counting every call it gets)
/// and notes every request it is sent.
fn counted(seen: &Seen) -> RuntimeBuilder {
    let noted = Arc::clone(seen);
    let calls = Arc::new(Mutex::new(0));
    Runtime::builder().registry(registry()).executor(
        Kind::Llm,
        from_fn(move |out| {
            let mut n = calls.lock().unwrap();
            *n += 1;
            noted.lock().unwrap().push((
                out.key.task(),
                out.key.number(),
                out.request.payload.value().clone(),
            ));
            Ok(json!(format!("answer {n}")))
        }),
    )
}

/// `builder` journaling to the store at `path` (opened with `history`), checkpointing
/// every 3 entries, and reading histories from it.
fn on_store(builder: RuntimeBuilder, path: &Path, history: History) -> Runtime {
    let store = Store::open_with(path, StoreOptions::new().history(history)).unwrap();
    let shared: Arc<dyn DurableStore> = Arc::new(store.clone());
    let builder = match store.recover().unwrap() {
        Some(journal) => builder.recover(&journal, &registry()).unwrap(),
        None => builder,
    };
    builder
        .journal(store)
        .checkpoint_every(3)
        .history(shared)
        .try_build()
        .unwrap()
}

fn sent_by(seen: &Seen, task: TaskId) -> Vec<u32> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(t, _, _)| *t == task)
        .map(|(_, n, _)| *n)
        .collect()
}

fn store_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.spool");
    (dir, path)
}

/// The edit of the tests: request 3 answered `EDITED`.
fn third_edited() -> Edit {
    Edit::Answer {
        request: 3,
        result: Ok(json!("EDITED")),
    }
}

#[test]
fn a_fork_with_its_third_answer_edited_sends_only_what_follows_and_survives_a_restart() {
    let (_dir, path) = store_path();
    let seen = Seen::default();
    let mut runtime = on_store(counted(&seen), &path, History::default());
    let id = runtime.submit(task("rust")).unwrap().id;
    runtime.run_until_idle();
    let original_state = runtime.task_state(id);
    let original = runtime.history(id).unwrap();
    // Six polls: the first asks, each of the next four gets an answer and asks again,
    // the last gets the fifth answer and returns. Step 3 is the poll that received
    // answer 3.
    let received: Vec<Vec<u32>> = original
        .steps
        .iter()
        .map(|s| s.answers.iter().map(|a| a.request).collect())
        .collect();
    assert_eq!(
        received,
        [vec![], vec![1], vec![2], vec![3], vec![4], vec![5]]
    );

    let fork = runtime.fork(id, 3, third_edited()).unwrap();
    runtime.run_until_idle();
    // Answers 1 and 2 came from the tape, 3 is the edit: only 4 and 5 were sent.
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
    let forked_state = TaskState::Completed(Ok(json!([
        "answer 1", "answer 2", "EDITED", "answer 6", "answer 7"
    ])));
    assert_eq!(runtime.task_state(fork), Some(forked_state.clone()));
    // The original is untouched.
    assert_eq!(runtime.task_state(id), original_state);
    assert_eq!(runtime.history(id).unwrap(), original);
    let fork_history = runtime.history(fork).unwrap();
    let origin = fork_history.origin.unwrap();
    assert_eq!((origin.task, origin.step), (id, 3));
    // A request its tape answers is answered in the step that asked it: the task goes
    // on in that step, so the fork takes fewer steps than its origin.
    assert_eq!(fork_history.steps.len(), 3);
    let playback = runtime.scheduler().fork_origin(fork).unwrap().1;
    assert_eq!((playback.played, playback.diverged_at), (3, None));

    // Dropped and recovered from the store: the same states, histories and origin,
    // and nothing sent again.
    drop(runtime);
    let sent_before = seen.lock().unwrap().len();
    let mut runtime = on_store(counted(&seen), &path, History::default());
    runtime.run_until_idle();
    assert_eq!(seen.lock().unwrap().len(), sent_before);
    assert_eq!(runtime.task_state(fork), Some(forked_state));
    assert_eq!(runtime.task_state(id), original_state);
    assert_eq!(runtime.history(fork).unwrap(), fork_history);
    assert_eq!(runtime.history(id).unwrap(), original);
    // And a fork made after the restart reuses the same answers.
    let again = runtime.fork(id, 3, third_edited()).unwrap();
    runtime.run_until_idle();
    assert_eq!(sent_by(&seen, again), [4, 5]);
    assert_eq!(
        runtime
            .scheduler()
            .fork_origin(fork)
            .map(|(o, p)| (o, p.played)),
        Some((origin, 3))
    );
}

#[test]
fn a_history_is_read_from_the_checkpoint_before_its_task_however_many_follow() {
    let (_dir, path) = store_path();
    let seen = Seen::default();
    let mut runtime = on_store(counted(&seen), &path, History::default());
    let ids: Vec<TaskId> = ["a", "b", "c", "d"]
        .iter()
        .map(|topic| {
            let id = runtime.submit(task(topic)).unwrap().id;
            runtime.run_until_idle();
            id
        })
        .collect();
    // Every task's history is there, each from its own submission.
    for (id, topic) in ids.iter().zip(["a", "b", "c", "d"]) {
        let history = runtime.history(*id).unwrap();
        assert_eq!(history.input, Some(json!(topic)));
        assert_eq!(history.steps.len(), 6);
    }
    assert_eq!(
        runtime.history(TaskId::from_raw(99)).unwrap_err(),
        TaskHistoryError::UnknownTask {
            task: TaskId::from_raw(99)
        }
    );
}

#[test]
fn a_history_dropped_by_retention_or_never_kept_says_so() {
    let (_dir, path) = store_path();
    let seen = Seen::default();
    let mut runtime = on_store(counted(&seen), &path, History::off());
    let first = runtime.submit(task("old")).unwrap().id;
    runtime.run_until_idle();
    let second = runtime.submit(task("new")).unwrap().id;
    runtime.run_until_idle();
    // The checkpoints taken since dropped the segment the first was submitted in.
    let error = runtime.history(first).unwrap_err();
    assert_eq!(error, TaskHistoryError::Dropped { task: first });
    assert_eq!(
        error.to_string(),
        format!(
            "the history of task {first} is no longer kept: it was submitted before the \
             oldest kept checkpoint, which the store's retention dropped"
        )
    );
    assert_eq!(
        runtime.fork(first, 0, Edit::None).unwrap_err(),
        TaskHistoryError::Dropped { task: first }
    );
    let _ = second;

    // A runtime without a store keeps none.
    let mut bare = counted(&seen).build();
    let id = bare.submit(task("x")).unwrap().id;
    bare.run_until_idle();
    assert_eq!(bare.history(id).unwrap_err(), TaskHistoryError::NotKept);
    assert_eq!(
        bare.handle()
            .fork(id, 0, Edit::None)
            .unwrap_err()
            .to_string(),
        "no history is kept: this runtime has no store to read it from (run it on a store \
         that keeps history)"
    );
}

/// The token the test servers take.
const TOKEN: &str = "history-token";

/// A runtime on a store (or none) behind an HTTP server, its loop on a thread.
struct Api {
    base: String,
    handle: RuntimeHandle,
    seen: Seen,
    server: Option<spool_http::Server>,
    runtime: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Api {
    fn start(with_store: bool) -> Api {
        let (dir, path) = store_path();
        let seen = Seen::default();
        let (builder, views) = spool_http::publish_views(
            counted(&seen),
            spool_http::DEFAULT_PUBLISH_EVERY,
            spool_http::DEFAULT_EVENT_RING,
        );
        let mut runtime = if with_store {
            on_store(builder, &path, History::default())
        } else {
            builder.build()
        };
        let handle = runtime.handle();
        let state = spool_http::AppState::new(handle.clone(), registry(), views, TOKEN).unwrap();
        let server = spool_http::Server::builder()
            .addr(([127, 0, 0, 1], 0).into())
            .start(state)
            .unwrap();
        let base = format!("http://{}", server.addr());
        let runtime = std::thread::spawn(move || {
            runtime.run();
        });
        Api {
            base,
            handle,
            seen,
            server: Some(server),
            runtime: Some(runtime),
            _dir: dir,
        }
    }

    /// Submits a writer on `topic` and waits for it to end.
    fn finished(&self, topic: &str) -> TaskId {
        let id = self.handle.submit(task(topic)).unwrap().id;
        self.wait_ended(id);
        id
    }

    fn wait_ended(&self, id: TaskId) -> TaskState {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let state = self
                .handle
                .query(move |rt| rt.task_state(id))
                .unwrap()
                .unwrap();
            if state.is_terminal() {
                return state;
            }
            assert!(Instant::now() < deadline, "task {id} did not end: {state}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let builder = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/json");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut answer = agent.run(builder.body(body).unwrap()).unwrap();
        let status = answer.status().as_u16();
        let text = answer.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.handle.shutdown();
        if let Some(runtime) = self.runtime.take() {
            let _ = runtime.join();
        }
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
    }
}

/// `value` with every `at` and `submitted_at` (times of the real clock) set to 0.
fn timeless(mut value: Value) -> Value {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    if key == "at" || key == "submitted_at" {
                        *field = json!(0);
                    } else {
                        walk(field);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

#[test]
fn get_history_answers_the_steps_as_json() {
    let api = Api::start(true);
    let id = api.finished("rust");
    let (status, body) = api.call("GET", &format!("/v1/tasks/{id}/history"), None);
    assert_eq!(status, 200, "{body}");
    let step = |n: u32, answers: Value, asked: Value, end: Value| {
        json!({"step": n, "at": 0, "answers": answers, "children_ended": [],
            "requests": asked, "spawned": [], "end": end})
    };
    let ask = |turn: u32, so_far: Value| {
        json!([{"number": turn, "kind": "llm",
            "payload": {"topic": "rust", "turn": turn, "so_far": so_far}}])
    };
    let got = |n: u32| json!([{"request": n, "result": {"Ok": format!("answer {n}")}}]);
    let all = json!(["answer 1", "answer 2", "answer 3", "answer 4", "answer 5"]);
    // The document's schema names the members the answer has.
    let (_, doc) = api.call("GET", "/v1/openapi.json", None);
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    let required = |name: &str| -> Vec<String> {
        let mut names: Vec<String> = doc["components"]["schemas"][name]["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(required("TaskHistory"), keys(&body));
    assert_eq!(required("HistoryStep"), keys(&body["steps"][0]));
    assert_eq!(
        doc["paths"]["/v1/tasks/{id}/history"]["get"]["responses"]["200"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/TaskHistory"
    );
    assert_eq!(
        timeless(body),
        json!({
            "task": id.get(),
            "type_name": "writer",
            "agent": "default",
            "submitted_at": 0,
            "input": "rust",
            "origin": null,
            "steps": [
                step(0, json!([]), ask(1, json!([])), json!("Waiting")),
                step(1, got(1), ask(2, json!(["answer 1"])), json!("Waiting")),
                step(2, got(2), ask(3, json!(["answer 1", "answer 2"])), json!("Waiting")),
                step(3, got(3), ask(4, json!(["answer 1", "answer 2", "answer 3"])), json!("Waiting")),
                step(4, got(4), ask(5, json!(["answer 1", "answer 2", "answer 3", "answer 4"])), json!("Waiting")),
                step(5, got(5), json!([]), json!({"Returned": all})),
            ],
            "end": {"Completed": all},
        })
    );
    let (status, body) = api.call("GET", "/v1/tasks/77/history", None);
    assert_eq!(
        (status, &body["type"], &body["detail"]),
        (
            404,
            &json!("https://spool.invalid/problems/not-found"),
            &json!("no task 77 in the history kept (never submitted, or spawned by another task)")
        )
    );
}

#[test]
fn history_and_fork_without_a_store_are_409() {
    let api = Api::start(false);
    let id = api.finished("rust");
    for (method, path, body) in [
        ("GET", format!("/v1/tasks/{id}/history"), None),
        (
            "POST",
            format!("/v1/tasks/{id}/fork"),
            Some(json!({"at": 1})),
        ),
    ] {
        let (status, problem) = api.call(method, &path, body);
        assert_eq!(status, 409, "{method} {path}");
        assert_eq!(
            problem,
            json!({
                "type": "https://spool.invalid/problems/history-not-kept",
                "title": "History not kept",
                "status": 409,
                "detail": "no history is kept: this runtime has no store to read it from \
                           (run it on a store that keeps history)",
            })
        );
    }
}

#[test]
fn post_fork_makes_a_task_that_shows_where_it_comes_from() {
    let api = Api::start(true);
    let id = api.finished("rust");
    let body = json!({"at": 3, "edit": {"answer": {"request": 3, "result": "EDITED"}}});
    let (status, answer) = api.call("POST", &format!("/v1/tasks/{id}/fork"), Some(body));
    assert_eq!(status, 201, "{answer}");
    let fork = answer["id"].as_u64().unwrap();
    assert_eq!(
        answer,
        json!({"id": fork, "origin": {"task": id.get(), "step": 3}})
    );
    let state = api.wait_ended(TaskId::from_raw(fork));
    assert_eq!(
        state,
        TaskState::Completed(Ok(json!([
            "answer 1", "answer 2", "EDITED", "answer 6", "answer 7"
        ])))
    );
    assert_eq!(sent_by(&api.seen, TaskId::from_raw(fork)), [4, 5]);
    // The fork says where it comes from; the original does not.
    let deadline = Instant::now() + Duration::from_secs(20);
    let task = loop {
        let (status, task) = api.call("GET", &format!("/v1/tasks/{fork}"), None);
        assert_eq!(status, 200, "{task}");
        if task["state"] == "completed" || Instant::now() > deadline {
            break task;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(task["forked_from"], json!({"task": id.get(), "step": 3}));
    let (_, original) = api.call("GET", &format!("/v1/tasks/{id}"), None);
    assert!(original.get("forked_from").is_none(), "{original}");
    // Another input, and no edit at all, are forks too.
    for body in [
        json!({"at": 0, "edit": {"input": "go"}}),
        json!({"at": 5, "edit": null}),
    ] {
        let (status, answer) = api.call("POST", &format!("/v1/tasks/{id}/fork"), Some(body));
        assert_eq!(status, 201, "{answer}");
    }
}

#[test]
fn bad_forks_are_refused_with_what_was_wrong() {
    let api = Api::start(true);
    let id = api.finished("rust");
    let fork = |body: Value| api.call("POST", &format!("/v1/tasks/{id}/fork"), Some(body));
    let (status, problem) = fork(json!({"at": 9}));
    assert_eq!(status, 422);
    assert_eq!(
        problem["errors"],
        json!([{"path": "/at", "message": format!("task {id} has 6 steps: there is no step 9")}])
    );
    let (status, problem) = fork(json!({"at": 2, "edit": {"answer": {"request": 4, "result": 1}}}));
    assert_eq!(status, 422);
    assert_eq!(
        problem["errors"],
        json!([{"path": "/edit/answer/request",
            "message": format!("task {id} had not made request 4 before step 2")}])
    );
    let (status, problem) =
        fork(json!({"at": 2, "edit": {"answer": {"request": 1, "result": 1, "error": "no"}}}));
    assert_eq!(
        (status, &problem["errors"][0]["path"]),
        (422, &json!("/edit/answer"))
    );
    // An edit is an answer or an input: both, or neither, is what was wrong.
    for edit in [
        json!({"answer": {"request": 1, "result": 1}, "input": {"topic": "go"}}),
        json!({}),
    ] {
        let (status, problem) = fork(json!({"at": 2, "edit": edit}));
        assert_eq!(
            (status, &problem["errors"][0]["path"]),
            (422, &json!("/edit")),
            "{problem}"
        );
    }
    // A whole number written with a fraction of zero is the number.
    let (status, problem) = fork(json!({"at": 9.0}));
    assert_eq!(
        (status, &problem["errors"][0]["path"]),
        (422, &json!("/at"))
    );
    let (status, _) = fork(json!({"at": 1.5}));
    assert_eq!(status, 400);
    let (status, _) = fork(json!({"at": "two"}));
    assert_eq!(status, 400);
    let (status, _) = fork(json!({"at": 1, "edit": {"rewind": 1}}));
    assert_eq!(status, 400);
    let (status, _) = api.call("POST", "/v1/tasks/77/fork", Some(json!({"at": 0})));
    assert_eq!(status, 404);
    // Nothing was forked.
    let (_, page) = api.call("GET", "/v1/tasks", None);
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1);
}

/// Runs `spool ARGS`: its exit code, stdout and stderr.
fn spool(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("SPOOL_TOKEN")
        .env_remove("SPOOL_DATABASE_URL")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `text` with each time of the table (`+1.234s`) written `+X.XXXs`.
fn times_hidden(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.split(' ')
                .map(|word| {
                    let time = word
                        .strip_prefix('+')
                        .and_then(|w| w.strip_suffix('s'))
                        .is_some_and(|n| n.parse::<f64>().is_ok());
                    if time { "+X.XXXs" } else { word }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn spool_history_prints_the_steps_and_spool_fork_makes_a_fork() {
    let api = Api::start(true);
    let id = api.finished("rust");
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let token_file = token_file.to_str().unwrap();
    let addr = api.base.as_str();
    let id_text = id.to_string();
    let (code, out, err) = spool(&[
        "history",
        &id_text,
        "--addr",
        addr,
        "--token-file",
        token_file,
    ]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!(times_hidden(&out));

    let (code, out, err) = spool(&[
        "fork",
        &id_text,
        "--at",
        "3",
        "--answer",
        "3=\"EDITED\"",
        "--addr",
        addr,
        "--token-file",
        token_file,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "task 2: forked from task 1 at step 3\n");
    api.wait_ended(TaskId::from_raw(2));
    let (code, out, err) = spool(&["history", "2", "--addr", addr, "--token-file", token_file]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().take(3).collect();
    assert_eq!(
        lines,
        [
            "task 2: writer, agent default; completed: [\"answer 1\",\"answer 2\",\"EDITED\",\"answer 6\",\"ans…",
            "forked from task 1 at step 3",
            "input: \"rust\"",
        ]
    );

    // The errors: one line each, 1 for what failed, 2 for a usage error.
    let (code, _, err) = spool(&["history", "9", "--addr", addr, "--token-file", token_file]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            format!(
                "spool history: the server at {addr} answered 404: no task 9 in the history \
                 kept (never submitted, or spawned by another task)\n"
            )
            .as_str()
        )
    );
    let (code, _, err) = spool(&["fork", "1", "--at", "3"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "spool fork: a fork is made only through a running server (its runtime runs the \
             fork): give --addr http://HOST:PORT and --token-file FILE\n"
        )
    );
    let (code, _, err) = spool(&[
        "fork", "1", "--at", "3", "--answer", "three", "--addr", addr,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("spool fork: --answer \"three\": expected REQ=JSON"),
        "{err}"
    );
    let (code, _, err) = spool(&["history", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("spool history: no history to read"),
        "{err}"
    );
}

#[test]
fn spool_history_reads_a_store_it_is_given() {
    let (_dir, path) = store_path();
    let path_text = path.to_str().unwrap();
    // A store holding no task 1 (its runtime ran none).
    drop(on_store(
        counted(&Seen::default()),
        &path,
        History::default(),
    ));
    let (code, _, err) = spool(&["history", "1", "--store", path_text]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "spool history: no task 1 in the history kept (never submitted, or spawned by another task)\n"
        )
    );
    let (code, _, err) = spool(&["history", "1", "--store", "/nonexistent/s.spool"]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "spool history: there is no store at /nonexistent/s.spool\n"
        )
    );
}

/// `spool serve` on a store: its built-in agent's history is read from the store while
/// the server runs (without its lock), and a fork of it is made through the server.
#[test]
fn spool_serve_keeps_its_agents_histories_and_forks_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let (store, token) = (store.to_str().unwrap(), token.to_str().unwrap());
    let server = support::Server::start([
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--llm-latency-ms",
        "0",
        "--store",
        store,
        "--token-file",
        token,
    ]);
    let addr = format!("http://{}", server.addr);
    let agent = support::client(Duration::from_secs(20));
    let mut answer = agent
        .post(format!("{addr}/v1/tasks"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send_json(json!({"type": "agent", "input": {"prompt": "What is 2+2?"}}))
        .unwrap();
    assert_eq!(answer.status(), 202);
    let id =
        serde_json::from_str::<Value>(&answer.body_mut().read_to_string().unwrap()).unwrap()["id"]
            .as_u64()
            .unwrap();
    let completed = |id: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let task = support::get_ok(&agent, &server.addr, TOKEN, &format!("/v1/tasks/{id}"));
            if task["state"] == "completed" {
                return task;
            }
            assert!(Instant::now() < deadline, "{task}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    completed(id);
    let id_text = id.to_string();
    // From the store, while the server writes it; and from the server: the same.
    let (code, from_store, err) = spool(&["history", &id_text, "--store", store, "--json"]);
    assert_eq!(code, 0, "{err}");
    let (code, from_server, err) = spool(&[
        "history",
        &id_text,
        "--addr",
        &addr,
        "--token-file",
        token,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let from_store: Value = serde_json::from_str(&from_store).unwrap();
    assert_eq!(
        from_store,
        serde_json::from_str::<Value>(&from_server).unwrap()
    );
    assert_eq!(from_store["type_name"], "agent");
    assert!(from_store["end"]["Completed"].is_object(), "{from_store}");

    let (code, out, err) = spool(&[
        "fork",
        &id_text,
        "--at",
        "1",
        "--addr",
        &addr,
        "--token-file",
        token,
    ]);
    assert_eq!(code, 0, "{err}");
    let fork = id + 1;
    assert_eq!(
        out,
        format!("task {fork}: forked from task {id} at step 1\n")
    );
    let task = completed(fork);
    assert_eq!(task["forked_from"], json!({"task": id, "step": 1}));
    server.stop();
}
