//! The OpenAI-compatible executor against a real HTTP server on 127.0.0.1 (tiny_http,
//! a port of its own per test, scripted answers, every request recorded with its body,
//! headers and arrival time), driven through a real threaded `Runtime` by async tasks:
//! plain answers and the exact body sent; tool calls normalized; 429s with
//! `Retry-After` in seconds and as an HTTP date holding every LLM request back in real
//! time and the request sent again with the same key; 429s past the back-off bounds
//! given up (a day-long `Retry-After`, 429s to everything); a 5xx retried, and the
//! retries counted; 5xx and refused connections failing after the retries; a timeout;
//! malformed bodies quoted; usage reaching the tokens-per-window limiter; a canceled
//! request's retries stopped. Then the header parsers and the configuration, unit by
//! unit.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use spool_core::{
    BackoffBound, BackoffConfig, Config, Kind, NewTask, Request, RequestError, RequestLimits,
    TaskError, TaskId, TaskState, async_task,
};
use spool_exec::{
    AttemptCounts, ConfigError, OpenAiConfig, OpenAiExecutor, parse_reset_duration,
    parse_retry_after, quote_body, rate_limit_delay,
};
use spool_runtime::Runtime;

#[path = "common/warm_up.rs"]
mod warm_up;
use warm_up::grow_connection_threads;

// ---------------------------------------------------------------------------------
// The test server

/// One request as the server received it.
#[derive(Clone, Debug)]
struct Seen {
    /// When the server took it (monotonic and wall clock).
    at: Instant,
    wall: SystemTime,
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("the executor sends JSON")
    }

    /// The content of the last message sent.
    fn last_message(&self) -> String {
        self.json()["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    }
}

/// What the server answers one request with.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    delay: Duration,
}

impl Reply {
    fn status(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    fn json(status: u16, body: Value) -> Reply {
        Reply::status(status, body.to_string())
    }

    /// A chat completion with text `content` and the given usage.
    fn text(content: &str, total_tokens: u32) -> Reply {
        Reply::json(
            200,
            completion(
                json!({"role": "assistant", "content": content}),
                "stop",
                total_tokens,
            ),
        )
    }

    fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// A chat-completions body with one choice.
fn completion(message: Value, finish_reason: &str, total_tokens: u32) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": total_tokens - total_tokens / 4,
            "completion_tokens": total_tokens / 4,
            "total_tokens": total_tokens,
        },
    })
}

type Script = dyn Fn(usize, &Seen) -> Reply + Send + Sync;

/// A tiny_http server on 127.0.0.1 with a port of its own; `script(index, request)`
/// decides each answer (index: the order of arrival, from 0).
struct TestServer {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// `(index, when the answer was written)`.
    answered: Arc<Mutex<Vec<(usize, Instant)>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl TestServer {
    fn start(script: impl Fn(usize, &Seen) -> Reply + Send + Sync + 'static) -> TestServer {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let script: Arc<Script> = Arc::new(script);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..8)
            .map(|_| {
                let (server, script, seen, answered, stop) = (
                    server.clone(),
                    script.clone(),
                    seen.clone(),
                    answered.clone(),
                    stop.clone(),
                );
                thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(20))
                        else {
                            continue;
                        };
                        if request.url() == "/warm-up" {
                            let _ = request.respond(tiny_http::Response::from_string("ok"));
                            continue;
                        }
                        let at = Instant::now();
                        let wall = SystemTime::now();
                        let mut body = String::new();
                        let _ = request.as_reader().read_to_string(&mut body);
                        let record = Seen {
                            at,
                            wall,
                            method: request.method().to_string(),
                            url: request.url().to_owned(),
                            headers: request
                                .headers()
                                .iter()
                                .map(|h| (h.field.to_string(), h.value.to_string()))
                                .collect(),
                            body,
                        };
                        let index = {
                            let mut seen = seen.lock().expect("lock");
                            seen.push(record.clone());
                            seen.len() - 1
                        };
                        let reply = script(index, &record);
                        thread::sleep(reply.delay);
                        let mut response = tiny_http::Response::from_string(reply.body)
                            .with_status_code(reply.status);
                        for (name, value) in &reply.headers {
                            let header =
                                tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
                                    .expect("a valid header");
                            response.add_header(header);
                        }
                        let _ = request.respond(response);
                        answered.lock().expect("lock").push((index, Instant::now()));
                    }
                })
            })
            .collect();
        grow_connection_threads(port, 12);
        TestServer {
            port,
            seen,
            answered,
            stop,
            threads,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1/chat/completions", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn answered_at(&self, index: usize) -> Instant {
        self.answered
            .lock()
            .expect("lock")
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, at)| *at)
            .expect("that request was answered")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------------
// Runtime helpers

/// A configuration for `server` with small retry pauses and a short timeout.
fn config(base_url: impl Into<String>) -> OpenAiConfig {
    OpenAiConfig::new(base_url, "test-model")
        .api_key("sk-test")
        .timeout(Duration::from_secs(5))
        .retry_base(Duration::from_millis(100))
        .retry_max(Duration::from_millis(400))
        .workers(4)
}

/// A runtime with the executor and the scheduler's 429 back-off starting at 100 ms, so
/// that a longer hold can only come from the provider's `Retry-After`.
fn runtime(config: OpenAiConfig, limits: RequestLimits) -> Runtime {
    let mut backoff = BackoffConfig::default();
    backoff.base = Duration::from_millis(100);
    let limits = limits.backoff(backoff);
    let workers = config.workers;
    let executor = OpenAiExecutor::new(config);
    Runtime::builder()
        .config(Config::new().requests(limits))
        .pool(Kind::Llm, workers, move || executor.clone())
        .build()
}

