//! The OpenAI-compatible executor streaming against a scripted endpoint on 127.0.0.1
//! (`support/sse_server.rs`): the same script answered whole and streamed gives the
//! same answer (text, tool calls joined from their fragments, finish reason, usage);
//! each piece reaches the driver as progress, numbered, before the answer; a stream
//! cut midway is retried and restarts the pieces; a chunk that is not JSON, the
//! provider's error in the stream and a 429 before it are answered as without
//! streaming; a provider that answers one body although asked to stream is read as such.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use spool_core::{
    Delta, Executor, Kind, OutboundRequest, Replies, ReplySink, Request, RequestError, RequestKey,
    Response, Time, ToolCallDelta,
};
use spool_exec::{OpenAiConfig, OpenAiExecutor};

#[path = "support/sse_server.rs"]
mod sse_server;
use sse_server::{Answer, Piece, Script, SseServer};

/// What the driver was handed, in order: progress and answers.
#[derive(Clone, Debug, PartialEq)]
enum Handed {
    Progress(RequestKey, Delta),
    Answer(Response),
}

#[derive(Default)]
struct Watch(Mutex<Vec<Handed>>);

impl ReplySink for Watch {
    fn send(&self, response: Response) -> bool {
        self.0.lock().unwrap().push(Handed::Answer(response));
        true
    }

    fn progress(&self, key: RequestKey, delta: Delta) -> bool {
        self.0.lock().unwrap().push(Handed::Progress(key, delta));
        true
    }
}

fn key() -> RequestKey {
    serde_json::from_value(json!({"task": 4, "number": 2, "slot": 0})).unwrap()
}

/// Runs one request with `payload` through an executor for `server`; what the driver
/// was handed.
fn ask(server: &SseServer, stream: bool, payload: serde_json::Value) -> Vec<Handed> {
    let mut executor = OpenAiExecutor::new(
        OpenAiConfig::new(&server.url, "test-model")
            .stream(stream)
            .max_retries(1)
            .retry_base(Duration::from_millis(1))
            .retry_max(Duration::from_millis(1))
            .timeout(Duration::from_secs(20)),
    );
    let watch = Arc::new(Watch::default());
    let sink: Arc<dyn ReplySink> = watch.clone();
    let mut batch = Vec::new();
    let mut replies = Replies::new(Time::ZERO, &mut batch, &sink);
    executor.execute(
        OutboundRequest {
            key: key(),
            request: Request::new(Kind::Llm, payload),
        },
        &mut replies,
    );
    assert!(batch.is_empty(), "the executor answers through its replier");
    watch.0.lock().unwrap().clone()
}

fn hi() -> serde_json::Value {
    json!({"messages": [{"role": "user", "content": "hi"}]})
}

/// The progress handed, and the answer (which must come last).
fn split(handed: Vec<Handed>) -> (Vec<Delta>, Response) {
    let mut deltas = Vec::new();
    let mut answer = None;
    for h in handed {
        match h {
            Handed::Progress(k, d) => {
                assert!(answer.is_none(), "progress after the answer");
                assert_eq!(k, key());
                deltas.push(d);
            }
            Handed::Answer(r) => {
                assert!(answer.is_none(), "two answers");
                answer = Some(r);
            }
        }
    }
    (deltas, answer.expect("an answer"))
}

