//! The fixture: a runtime on a thread of its own, a server on a free loopback port,
//! and a client that never treats a status as an error.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_core::{
    AgentTask, JournalEntry, Kind, MemoryJournal, RequestError, SavedTask, StateError, Step,
    TaskContext, TaskRegistry, TraceEvent,
};
use spool_http::{Access, AppState, Server, ServerBuilder};
use spool_runtime::{Runtime, RuntimeHandle, from_fn};

/// The token every request of the tests gives.
pub(crate) const TOKEN: &str = "test-token-0123456789";

/// The test's task type: asks for a confirmation if told to, sleeps if told to, then
/// makes `steps` LLM calls, and ends with their answers.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Script {
    steps: u32,
    #[serde(default)]
    confirm: bool,
    #[serde(default)]
    sleep_ms: u64,
    /// The step whose LLM call the executor answers with an error (0: none).
    #[serde(default)]
    fail_at: u32,
    /// The step whose LLM call the executor answers 429 once, then answers (0: none).
    #[serde(default)]
    rate_limit_at: u32,
    #[serde(default)]
    done: u32,
    #[serde(default)]
    stage: u8,
    #[serde(default)]
    answers: Vec<Value>,
}

impl AgentTask for Script {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(answer) = cx.take_answer() {
            match answer.result {
                Ok(value) => self.answers.push(value),
                Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
            }
        }
        if self.stage == 0 {
            self.stage = 1;
            if self.sleep_ms > 0 {
                cx.sleep(Duration::from_millis(self.sleep_ms));
                return Step::Wait;
            }
        }
        if self.stage == 1 {
            self.stage = 2;
            if self.confirm {
                cx.confirm(json!({"question": "go on?"}));
                return Step::Wait;
            }
        }
        if self.done < self.steps {
            self.done += 1;
            let mut payload = json!({"step": self.done});
            if self.done == self.fail_at {
                payload["fail"] = Value::Bool(true);
            }
            if self.done == self.rate_limit_at {
                payload["rate_limit_once"] = Value::Bool(true);
            }
            cx.llm(payload);
            return Step::Wait;
        }
        Step::done(json!({"answers": self.answers}))
    }

    fn type_name(&self) -> &'static str {
        "script"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// The schema of `script`'s input.
pub(crate) fn script_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["steps"],
        "properties": {
            "steps": {"type": "integer", "minimum": 0, "maximum": 50},
            "confirm": {"type": "boolean"},
            "sleep_ms": {"type": "integer", "minimum": 0},
            "fail_at": {"type": "integer", "minimum": 0},
            "rate_limit_at": {"type": "integer", "minimum": 0}
        }
    })
}

pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_serde::<Script>("script")
        .with_input("script", |input| {
            serde_json::from_value::<Script>(input.clone())
                .map(|s| Box::new(s) as Box<dyn AgentTask>)
                .map_err(|e| e.to_string())
        })
        .with_input_schema("script", script_schema())
        // Another name for the same body: a task made as `chain` is listed as `chain`.
        .with_input("chain", |input| {
            serde_json::from_value::<Script>(input.clone())
                .map(|s| Box::new(s) as Box<dyn AgentTask>)
                .map_err(|e| e.to_string())
        })
}

/// The scripted LLM of a server with budgets: echoes the payload after `delay`, with
/// the usage a provider reports (30 tokens in, 10 out, of `gpt-4o`).
struct UsageLlm {
    delay: Duration,
}

impl spool_core::Executor for UsageLlm {
    fn execute(
        &mut self,
        request: spool_core::OutboundRequest,
        replies: &mut spool_core::Replies<'_>,
    ) {
        std::thread::sleep(self.delay);
        let payload = request.request.payload.value().clone();
        let usage = spool_core::Usage::new(30, 10, "gpt-4o");
        replies.send(
            spool_core::Response::ok(request.key, json!({"echo": payload})).with_usage(usage),
        );
    }
}

/// A server over a running runtime; stops both when dropped.
pub(crate) struct Api {
    pub(crate) base: String,
    pub(crate) handle: RuntimeHandle,
    pub(crate) journal: MemoryJournal,
    server: Option<Server>,
    runtime: Option<JoinHandle<()>>,
}

/// How the fixture is set up.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    pub(crate) access: Access,
    pub(crate) body_limit: usize,
    pub(crate) llm_delay: Duration,
    pub(crate) max_queued: Option<usize>,
    pub(crate) ring: usize,
    pub(crate) requests: Option<spool_core::RequestLimits>,
    /// Budgets: with them, the scripted LLM answers every request with a usage of 30
    /// tokens in and 10 out of `gpt-4o`.
    pub(crate) budgets: Option<spool_core::Budgets>,
    /// How often the loop publishes the views.
    pub(crate) publish_every: Duration,
    /// Sets the server up further (its limits and hosts).
    pub(crate) server: fn(ServerBuilder) -> ServerBuilder,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            access: Access::Token(TOKEN.to_owned()),
            body_limit: spool_http::DEFAULT_BODY_LIMIT,
            llm_delay: Duration::from_millis(1),
            max_queued: None,
            ring: spool_http::DEFAULT_EVENT_RING,
            requests: None,
            budgets: None,
            publish_every: Duration::from_millis(5),
            server: |server| server,
        }
    }
}