/// A task that sleeps `after`, asks the LLM `payload` and returns the answer.
fn ask_after(runtime: &mut Runtime, after: Duration, payload: Value) -> TaskId {
    let task = async_task("ask", move |cx| async move {
        if !after.is_zero() {
            cx.sleep(after).await;
        }
        let answer = cx.llm(payload).await?;
        Ok::<_, TaskError>(answer)
    });
    runtime.submit(NewTask::new(task)).expect("submitted").id
}

fn ask(runtime: &mut Runtime, payload: Value) -> TaskId {
    ask_after(runtime, Duration::ZERO, payload)
}

fn user(content: &str) -> Value {
    json!({"messages": [{"role": "user", "content": content}]})
}

fn completed(runtime: &Runtime, id: TaskId) -> Value {
    match runtime.task_state(id) {
        Some(TaskState::Completed(Ok(value))) => value,
        other => panic!("task {id} did not complete with a value: {other:?}"),
    }
}

fn failed_with(runtime: &Runtime, id: TaskId) -> RequestError {
    match runtime.task_state(id) {
        Some(TaskState::Completed(Err(TaskError::RequestFailed { error }))) => error,
        other => panic!("task {id} did not fail on its request: {other:?}"),
    }
}

/// The normalized answer for a text reply.
fn text_answer(content: &str, total_tokens: u32) -> Value {
    json!({
        "content": content,
        "tool_calls": [],
        "finish_reason": "stop",
        "usage": {
            "prompt_tokens": total_tokens - total_tokens / 4,
            "completion_tokens": total_tokens / 4,
            "total_tokens": total_tokens,
        },
    })
}

// ---------------------------------------------------------------------------------
// Answers

#[test]
fn a_plain_answer_and_the_exact_request_sent() {
    let server = TestServer::start(|_, _| Reply::text("Hello! How can I help?", 12));
    // The base URL without `/v1`: the executor adds it.
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let payload = json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "temperature": 0,
        "max_tokens": 50,
    });
    let id = ask(&mut runtime, payload);
    runtime.run_until_idle();

    assert_eq!(
        completed(&runtime, id),
        text_answer("Hello! How can I help?", 12)
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.url, "/v1/chat/completions");
    assert_eq!(
        request.json(),
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ],
            "temperature": 0,
            "max_tokens": 50,
        })
    );
    assert_eq!(request.header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("Content-Type"), Some("application/json"));
    assert_eq!(
        request.header("X-Spool-Request-Key"),
        Some(format!("{id}:1").as_str())
    );
    let stats = runtime.scheduler().stats();
    assert_eq!(
        (stats.requests, stats.answers, stats.rate_limited),
        (1, 1, 0)
    );
}

#[test]
fn a_payload_naming_its_model_keeps_it_and_no_key_sends_no_authorization() {
    let server = TestServer::start(|_, _| Reply::text("ok", 3));
    let config =
        OpenAiConfig::new(format!("{}/v1/", server.url()), "test-model").request_key_header(None);
    let mut runtime = runtime(config, RequestLimits::new());
    let id = ask(
        &mut runtime,
        json!({"model": "other-model", "messages": [{"role": "user", "content": "Hi"}]}),
    );
    runtime.run_until_idle();

    assert_eq!(completed(&runtime, id), text_answer("ok", 3));
    let seen = server.seen();
    assert_eq!(seen[0].url, "/v1/chat/completions");
    assert_eq!(
        seen[0].json(),
        json!({"model": "other-model", "messages": [{"role": "user", "content": "Hi"}]})
    );
    assert_eq!(seen[0].header("Authorization"), None);
    assert_eq!(seen[0].header("X-Spool-Request-Key"), None);
}

