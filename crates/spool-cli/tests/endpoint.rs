//! `spool demo` against a real OpenAI-compatible endpoint: a chat-completions server on
//! 127.0.0.1 started by the test (tiny_http) plays the model. The agents send it
//! OpenAI-format conversations with the demo's tool definitions, run the tools it
//! calls (arguments that do not fit a tool's schema come back to it as the tool's
//! error), and finish with its text; the summary reports the answers. Against a server
//! that refuses for a day, every agent fails at once, and against one that fails each
//! first call with a 500, the summary counts the executor's retries.

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../../../tests/exec/common/warm_up.rs"]
mod warm_up;
use warm_up::grow_connection_threads;

/// What the server received: the `Authorization` header and the body, per request.
type Received = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// The model: first, two calls of `calc`, one with arguments that do not fit its
/// schema; once the tools have answered, the text `<expr> = <value>.` from the good one.
fn model(body: &Value) -> Value {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let answered: Vec<Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .filter_map(|text| serde_json::from_str(text).ok())
        .collect();
    let message = if answered.is_empty() {
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_good", "type": "function",
             "function": {"name": "calc", "arguments": "{\"expr\":\"6 * 7\"}"}},
            {"id": "call_bad", "type": "function",
             "function": {"name": "calc", "arguments": "{\"expression\":\"6 * 7\"}"}},
        ]})
    } else {
        let result = answered.iter().find(|a| a.get("value").is_some());
        let text = result.map_or_else(
            || "no result".to_owned(),
            |r| format!("{} = {}.", r["expr"].as_str().unwrap_or("?"), r["value"]),
        );
        json!({"role": "assistant", "content": text})
    };
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
}

/// Serves chat completions with [`model`] until `stop` is set; returns the URL.
fn start_server(received: Received, stop: Arc<AtomicBool>) -> (String, thread::JoinHandle<()>) {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("a port on 127.0.0.1");
    let port = server.server_addr().to_ip().expect("an IP address").port();
    let thread = thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(20)) else {
                continue;
            };
            if request.url() == "/warm-up" {
                let _ = request.respond(tiny_http::Response::from_string("ok"));
                continue;
            }
            let mut text = String::new();
            let _ = request.as_reader().read_to_string(&mut text);
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let auth = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.to_string());
            let answer = model(&body);
            received.lock().expect("not poisoned").push((auth, body));
            let header = tiny_http::Header::from_bytes("Content-Type", "application/json")
                .expect("a valid header");
            let _ = request
                .respond(tiny_http::Response::from_string(answer.to_string()).with_header(header));
        }
    });
    grow_connection_threads(port, 40);
    (format!("http://127.0.0.1:{port}"), thread)
}

/// How the test server answers one request: status, headers, body.
type Reply = (u16, Vec<(&'static str, String)>, String);

/// Serves chat completions with `reply(body)` until `stop` is set; returns the URL and
/// the number of requests it answered.
fn start_scripted_server(
    reply: impl Fn(&Value) -> Reply + Send + 'static,
    stop: Arc<AtomicBool>,
) -> (String, Arc<Mutex<usize>>, thread::JoinHandle<()>) {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("a port on 127.0.0.1");
    let port = server.server_addr().to_ip().expect("an IP address").port();
    let answered = Arc::new(Mutex::new(0));
    let count = answered.clone();
    let thread = thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(20)) else {
                continue;
            };
            if request.url() == "/warm-up" {
                let _ = request.respond(tiny_http::Response::from_string("ok"));
                continue;
            }
            let mut text = String::new();
            let _ = request.as_reader().read_to_string(&mut text);
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let (status, headers, answer) = reply(&body);
            *count.lock().expect("not poisoned") += 1;
            let mut response = tiny_http::Response::from_string(answer).with_status_code(status);
            for (name, value) in headers {
                response.add_header(
                    tiny_http::Header::from_bytes(name, value.as_bytes()).expect("a valid header"),
                );
            }
            let _ = request.respond(response);
        }
    });
    grow_connection_threads(port, 40);
    (format!("http://127.0.0.1:{port}"), answered, thread)
}

/// [`demo`], given `limit` to finish: a demo still running then is killed, and the
/// test fails instead of hanging.
fn demo_within(base_url: &str, agents: &str, limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args([
            "demo",
            "--agents",
            agents,
            "--max-latency-ms",
            "2",
            "--quiet",
        ])
        .env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "test-model")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the spool binary runs");
    let started = Instant::now();
    while child.try_wait().expect("waits").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("killed");
            panic!(
                "the demo was still running after {limit:?}; stdout:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("its output")
}

fn demo(base_url: &str, agents: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .args([
            "demo",
            "--agents",
            agents,
            "--max-latency-ms",
            "2",
            "--quiet",
        ])
        .env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "test-model")
        .output()
        .expect("the spool binary runs")
}

