//! Streamed answers on the event stream: the OpenAI-compatible executor streaming
//! from a scripted endpoint on 127.0.0.1 (`spool-exec`'s `support/sse_server.rs`),
//! its pieces published as `event: delta` before the answer's trace events; the first
//! reaches a client soon after the endpoint wrote it; a client that reconnects with a
//! piece's id mid-answer gets the pieces it missed, then the answer.
//! A threaded run streamed journals what the same run does without streaming.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::{Cx, Kind, Outcome, TaskRegistry};
use spool_exec::{OpenAiConfig, OpenAiExecutor};
use spool_http::{AppState, Server};
use spool_runtime::{Runtime, RuntimeHandle};

use crate::support::TOKEN;

#[path = "../../../spool-exec/tests/support/sse_server.rs"]
mod sse_server;
use sse_server::{Answer, Script, SseServer};

/// The task: asks the model once, ends with its answer's content.
async fn ask(cx: Cx, _input: Value) -> Outcome {
    let answer = cx
        .llm(json!({"messages": [{"role": "user", "content": "count"}]}))
        .await?;
    Ok(answer["content"].clone())
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_async("ask", ask)
}

/// A server over a runtime whose LLM streams from `endpoint`.
struct Streaming {
    addr: String,
    handle: RuntimeHandle,
    server: Option<Server>,
    runtime: Option<JoinHandle<()>>,
}

impl Streaming {
    fn start(endpoint: &SseServer) -> Streaming {
        let config = OpenAiConfig::new(&endpoint.url, "test-model")
            .stream(true)
            .timeout(Duration::from_secs(60));
        let builder = Runtime::builder()
            .registry(registry())
            .executor(Kind::Llm, OpenAiExecutor::new(config));
        let (builder, views) = spool_http::publish_views(builder, Duration::from_millis(5), 4096);
        let (builder, deltas) = spool_http::publish_deltas(builder, 4096);
        let mut runtime = builder.try_build().expect("the runtime starts");
        let handle = runtime.handle();
        let state = AppState::new(handle.clone(), registry(), views, TOKEN)
            .expect("the state is made")
            .with_deltas(deltas);
        let server = Server::builder()
            .addr(([127, 0, 0, 1], 0).into())
            .start(state)
            .expect("the server starts");
        let addr = server.addr().to_string();
        let runtime = std::thread::spawn(move || {
            runtime.run();
        });
        Streaming {
            addr,
            handle,
            server: Some(server),
            runtime: Some(runtime),
        }
    }