#[test]
fn two_tool_calls_are_normalized_with_their_arguments_parsed() {
    let message = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}},
            {"id": "call_2", "type": "function",
             "function": {"name": "search", "arguments": "{\"query\": \"rust\", \"limit\": 3}"}},
        ],
    });
    let server = TestServer::start(move |_, _| {
        Reply::json(200, completion(message.clone(), "tool_calls", 40))
    });
    let mut runtime = runtime(config(format!("{}/v1", server.url())), RequestLimits::new());
    let tools = json!([
        {"type": "function", "function": {
            "name": "read_file",
            "description": "Reads a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        }},
        {"type": "function", "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        }},
    ]);
    let payload = json!({
        "messages": [{"role": "user", "content": "Read my notes and search for rust."}],
        "tools": tools,
        "tool_choice": "auto",
    });
    let id = ask(&mut runtime, payload.clone());
    runtime.run_until_idle();

    assert_eq!(
        completed(&runtime, id),
        json!({
            "content": null,
            "tool_calls": [
                {"id": "call_1", "name": "read_file", "arguments": {"path": "notes.txt"}},
                {"id": "call_2", "name": "search", "arguments": {"query": "rust", "limit": 3}},
            ],
            "finish_reason": "tool_calls",
            "usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40},
        })
    );
    // The tools and every other field went through as they were.
    let mut expected = payload;
    expected["model"] = json!("test-model");
    assert_eq!(server.seen()[0].json(), expected);
}

#[test]
fn tool_arguments_that_do_not_parse_stay_text_and_content_parts_are_joined() {
    let message = json!({
        "role": "assistant",
        "content": [{"type": "text", "text": "Let me "}, {"type": "text", "text": "look."}],
        "tool_calls": [
            {"type": "function", "function": {"name": "ls", "arguments": "{\"path\": \"/tm"}},
        ],
    });
    let server = TestServer::start(move |_, _| {
        let mut body = completion(message.clone(), "tool_calls", 8);
        body.as_object_mut().expect("an object").remove("usage");
        Reply::json(200, body)
    });
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let id = ask(&mut runtime, user("list /tmp"));
    runtime.run_until_idle();

    assert_eq!(
        completed(&runtime, id),
        json!({
            "content": "Let me look.",
            "tool_calls": [{"id": null, "name": "ls", "arguments": "{\"path\": \"/tm"}],
            "finish_reason": "tool_calls",
            "usage": null,
        })
    );
}

// ---------------------------------------------------------------------------------
// 429: the scheduler's back-off

/// The 429 test's script: the first request (from the first task) gets a 429 with
/// `retry_after`; every other request an answer naming what it was asked.
fn rate_limited_script(retry_after: String) -> impl Fn(usize, &Seen) -> Reply + Send + Sync {
    move |index, seen| {
        if index == 0 {
            Reply::json(
                429,
                json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
            )
            .header("Retry-After", &retry_after)
        } else {
            Reply::text(&format!("answer to {}", seen.last_message()), 10)
        }
    }
}

#[test]
fn a_429_with_retry_after_seconds_holds_every_llm_request_and_resends_with_the_same_key() {
    let server = TestServer::start(rate_limited_script("2".to_owned()));
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let first = ask(&mut runtime, user("first"));
    // Two more tasks ask 300 ms later, while the kind is backed off.
    let later: Vec<TaskId> = ["second", "third"]
        .iter()
        .map(|m| ask_after(&mut runtime, Duration::from_millis(300), user(m)))
        .collect();
    let started = Instant::now();
    runtime.run_until_idle();
    let elapsed = started.elapsed();

    assert_eq!(
        completed(&runtime, first),
        text_answer("answer to first", 10)
    );
    assert_eq!(
        completed(&runtime, later[0]),
        text_answer("answer to second", 10)
    );
    assert_eq!(
        completed(&runtime, later[1]),
        text_answer("answer to third", 10)
    );
    assert_eq!(runtime.scheduler().stats().rate_limited, 1);

    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].last_message(), "first");
    let limited_at = server.answered_at(0);
    for request in &seen[1..] {
        let waited = request.at.duration_since(limited_at);
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(3500),
            "`{}` arrived {waited:?} after the 429",
            request.last_message()
        );
    }
    // The 429'd request went again, the same body under the same key.
    let again: Vec<&Seen> = seen[1..]
        .iter()
        .filter(|s| s.last_message() == "first")
        .collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].body, seen[0].body);
    let key = format!("{first}:1");
    assert_eq!(seen[0].header("X-Spool-Request-Key"), Some(key.as_str()));
    assert_eq!(again[0].header("X-Spool-Request-Key"), Some(key.as_str()));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn a_429_with_an_http_date_holds_until_that_date() {
    let until = SystemTime::now() + Duration::from_secs(3);
    let date = httpdate::fmt_http_date(until);
    // The date has whole seconds: the hold ends at it, 2 to 3 s from now.
    let ends = httpdate::parse_http_date(&date).expect("a date");
    let server = TestServer::start(rate_limited_script(date));
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let first = ask(&mut runtime, user("first"));
    let second = ask_after(&mut runtime, Duration::from_millis(200), user("second"));
    runtime.run_until_idle();

    assert_eq!(
        completed(&runtime, first),
        text_answer("answer to first", 10)
    );
    assert_eq!(
        completed(&runtime, second),
        text_answer("answer to second", 10)
    );
    assert_eq!(runtime.scheduler().stats().rate_limited, 1);
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for request in &seen[1..] {
        let after = request.wall.duration_since(ends);
        assert!(
            after
                .as_ref()
                .is_ok_and(|d| *d < Duration::from_millis(1500)),
            "`{}` arrived {after:?} after the Retry-After date",
            request.last_message()
        );
    }
}

/// Shuts `runtime` down after `after` if it is still running then: a test of a bound
/// fails (with unfinished tasks) instead of hanging when the bound is missing.
fn watchdog(runtime: &Runtime, after: Duration) {
    let handle = runtime.handle();
    thread::spawn(move || {
        thread::sleep(after);
        let _ = handle.shutdown();
    });
}

/// The scheduler's back-off for the bounded-wait tests: from 100 ms, doubling to 1.6 s,
/// no `Retry-After` longer than 1 s waited out, 2 s of back-off per request at most.
fn bounded_backoff() -> RequestLimits {
    let mut backoff = BackoffConfig::default();
    backoff.base = Duration::from_millis(100);
    backoff.max = Duration::from_millis(1600);
    backoff.max_wait = Duration::from_secs(1);
    backoff.budget = Duration::from_secs(2);
    RequestLimits::new().backoff(backoff)
}

/// A runtime with the executor, and `limits` (whose back-off it keeps).
fn runtime_with(config: OpenAiConfig, limits: RequestLimits) -> Runtime {
    let workers = config.workers;
    let executor = OpenAiExecutor::new(config);
    Runtime::builder()
        .config(Config::new().requests(limits))
        .pool(Kind::Llm, workers, move || executor.clone())
        .build()
}