/// A script with text and two tool calls whose arguments come in fragments.
fn tools_script() -> Script {
    let call = |index, id: Option<&str>, name: Option<&str>, arguments: &str| Piece::Call {
        index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        arguments: arguments.to_owned(),
    };
    Script {
        pieces: vec![
            Piece::Text("Let me ".to_owned()),
            Piece::Text("look.".to_owned()),
            call(0, Some("call_1"), Some("read_file"), ""),
            call(0, None, None, "{\"pa"),
            call(0, None, None, "th\": \"notes.txt\"}"),
            call(1, Some("call_2"), Some("search"), "{\"query\": "),
            call(1, None, None, "\"rust\", \"limit\": 3}"),
        ],
        finish_reason: "tool_calls".to_owned(),
        usage: json!({"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}),
    }
}

#[test]
fn a_streamed_answer_is_assembled_into_the_answer_without_streaming() {
    let script = tools_script();
    let answers = script.clone();
    let server =
        SseServer::start(move |seen, _| Answer::for_request(&answers, seen, Duration::ZERO));
    // The payload asks for `stream: true` itself: the executor's setting decides.
    let mut payload = hi();
    payload["stream"] = json!(true);
    let (no_deltas, whole) = split(ask(&server, false, payload.clone()));
    let (deltas, streamed) = split(ask(&server, true, payload));

    assert_eq!(no_deltas, vec![]);
    assert_eq!(streamed, whole);
    assert_eq!(
        (whole.result.clone(), whole.tokens_used),
        (
            Ok(json!({
                "content": "Let me look.",
                "tool_calls": [
                    {"id": "call_1", "name": "read_file", "arguments": {"path": "notes.txt"}},
                    {"id": "call_2", "name": "search", "arguments": {"query": "rust", "limit": 3}},
                ],
                "finish_reason": "tool_calls",
                "usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40},
            })),
            Some(40)
        )
    );
    let fragment = |seq, index, id: Option<&str>, name: Option<&str>, arguments: &str| Delta {
        seq,
        tool_calls: vec![ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
        }],
        ..Delta::default()
    };
    assert_eq!(
        deltas,
        vec![
            Delta::text(0, "Let me "),
            Delta::text(1, "look."),
            fragment(2, 0, Some("call_1"), Some("read_file"), ""),
            fragment(3, 0, None, None, "{\"pa"),
            fragment(4, 0, None, None, "th\": \"notes.txt\"}"),
            fragment(5, 1, Some("call_2"), Some("search"), "{\"query\": "),
            fragment(6, 1, None, None, "\"rust\", \"limit\": 3}"),
        ]
    );
    // Without streaming neither `stream` field is sent; with it, both are.
    let seen = server.seen();
    assert_eq!(
        seen[0].json(),
        json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}]})
    );
    assert_eq!(
        seen[1].json(),
        json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
            "stream": true, "stream_options": {"include_usage": true}})
    );
    assert_eq!(seen[1].key.as_deref(), Some("4:2"));
}

#[test]
fn a_stream_cut_midway_is_sent_again_and_its_pieces_start_over() {
    let script = Script::text(4);
    let events = script.events();
    let server = SseServer::start(move |_, count| Answer::Stream {
        events: events.clone(),
        pause: Duration::ZERO,
        // The role, then two pieces; then the connection closes.
        cut_after: (count == 0).then_some(3),
    });
    let (deltas, answer) = split(ask(&server, true, hi()));

    let mut restart = Delta::text(2, "t0 ");
    restart.restart = true;
    assert_eq!(
        deltas,
        vec![
            Delta::text(0, "t0 "),
            Delta::text(1, "t1 "),
            restart,
            Delta::text(3, "t1 "),
            Delta::text(4, "t2 "),
            Delta::text(5, "t3 "),
        ]
    );
    assert_eq!(
        (answer.result, answer.tokens_used),
        (Ok(Script::text(4).whole_answer()), Some(11))
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].key.as_deref(), seen[1].key.as_deref()),
        (Some("4:2"), Some("4:2"))
    );
}

