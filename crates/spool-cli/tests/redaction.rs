//! `spool serve --public-read` with credentials in `OPENAI_BASE_URL` (a user, a
//! password and a query key) and a provider that refuses connections: the task fails,
//! and neither its error as the API gives it (without a token), nor the store file, nor
//! the log on stderr (at `debug`, with the executor's retries) holds the credentials.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Server, client, get};

#[test]
fn credentials_in_the_base_url_reach_no_answer_store_or_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "redaction-token\n").unwrap();
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://user:pw@127.0.0.1:{port}/v1?api-key=K&x=1");
    let mut server = Server::start_with(
        [
            "serve".as_ref(),
            "--addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--public-read".as_ref(),
            "--store".as_ref(),
            store.as_os_str(),
            "--token-file".as_ref(),
            token_file.as_os_str(),
        ],
        &[
            ("OPENAI_BASE_URL", &base),
            ("RUST_LOG", "spool=debug,spool_exec=debug"),
        ],
    );
    let agent = client(Duration::from_secs(20));
    let mut response = agent
        .post(format!("http://{}/v1/tasks", server.addr))
        .header("Authorization", "Bearer redaction-token")
        .header("Content-Type", "application/json")
        .send(r#"{"type": "agent", "input": {"prompt": "standup"}}"#)
        .unwrap();
    assert_eq!(
        response.status().as_u16(),
        202,
        "{:?}",
        response.body_mut().read_to_string()
    );
    // Read without a token, as anyone may under --public-read.
    let deadline = Instant::now() + Duration::from_secs(60);
    let task = loop {
        let (status, task) = get(&agent, &server.addr, "", "/v1/tasks/1");
        if status == 200 && task["state"] == "failed" {
            break task;
        }
        assert!(Instant::now() < deadline, "{status} {task}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let error = task["error"].as_str().unwrap_or_default().to_owned();
    let shown = format!("POST http://***@127.0.0.1:{port}/v1/chat/completions?api-key=***&x=***");
    assert!(error.contains(&shown), "{error}");
    let list = get(&agent, &server.addr, "", "/v1/tasks").1;
    server.terminate();
    let stored = std::fs::read(&store).unwrap();
    let log = server.log();
    let secrets = ["user:pw", "pw@", "api-key=K", "x=1"];
    for (what, text) in [
        ("the task", task.to_string()),
        ("the list", list.to_string()),
        ("the log", log.clone()),
        ("the store", String::from_utf8_lossy(&stored).into_owned()),
    ] {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret:?} is in {what}: {text}");
        }
    }
    // What was looked through holds the error: the store its message, the log the
    // executor's retries.
    assert!(
        String::from_utf8_lossy(&stored).contains(&shown),
        "the store does not hold the error"
    );
    assert!(log.contains("LLM request: retrying"), "{log}");
    assert!(matches!(task["error"], Value::String(_)));
}
