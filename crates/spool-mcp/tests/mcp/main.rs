//! The MCP executor against a real MCP server built with rmcp (`tests/support/server.rs`):
//! over stdio (this test binary, started again as the server) and over streamable HTTP
//! on 127.0.0.1, through a real runtime and tasks. Tools listed with their schemas,
//! answers, tool errors, a server that crashes in the middle of a call (the call fails,
//! the server is started again, the next call succeeds), a call that hangs (the timeout
//! ends it and the server hears `notifications/cancelled`), a task canceled while its
//! call is out (the server hears it too), and a server that cannot start.
//!
//! The binary has its own `main` (no libtest): run with `SPOOL_MCP_TEST_SERVER=stdio` it
//! is the stdio server, whose standard output must carry nothing but JSON-RPC.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::{
    Executor, NewTask, OutboundRequest, Replies, ReplySink, Request, RequestError, RequestKey,
    Response, Step, TaskError, TaskId, TaskState, Time, task_fn,
};
use spool_mcp::{McpConfig, McpExecutor, ServerConfig, Transport};
use spool_runtime::Runtime;

/// How long anything here may take before the test counts it as hung.
const LIMIT: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    match std::env::var(server::SERVE_VAR).as_deref() {
        Ok("stdio") => {
            server::serve_stdio();
            return ExitCode::SUCCESS;
        }
        Ok(server::STUBBORN) => server::serve_stubborn(),
        Ok(server::LINGER) => server::linger(),
        _ => {}
    }
    let tests: [(&str, fn()); 10] = [
        (
            "tools_are_listed_with_their_schemas",
            tools_are_listed_with_their_schemas,
        ),
        (
            "calls_answer_over_stdio_and_http",
            calls_answer_over_stdio_and_http,
        ),
        (
            "a_tool_error_is_a_typed_failure",
            a_tool_error_is_a_typed_failure,
        ),
        (
            "a_crash_mid_call_fails_it_and_the_server_comes_back",
            a_crash_mid_call_fails_it_and_the_server_comes_back,
        ),
        (
            "a_hung_call_times_out_and_the_server_hears_the_cancel",
            a_hung_call_times_out_and_the_server_hears_the_cancel,
        ),
        (
            "a_canceled_task_cancels_its_call_at_the_server",
            a_canceled_task_cancels_its_call_at_the_server,
        ),
        (
            "a_request_sent_again_is_answered_each_time",
            a_request_sent_again_is_answered_each_time,
        ),
        (
            "a_server_that_cannot_start_is_named",
            a_server_that_cannot_start_is_named,
        ),
        (
            "a_dropped_executor_ends_a_stubborn_server_and_its_child",
            a_dropped_executor_ends_a_stubborn_server_and_its_child,
        ),
        (
            "a_shutdown_ends_a_stubborn_server_and_its_child",
            a_shutdown_ends_a_stubborn_server_and_its_child,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed, mut filtered) = (0, 0, 0);
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            filtered += 1;
            continue;
        }
        match catch_unwind(AssertUnwindSafe(test)) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored; 0 measured; {filtered} filtered out"
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A directory for the test's logs, removed at the end.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// The stdio server `name`: this binary, logging to `log`.
fn stdio_server(name: &str, log: &Path) -> ServerConfig {
    let exe = std::env::current_exe().expect("the test binary's path");
    ServerConfig::new(
        name,
        Transport::Stdio {
            command: exe.to_string_lossy().into_owned(),
            args: Vec::new(),
            env: BTreeMap::from([
                (server::SERVE_VAR.to_owned(), "stdio".to_owned()),
                (
                    server::LOG_VAR.to_owned(),
                    log.to_string_lossy().into_owned(),
                ),
            ]),
            cwd: None,
        },
    )
}

/// The stdio server `name` that starts a child and goes on after its input ends: this
/// binary, logging to `log`.
fn stubborn_server(name: &str, log: &Path) -> ServerConfig {
    let exe = std::env::current_exe().expect("the test binary's path");
    ServerConfig::new(
        name,
        Transport::Stdio {
            command: exe.to_string_lossy().into_owned(),
            args: Vec::new(),
            env: BTreeMap::from([
                (server::SERVE_VAR.to_owned(), server::STUBBORN.to_owned()),
                (
                    server::LOG_VAR.to_owned(),
                    log.to_string_lossy().into_owned(),
                ),
            ]),
            cwd: None,
        },
    )
}

