//! `spool demo` against a real OpenAI-compatible endpoint: a chat-completions server on
//! 127.0.0.1 started by the test (tiny_http) plays the model. The agents send it
//! OpenAI-format conversations with the demo's tool definitions, run the tools it
//! calls (arguments that do not fit a tool's schema come back to it as the tool's
//! error), and finish with its text; the summary reports the answers.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

#[path = "../../spool-exec/tests/common/warm_up.rs"]
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
                       "content": json!({"error": "invalid arguments: arguments of `calc` do not fit its schema: /expr: required property missing; /expression: unexpected property (allowed: expr)"}).to_string()}),
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
