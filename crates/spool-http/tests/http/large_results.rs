//! Results too large for the views (over 64 KiB), which `GET /v1/tasks/{id}` reads from
//! the loop's table: reads of one task at once copy the result on the loop once, and
//! every one of them has the whole result; another task's costs a copy of its own.

use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::{NewTask, Step, task_fn};
use spool_http::{AppState, Server};
use spool_runtime::{Runtime, RuntimeHandle};

use crate::support::{Answer, TOKEN, registry, request};

/// A server over a running runtime that ran `tasks` (each completing at once), and the
/// server's state, to count its reads of the loop.
struct Served {
    base: String,
    state: AppState,
    handle: RuntimeHandle,
    thread: Option<JoinHandle<()>>,
    server: Option<Server>,
}

impl Served {
    fn start(results: Vec<Value>) -> Served {
        let (builder, views) = spool_http::publish_views(
            Runtime::builder().registry(registry()),
            Duration::from_millis(5),
            1024,
        );
        let mut runtime = builder.try_build().unwrap();
        for value in results {
            let task = NewTask::new(task_fn("done", move |_cx| Step::done(value.clone())));
            runtime.submit(task).unwrap();
        }
        let handle = runtime.handle();
        let state = AppState::new(handle.clone(), registry(), views, TOKEN).unwrap();
        let server = Server::builder()
            .addr(([127, 0, 0, 1], 0).into())
            .start(state.clone())
            .unwrap();
        let thread = std::thread::spawn(move || {
            let _ = runtime.run();
        });
        Served {
            base: format!("http://{}", server.addr()),
            state,
            handle,
            thread: Some(thread),
            server: Some(server),
        }
    }

    fn get(&self, path: &str) -> Answer {
        request(
            "GET",
            &format!("{}{path}", self.base),
            Some(TOKEN),
            &[],
            None,
        )
    }

    /// Waits until the list shows `n` completed tasks; gives up after 20 s.
    fn wait_for_completed(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let list = self.get("/v1/tasks?state=completed");
            if list.json["tasks"].as_array().map(Vec::len) == Some(n) {
                return;
            }
            assert!(Instant::now() < deadline, "{list:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Served {
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

/// Sixteen GETs at once of a task with a 1 MB result: one copy on the loop, sixteen
/// whole results. Another large task costs one more copy; the first is still kept; a
/// small result (in the views) costs none.
#[test]
fn reads_of_a_large_result_at_once_copy_it_on_the_loop_once() {
    let large = "x".repeat(1_000_000);
    let other = "y".repeat(100_000);
    let served = Arc::new(Served::start(vec![
        Value::String(large.clone()),
        Value::String(other.clone()),
        json!({"answer": 42}),
    ]));
    served.wait_for_completed(3);
    assert_eq!(served.state.large_result_loop_reads(), 0);

    let start = Arc::new(Barrier::new(16));
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let (served, start) = (served.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                served.get("/v1/tasks/1")
            })
        })
        .collect();
    for reader in readers {
        let answer = reader.join().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.status);
        assert_eq!(answer.json["result"].as_str(), Some(large.as_str()));
        assert_eq!(answer.json["result_bytes"], json!(1_000_002));
        assert_eq!(answer.json["state"], json!("completed"));
    }
    assert_eq!(served.state.large_result_loop_reads(), 1);

    let answer = served.get("/v1/tasks/2");
    assert_eq!(answer.json["result"].as_str(), Some(other.as_str()));
    assert_eq!(served.state.large_result_loop_reads(), 2);
    for (path, result) in [
        ("/v1/tasks/1", Value::String(large)),
        ("/v1/tasks/2", Value::String(other)),
        ("/v1/tasks/3", json!({"answer": 42})),
    ] {
        assert_eq!(served.get(path).json["result"], result, "{path}");
    }
    assert_eq!(served.state.large_result_loop_reads(), 2);
}