impl Api {
    pub(crate) fn start() -> Api {
        Api::with(Setup::default())
    }

    pub(crate) fn with(setup: Setup) -> Api {
        let delay = setup.llm_delay;
        // The requests answered 429 once already.
        let refused = std::sync::Mutex::new(Vec::new());
        let journal = MemoryJournal::new();
        let mut config = spool_core::Config::new();
        if let Some(max) = setup.max_queued {
            config = config.limits(spool_core::TaskLimits::new().max_running(1).max_queued(max));
        }
        if let Some(requests) = setup.requests.clone() {
            config = config.requests(requests);
        }
        let with_usage = setup.budgets.is_some();
        if let Some(budgets) = setup.budgets.clone() {
            config = config.budgets(budgets);
        }
        let builder = Runtime::builder().config(config).registry(registry());
        let builder = if with_usage {
            builder.executor(Kind::Llm, UsageLlm { delay })
        } else {
            builder.executor(
                Kind::Llm,
                from_fn(move |request| {
                    std::thread::sleep(delay);
                    let payload = request.request.payload.value().clone();
                    if payload["fail"] == true {
                        return Err(RequestError::failed("the model is down"));
                    }
                    if payload["rate_limit_once"] == true {
                        let mut refused = refused.lock().expect("not poisoned");
                        if !refused.contains(&request.key) {
                            refused.push(request.key);
                            return Err(RequestError::RateLimited {
                                retry_after: Some(Duration::from_millis(10)),
                            });
                        }
                    }
                    Ok(json!({"echo": payload}))
                }),
            )
        };
        let builder = builder.journal(journal.clone()).journal_trace(true);
        let (builder, views) = spool_http::publish_views(builder, setup.publish_every, setup.ring);
        let mut runtime = builder.try_build().expect("the runtime starts");
        let handle = runtime.handle();
        let state = AppState::new(handle.clone(), registry(), views, TOKEN)
            .expect("the schemas compile")
            .access(setup.access)
            .body_limit(setup.body_limit)
            .prompt_type("script");
        let server = (setup.server)(Server::builder())
            .addr(([127, 0, 0, 1], 0).into())
            .start(state)
            .expect("the server starts");
        let base = format!("http://{}", server.addr());
        let runtime = std::thread::spawn(move || {
            runtime.run();
        });
        Api {
            base,
            handle,
            journal,
            server: Some(server),
            runtime: Some(runtime),
        }
    }

    pub(crate) fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_owned()
    }

    /// The trace events the loop journaled, in order.
    pub(crate) fn trace(&self) -> Vec<TraceEvent> {
        self.journal
            .journal()
            .map(|j| {
                j.entries
                    .into_iter()
                    .filter_map(|e| match e {
                        JournalEntry::Event(event) => Some(event),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until `GET path` gives a body that `done` accepts.
    pub(crate) fn wait_for(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.wait_for_answer(path, |answer| done(&answer.json)).json
    }

    /// GETs `path` (a text body) until `done` says its text is what the test waits
    /// for.
    pub(crate) fn wait_for_text(&self, path: &str, done: impl Fn(&str) -> bool) -> String {
        self.wait_for_answer(path, |answer| done(&answer.text)).text
    }

    /// GETs `path` until it answers 200 with what `done` accepts; gives up after 20 s.
    fn wait_for_answer(&self, path: &str, done: impl Fn(&Answer) -> bool) -> Answer {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = self.call("GET", path, None);
            if answer.status == 200 && done(&answer) {
                return answer;
            }
            assert!(
                Instant::now() < deadline,
                "gave up waiting on {path}: {answer:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A request with the token.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<&str>) -> Answer {
        request(
            method,
            &format!("{}{path}", self.base),
            Some(TOKEN),
            &[],
            body,
        )
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.handle.shutdown();
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        if let Some(runtime) = self.runtime.take() {
            let _ = runtime.join();
        }
    }
}

/// An answer: its status, content type, body as text, and as JSON (`Null` if not).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) text: String,
    pub(crate) json: Value,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts a problem: its status, content type and exact body.
    #[track_caller]
    pub(crate) fn assert_problem(&self, status: u16, body: Value) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.content_type, "application/problem+json", "{self:?}");
        assert_eq!(self.json, body);
    }
}

/// One request with `ureq`, statuses not taken as errors.
pub(crate) fn request(
    method: &str,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let mut builder = ureq::http::Request::builder().method(method).uri(url);
    if let Some(token) = token {
        builder = builder.header("Authorization", format!("Bearer {token}"));
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    if body.is_some() {
        builder = builder.header("Content-Type", "application/json");
    }
    let request = builder
        .body(body.unwrap_or_default().to_owned())
        .expect("a request");
    let mut response = agent.run(request).expect("an answer");
    let status = response.status().as_u16();
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
        .collect();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer {
        status,
        content_type,
        headers,
        text,
        json,
    }
}

/// The problem body every test compares against.
pub(crate) fn problem(status: u16, slug: &str, title: &str, detail: &str) -> Value {
    json!({
        "type": format!("https://spool.invalid/problems/{slug}"),
        "title": title,
        "status": status,
        "detail": detail,
    })
}
