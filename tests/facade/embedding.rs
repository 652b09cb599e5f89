//! The embedding walkthrough (`docs/embedding.md`, `examples/embedding/main.rs`) run as
//! the page says, against a fake OpenAI-compatible endpoint on 127.0.0.1: a task
//! submitted over HTTP calls the custom tool the model asks for and completes with the
//! model's answer; stopped while its last model request is out, the application started
//! again on the same store sends that request again and the task completes. The page's
//! code is the example's, word for word.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool::RuntimeHandle;
use spool::exec::OpenAiConfig;

#[allow(dead_code)]
#[path = "../../examples/embedding/main.rs"]
mod app;

/// The token the test application takes.
const TOKEN: &str = "a-test-token-of-some-length";

/// How long any one wait of the test may take before it fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// The prompt submitted, and what the fake model ends with once it has the tool's answer.
const PROMPT: &str = "How many words are in 'the quick brown fox'?";
const ANSWER: &str = "It has 4 words.";

/// A chat-completions body with one choice holding `message`.
fn completion(message: Value, finish_reason: &str) -> String {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
    .to_string()
}

/// The fake model: asked the prompt, it calls `word_count` on the quoted text; given the
/// tool's answer, it says the count.
fn model_reply(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        let answer: Value =
            serde_json::from_str(last["content"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
        let content = format!("It has {} words.", answer["words"]);
        return completion(json!({"role": "assistant", "content": content}), "stop");
    }
    let call = json!({
        "id": "call_1",
        "type": "function",
        "function": {"name": "word_count", "arguments": json!({"text": "the quick brown fox"}).to_string()},
    });
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": [call]}),
        "tool_calls",
    )
}