/// A 429 asking for a day, for `u64::MAX` seconds, or until a date in year 9999 is not
/// waited out. Each of the three requests fails at once with `RateLimitExceeded`
/// carrying the provider's value (saturated where it does not fit a `Duration`); the
/// LLM kind backs off only `max_wait` (1 s here), so a fourth request made meanwhile
/// goes about 1 s after the 429s and is answered.
#[test]
fn a_retry_after_of_a_day_or_more_fails_the_request_at_once_and_holds_the_kind_max_wait() {
    let year_9999 = "Fri, 31 Dec 9999 23:59:59 GMT";
    let server = TestServer::start(move |_, seen| {
        let refuse = |retry_after: &str| {
            Reply::json(429, json!({"error": {"message": "come back later"}}))
                .header("Retry-After", retry_after)
        };
        match seen.last_message().as_str() {
            "day" => refuse("86400"),
            "max" => refuse("18446744073709551615"),
            "date" => refuse(year_9999),
            other => Reply::text(&format!("answer to {other}"), 10),
        }
    });
    let mut runtime = runtime_with(config(server.url()).workers(4), bounded_backoff());
    let refused: Vec<TaskId> = ["day", "max", "date"]
        .iter()
        .map(|m| ask(&mut runtime, user(m)))
        .collect();
    let later = ask_after(&mut runtime, Duration::from_millis(200), user("later"));
    watchdog(&runtime, Duration::from_secs(20));
    runtime.run_until_idle();

    let given_up = |retry_after: Duration| RequestError::RateLimitExceeded {
        retry_after: Some(retry_after),
        waited: Duration::ZERO,
        bound: BackoffBound::MaxWait(Duration::from_secs(1)),
    };
    assert_eq!(
        failed_with(&runtime, refused[0]),
        given_up(Duration::from_secs(86_400))
    );
    assert_eq!(
        failed_with(&runtime, refused[1]),
        given_up(Duration::from_secs(u64::MAX))
    );
    // The date, from when the executor read it: some 7,973 years.
    let RequestError::RateLimitExceeded {
        retry_after: Some(until_9999),
        ..
    } = failed_with(&runtime, refused[2])
    else {
        panic!("not RateLimitExceeded");
    };
    assert_eq!(failed_with(&runtime, refused[2]), given_up(until_9999));
    let years = until_9999.as_secs() / (365 * 24 * 3600);
    assert!((7900..8000).contains(&years), "{until_9999:?}");
    assert_eq!(
        completed(&runtime, later),
        text_answer("answer to later", 10)
    );
    let stats = runtime.scheduler().stats();
    assert_eq!((stats.requests, stats.rate_limited), (4, 0));

    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[3].last_message(), "later");
    let last_429 = (0..3).map(|i| server.answered_at(i)).max().expect("three");
    let held = seen[3].at.duration_since(last_429);
    assert!(
        held >= Duration::from_millis(700) && held < Duration::from_secs(3),
        "the later request went {held:?} after the last 429"
    );
}

/// Eight requests at once to a server that answers 429 with `Retry-After: 0.1` to
/// everything. The eight 429s of a round are one hit, so the rounds back off 0.1, 0.2,
/// 0.4 and 0.8 s (1.5 s in all); the fifth round's 429 would take each request 1.6 s
/// more, past its 2 s budget, so each task fails then with `RateLimitExceeded` — after
/// 5 sends of each request, 40 in all. (When each 429 doubled the back-off, the first
/// round alone took it to its 1.6 s cap and every request went 21 times.)
#[test]
fn requests_refused_together_are_one_hit_and_fail_when_their_back_off_budget_is_spent() {
    let server = TestServer::start(|_, _| {
        Reply::json(429, json!({"error": {"message": "slow down"}})).header("Retry-After", "0.1")
    });
    let mut runtime = runtime_with(config(server.url()).workers(8), bounded_backoff());
    let tasks: Vec<TaskId> = (0..8)
        .map(|i| ask(&mut runtime, user(&format!("question {i}"))))
        .collect();
    watchdog(&runtime, Duration::from_secs(20));
    runtime.run_until_idle();

    for id in &tasks {
        match failed_with(&runtime, *id) {
            RequestError::RateLimitExceeded {
                retry_after,
                waited,
                bound,
            } => {
                assert_eq!(retry_after, Some(Duration::from_millis(100)));
                assert_eq!(bound, BackoffBound::Budget(Duration::from_secs(2)));
                // 0.1 + 0.2 + 0.4 + 0.8 s, less the time between the first 429 of a
                // round and the task's own, plus the little its own Retry-After added.
                assert!(
                    waited > Duration::from_millis(1300) && waited <= Duration::from_secs(2),
                    "task {id} waited {waited:?}"
                );
            }
            other => panic!("task {id} failed with {other:?}"),
        }
    }
    let seen = server.seen();
    for id in &tasks {
        let key = format!("{id}:1");
        let sends = seen
            .iter()
            .filter(|s| s.header("X-Spool-Request-Key") == Some(key.as_str()))
            .count();
        assert_eq!(sends, 5, "request {key}");
    }
    assert_eq!(seen.len(), 40);
    // Four rounds backed off and sent again; the fifth's 429s were given up.
    assert_eq!(runtime.scheduler().stats().rate_limited, 32);
}