#[test]
fn with_openai_base_url_the_demo_runs_against_the_endpoint_and_reports_the_answers() {
    let received: Received = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (url, server) = start_server(received.clone(), stop.clone());
    let out = demo(&url, "20");
    stop.store(true, Ordering::SeqCst);
    server.join().expect("the server thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "spool demo: 20 agents, seed 42, llm {url}/v1/chat/completions (model test-model, from OPENAI_BASE_URL), simulated latency tools 1-2 ms"
        )
    );
    assert!(
        stdout.contains("tasks:      20 completed ok, 0 failed, 0 canceled\n"),
        "{stdout}"
    );
    // Per agent: two LLM calls, two calc calls (one refused by the schema).
    assert!(
        stdout.contains(
            "requests:   80 (llm: 40, tool:calc: 40, tool:read_file: 0, tool:search: 0)\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "limits:     at most 32 LLM calls at the provider at once; 0 calls refused with 429"
        ),
        "{stdout}"
    );
    let answers: Vec<&str> = lines
        .iter()
        .skip_while(|l| **l != "answers:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .copied()
        .collect();
    let mut expected: Vec<String> = (0..10)
        .map(|i| format!("  agent-{i}: 6 * 7 = 42."))
        .collect();
    expected.push("  … and 10 more".to_owned());
    assert_eq!(answers, expected);
    assert!(
        stdout.contains(
            "check:      ok, 20/20 agents finished with an answer (a real LLM: answers are not checked against scripts)\n"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("FAILED"), "{stdout}");

    // What the endpoint was sent.
    let received = received.lock().expect("not poisoned");
    assert_eq!(received.len(), 40);
    let definitions = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| t["function"]["name"].as_str().unwrap_or("?").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut seconds = 0;
    for (auth, body) in received.iter() {
        assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
        assert_eq!(body["model"], "test-model");
        assert_eq!(definitions(body), ["search", "read_file", "calc"]);
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages[0]["role"], "system");
        assert!(
            messages[0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("You are agent-")),
            "{body}"
        );
        assert_eq!(messages[1]["role"], "user");
        if messages.len() == 2 {
            continue;
        }
        seconds += 1;
        assert_eq!(
            messages[2..],
            [
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_good", "type": "function",
                     "function": {"name": "calc", "arguments": "{\"expr\":\"6 * 7\"}"}},
                    {"id": "call_bad", "type": "function",
                     "function": {"name": "calc", "arguments": "{\"expression\":\"6 * 7\"}"}},
                ]}),
                json!({"role": "tool", "tool_call_id": "call_good",
                       "content": "{\"expr\":\"6 * 7\",\"value\":42}"}),
                json!({"role": "tool", "tool_call_id": "call_bad",
                       "content": json!({"error": "invalid arguments: arguments of `calc` do not fit its schema: /expr: required property is missing; /expression: property is not allowed"}).to_string()}),
            ]
        );
    }
    assert_eq!(seconds, 20);
}

#[test]
fn an_unusable_openai_base_url_is_an_error_not_the_scripted_model() {
    let out = demo("ftp://example.invalid", "2");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "spool demo: OPENAI_BASE_URL is set but cannot be used: the base URL `ftp://example.invalid` is not usable: it must start with http:// or https://\n"
    );
}

/// End to end: a provider answering every call 429 with `Retry-After: 86400` does not
/// stop the demo for a day. Each agent's first LLM call fails at once (the day is past
/// the scheduler's `max_wait`) with the provider's value in its error, and the summary
/// counts the 429s given up.
#[test]
fn a_provider_refusing_for_a_day_fails_every_agent_at_once_instead_of_holding_them() {
    let stop = Arc::new(AtomicBool::new(false));
    let (url, answered, server) = start_scripted_server(
        |_| {
            (
                429,
                vec![("Retry-After", "86400".to_owned())],
                json!({"error": {"message": "Rate limit reached", "type": "requests"}}).to_string(),
            )
        },
        stop.clone(),
    );
    let out = demo_within(&url, "20", Duration::from_secs(60));
    stop.store(true, Ordering::SeqCst);
    server.join().expect("the server thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");

    for line in [
        "tasks:      0 completed ok, 20 failed, 0 canceled\n",
        "requests:   20 (llm: 20, tool:calc: 0, tool:read_file: 0, tool:search: 0)\n",
        "; 0 calls refused with 429, backed off and sent again; 20 more refused past the back-off bounds and failed to their tasks\n",
        "server:     20 requests sent to the server (0 retries of 5xx/connection errors, 20 answered 429)\n",
        "check:      FAILED: 0 of 20 agents finished with an answer, 20 failed, 0 unfinished\n",
        "  agent-0: failed: request 1 failed: rate limited by the provider (it asked to retry after 86400s): that is longer than the longest wait of 300s\n",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    assert_eq!(*answered.lock().expect("not poisoned"), 20);
}

/// End to end: a server that answers each agent's first LLM call with a 500 the first
/// time. The executor retries those 20 itself; the summary counts them, so its 40 LLM
/// requests served plus 20 retries reconcile with the 60 requests the server saw.
#[test]
fn the_summary_counts_the_executor_retries_the_server_saw() {
    let stop = Arc::new(AtomicBool::new(false));
    let failed_once: Arc<Mutex<BTreeMap<String, bool>>> = Arc::default();
    let (url, answered, server) = start_scripted_server(
        move |body| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let agent = messages
                .first()
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            let first_call = messages.len() == 2;
            let mut failed = failed_once.lock().expect("not poisoned");
            if first_call && failed.insert(agent, true).is_none() {
                return (500, vec![], json!({"error": "try again"}).to_string());
            }
            let content = ("Content-Type", "application/json".to_owned());
            (200, vec![content], model(body).to_string())
        },
        stop.clone(),
    );
    let out = demo_within(&url, "20", Duration::from_secs(60));
    stop.store(true, Ordering::SeqCst);
    server.join().expect("the server thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    for line in [
        "tasks:      20 completed ok, 0 failed, 0 canceled\n",
        "requests:   80 (llm: 40, tool:calc: 40, tool:read_file: 0, tool:search: 0)\n",
        "server:     60 requests sent to the server (20 retries of 5xx/connection errors, 0 answered 429)\n",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    assert_eq!(*answered.lock().expect("not poisoned"), 60);
}