/// A tiny_http server on 127.0.0.1 answering chat completions on one thread, in order
/// of arrival; the request at `hold` (from 0) is held until `release` says, then
/// answered `500`. Every body it took goes to `seen`.
struct FakeModel {
    base_url: String,
    stop: Arc<Mutex<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeModel {
    fn start(hold: usize, release: Receiver<()>, seen: Sender<Value>) -> FakeModel {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let stop = Arc::new(Mutex::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut index = 0;
            while !*stopped.lock().expect("lock") {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(20)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = request.as_reader().read_to_string(&mut body);
                let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let _ = seen.send(body.clone());
                let (status, reply) = if index == hold {
                    let _ = release.recv_timeout(DEADLINE);
                    (500, "{}".to_owned())
                } else {
                    (200, model_reply(&body))
                };
                index += 1;
                let header = tiny_http::Header::from_bytes("Content-Type", "application/json")
                    .expect("a header");
                let _ = request.respond(
                    tiny_http::Response::from_string(reply)
                        .with_status_code(status)
                        .with_header(header),
                );
            }
        });
        FakeModel {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        *self.stop.lock().expect("lock") = true;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The application on a thread of its own, as its `main` runs it.
struct App {
    addr: SocketAddr,
    handle: RuntimeHandle,
    /// Says when `run` has returned (the loop takes no more answers).
    stopped: Receiver<()>,
    thread: JoinHandle<()>,
}

impl App {
    fn start(store: PathBuf, base_url: &str) -> App {
        let llm = OpenAiConfig::new(base_url, "test-model").max_retries(0);
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stopped_tx, stopped) = mpsc::channel();
        let thread = thread::spawn(move || {
            let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
            let (mut runtime, server) =
                app::start(&store, loopback, llm, TOKEN).expect("the application starts");
            let _ = ready_tx.send((server.addr(), runtime.handle()));
            runtime.run();
            let _ = stopped_tx.send(());
            drop(runtime);
            server.shutdown();
        });
        let (addr, handle) = ready_rx
            .recv_timeout(DEADLINE)
            .expect("the application listens");
        App {
            addr,
            handle,
            stopped,
            thread,
        }
    }

    /// Stops the loop and waits until `run` has returned.
    fn stop_loop(&self) {
        self.handle.shutdown().expect("the loop takes the shutdown");
        self.stopped.recv_timeout(DEADLINE).expect("the loop stops");
    }

    fn join(self) {
        self.thread.join().expect("the application's thread ends");
    }
}

/// One HTTP/1.1 request with the token; the status and the body as JSON.
fn call(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect to the application");
    stream.set_read_timeout(Some(DEADLINE)).expect("a timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(format!("{head}{body}").as_bytes())
        .expect("send the request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let answer = String::from_utf8(answer).expect("UTF-8");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head[9..12].parse().expect("a status code");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The body of a chunked answer.
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
}

/// Reads task `id` until it has ended, or fails the test at the deadline.
fn wait_ended(addr: SocketAddr, id: u64) -> Value {
    let start = Instant::now();
    loop {
        let (status, task) = call(addr, "GET", &format!("/v1/tasks/{id}"), None);
        assert_eq!(status, 200, "{task}");
        if ["completed", "failed", "canceled"].contains(&task["state"].as_str().unwrap_or("")) {
            return task;
        }
        assert!(start.elapsed() < DEADLINE, "task {id} did not end: {task}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_walkthrough_serves_an_agent_with_a_tool_and_goes_on_after_a_restart() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("app.spool");
    let (release, released) = mpsc::channel();
    let (seen_tx, seen) = mpsc::channel();
    // The model's second request (the one with the tool's answer) is held.
    let model = FakeModel::start(1, released, seen_tx);

    let app = App::start(store.clone(), &model.base_url);
    let (status, submitted) = call(
        app.addr,
        "POST",
        "/v1/tasks",
        Some(json!({"type": "assistant", "input": {"prompt": PROMPT}})),
    );
    assert_eq!(status, 202, "{submitted}");
    // What the page shows.
    assert_eq!(
        submitted,
        json!({"id": 1, "admission": {"status": "ready"}})
    );
    let id = submitted["id"].as_u64().expect("an id");
    let first = seen.recv_timeout(DEADLINE).expect("the model is asked");
    assert_eq!(
        first["messages"],
        json!([{"role": "user", "content": PROMPT}])
    );
    assert_eq!(first["tools"][0]["function"]["name"], "word_count");
    let second = seen
        .recv_timeout(DEADLINE)
        .expect("the model is given the tool's answer");
    assert_eq!(
        second["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": r#"{"words":4}"#})
    );

    // Stopped while that request is out: the store has everything before it.
    app.stop_loop();
    release.send(()).expect("the fake model waits");
    app.join();

    let app = App::start(store, &model.base_url);
    let task = wait_ended(app.addr, id);
    assert_eq!(task["state"], "completed", "{task}");
    assert_eq!(task["result"], ANSWER);
    // The same request again, not the agent from the start: the tool is not run twice.
    let again = seen
        .recv_timeout(DEADLINE)
        .expect("the request is sent again");
    assert_eq!(again["messages"], second["messages"]);
    assert!(seen.try_recv().is_err(), "no other request");
    app.stop_loop();
    app.join();
    let store = spool::store::Store::open(dir.path().join("app.spool")).expect("the store");
    assert_eq!(store.maker().expect("read"), Some(app::MAKER.to_owned()));
}

#[test]
fn a_store_another_program_made_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("run.spool");
    let store = spool::store::Store::open(&path).expect("a store");
    store.claim_maker("run").expect("claimed");
    drop(store);
    let llm = OpenAiConfig::new("http://127.0.0.1:9/v1", "test-model");
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let Err(error) = app::start(&path, loopback, llm, TOKEN) else {
        panic!("a store of `run` is taken");
    };
    assert_eq!(
        error.to_string(),
        format!("{} was made by run, not by my-agent", path.display())
    );
}

/// The fenced blocks of `docs/embedding.md` that follow a line naming `file`.
fn blocks_for(page: &str, file: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if !line.contains(&format!("`{file}`")) {
            continue;
        }
        let Some(_fence) = lines.by_ref().find(|l| l.starts_with("```")) else {
            break;
        };
        let block: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        blocks.push(block.join("\n") + "\n");
    }
    blocks
}

#[test]
fn the_page_shows_the_example_word_for_word() {
    let root = env!("CARGO_MANIFEST_DIR");
    let page = std::fs::read_to_string(format!("{root}/docs/embedding.md")).expect("the page");
    let example =
        std::fs::read_to_string(format!("{root}/examples/embedding/main.rs")).expect("the example");
    // Every block opens with its language and closes bare: nothing of the program
    // is left outside its block.
    let fences: Vec<&str> = page.lines().filter(|l| l.starts_with("```")).collect();
    for pair in fences.chunks(2) {
        assert!(
            pair.len() == 2 && pair[0].len() > 3 && pair[1] == "```",
            "unpaired fences in docs/embedding.md: {fences:?}"
        );
    }
    let blocks = blocks_for(&page, "src/main.rs");
    assert_eq!(
        blocks.len(),
        1,
        "one block after a line naming `src/main.rs`"
    );
    assert!(
        blocks[0] == example,
        "docs/embedding.md's src/main.rs differs from examples/embedding/main.rs: copy the file into the page"
    );
    // The dependencies the page gives are those the example uses.
    let manifest = blocks_for(&page, "Cargo.toml");
    assert_eq!(
        manifest.len(),
        1,
        "one block after a line naming `Cargo.toml`"
    );
    assert!(
        manifest[0].contains(r#"features = ["store", "exec", "http"]"#),
        "{}",
        manifest[0]
    );
    assert!(manifest[0].contains("serde_json = "), "{}", manifest[0]);
}

/// Step 1 of the page as a newcomer takes it: `cargo new`, the page's `Cargo.toml` lines
/// (the path pointing at this checkout) and its `src/main.rs`, then `cargo check`.
/// It builds in a target directory of its own (a cargo inside a test must not wait on the
/// lock of the one running it): the first run checks every dependency, about two and a
/// half minutes on two cores; later runs take seconds.
#[test]
fn a_new_crate_with_the_pages_lines_builds() {
    let root = env!("CARGO_MANIFEST_DIR");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let page = std::fs::read_to_string(format!("{root}/docs/embedding.md")).expect("the page");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let run = |args: &[&str], cwd: &std::path::Path| {
        let out = std::process::Command::new(&cargo)
            .args(args)
            .current_dir(cwd)
            .env(
                "CARGO_TARGET_DIR",
                format!("{root}/target/facade-new-crate"),
            )
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "cargo {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["new", "--vcs", "none", "--quiet", "my-agent"], dir.path());
    let krate = dir.path().join("my-agent");
    let manifest = blocks_for(&page, "Cargo.toml").remove(0);
    let lines = manifest
        .replace("[dependencies]\n", "")
        .replace(r#"path = "../spool""#, &format!("path = {root:?}"));
    let mut toml = std::fs::read_to_string(krate.join("Cargo.toml")).expect("Cargo.toml");
    toml.push_str(&lines);
    std::fs::write(krate.join("Cargo.toml"), toml).expect("write Cargo.toml");
    let main = blocks_for(&page, "src/main.rs").remove(0);
    std::fs::write(krate.join("src/main.rs"), main).expect("write src/main.rs");
    // The workspace's versions of every dependency: nothing to fetch.
    std::fs::copy(format!("{root}/Cargo.lock"), krate.join("Cargo.lock")).expect("Cargo.lock");
    run(&["check", "--offline", "--quiet"], &krate);
}
