//! A completed task's result is the same after `spool serve` restarts on its store: the
//! built-in agent submitted as `agent` ends with `agent, answer, messages, schedule,
//! tool_calls, turns`, and the restarted server — which rebuilds the task from the
//! store, replaying it — shows exactly that again. Both servers run with the runtime's
//! round-trip check on (`SPOOL_CHECK_ROUND_TRIP=1`), and neither reports a state that
//! does not round-trip; nor does the demo, run on a store with the check on.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

use support::{Server, client, get_ok};

const TOKEN: &str = "restart-test-token";

fn serve(dir: &Path) -> Server {
    let store = dir.join("s.spool");
    let token = dir.join("token");
    let args: Vec<&std::ffi::OsStr> = vec![
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--llm-latency-ms".as_ref(),
        "1".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
    ];
    Server::start_with(args, &[("SPOOL_CHECK_ROUND_TRIP", "1")])
}

/// `GET /v1/tasks/{id}` until the task has completed (30 s at most).
fn completed(agent: &ureq::Agent, addr: &str, id: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = get_ok(agent, addr, TOKEN, &format!("/v1/tasks/{id}"));
        if task["state"] == "completed" {
            return task;
        }
        assert!(
            Instant::now() < deadline,
            "task {id} did not complete: {task}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_completed_agents_result_is_the_same_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let agent = client(Duration::from_secs(10));
    let mut server = serve(dir.path());
    let mut response = agent
        .post(format!("http://{}/v1/tasks", server.addr))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .send(r#"{"type": "agent", "input": {"prompt": "standup"}}"#)
        .unwrap();
    let body: Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(
        (response.status().as_u16(), &body["id"]),
        (202, &Value::from(1)),
        "{body}"
    );
    let before = completed(&agent, &server.addr, 1)["result"].clone();
    let keys: Vec<&str> = before
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "agent",
            "answer",
            "messages",
            "schedule",
            "tool_calls",
            "turns"
        ],
        "{before}"
    );
    assert_eq!(before["schedule"], Value::Null, "{before}");
    assert_eq!(before["messages"][0]["content"], "standup", "{before}");
    assert!(server.terminate().success(), "{}", server.log());
    let first_log = server.log();

    let mut server = serve(dir.path());
    let after = completed(&agent, &server.addr, 1)["result"].clone();
    assert_eq!(after, before);
    assert!(server.terminate().success(), "{}", server.log());
    for log in [first_log, server.log()] {
        assert!(!log.contains("round-trip"), "{log}");
    }
}

/// The demo's workload (200 built-in agents, journaled to a store with checkpoints)
/// with the runtime's round-trip check on: no checkpoint finds a state that does not
/// round-trip, and every answer is right.
#[test]
fn the_demo_passes_the_round_trip_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_CRASH_AT")
        .env("SPOOL_CHECK_ROUND_TRIP", "1")
        .args([
            "demo",
            "--agents",
            "200",
            "--max-latency-ms",
            "3",
            "--quiet",
            "--store",
        ])
        .arg(dir.path().join("demo.spool"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("tasks:      200 completed ok, 0 failed, 0 canceled"),
        "{stdout}"
    );
    assert!(!stderr.contains("round-trip"), "{stderr}");
}
