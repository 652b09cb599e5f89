//! A scripted OpenAI-compatible endpoint on 127.0.0.1 for the streaming tests: a
//! `std::net::TcpListener` thread that answers each POST as the test's closure says
//! (one JSON body, or Server-Sent Events written one at a time, chunked), and records
//! each request (its key header and body) and when each event was written.
//!
//! A script ([`Script`]) gives the same answer both ways: as the whole chat
//! completion a call without streaming gets, and as the chunks of a streamed one.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One piece of a scripted answer.
#[derive(Clone, Debug)]
pub enum Piece {
    /// Text of the content.
    Text(String),
    /// A fragment of tool call `index`: its id and name in the first fragment.
    Call {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
}

/// A scripted answer: its pieces, finish reason and usage.
#[derive(Clone, Debug)]
pub struct Script {
    pub pieces: Vec<Piece>,
    pub finish_reason: String,
    pub usage: Value,
}

impl Script {
    /// `n` text pieces `t0 `, `t1 `, ... and a `stop`.
    pub fn text(n: usize) -> Script {
        Script {
            pieces: (0..n).map(|i| Piece::Text(format!("t{i} "))).collect(),
            finish_reason: "stop".to_owned(),
            usage: json!({"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}),
        }
    }

    /// The whole chat completion a call without streaming is answered with.
    pub fn whole(&self) -> Value {
        let mut content: Option<String> = None;
        let mut calls: Vec<(Option<String>, Option<String>, String)> = Vec::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => content.get_or_insert_with(String::new).push_str(text),
                Piece::Call {
                    index,
                    id,
                    name,
                    arguments,
                } => {
                    let index = *index as usize;
                    while calls.len() <= index {
                        calls.push((None, None, String::new()));
                    }
                    let call = &mut calls[index];
                    call.0 = call.0.take().or_else(|| id.clone());
                    call.1 = call.1.take().or_else(|| name.clone());
                    call.2.push_str(arguments);
                }
            }
        }
        let mut message = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            message["tool_calls"] = calls
                .into_iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": arguments}})
                })
                .collect();
        }
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        })
    }

    /// The answer a task gets for a script of text only (as the executor normalizes it).
    pub fn whole_answer(&self) -> Value {
        let text: String = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text(text) => text.as_str(),
                Piece::Call { .. } => "",
            })
            .collect();
        json!({"content": text, "tool_calls": [], "finish_reason": self.finish_reason,
            "usage": self.usage})
    }

    /// The events of the streamed answer (each a `data:` payload), `[DONE]` last.
    pub fn events(&self) -> Vec<String> {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string()
        };
        let mut events = vec![chunk(json!({"role": "assistant"}), Value::Null)];
        for piece in &self.pieces {
            events.push(match piece {
                Piece::Text(text) => chunk(json!({"content": text}), Value::Null),
                Piece::Call {
                    index,
                    id,
                    name,
                    arguments,
                } => {
                    let mut call = json!({"index": index, "function": {"arguments": arguments}});
                    if let Some(id) = id {
                        call["id"] = json!(id);
                        call["type"] = json!("function");
                    }
                    if let Some(name) = name {
                        call["function"]["name"] = json!(name);
                    }
                    chunk(json!({"tool_calls": [call]}), Value::Null)
                }
            });
        }
        events.push(chunk(json!({}), json!(self.finish_reason)));
        events.push(
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                "usage": self.usage})
            .to_string(),
        );
        events.push("[DONE]".to_owned());
        events
    }
}

/// How the server answers one request.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A status and a JSON body (with its length).
    Json(u16, Value),
    /// Server-Sent Events, chunked: each event written and flushed on its own, `pause`
    /// after each; with `cut_after`, the connection is closed after that many events.
    Stream {
        events: Vec<String>,
        pause: Duration,
        cut_after: Option<usize>,
    },
    /// Events written until the test releases the gate, then the rest: for a kill
    /// mid-answer. The server waits on the gate after `before` events.
    Held {
        events: Vec<String>,
        before: usize,
        gate: Arc<Mutex<bool>>,
    },
    /// A status, headers and a body as they are (e.g. a 429 with `Retry-After`).
    Raw(u16, Vec<(String, String)>, String),
}