#[test]
fn a_chunk_that_is_not_json_is_malformed_and_not_sent_again() {
    let server = SseServer::start(|_, _| Answer::Stream {
        events: vec![
            "{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}".to_owned(),
            "{oops".to_owned(),
        ],
        pause: Duration::ZERO,
        cut_after: None,
    });
    let (deltas, answer) = split(ask(&server, true, hi()));
    assert_eq!(deltas, vec![Delta::text(0, "a")]);
    assert_eq!(
        answer.result,
        Err(RequestError::Malformed {
            message: "an event of the answer is not JSON (key must be a string at line 1 \
                      column 2): `{oops`"
                .to_owned()
        })
    );
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn the_providers_error_in_the_stream_fails_as_without_streaming() {
    let server = SseServer::start(|_, _| Answer::Stream {
        events: vec!["{\"error\":{\"message\":\"overloaded\"}}".to_owned()],
        pause: Duration::ZERO,
        cut_after: None,
    });
    let (_, answer) = split(ask(&server, true, hi()));
    assert_eq!(
        answer.result,
        Err(RequestError::Failed {
            message: format!(
                "POST {}/v1/chat/completions answered HTTP 200 OK with an error: \
                 `{{\"error\":{{\"message\":\"overloaded\"}}}}`",
                server.url
            )
        })
    );
}

#[test]
fn a_429_before_the_stream_is_rate_limited() {
    let server = SseServer::start(|_, _| {
        Answer::Raw(
            429,
            vec![("retry-after".to_owned(), "2".to_owned())],
            "{}".to_owned(),
        )
    });
    let (deltas, answer) = split(ask(&server, true, hi()));
    assert_eq!(deltas, vec![]);
    assert_eq!(
        answer.result,
        Err(RequestError::RateLimited {
            retry_after: Some(Duration::from_secs(2))
        })
    );
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn a_provider_that_answers_one_body_when_asked_to_stream_is_read_whole() {
    let server = SseServer::start(|_, _| Answer::Json(200, Script::text(3).whole()));
    let (deltas, answer) = split(ask(&server, true, hi()));
    assert_eq!(deltas, vec![]);
    assert_eq!(
        (answer.result, answer.tokens_used),
        (Ok(Script::text(3).whole_answer()), Some(10))
    );
}

/// An agent that asks twice (the tools script, then text) and returns both answers,
/// run on virtual time with the executor streaming or not: its journal (encoded) and
/// the hash of its trace.
fn journaled_run(stream: bool) -> (Vec<u8>, u64, Vec<Option<String>>) {
    use spool_core::{AsyncTask, Cx, Outcome, TaskRegistry, TaskState};
    use spool_test::TestScheduler;

    async fn ask_twice(cx: Cx, _input: serde_json::Value) -> Outcome {
        let first = cx.llm(hi()).await?;
        let second = cx.llm(hi()).await?;
        Ok(json!([first, second]))
    }

    let (tools, text) = (tools_script(), Script::text(5));
    let server = SseServer::start(move |seen, count| {
        let script = if count == 0 { &tools } else { &text };
        Answer::for_request(script, seen, Duration::ZERO)
    });
    let mut scheduler = TestScheduler::new();
    scheduler.record_journal().unwrap();
    scheduler.executor(
        Kind::Llm,
        OpenAiExecutor::new(OpenAiConfig::new(&server.url, "test-model").stream(stream)),
    );
    let id = scheduler.spawn(AsyncTask::replayable("ask-twice", json!(null), ask_twice));
    scheduler.step_until_idle();
    assert!(
        matches!(scheduler.task_state(id), TaskState::Completed(Ok(_))),
        "{}",
        scheduler.task_state(id)
    );
    let journal = scheduler.journal().unwrap();
    // The journal replays to the same trace.
    let registry = TaskRegistry::new().with_async("ask-twice", ask_twice);
    let replay = TestScheduler::replay(&journal, &registry).unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.trace_hash, scheduler.trace_hash());
    let journal = journal.encode().unwrap();
    let streamed = server
        .seen()
        .iter()
        .map(|seen| seen.json()["stream"].as_bool().map(|s| s.to_string()))
        .collect();
    (journal, scheduler.trace_hash(), streamed)
}

/// Streaming changes nothing the scheduler sees: the journal, byte for byte, and the
/// trace's hash are those of the same run without streaming.
#[test]
fn the_journal_and_the_trace_are_those_of_the_run_without_streaming() {
    let (plain, plain_hash, plain_asked) = journaled_run(false);
    let (streamed, streamed_hash, streamed_asked) = journaled_run(true);
    assert_eq!(plain_asked, vec![None, None]);
    assert_eq!(
        streamed_asked,
        vec![Some("true".to_owned()), Some("true".to_owned())]
    );
    assert_eq!(streamed_hash, plain_hash);
    assert!(streamed == plain, "the journals differ");
}