/// The executor counts its own retries, so the requests the endpoint saw reconcile with
/// the scheduler's. Four requests each meet a 500 first and are retried by the
/// executor; a fifth meets a 429 first (sent again by the scheduler), then a 500
/// (retried by the executor), then an answer. The server saw 11 requests: 5 sent by the
/// scheduler + 1 sent again after the 429 + 5 retries.
#[test]
fn retries_of_5xx_are_counted_so_the_endpoint_count_reconciles() {
    let keys_seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = keys_seen.clone();
    let server = TestServer::start(move |_, seen| {
        let key = seen.header("X-Spool-Request-Key").unwrap_or("").to_owned();
        let times = {
            let mut log = log.lock().expect("lock");
            log.push(key);
            let key = log.last().cloned().unwrap_or_default();
            log.iter().filter(|k| **k == key).count()
        };
        let limited_first = seen.last_message() == "limited";
        match (limited_first, times) {
            (true, 1) => Reply::json(429, json!({"error": "slow down"})).header("Retry-After", "0"),
            (true, 2) | (false, 1) => Reply::json(500, json!({"error": "oops"})),
            _ => Reply::text(&format!("answer to {}", seen.last_message()), 10),
        }
    });
    let config = config(server.url()).workers(4);
    let executor = OpenAiExecutor::new(config.clone());
    let pool = executor.clone();
    let mut runtime = Runtime::builder()
        .config(Config::new().requests(bounded_backoff()))
        .pool(Kind::Llm, config.workers, move || pool.clone())
        .build();
    let asked = ["a", "b", "c", "d", "limited"];
    let tasks: Vec<TaskId> = asked.iter().map(|m| ask(&mut runtime, user(m))).collect();
    runtime.run_until_idle();

    for (id, asked) in tasks.iter().zip(asked) {
        assert_eq!(
            completed(&runtime, *id),
            text_answer(&format!("answer to {asked}"), 10)
        );
    }
    let mut expected = AttemptCounts::default();
    expected.attempts = 11;
    expected.retries = 5;
    expected.rate_limited = 1;
    assert_eq!(executor.attempts(), expected);
    assert_eq!(server.seen().len(), 11);
    let stats = runtime.scheduler().stats();
    assert_eq!((stats.requests, stats.rate_limited), (5, 1));
    let counts = executor.attempts();
    assert_eq!(
        counts.attempts,
        stats.requests + stats.rate_limited + counts.retries
    );
}

// ---------------------------------------------------------------------------------
// Retries, failures, timeouts, bad bodies

#[test]
fn a_500_is_retried_once_and_the_task_sees_only_the_success() {
    let server = TestServer::start(|index, _| {
        if index == 0 {
            Reply::json(
                500,
                json!({"error": {"message": "The server had an error"}}),
            )
        } else {
            Reply::text("recovered", 7)
        }
    });
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let id = ask(&mut runtime, user("hello"));
    runtime.run_until_idle();

    assert_eq!(completed(&runtime, id), text_answer("recovered", 7));
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body, seen[0].body);
    assert_eq!(
        seen[1].header("X-Spool-Request-Key"),
        seen[0].header("X-Spool-Request-Key")
    );
    // The first retry waits 50 to 100 ms (retry_base 100 ms, jittered to half-to-all).
    let pause = seen[1].at.duration_since(server.answered_at(0));
    assert!(
        pause >= Duration::from_millis(50) && pause < Duration::from_millis(600),
        "retried after {pause:?}"
    );
    let stats = runtime.scheduler().stats();
    assert_eq!(
        (stats.requests, stats.answers, stats.rate_limited),
        (1, 1, 0)
    );
}

#[test]
fn server_errors_every_time_fail_after_the_retries_with_the_status_and_body() {
    let server = TestServer::start(|_, _| Reply::json(503, json!({"error": "overloaded"})));
    let mut runtime = runtime(config(server.url()).max_retries(2), RequestLimits::new());
    let id = ask(&mut runtime, user("hello"));
    let started = Instant::now();
    runtime.run_until_idle();
    let elapsed = started.elapsed();

    assert_eq!(
        failed_with(&runtime, id),
        RequestError::Failed {
            message: format!(
                "POST {} failed after 3 attempts; the last: HTTP 503 Service Unavailable: \
                 `{{\"error\":\"overloaded\"}}`",
                server.endpoint()
            ),
        }
    );
    assert_eq!(server.seen().len(), 3);
    // Pauses of 50-100 ms, then 100-200 ms.
    assert!(
        elapsed >= Duration::from_millis(150) && elapsed < Duration::from_secs(2),
        "took {elapsed:?}"
    );
}

#[test]
fn a_refused_connection_fails_after_the_retries() {
    // A port nobody listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = config(format!("http://127.0.0.1:{port}"))
        .max_retries(2)
        .retry_base(Duration::from_millis(20))
        .retry_max(Duration::from_millis(40));
    let mut runtime = runtime(config, RequestLimits::new());
    let id = ask(&mut runtime, user("anyone there?"));
    let started = Instant::now();
    runtime.run_until_idle();
    let elapsed = started.elapsed();

    let RequestError::Failed { message } = failed_with(&runtime, id) else {
        panic!("not a failure");
    };
    let prefix = format!(
        "POST http://127.0.0.1:{port}/v1/chat/completions failed after 3 attempts; the last: \
         connection error: "
    );
    assert!(message.starts_with(&prefix), "{message}");
    assert!(
        message.to_lowercase().contains("connection refused"),
        "{message}"
    );
    assert!(
        elapsed >= Duration::from_millis(30) && elapsed < Duration::from_secs(2),
        "took {elapsed:?}"
    );
}