    /// Submits an `ask` task; its id.
    fn submit(&self) -> u64 {
        let answer = crate::support::request(
            "POST",
            &format!("http://{}/v1/tasks", self.addr),
            Some(TOKEN),
            &[],
            Some(r#"{"type": "ask", "input": null}"#),
        );
        assert_eq!(answer.status, 202, "{answer:?}");
        answer.json["id"].as_u64().expect("an id")
    }
}

impl Streaming {
    /// Task `task`'s result, once the views show it completed (20 s at most).
    fn result(&self, task: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = crate::support::request(
                "GET",
                &format!("http://{}/v1/tasks/{task}", self.addr),
                Some(TOKEN),
                &[],
                None,
            );
            if answer.json["state"] == "completed" {
                return answer.json["result"].clone();
            }
            assert!(Instant::now() < deadline, "not completed: {answer:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Streaming {
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

/// One Server-Sent Event, with when it was read.
#[derive(Clone, Debug)]
struct Sse {
    id: Option<String>,
    event: String,
    data: Value,
    at: Instant,
}

/// An event stream read raw off the socket, for 30 s at most.
struct Events {
    reader: BufReader<TcpStream>,
    deadline: Instant,
}

impl Events {
    fn open(addr: &str, path: &str, last: Option<&str>) -> Events {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let last = last.map_or_else(String::new, |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            writer,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Accept: text/event-stream\r\n{last}\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "HTTP/1.1 200 OK");
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        Events {
            reader,
            deadline: Instant::now() + Duration::from_secs(30),
        }
    }

    /// The next event (keep-alive comments and chunk sizes skipped).
    fn next(&mut self) -> Sse {
        let mut sse = Sse {
            id: None,
            event: "message".to_owned(),
            data: Value::Null,
            at: Instant::now(),
        };
        let mut any = false;
        loop {
            // Keep-alive comments come every 15 s: a stream that sends nothing else
            // ends the test here.
            assert!(Instant::now() < self.deadline, "no event in time");
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).unwrap();
            assert!(n > 0, "the stream ended");
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(v) = line.strip_prefix("id: ") {
                sse.id = Some(v.to_owned());
                any = true;
            } else if let Some(v) = line.strip_prefix("event: ") {
                sse.event = v.to_owned();
                any = true;
            } else if let Some(v) = line.strip_prefix("data: ") {
                sse.data = serde_json::from_str(v).unwrap();
                sse.at = Instant::now();
                any = true;
            } else if line.is_empty() && any {
                return sse;
            }
        }
    }

    /// Events up to the first that `last` accepts (included).
    fn until(&mut self, last: impl Fn(&Sse) -> bool) -> Vec<Sse> {
        let mut events = Vec::new();
        loop {
            let event = self.next();
            let done = last(&event);
            events.push(event);
            if done {
                return events;
            }
        }
    }
}

/// Whether `event` is task `task`'s ending.
fn completes(task: u64) -> impl Fn(&Sse) -> bool {
    move |e| e.event == "transition" && e.data["task"] == task && e.data["to"] == "Completed(ok)"
}

/// The text of the delta events of `events`, with their numbers.
fn pieces(events: &[Sse]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter(|e| e.event == "delta")
        .map(|e| {
            (
                e.data["seq"].as_u64().unwrap(),
                e.data["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Where in `events` task `task`'s answer shows: its move out of `Waiting`.
fn answer_at(events: &[Sse], task: u64) -> usize {
    events
        .iter()
        .position(|e| {
            e.event == "transition"
                && e.data["task"] == task
                && e.data["from"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("Waiting")
        })
        .expect("the answer's transition")
}

#[test]
fn two_hundred_pieces_reach_the_stream_in_order_and_before_the_answer() {
    let script = Script::text(200);
    let endpoint = SseServer::start(move |seen, _| {
        Answer::for_request(&script, seen, Duration::from_millis(2))
    });
    let api = Streaming::start(&endpoint);
    let mut events = Events::open(&api.addr, "/v1/events", None);
    let task = api.submit();
    let got = events.until(completes(task));

    let expected: Vec<(u64, String)> = (0..200).map(|i| (i, format!("t{i} "))).collect();
    assert_eq!(pieces(&got), expected);
    // Every piece is the task's, and comes before its answer's trace events.
    let deltas: Vec<&Sse> = got.iter().filter(|e| e.event == "delta").collect();
    assert!(
        deltas
            .iter()
            .all(|e| e.data["task"] == task && e.data["request"] == 1)
    );
    let last_delta = got.iter().rposition(|e| e.event == "delta").unwrap();
    assert!(last_delta < answer_at(&got, task), "{got:#?}");
    // The first piece arrived soon after the endpoint wrote it.
    let written = endpoint.written();
    let (wrote, _) = written
        .iter()
        .find(|(_, data)| data.contains("\"t0 \""))
        .expect("the first piece was written");
    let lag = deltas[0].at.duration_since(*wrote);
    let last = got.iter().rfind(|e| e.event == "delta").map(|e| e.at);
    eprintln!(
        "the first piece reached the client {lag:?} after the endpoint wrote it; \
         the 200 took {:?}",
        last.map(|at| at.duration_since(deltas[0].at))
    );
    assert!(
        lag < Duration::from_millis(50),
        "the first piece took {lag:?}"
    );
    // And the task's result is the whole text.
    let text: String = expected.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(api.result(task), json!(text));
}

#[test]
fn a_reconnect_mid_answer_gets_the_pieces_it_missed_then_the_answer() {
    let gate = Arc::new(Mutex::new(false));
    let held = Arc::clone(&gate);
    let script = Script::text(20);
    // The role and ten pieces, then the endpoint waits for the test.
    let endpoint = SseServer::start(move |_, _| Answer::Held {
        events: script.events(),
        before: 11,
        gate: Arc::clone(&held),
    });
    let api = Streaming::start(&endpoint);
    let mut first = Events::open(&api.addr, "/v1/events", None);
    let task = api.submit();
    // Five pieces read, then the client goes.
    let read = first.until(|e| e.event == "delta" && e.data["seq"] == 4);
    assert_eq!(
        pieces(&read),
        (0..5).map(|i| (i, format!("t{i} "))).collect::<Vec<_>>()
    );
    let last_id = read.last().and_then(|e| e.id.clone()).unwrap();
    assert!(last_id.contains(':'), "a piece's id is SEQ:N: {last_id}");
    drop(first);

    let path = format!("/v1/events?task={task}");
    let mut again = Events::open(&api.addr, &path, Some(&last_id));
    let missed = again.until(|e| e.event == "delta" && e.data["seq"] == 9);
    assert_eq!(
        pieces(&missed),
        (5..10).map(|i| (i, format!("t{i} "))).collect::<Vec<_>>()
    );
    *gate.lock().unwrap() = true;
    let rest = again.until(completes(task));
    assert_eq!(
        pieces(&rest),
        (10..20).map(|i| (i, format!("t{i} "))).collect::<Vec<_>>()
    );
    let last_delta = rest.iter().rposition(|e| e.event == "delta").unwrap();
    assert!(last_delta < answer_at(&rest, task), "{rest:#?}");
    assert!(rest.iter().all(|e| e.data["task"] == task));
}

/// What a threaded run of one `ask` task against an endpoint answering a 50-piece
/// script records, streaming or not: the answers journaled (without their times),
/// the trace's transitions (without their times), and the pieces its watcher saw.
fn recorded_run(stream: bool) -> (Vec<Value>, Vec<String>, usize) {
    use spool_core::{AsyncTask, JournalEntry, MemoryJournal, NewTask, Scheduler};

    let script = Script::text(50);
    let endpoint =
        SseServer::start(move |seen, _| Answer::for_request(&script, seen, Duration::ZERO));
    let journal = MemoryJournal::new();
    let config = OpenAiConfig::new(&endpoint.url, "test-model").stream(stream);
    let pieces = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&pieces);
    let builder = Runtime::builder()
        .registry(registry())
        .executor(Kind::Llm, OpenAiExecutor::new(config))
        .journal(journal.clone())
        .journal_trace(true)
        .on_progress(move |progress| {
            if let spool_runtime::Progress::Delta { .. } = progress {
                *counted.lock().unwrap() += 1;
            }
        });
    // The HTTP server's hub takes the pieces too, as `spool serve`'s does.
    let (builder, _hub) = spool_http::publish_deltas(builder, 16);
    let mut runtime = builder.try_build().expect("the runtime starts");
    runtime
        .submit(NewTask::new(AsyncTask::replayable("ask", Value::Null, ask)))
        .expect("submitted");
    runtime.run_until_idle();
    drop(runtime);
    let journal = journal.journal().expect("a journal");
    let replay = Scheduler::replay(&journal, &registry()).expect("the journal replays");
    assert_eq!(replay.divergence, None);
    let mut answers = Vec::new();
    let mut trace = Vec::new();
    for entry in &journal.entries {
        // Every input but the loop's steps (how many polls a turn took, which the
        // real clock's timing decides), by kind, in order.
        let kind = serde_json::to_value(entry).unwrap();
        let kind = match &kind {
            Value::Object(fields) => fields.keys().next().cloned().unwrap_or_default(),
            other => other.as_str().unwrap_or_default().to_owned(),
        };
        if kind != "Steps" && kind != "Event" {
            trace.push(kind);
        }
        match entry {
            JournalEntry::Answered { .. } | JournalEntry::Usage { .. } => {
                let mut value = serde_json::to_value(entry).unwrap();
                if let Some(fields) = value.as_object_mut().and_then(|v| v.values_mut().next()) {
                    fields["at"] = Value::Null;
                }
                answers.push(value);
            }
            JournalEntry::Event(event) => trace.push(format!(
                "{} {} {} -> {} ({})",
                event.seq, event.task, event.from, event.to, event.cause
            )),
            _ => {}
        }
    }
    let pieces = *pieces.lock().unwrap();
    (answers, trace, pieces)
}

/// A threaded run streamed journals what the same run does without streaming: the
/// same answers, the same transitions (times aside, which a real clock gives); the
/// pieces went to the watchers only.
#[test]
fn a_streamed_run_journals_what_the_run_without_streaming_does() {
    let (plain_answers, plain_trace, plain_pieces) = recorded_run(false);
    let (answers, trace, pieces) = recorded_run(true);
    assert_eq!((plain_pieces, pieces), (0, 50));
    assert_eq!(answers.len(), 2, "the usage and the answer: {answers:?}");
    assert_eq!(answers, plain_answers);
    assert_eq!(trace, plain_trace);
}
