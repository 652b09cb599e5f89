//! `spool serve`: it says where it listens once it takes connections, needs its token,
//! runs a submitted agent to its answer, keeps what it took in across a restart (the
//! agent still listed as the type `agent` it was submitted as), and stops cleanly on
//! SIGTERM.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

/// Starts `spool serve` on a free port; returns it, its address and its stderr.
fn serve(dir: &std::path::Path) -> (Child, String, BufReader<ChildStderr>) {
    let (child, addr, stderr, _before) = serve_with(dir, &[], None, "1", &[]);
    (child, addr, stderr)
}

/// [`serve`] with options before the subcommand (`--log-format json`), `RUST_LOG`, the
/// scripted model taking `latency_ms`, and `args` after the fixed ones; also gives the
/// lines before `listening on`.
fn serve_with(
    dir: &std::path::Path,
    global: &[&str],
    rust_log: Option<&str>,
    latency_ms: &str,
    args: &[&str],
) -> (Child, String, BufReader<ChildStderr>, Vec<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
    match rust_log {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    let mut child = command
        .env_remove("OPENAI_BASE_URL")
        .args(global)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--llm-latency-ms",
            latency_ms,
            "--store",
        ])
        .arg(dir.join("s.spool"))
        .arg("--token-file")
        .arg(dir.join("token"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let mut before = Vec::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "spool serve ended early"
        );
        if let Some(addr) = line.trim().strip_prefix("listening on http://") {
            break addr.to_owned();
        }
        before.push(line.trim_end().to_owned());
    };
    (child, addr, stderr, before)
}

/// One request over a fresh connection: the status and the body.
fn call(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    match try_call(addr, method, path, token, body) {
        Ok(answer) => answer,
        Err(error) => panic!("{method} {path}: {error}"),
    }
}