#[test]
fn a_slow_answer_past_the_timeout_is_a_timeout_and_is_not_retried() {
    let server =
        TestServer::start(|_, _| Reply::text("too late", 5).delay(Duration::from_millis(1500)));
    let config = config(server.url()).timeout(Duration::from_millis(300));
    let mut runtime = runtime(config, RequestLimits::new());
    let id = ask(&mut runtime, user("take your time"));
    let started = Instant::now();
    runtime.run_until_idle();
    let elapsed = started.elapsed();

    assert_eq!(
        failed_with(&runtime, id),
        RequestError::Timeout {
            after: Duration::from_millis(300)
        }
    );
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_millis(1200),
        "took {elapsed:?}"
    );
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn malformed_bodies_are_malformed_errors_that_quote_them() {
    let long = format!("<html>{}</html>", "é".repeat(150));
    let long_body = long.clone();
    let server = TestServer::start(move |_, seen| match seen.last_message().as_str() {
        "not json" => Reply::status(200, "this is not json"),
        "no choices" => Reply::json(200, json!({"id": "x", "choices": []})),
        "long" => Reply::status(200, long_body.clone()),
        "bad content" => Reply::json(
            200,
            completion(json!({"role": "assistant", "content": 42}), "stop", 4),
        ),
        _ => Reply::status(200, ""),
    });
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let ids: Vec<TaskId> = ["not json", "no choices", "long", "bad content", "empty"]
        .iter()
        .map(|m| ask(&mut runtime, user(m)))
        .collect();
    runtime.run_until_idle();

    let malformed = |message: String| RequestError::Malformed { message };
    assert_eq!(
        failed_with(&runtime, ids[0]),
        malformed(
            "the answer is not JSON (expected ident at line 1 column 2): `this is not json`"
                .to_owned()
        )
    );
    assert_eq!(
        failed_with(&runtime, ids[1]),
        malformed(
            "the answer has no `choices[0].message` object: `{\"choices\":[],\"id\":\"x\"}`"
                .to_owned()
        )
    );
    // 200 bytes: `<html>` and 97 two-byte characters; the 98th would be cut in two.
    let quoted = format!("<html>{}", "é".repeat(97));
    assert_eq!(quoted.len(), 200);
    assert_eq!(
        failed_with(&runtime, ids[2]),
        malformed(format!(
            "the answer is not JSON (expected value at line 1 column 1): `{quoted}`... \
             ({} bytes in all)",
            long.len()
        ))
    );
    let RequestError::Malformed { message } = failed_with(&runtime, ids[3]) else {
        panic!("not malformed");
    };
    assert!(
        message.starts_with("`message.content` is neither text nor null: `{"),
        "{message}"
    );
    assert_eq!(
        failed_with(&runtime, ids[4]),
        malformed(
            "the answer is not JSON (EOF while parsing a value at line 1 column 0): \
             an empty body"
                .to_owned()
        )
    );
    // Bad bodies are not retried.
    assert_eq!(server.seen().len(), 5);
}

#[test]
fn other_4xx_fail_at_once_with_the_status_and_a_quote() {
    let server = TestServer::start(|_, _| {
        Reply::json(
            400,
            json!({"error": {"message": "Invalid value for 'temperature'"}}),
        )
    });
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let id = ask(&mut runtime, json!({"messages": [], "temperature": 9}));
    runtime.run_until_idle();

    assert_eq!(
        failed_with(&runtime, id),
        RequestError::Failed {
            message: format!(
                "POST {} answered HTTP 400 Bad Request: \
                 `{{\"error\":{{\"message\":\"Invalid value for 'temperature'\"}}}}`",
                server.endpoint()
            ),
        }
    );
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn payloads_without_messages_are_invalid_arguments_and_never_sent() {
    let server = TestServer::start(|_, _| Reply::text("unreachable", 1));
    let mut runtime = runtime(config(server.url()), RequestLimits::new());
    let text = ask(&mut runtime, json!("hi"));
    let no_messages = ask(&mut runtime, json!({"prompt": "hi"}));
    runtime.run_until_idle();

    let invalid = |message: &str| RequestError::InvalidArguments {
        message: message.to_owned(),
    };
    assert_eq!(
        failed_with(&runtime, text),
        invalid("an LLM request's payload must be a JSON object with `messages`, not a string")
    );
    assert_eq!(
        failed_with(&runtime, no_messages),
        invalid("an LLM request's payload must have a `messages` array")
    );
    assert_eq!(server.seen().len(), 0);
}

// ---------------------------------------------------------------------------------
// The limiter and cancellation

/// Two requests of 10 estimated tokens each under a 100-tokens-per-second window; the
/// provider reports `used` tokens for the first. Returns the scheduler time between the
/// first request going out and the second's answer, and the server's gap between them.
fn two_requests_under_a_token_window(used: u32) -> (Duration, Duration) {
    let server = TestServer::start(move |_, _| Reply::text("ok", used));
    let limits = RequestLimits::new().tokens(Kind::Llm, 100, Duration::from_secs(1));
    let mut runtime = runtime(config(server.url()), limits);
    let task = async_task("two", |cx| async move {
        let start = cx.now();
        cx.request(Request::llm(user("one")).with_tokens(10))
            .await?;
        cx.request(Request::llm(user("two")).with_tokens(10))
            .await?;
        let took = cx.now().saturating_since(start);
        Ok::<_, TaskError>(json!(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX)))
    });
    let id = runtime.submit(NewTask::new(task)).expect("submitted").id;
    runtime.run_until_idle();
    let took = Duration::from_nanos(completed(&runtime, id).as_u64().expect("nanoseconds"));
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    (took, seen[1].at.duration_since(seen[0].at))
}

