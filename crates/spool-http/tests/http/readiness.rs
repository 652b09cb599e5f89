//! Before the views' first publication: `/healthz` says `starting` (503), and reads wait
//! for the publication instead of answering from empty views (`[]`, zero counts), up to
//! the state's ready wait, then `503` with `Retry-After`. And the list of tasks leaves
//! large results out.

use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{NewTask, Step, task_fn};
use spool_http::{AppState, Server};
use spool_runtime::{Runtime, RuntimeHandle};

use crate::support::{TOKEN, problem, registry, request};

/// A server over a runtime that is built, holds tasks, and does not run (so has not
/// published) until [`Held::run`].
struct Held {
    base: String,
    handle: RuntimeHandle,
    runtime: Option<Runtime>,
    thread: Option<JoinHandle<()>>,
    server: Option<Server>,
}

impl Held {
    /// `tasks` submitted before the runtime runs; `wait`: the state's ready wait, if
    /// not the default.
    fn start(tasks: Vec<NewTask>, wait: Option<Duration>) -> Held {
        let (builder, views) = spool_http::publish_views(
            Runtime::builder().registry(registry()),
            Duration::from_millis(5),
            1024,
        );
        let mut runtime = builder.try_build().unwrap();
        for task in tasks {
            runtime.submit(task).unwrap();
        }
        let handle = runtime.handle();
        let mut state = AppState::new(handle.clone(), registry(), views, TOKEN).unwrap();
        if let Some(wait) = wait {
            state = state.ready_wait(wait);
        }
        let server = Server::builder()
            .addr(([127, 0, 0, 1], 0).into())
            .start(state)
            .unwrap();
        Held {
            base: format!("http://{}", server.addr()),
            handle,
            runtime: Some(runtime),
            thread: None,
            server: Some(server),
        }
    }

    /// Runs the runtime on a thread of its own: it publishes at its first turn.
    fn run(&mut self) {
        let mut runtime = self.runtime.take().unwrap();
        self.thread = Some(std::thread::spawn(move || {
            let _ = runtime.run();
        }));
    }

    fn get(&self, path: &str) -> crate::support::Answer {
        request(
            "GET",
            &format!("{}{path}", self.base),
            Some(TOKEN),
            &[],
            None,
        )
    }

    /// GETs `path` until it answers 200; gives up after 20 s.
    fn wait_for_200(&self, path: &str) -> crate::support::Answer {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let answer = self.get(path);
            if answer.status == 200 {
                return answer;
            }
            assert!(std::time::Instant::now() < deadline, "{answer:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.handle.shutdown();
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn done(name: &'static str, value: Value) -> NewTask {
    NewTask::new(task_fn(name, move |_cx| Step::done(value.clone())))
}

/// A restarted server's tasks are there before its loop runs: a read waits for the
/// first publication rather than answering `[]`, and `/healthz` says `starting` until
/// then.
#[test]
fn reads_wait_for_the_first_publication() {
    let mut held = Held::start(vec![done("early", json!(1))], None);
    let health = held.get("/healthz");
    assert_eq!(
        (
            health.status,
            health.text.as_str(),
            health.header("retry-after")
        ),
        (503, "starting 0\n", Some("1"))
    );
    let base = held.base.clone();
    let read = std::thread::spawn(move || {
        request("GET", &format!("{base}/v1/tasks"), Some(TOKEN), &[], None)
    });
    held.run();
    let answer = read.join().unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let ids: Vec<&Value> = answer.json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(ids, [&json!(1)]);
    let health = held.wait_for_200("/healthz");
    assert!(health.text.starts_with("ok "), "{health:?}");
    assert_ne!(health.text, "ok 0\n");
}

/// A read that the first publication does not come for within the ready wait is
/// `503` with `Retry-After`, for every view; what does not come from the views is
/// answered at once.
#[test]
fn a_read_before_any_publication_is_503_after_the_wait() {
    let held = Held::start(
        vec![done("early", json!(1))],
        Some(Duration::from_millis(50)),
    );
    let detail = "the server is starting: its views of the runtime are not published yet";
    for path in [
        "/v1/tasks",
        "/v1/tasks/1",
        "/v1/queue",
        "/v1/schedules",
        "/metrics",
    ] {
        let answer = held.get(path);
        answer.assert_problem(503, problem(503, "starting", "Starting", detail));
        assert_eq!(answer.header("retry-after"), Some("1"), "{path}");
    }
    assert_eq!(held.get("/v1/task-types").status, 200);
    assert_eq!(held.get("/v1/openapi.json").status, 200);
    // The token is checked first: without it, 401 at once.
    let anonymous = request("GET", &format!("{}/v1/tasks", held.base), None, &[], None);
    assert_eq!(anonymous.status, 401);
}

/// The list carries a result of at most 4 KiB, and the size of a larger one in its
/// place (`result_omitted`); the task itself has the whole result.
#[test]
fn the_list_leaves_large_results_out() {
    let large = "x".repeat(5_000_000);
    let mut held = Held::start(
        vec![
            done("small", json!({"answer": 42})),
            done("large", Value::String(large.clone())),
            done("edge", Value::String("y".repeat(4094))),
        ],
        None,
    );
    held.run();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let list = loop {
        let list = held.get("/v1/tasks?state=completed");
        if list.json["tasks"].as_array().map(Vec::len) == Some(3) {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "{list:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    let rows = list.json["tasks"].as_array().unwrap();
    let shape: Vec<Value> = rows
        .iter()
        .map(|row| {
            let mut row = row.as_object().unwrap().clone();
            let result = row.get("result").map(|r| match r {
                Value::String(s) if s.len() > 100 => json!(format!("{} bytes", s.len())),
                other => other.clone(),
            });
            row.retain(|k, _| ["id", "result_bytes", "result_omitted"].contains(&k.as_str()));
            row.insert("result".to_owned(), result.unwrap_or(json!("absent")));
            Value::Object(row)
        })
        .collect();
    assert_eq!(
        shape,
        [
            json!({"id": 1, "result": {"answer": 42}, "result_bytes": 13}),
            json!({"id": 2, "result": null, "result_bytes": 5_000_002, "result_omitted": true}),
            json!({"id": 3, "result": "4094 bytes", "result_bytes": 4096}),
        ]
    );
    assert!(list.text.len() < 10_000, "{} bytes", list.text.len());
    let task = held.get("/v1/tasks/2");
    assert_eq!(
        task.json["result"].as_str().map(str::len),
        Some(large.len())
    );
    assert_eq!(task.json["result_bytes"], json!(5_000_002));
    assert!(task.json.get("result_omitted").is_none());
}