/// An HTTP server `name` on 127.0.0.1, started here, logging to `log`.
fn http_server(name: &str, log: &Path) -> ServerConfig {
    let url = server::serve_http(Some(log.to_owned()));
    ServerConfig::new(
        name,
        Transport::Http {
            url,
            headers: BTreeMap::new(),
        },
    )
}

fn start(servers: Vec<ServerConfig>) -> McpExecutor {
    McpExecutor::start(&McpConfig { servers }).expect("the servers start")
}

/// A runtime serving every MCP tool's kind with a clone of `mcp`.
fn runtime(mcp: &McpExecutor) -> Runtime {
    mcp.tools()
        .iter()
        .fold(Runtime::builder(), |builder, tool| {
            builder.executor(tool.kind(), mcp.clone())
        })
        .build()
}

/// A task that calls `tool` once with `args` and ends with its answer.
fn ask(tool: &str, args: Value) -> NewTask {
    let tool = tool.to_owned();
    let mut asked = false;
    NewTask::new(task_fn("ask", move |cx| {
        if !asked {
            asked = true;
            cx.tool(tool.clone(), args.clone());
            return Step::Wait;
        }
        match cx.take_answer() {
            Some(answer) => Step::Done(answer.result.map_err(|e| e.into_task_error(1))),
            None => Step::fail("resumed without an answer"),
        }
    }))
}

/// Runs one call to its end: the tool's answer, or the request's error.
fn call(runtime: &mut Runtime, tool: &str, args: Value) -> Result<Value, RequestError> {
    let id = runtime.submit(ask(tool, args)).expect("admitted").id;
    runtime.run_until_idle();
    outcome(runtime, id)
}

fn outcome(runtime: &Runtime, id: TaskId) -> Result<Value, RequestError> {
    match runtime.task_state(id) {
        Some(TaskState::Completed(Ok(value))) => Ok(value),
        Some(TaskState::Completed(Err(TaskError::Request { error, .. }))) => Err(error),
        other => panic!("the task ended as {other:?}"),
    }
}