/// GETs `path` until it answers 200 with a body `done` accepts; gives up after 20 s.
fn wait_for(addr: &str, path: &str, token: Option<&str>, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = call(addr, "GET", path, token, "");
        if status == 200 && done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "GET {path}: {status} {body}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`call`], with what went wrong on the connection as an error.
fn try_call(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> std::io::Result<(u16, Value)> {
    let mut stream = TcpStream::connect(addr)?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

fn sigterm(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn spool_serve_runs_a_submitted_agent_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "serve-test-token\n").unwrap();
    let token = Some("serve-test-token");
    let (mut child, addr, mut stderr) = serve(dir.path());
    let (status, body) = call(&addr, "POST", "/v1/tasks", None, "{}");
    assert_eq!(status, 401, "{body}");
    // A blank prompt is refused in words, at the prompt's path.
    let (status, body) = call(
        &addr,
        "POST",
        "/v1/tasks",
        token,
        r#"{"type": "agent", "input": {"prompt": "   "}}"#,
    );
    assert_eq!(
        (status, &body["detail"], &body["errors"]),
        (
            422,
            &Value::from("/input/prompt: must not be blank"),
            &serde_json::json!([{"path": "/input/prompt", "message": "must not be blank"}])
        ),
        "{body}"
    );
    let (status, body) = call(
        &addr,
        "POST",
        "/v1/tasks",
        token,
        r#"{"type": "agent", "input": {"prompt": "standup"}}"#,
    );
    assert_eq!((status, &body["id"]), (202, &Value::from(1)), "{body}");
    let task = wait_for(&addr, "/v1/tasks/1", token, |t| t["state"] == "completed");
    assert_eq!(
        task["result"]["answer"],
        "Run 1 of this conversation: for \"standup\" the notes give the figure 687."
    );
    // Listed as the type it was submitted as (its body is a `react-agent`).
    assert_eq!(task["type"], "agent", "{task}");
    // The list is read from the published views: it shows the task once they do.
    let page = wait_for(&addr, "/v1/tasks", token, |p| {
        p["tasks"][0]["state"] == "completed"
    });
    assert_eq!(page["tasks"][0]["type"], "agent", "{page}");
    // Its timeline: from its submission to its end, the LLM and the search tool in it.
    let timeline = task["timeline"].as_array().unwrap();
    assert_eq!(timeline[0]["start_ms"], 0, "{task}");
    assert_eq!(timeline.last().unwrap()["open"], false, "{task}");
    let kinds: Vec<&str> = timeline.iter().filter_map(|i| i["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"llm") && kinds.contains(&"tool:search"),
        "{task}"
    );
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(
        rest.contains("spool serve: SIGTERM; shutting down"),
        "{rest}"
    );
    assert!(
        rest.contains("spool serve: stopped; everything taken in is in the store"),
        "{rest}"
    );
    // Started again on the store, it still has the task.
    let (mut child, addr, _stderr) = serve(dir.path());
    let (status, task) = call(&addr, "GET", "/v1/tasks/1", token, "");
    assert_eq!(
        (status, &task["state"], &task["type"]),
        (200, &Value::from("completed"), &Value::from("agent")),
        "{task}"
    );
    // Its timeline was the last life's trace: an ended task restored has none.
    assert_eq!(task["timeline"], serde_json::json!([]), "{task}");
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

/// `--log-format json`: every log line on stderr is one JSON object with `level`,
/// `target` and `message`; the line that is the command's output (`listening on`)
/// stays as it is. `RUST_LOG` filters the logs, not that output.
#[test]
fn json_logs_are_one_object_a_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "serve-test-token\n").unwrap();
    let json = ["--log-format", "json"];
    let (mut child, _addr, mut stderr, before) = serve_with(dir.path(), &json, None, "1", &[]);
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    let mut after = String::new();
    stderr.read_to_string(&mut after).unwrap();
    let logs: Vec<[String; 3]> = before
        .iter()
        .map(String::as_str)
        .chain(after.lines())
        .map(|line| {
            let object: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
            assert!(object["timestamp"].is_string(), "{line}");
            ["level", "target", "message"].map(|name| {
                object[name]
                    .as_str()
                    .unwrap_or_else(|| panic!("no {name}: {line}"))
                    .to_owned()
            })
        })
        .collect();
    let store = dir.path().join("s.spool");
    let expected = [
        [
            "INFO",
            "spool::serve",
            &format!(
                "spool serve: 0 schedules, 0 live tasks in {}; llm the scripted model (1 ms a \
                 call); no limits",
                store.display()
            ),
        ],
        [
            "INFO",
            "spool::run::signals",
            "spool serve: SIGTERM; shutting down",
        ],
        [
            "INFO",
            "spool::serve",
            "spool serve: stopped; everything taken in is in the store",
        ],
    ]
    .map(|fields| fields.map(str::to_owned));
    assert_eq!(logs, expected);
    // With RUST_LOG=warn there are none: only `listening on`.
    let (mut child, _addr, mut stderr, before) =
        serve_with(dir.path(), &json, Some("warn"), "1", &[]);
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    let mut after = String::new();
    stderr.read_to_string(&mut after).unwrap();
    assert_eq!((before, after), (vec![], String::new()));
}

/// `spool serve` with `args` after the fixed ones (a store and a token in `dir`, the
/// scripted model taking `latency_ms`); it, its address and its stderr once it listens.
fn serve_limited(
    dir: &std::path::Path,
    latency_ms: &str,
    args: &[&str],
) -> (Child, String, BufReader<ChildStderr>) {
    let (child, addr, stderr, _before) = serve_with(dir, &[], None, latency_ms, args);
    (child, addr, stderr)
}

/// `spool serve ARGS` that ends at once: its exit status and its stderr.
fn serve_refused(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("RUST_LOG")
        .env_remove("OPENAI_BASE_URL")
        .args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(dir.join("s.spool"))
        .arg("--token-file")
        .arg(dir.join("token"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `--limit` that does not parse is a usage error (status 2) naming the bad part,
/// as is a kind limited twice; neither opens the store.
#[test]
fn a_bad_limit_is_refused_at_start_as_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "serve-test-token\n").unwrap();
    assert_eq!(
        serve_refused(dir.path(), &["--limit", "llm=4,60/fortnight"]),
        (
            Some(2),
            "error: invalid value 'llm=4,60/fortnight' for '--limit <KIND=SPEC>': \
             `60/fortnight`: the period must be s, min or h\n\n\
             For more information, try '--help'.\n"
                .to_owned()
        )
    );
    assert_eq!(
        serve_refused(dir.path(), &["--max-running", "0"]),
        (
            Some(2),
            "error: invalid value '0' for '--max-running <N>': 0 is not in 1..18446744073709551615\n\n\
             For more information, try '--help'.\n"
                .to_owned()
        )
    );
    assert_eq!(
        serve_refused(dir.path(), &["--limit", "llm=4", "--limit", "llm=60/min"]),
        (
            Some(2),
            "spool serve: --limit llm is given twice; give each kind once, its parts \
             comma-separated\n"
                .to_owned()
        )
    );
    assert!(!dir.path().join("s.spool").exists());
}

/// The queue's limits: `max_running`, and the llm gate's cap and window (once the views
/// are published: before, the queue is empty and has no policy).
fn queue_limits(addr: &str) -> (Value, Value, Value) {
    // (`policy` is empty until the first publication.)
    let queue = wait_for(addr, "/v1/queue", Some("serve-test-token"), |q| {
        q["policy"] != ""
    });
    let llm = queue["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"] == "llm")
        .cloned()
        .unwrap_or(Value::Null);
    (
        queue["max_running"].clone(),
        llm["max_in_flight"].clone(),
        llm["window"]["max"].clone(),
    )
}

/// A store keeps the limits it runs under: started again without limit options it goes
/// on under them; with other options it takes them if no task is live, and refuses
/// them (status 1, the store unchanged) while one is.
#[test]
fn a_store_keeps_its_limits_and_changes_them_only_with_no_live_task() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "serve-test-token\n").unwrap();
    let limited = ["--max-running", "2", "--limit", "llm=1,30/min"];
    let (mut child, addr, _stderr) = serve_limited(dir.path(), "1", &limited);
    assert_eq!(queue_limits(&addr), (json!(2), json!(1), json!(30)));
    sigterm(&child);
    assert!(child.wait().unwrap().success());

    // Without options: the store's.
    let (mut child, addr, _stderr) = serve_limited(dir.path(), "1", &[]);
    assert_eq!(queue_limits(&addr), (json!(2), json!(1), json!(30)));
    sigterm(&child);
    assert!(child.wait().unwrap().success());

    // Other options, no task live: they replace the store's (the llm gate stays, as a
    // kind that had one, without a cap or a window). A task is left live: its LLM call
    // takes a minute, and the server stops before.
    let (mut child, addr, _stderr) = serve_limited(dir.path(), "60000", &["--max-running", "4"]);
    assert_eq!(queue_limits(&addr), (json!(4), Value::Null, Value::Null));
    let (status, body) = call(
        &addr,
        "POST",
        "/v1/tasks",
        Some("serve-test-token"),
        r#"{"type": "agent", "input": {"prompt": "slow"}}"#,
    );
    assert_eq!(status, 202, "{body}");
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    let store = dir.path().join("s.spool");
    let (code, stderr) = serve_refused(dir.path(), &["--max-running", "8"]);
    assert_eq!(
        (code, stderr),
        (
            Some(1),
            format!(
                "spool serve: the store {} has 1 live task, started under limits \
                 --max-running 4; limits change only when no task is live: start it \
                 without limit options (it keeps its limits) and let its tasks end, or \
                 use another store\n",
                store.display()
            )
        )
    );
    // The same options as the store's limits: it goes on, and the task with it, to its
    // end.
    let (mut child, addr, _stderr) = serve_limited(dir.path(), "1", &["--max-running", "4"]);
    assert_eq!(queue_limits(&addr), (json!(4), Value::Null, Value::Null));
    wait_for(&addr, "/v1/tasks/1", Some("serve-test-token"), |t| {
        t["state"] == "completed"
    });
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

/// A supervisor that stops reading `spool serve`'s stderr (it closed the pipe) does not
/// stop the server: its `listening on` line is lost, and it serves and stops cleanly.
#[test]
fn a_closed_stderr_does_not_stop_the_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "closed-stderr\n").unwrap();
    let addr = support::free_addr();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("RUST_LOG")
        .env_remove("OPENAI_BASE_URL")
        .args(["serve", "--addr", &addr, "--store"])
        .arg(dir.path().join("s.spool"))
        .arg("--token-file")
        .arg(dir.path().join("token"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("spool serve ended ({status}) with its stderr closed");
        }
        // (Refused, or reset, until it listens; its exit is what the test looks for.)
        match try_call(&addr, "GET", "/v1/queue", Some("closed-stderr"), "") {
            Ok((200, _)) => break,
            Ok(_) => {}
            Err(error) => eprintln!("not yet: {error}"),
        }
        assert!(Instant::now() < deadline, "spool serve never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
