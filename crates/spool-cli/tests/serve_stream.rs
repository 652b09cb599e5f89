//! `spool serve --store` against a real (scripted) endpoint that streams: pieces of the
//! answer reach `/v1/events` as `event: delta`; SIGKILLed mid-answer and started
//! again on the same store, the server asks the same request again (the endpoint sees
//! the same request key twice), and the task completes once, with the whole answer.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

#[path = "../../spool-exec/tests/support/sse_server.rs"]
mod sse_server;

use sse_server::{Answer, Script, SseServer};
use support::Server;

const TOKEN: &str = "serve-stream-test-token";

/// Starts `spool serve` on `store` with `endpoint` as its model, streamed unless
/// `--no-stream` is in `more`.
fn start(store: &Path, token_file: &Path, endpoint: &SseServer, more: &[&str]) -> Server {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token_file.as_os_str(),
    ];
    args.extend(more.iter().map(std::ffi::OsStr::new));
    Server::start_with(args, &[("OPENAI_BASE_URL", endpoint.url.as_str())])
}

/// Opens `/v1/events` and reads it until the first `event: delta`; its data.
fn first_delta(addr: &str) -> Value {
    let stream = TcpStream::connect(addr).expect("the server takes connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let mut writer = stream.try_clone().expect("a clone");
    write!(
        writer,
        "GET /v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Accept: text/event-stream\r\n\r\n"
    )
    .expect("the request is sent");
    let mut reader = BufReader::new(stream);
    let mut delta = false;
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("the stream is read");
        assert!(n > 0, "the event stream ended before a delta");
        let line = line.trim_end();
        if line == "event: delta" {
            delta = true;
        } else if let (true, Some(data)) = (delta, line.strip_prefix("data: ")) {
            return serde_json::from_str(data).expect("a delta's data is JSON");
        }
    }
}

/// Waits up to 60 s for task `id` to end; its view.
fn ended(agent: &ureq::Agent, addr: &str, id: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, task) = support::get(agent, addr, TOKEN, &format!("/v1/tasks/{id}"));
        if status == 200 && matches!(task["state"].as_str(), Some("completed" | "failed")) {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} did not end: {task}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_killed_mid_answer_asks_again_with_the_same_key_and_completes_once() {
    let dir = tempfile::tempdir().expect("a directory");
    let store = dir.path().join("stream.spool");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("the token is written");
    let script = Script::text(30);
    let gate = Arc::new(Mutex::new(false));
    let held = Arc::clone(&gate);
    // The first request: the role and five pieces, then nothing until the test lets
    // it go (after the kill). Every later one: the whole stream.
    let endpoint = SseServer::start(move |seen, count| {
        if count == 0 {
            Answer::Held {
                events: script.events(),
                before: 6,
                gate: Arc::clone(&held),
            }
        } else {
            Answer::for_request(&script, seen, Duration::ZERO)
        }
    });
    let agent = support::client(Duration::from_secs(10));

    let mut first = start(&store, &token_file, &endpoint, &[]);
    let addr = first.addr.clone();
    let watcher = thread::spawn(move || first_delta(&addr));
    let mut response = agent
        .post(format!("http://{}/v1/tasks", first.addr))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send_json(json!({"type": "agent", "input": {"prompt": "count to thirty"}}))
        .expect("the task is submitted");
    assert_eq!(response.status().as_u16(), 202);
    let submitted: Value = response.body_mut().read_json().expect("JSON");
    let id = submitted["id"].as_u64().expect("an id");
    // Mid-answer: a piece has reached the event stream.
    let delta = watcher.join().expect("the watcher");
    assert_eq!(delta["task"], id);
    assert_eq!(
        (delta["seq"].clone(), delta["text"].clone()),
        (json!(0), json!("t0 "))
    );
    first.child.kill().expect("SIGKILL");
    first.child.wait().expect("the killed server is waited for");
    *gate.lock().expect("the gate") = true;

    let second = start(&store, &token_file, &endpoint, &[]);
    let task = ended(&agent, &second.addr, id);
    assert_eq!(task["state"], "completed", "{task}");
    let whole = Script::text(30).whole_answer()["content"].clone();
    let whole = whole.as_str().expect("text").to_owned();
    assert!(task["result"].to_string().contains(&whole), "{task}");
    // The same request, asked twice with its key; one task in the store.
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].key, Some(format!("{id}:1")));
    assert_eq!(seen[1].key, seen[0].key);
    assert!(seen.iter().all(|s| s.json()["stream"] == true));
    let (_, tasks) = support::get(&agent, &second.addr, TOKEN, "/v1/tasks");
    assert_eq!(tasks["tasks"].as_array().map(Vec::len), Some(1), "{tasks}");
    second.stop();
}

#[test]
fn no_stream_asks_for_the_whole_answer() {
    let dir = tempfile::tempdir().expect("a directory");
    let store = dir.path().join("whole.spool");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("the token is written");
    let script = Script::text(3);
    let endpoint =
        SseServer::start(move |seen, _| Answer::for_request(&script, seen, Duration::ZERO));
    let agent = support::client(Duration::from_secs(10));
    let server = start(&store, &token_file, &endpoint, &["--no-stream"]);
    let mut response = agent
        .post(format!("http://{}/v1/tasks", server.addr))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send_json(json!({"type": "agent", "input": {"prompt": "count to three"}}))
        .expect("the task is submitted");
    let submitted: Value = response.body_mut().read_json().expect("JSON");
    let id = submitted["id"].as_u64().expect("an id");
    let task = ended(&agent, &server.addr, id);
    assert_eq!(task["state"], "completed", "{task}");
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].json().get("stream"), None);
    server.stop();
}