impl Answer {
    /// The script, streamed if the request asked for it, else whole.
    pub fn for_request(script: &Script, seen: &Seen, pause: Duration) -> Answer {
        if seen.json()["stream"] == json!(true) {
            Answer::Stream {
                events: script.events(),
                pause,
                cut_after: None,
            }
        } else {
            Answer::Json(200, script.whole())
        }
    }
}

/// One request as the server read it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub key: Option<String>,
    pub body: String,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// The server: its address, the requests seen, when each event was written.
#[derive(Clone)]
pub struct SseServer {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    written: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl SseServer {
    /// Starts a server answering each request as `answer` says (given the request and
    /// how many came before it).
    pub fn start(answer: impl Fn(&Seen, usize) -> Answer + Send + Sync + 'static) -> SseServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let written = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(answer);
        let server = SseServer {
            url,
            seen: Arc::clone(&seen),
            written: Arc::clone(&written),
        };
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, written, answer) =
                    (Arc::clone(&seen), Arc::clone(&written), Arc::clone(&answer));
                thread::spawn(move || serve(stream, &seen, &written, &*answer));
            }
        });
        server
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Each event written so far (its data), with when it was sent (just before it was
    /// written).
    pub fn written(&self) -> Vec<(Instant, String)> {
        self.written.lock().unwrap().clone()
    }
}

/// Serves the requests of one connection.
fn serve(
    stream: TcpStream,
    seen: &Mutex<Vec<Seen>>,
    written: &Mutex<Vec<(Instant, String)>>,
    answer: &(dyn Fn(&Seen, usize) -> Answer + Send + Sync),
) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut key) = (0usize, None);
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim().to_owned();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("x-spool-request-key") {
                    key = Some(value);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Seen {
            key,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        let count = {
            let mut seen = seen.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        match answer(&request, count) {
            Answer::Json(status, value) => {
                let body = value.to_string();
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n",
                    body.len()
                );
                if out.write_all(head.as_bytes()).is_err()
                    || out.write_all(body.as_bytes()).is_err()
                {
                    return;
                }
            }
            Answer::Raw(status, headers, body) => {
                let mut head = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                if out.write_all(head.as_bytes()).is_err()
                    || out.write_all(body.as_bytes()).is_err()
                {
                    return;
                }
            }
            Answer::Stream {
                events,
                pause,
                cut_after,
            } => {
                if !stream_events(&mut out, written, &events, pause, cut_after, None) {
                    return;
                }
            }
            Answer::Held {
                events,
                before,
                gate,
            } => {
                if !stream_events(
                    &mut out,
                    written,
                    &events,
                    Duration::ZERO,
                    None,
                    Some((before, &gate)),
                ) {
                    return;
                }
            }
        }
    }
}

/// Writes `events` as a chunked event stream; false if the connection is done with.
fn stream_events(
    out: &mut TcpStream,
    written: &Mutex<Vec<(Instant, String)>>,
    events: &[String],
    pause: Duration,
    cut_after: Option<usize>,
    held: Option<(usize, &Mutex<bool>)>,
) -> bool {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                transfer-encoding: chunked\r\n\r\n";
    if out.write_all(head.as_bytes()).is_err() {
        return false;
    }
    for (i, event) in events.iter().enumerate() {
        if cut_after == Some(i) {
            let _ = out.shutdown(std::net::Shutdown::Both);
            return false;
        }
        if let Some((before, gate)) = held
            && i == before
        {
            // Wait (bounded) for the test to let the rest go.
            let end = Instant::now() + Duration::from_secs(60);
            while !*gate.lock().unwrap() && Instant::now() < end {
                thread::sleep(Duration::from_millis(5));
            }
        }
        let data = format!("data: {event}\n\n");
        let chunk = format!("{:x}\r\n{data}\r\n", data.len());
        // When it was sent: just before it is written.
        let sent = Instant::now();
        if out.write_all(chunk.as_bytes()).is_err() || out.flush().is_err() {
            return false;
        }
        written.lock().unwrap().push((sent, event.clone()));
        if !pause.is_zero() {
            thread::sleep(pause);
        }
    }
    out.write_all(b"0\r\n\r\n").is_ok()
}