/// The lines of a server's log, once `done` holds for them; panics after `LIMIT`.
fn log_until(log: &Path, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let lines: Vec<String> = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if done(&lines) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what}: {lines:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn log_path(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

fn tools_are_listed_with_their_schemas() {
    let dir = scratch();
    let mcp = start(vec![
        stdio_server("local", &log_path(&dir, "local.log")),
        http_server("remote", &log_path(&dir, "remote.log")),
    ]);
    let offered: Vec<&str> = mcp.tools().iter().map(|t| t.offered.as_str()).collect();
    assert_eq!(
        offered,
        [
            "local__add",
            "local__echo",
            "local__fail",
            "local__hang",
            "local__crash",
            "remote__add",
            "remote__echo",
            "remote__fail",
            "remote__hang",
            "remote__crash",
        ]
    );
    assert_eq!(mcp.tools()[5].kind().to_string(), "tool:remote__add");
    assert_eq!(
        mcp.definitions()[0],
        json!({"type": "function", "function": {
            "name": "local__add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        }})
    );
    assert_eq!(
        (
            mcp.starts("local"),
            mcp.starts("remote"),
            mcp.starts("nope")
        ),
        (Some(1), Some(1), None)
    );
}

fn calls_answer_over_stdio_and_http() {
    let dir = scratch();
    let mcp = start(vec![
        stdio_server("local", &log_path(&dir, "local.log")),
        http_server("remote", &log_path(&dir, "remote.log")),
    ]);
    let mut runtime = runtime(&mcp);
    assert_eq!(
        call(&mut runtime, "local__add", json!({"a": 2, "b": 3})),
        Ok(json!("5"))
    );
    assert_eq!(
        call(&mut runtime, "remote__add", json!({"a": 40, "b": 2})),
        Ok(json!("42"))
    );
    assert_eq!(
        call(&mut runtime, "remote__echo", json!({"text": "hé"})),
        Ok(json!("hé"))
    );
    assert_eq!(
        call(&mut runtime, "local__echo", json!(["not", "an", "object"])),
        Err(RequestError::InvalidArguments {
            message: "the arguments of MCP tool `local__echo` must be an object, not an array"
                .to_owned()
        })
    );
    assert_eq!(mcp.in_flight(), 0);
}

fn a_tool_error_is_a_typed_failure() {
    let dir = scratch();
    let mcp = start(vec![http_server("remote", &log_path(&dir, "remote.log"))]);
    let mut runtime = runtime(&mcp);
    assert_eq!(
        call(&mut runtime, "remote__fail", json!({})),
        Err(RequestError::failed(
            "MCP tool `remote__fail` reported an error: the disk is on fire"
        ))
    );
}

fn a_crash_mid_call_fails_it_and_the_server_comes_back() {
    let dir = scratch();
    let log = log_path(&dir, "local.log");
    let mcp = start(vec![stdio_server("local", &log)]);
    let mut runtime = runtime(&mcp);
    assert_eq!(
        call(&mut runtime, "local__crash", json!({})),
        Err(RequestError::failed(
            "MCP server `local` stopped during the call of `local__crash`; the call was not sent again"
        ))
    );
    // The next call waits for the server to be started again, then goes through.
    assert_eq!(
        call(&mut runtime, "local__add", json!({"a": 1, "b": 1})),
        Ok(json!("2"))
    );
    assert_eq!(mcp.starts("local"), Some(2));
    let lines = log_until(&log, "the second start's call", |lines| lines.len() >= 4);
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["start", "call", "start", "call"], "{lines:?}");
    assert_eq!(
        (lines[1].as_str(), lines[3].as_str()),
        ("call crash", "call add")
    );
    assert_ne!(lines[0], lines[2], "a new process");
}

fn a_hung_call_times_out_and_the_server_hears_the_cancel() {
    let dir = scratch();
    let log = log_path(&dir, "local.log");
    let mcp = start(vec![
        stdio_server("local", &log).timeout(Duration::from_millis(300)),
    ]);
    let mut runtime = runtime(&mcp);
    assert_eq!(
        call(&mut runtime, "local__hang", json!({})),
        Err(RequestError::Timeout {
            after: Duration::from_millis(300)
        })
    );
    let lines = log_until(&log, "the cancel", |lines| {
        lines.iter().any(|l| l.starts_with("cancelled"))
    });
    assert_eq!(lines[1..], ["call hang", "cancelled timed out after 0.3 s"]);
    // The server is still good for the next call.
    assert_eq!(
        call(&mut runtime, "local__add", json!({"a": 1, "b": 2})),
        Ok(json!("3"))
    );
    assert_eq!(mcp.starts("local"), Some(1));
}

fn a_canceled_task_cancels_its_call_at_the_server() {
    let dir = scratch();
    let log = log_path(&dir, "remote.log");
    let mcp = start(vec![http_server("remote", &log)]);
    let mut runtime = runtime(&mcp);
    let id = runtime
        .submit(ask("remote__hang", json!({})))
        .expect("admitted")
        .id;
    let handle = runtime.handle();
    let canceler = thread::spawn(move || {
        log_until(&log, "the call", |lines| {
            lines.iter().any(|l| l == "call hang")
        });
        handle.cancel(id).expect("the task is live");
        log_until(&log, "the cancel", |lines| {
            lines.iter().any(|l| l.starts_with("cancelled"))
        })
    });
    runtime.run_until_idle();
    let lines = canceler.join().expect("the canceler ends");
    assert_eq!(
        lines,
        [
            "call hang",
            &format!("cancelled {}", spool_mcp::CANCELED_REASON),
        ]
    );
    assert!(
        matches!(runtime.task_state(id), Some(TaskState::Canceled(_))),
        "{:?}",
        runtime.task_state(id)
    );
    let deadline = Instant::now() + LIMIT;
    while mcp.in_flight() != 0 {
        assert!(
            Instant::now() < deadline,
            "the canceled call is still counted"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// A server whose program does not exist: the start fails at once, naming it.
fn a_server_that_cannot_start_is_named() {
    let config = ServerConfig::new(
        "ghost",
        Transport::Stdio {
            command: "/nonexistent/mcp-server".to_owned(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
        },
    );
    // A first try that fails is said at once, not retried until the 60 s timeout.
    let started = Instant::now();
    let error = McpExecutor::start(&McpConfig {
        servers: vec![config],
    })
    .expect_err("it cannot start");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        error.to_string(),
        "MCP server `ghost` did not start: cannot start `/nonexistent/mcp-server`: No such file or directory (os error 2)"
    );
}

/// Hands the executor's answers to a channel.
struct Channel(std::sync::Mutex<std::sync::mpsc::Sender<Response>>);

impl ReplySink for Channel {
    fn send(&self, response: Response) -> bool {
        self.0.lock().expect("not poisoned").send(response).is_ok()
    }
}

/// A request sent again with the same key while the first is out (as after a restore
/// in the same process) does not cancel the first, nor is it dropped when the first
/// ends: each is answered, the first here by its timeout.
fn a_request_sent_again_is_answered_each_time() {
    let dir = scratch();
    let server =
        http_server("remote", &log_path(&dir, "remote.log")).timeout(Duration::from_millis(500));
    let mut mcp = start(vec![server]);
    let (sender, answers) = std::sync::mpsc::channel();
    let sink: Arc<dyn ReplySink> = Arc::new(Channel(std::sync::Mutex::new(sender)));
    let key: RequestKey =
        serde_json::from_value(json!({"task": 7, "number": 1, "slot": 0})).expect("a request key");
    let mut batch = Vec::new();
    for (tool, args) in [
        ("remote__hang", json!({})),
        ("remote__add", json!({"a": 1, "b": 2})),
    ] {
        let request = OutboundRequest {
            key,
            request: Request::tool(tool, args),
        };
        mcp.execute(request, &mut Replies::new(Time::ZERO, &mut batch, &sink));
    }
    let mut results = Vec::new();
    while results.len() < 2 {
        let answer = answers
            .recv_timeout(LIMIT)
            .expect("an answer for each send");
        assert_eq!(answer.key, key);
        results.push(answer.result);
    }
    results.sort_by_key(|result| result.is_err());
    assert_eq!(
        results,
        [
            Ok(json!("3")),
            Err(RequestError::Timeout {
                after: Duration::from_millis(500)
            })
        ]
    );
    assert!(
        batch.is_empty(),
        "answers go through the replier: {batch:?}"
    );
}

/// Kills what is left of a stubborn server's group when dropped, pass or fail.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .status();
    }
}

/// Starts the stubborn server `local` logging to `log`; its pid and its child's, once
/// both run, and the guard that kills what is left of them.
fn start_stubborn(log: &Path) -> (McpExecutor, u32, u32, Group) {
    let mcp = start(vec![stubborn_server("local", log)]);
    let lines = log_until(log, "the child", |lines| {
        server::stubborn_pids(lines).is_some()
    });
    let (leader, child) = server::stubborn_pids(&lines).expect("two pids");
    assert!(server::runs(leader) && server::runs(child), "{lines:?}");
    (mcp, leader, child, Group(leader))
}

/// The last clone of the executor dropped (the runtime's, then the test's), a stdio
/// server that goes on after its input ends and the child it started are ended.
fn a_dropped_executor_ends_a_stubborn_server_and_its_child() {
    let dir = scratch();
    let log = log_path(&dir, "stubborn.log");
    let (mcp, leader, child, _group) = start_stubborn(&log);
    drop(runtime(&mcp));
    drop(mcp);
    let deadline = Instant::now() + LIMIT;
    while server::runs(leader) || server::runs(child) {
        assert!(
            Instant::now() < deadline,
            "the server ({leader}: {}) or its child ({child}: {}) still runs",
            server::runs(leader),
            server::runs(child)
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// A stdio server that goes on after its input ends, and its child, are ended by a
/// shutdown while a clone of the executor is still held (the runtime's); the server
/// saw its input end first. A second shutdown returns at once; a call after it fails.
fn a_shutdown_ends_a_stubborn_server_and_its_child() {
    let dir = scratch();
    let log = log_path(&dir, "stubborn.log");
    let (mcp, leader, child, _group) = start_stubborn(&log);
    let mut runtime = runtime(&mcp);
    mcp.shutdown();
    assert!(
        !server::runs(leader) && !server::runs(child),
        "the server ({leader}) and its child ({child}) are ended when shutdown returns"
    );
    let lines = log_until(&log, "the input's end", |lines| {
        lines.iter().any(|l| l == "input ended")
    });
    assert_eq!(lines.len(), 3, "{lines:?}");
    let again = Instant::now();
    mcp.shutdown();
    assert!(
        again.elapsed() < Duration::from_secs(1),
        "{:?}",
        again.elapsed()
    );
    assert_eq!(
        call(&mut runtime, "local__add", json!({"a": 1, "b": 1})),
        Err(RequestError::failed(
            "MCP server `local` is not running (last: the executor is stopping); waited 60s"
        ))
    );
}