#[test]
fn reported_usage_reaches_the_tokens_per_window_limiter() {
    // The provider says the first request used the whole budget: the second waits
    // until the first leaves the window, a second after it went out.
    let (took, gap) = two_requests_under_a_token_window(100);
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(gap >= Duration::from_millis(900), "{gap:?}");
    // With 5 tokens used, the second goes at once.
    let (took, gap) = two_requests_under_a_token_window(5);
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert!(gap < Duration::from_millis(500), "{gap:?}");
}

#[test]
fn a_canceled_request_stops_retrying() {
    let server = TestServer::start(|_, _| Reply::json(502, json!({"error": "bad gateway"})));
    let config = config(server.url())
        .max_retries(10)
        .retry_base(Duration::from_millis(400))
        .retry_max(Duration::from_secs(2));
    let mut runtime = runtime(config, RequestLimits::new());
    // The deadline ends the task while its request waits between retries: the attempt
    // at 0 s, the retry after 200-400 ms, then a pause of 400-800 ms.
    let task = async_task("ask", |cx| async move {
        let answer = cx.llm(user("hello")).await?;
        Ok::<_, TaskError>(answer)
    });
    let id = runtime
        .submit(NewTask::new(task).deadline(Duration::from_millis(500)))
        .expect("submitted")
        .id;
    runtime.run_until_idle();
    assert!(matches!(
        runtime.task_state(id),
        Some(TaskState::Completed(Err(
            TaskError::DeadlineExceeded { .. }
        )))
    ));
    // Without the cancel signal, attempt 3 would come by 1.2 s and more after it.
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(server.seen().len(), 2);
}

// ---------------------------------------------------------------------------------
// Header parsing

#[test]
fn retry_after_is_seconds_or_an_http_date() {
    // Sun, 06 Nov 1994 08:49:30 GMT
    let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
    assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
    assert_eq!(
        parse_retry_after(" 120 ", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("1.5", now),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
        Some(Duration::from_secs(7))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 09:49:30 GMT", now),
        Some(Duration::from_secs(3600))
    );
    // A date already past: no delay.
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
        Some(Duration::ZERO)
    );
    // The obsolete formats HTTP still allows.
    assert_eq!(
        parse_retry_after("Sunday, 06-Nov-94 08:49:40 GMT", now),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        parse_retry_after("Sun Nov  6 08:49:50 1994", now),
        Some(Duration::from_secs(20))
    );
    for bad in [
        "",
        "soon",
        "-1",
        "2s",
        "NaN",
        "inf",
        "Sun, 32 Nov 1994 08:49:37 GMT",
    ] {
        assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
    }
}

/// Delays too long for a `Duration` saturate at `Duration::MAX` instead of overflowing,
/// panicking or reading as no delay at all.
#[test]
fn delays_too_long_for_a_duration_saturate() {
    let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
    assert_eq!(
        parse_retry_after("18446744073709551615", now),
        Some(Duration::from_secs(u64::MAX))
    );
    assert_eq!(
        parse_retry_after("99999999999999999999999", now),
        Some(Duration::MAX)
    );
    assert_eq!(
        parse_retry_after("99999999999999999999999.5", now),
        Some(Duration::MAX)
    );
    let year_9999 = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now).expect("a date");
    assert_eq!(
        year_9999,
        Duration::from_secs(253_402_300_799 - 784_111_770)
    );
    let huge_ms = format!("1{}", "0".repeat(40));
    assert_eq!(
        rate_limit_delay([("retry-after-ms", huge_ms.as_str())], now),
        Some(Duration::MAX)
    );
    assert_eq!(
        parse_reset_duration("99999999999999999999999999999999999999999h"),
        Some(Duration::MAX)
    );
    assert_eq!(
        parse_reset_duration("18446744073709551615s1s"),
        Some(Duration::MAX)
    );
}

#[test]
fn reset_durations_are_read_as_providers_write_them() {
    let ms = Duration::from_millis;
    let cases = [
        ("1s", ms(1000)),
        ("6m0s", ms(360_000)),
        ("250ms", ms(250)),
        ("1h2m3.5s", ms(3_723_500)),
        ("0.5s", ms(500)),
        ("7.66s", ms(7660)),
        ("20us", Duration::from_micros(20)),
        ("20\u{b5}s", Duration::from_micros(20)),
        ("15ns", Duration::from_nanos(15)),
        ("3", ms(3000)),
        ("0.25", ms(250)),
        (" 2m ", ms(120_000)),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_reset_duration(text), Some(expected), "{text:?}");
    }
    for bad in ["", "s", "1x", "1.2.3s", "-1s", "1 s", "ms5", "."] {
        assert_eq!(parse_reset_duration(bad), None, "{bad:?}");
    }
}

#[test]
fn the_delay_of_a_429_comes_from_the_best_header_present() {
    let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
    let delay = |headers: &[(&str, &str)]| rate_limit_delay(headers.iter().copied(), now);
    // retry-after-ms is the most precise; then Retry-After; names in any case.
    assert_eq!(
        delay(&[("Retry-After", "3"), ("retry-after-ms", "1250")]),
        Some(Duration::from_millis(1250))
    );
    assert_eq!(
        delay(&[("x-ratelimit-reset-requests", "9s"), ("RETRY-AFTER", "3")]),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        delay(&[("retry-after", "Sun, 06 Nov 1994 08:49:35 GMT")]),
        Some(Duration::from_secs(5))
    );
    // Without Retry-After: the reset of the budget that ran out...
    let spent_tokens = [
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ];
    assert_eq!(delay(&spent_tokens), Some(Duration::from_secs(360)));
    let spent_requests = [
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "250ms"),
        ("x-ratelimit-remaining-tokens", "149000"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ];
    assert_eq!(delay(&spent_requests), Some(Duration::from_millis(250)));
    // ...or, if none says, the later reset.
    assert_eq!(
        delay(&[
            ("x-ratelimit-reset-requests", "2s"),
            ("x-ratelimit-reset-tokens", "500ms")
        ]),
        Some(Duration::from_secs(2))
    );
    // An unreadable Retry-After falls through to the provider's headers.
    assert_eq!(
        delay(&[
            ("retry-after", "later"),
            ("x-ratelimit-reset-tokens", "1.5s")
        ]),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(delay(&[("content-type", "application/json")]), None);
    assert_eq!(delay(&[]), None);
}

#[test]
fn quotes_are_cut_at_200_bytes_on_a_character_boundary() {
    assert_eq!(quote_body(b"{}"), "`{}`");
    assert_eq!(quote_body(b""), "an empty body");
    assert_eq!(quote_body(&[b'a', 0xff, b'b']), "`a\u{fffd}b`");
    let exact = "y".repeat(200);
    assert_eq!(quote_body(exact.as_bytes()), format!("`{exact}`"));
    // 199 bytes, then a three-byte character: cut before it.
    let text = format!("{}€tail", "z".repeat(199));
    assert_eq!(
        quote_body(text.as_bytes()),
        format!("`{}`... ({} bytes in all)", "z".repeat(199), text.len())
    );
}

// ---------------------------------------------------------------------------------
// Configuration

#[test]
fn endpoints_with_and_without_v1() {
    let endpoint = |base: &str| OpenAiConfig::new(base, "m").endpoint();
    assert_eq!(endpoint("http://h:1"), "http://h:1/v1/chat/completions");
    assert_eq!(endpoint("http://h:1/"), "http://h:1/v1/chat/completions");
    assert_eq!(endpoint("http://h:1/v1"), "http://h:1/v1/chat/completions");
    assert_eq!(endpoint("http://h:1/v1/"), "http://h:1/v1/chat/completions");
    assert_eq!(
        endpoint("https://h/api"),
        "https://h/api/v1/chat/completions"
    );
    assert_eq!(
        endpoint("https://h/openai/v1"),
        "https://h/openai/v1/chat/completions"
    );
    assert_eq!(
        endpoint("https://h/v1/chat/completions"),
        "https://h/v1/chat/completions"
    );
    // The query is posted as given; `endpoint` shows it with its values hidden, as
    // any of them may be a key.
    assert_eq!(
        endpoint("https://h/openai/v1?api-version=2024-10-21"),
        "https://h/openai/v1/chat/completions?api-version=***"
    );
}

#[test]
fn configuration_from_the_environment_variables() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let config = OpenAiConfig::from_vars(
        "default-model",
        vars(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
            ("OPENAI_API_KEY", "sk-abc"),
        ]),
    )
    .expect("a configuration");
    assert_eq!(config.base_url, "http://127.0.0.1:8000/v1");
    assert_eq!(config.model, "default-model");
    assert_eq!(config.api_key.as_deref(), Some("sk-abc"));
    assert_eq!(config.timeout, Duration::from_secs(120));
    assert_eq!(config.max_retries, 3);
    assert_eq!(config.workers, 8);
    // The key never shows in debug output.
    let debug = format!("{config:?}");
    assert!(
        debug.contains("<redacted>") && !debug.contains("sk-abc"),
        "{debug}"
    );

    let config = OpenAiConfig::from_vars(
        "default-model",
        vars(&[
            ("OPENAI_BASE_URL", "https://llm.internal"),
            ("OPENAI_API_KEY", ""),
            ("OPENAI_MODEL", "llama-3"),
        ]),
    )
    .expect("a configuration");
    assert_eq!((config.model.as_str(), config.api_key), ("llama-3", None));

    assert_eq!(
        OpenAiConfig::from_vars("m", vars(&[("OPENAI_API_KEY", "sk")])),
        Err(ConfigError::MissingBaseUrl)
    );
    assert_eq!(
        OpenAiConfig::from_vars("m", vars(&[("OPENAI_BASE_URL", " ")])),
        Err(ConfigError::MissingBaseUrl)
    );
    assert_eq!(
        OpenAiConfig::from_vars("m", vars(&[("OPENAI_BASE_URL", "localhost:8000")])),
        Err(ConfigError::InvalidBaseUrl {
            url: "localhost:8000".to_owned(),
            reason: "it must start with http:// or https://".to_owned(),
        })
    );
    assert_eq!(
        OpenAiConfig::from_vars("m", vars(&[("OPENAI_BASE_URL", "http:///v1")])),
        Err(ConfigError::InvalidBaseUrl {
            url: "http:///v1".to_owned(),
            reason: "it has no host".to_owned(),
        })
    );
    assert_eq!(
        OpenAiConfig::from_vars("", vars(&[("OPENAI_BASE_URL", "http://h")])),
        Err(ConfigError::MissingModel)
    );
    assert_eq!(
        OpenAiConfig::new("http://h", "m").workers(0).validate(),
        Err(ConfigError::NoWorkers)
    );
}

#[test]
fn an_unusable_base_url_fails_each_request_saying_why() {
    let mut runtime = runtime(OpenAiConfig::new("ftp://h", "m"), RequestLimits::new());
    let id = ask(&mut runtime, user("hi"));
    runtime.run_until_idle();
    assert_eq!(
        failed_with(&runtime, id),
        RequestError::Failed {
            message: "the base URL `ftp://h` is not usable: it must start with http:// or https://"
                .to_owned(),
        }
    );
}
