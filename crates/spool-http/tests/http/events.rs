//! The event stream, read raw off the socket: a client that disconnects mid-run and
//! reconnects with `Last-Event-ID` sees every event exactly once, and the events are
//! the loop's trace as it journaled it; a reconnect older than the ring gets a gap.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::TraceEvent;

use crate::support::{Api, Setup, TOKEN};

/// One Server-Sent Event.
#[derive(Clone, Debug, PartialEq)]
struct Sse {
    id: Option<u64>,
    event: String,
    data: Value,
}

/// An open event stream, read chunk by chunk.
struct Stream {
    reader: BufReader<TcpStream>,
    text: String,
}

impl Stream {
    fn open(addr: &str, path: &str, last: Option<u64>) -> Stream {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let last = last.map_or_else(String::new, |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            writer,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n{last}\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "HTTP/1.1 200 OK");
        let mut content_type = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-type:") {
                content_type = v.trim().to_owned();
            }
        }
        assert_eq!(content_type, "text/event-stream");
        Stream {
            reader,
            text: String::new(),
        }
    }

    /// The next event (skipping keep-alive comments).
    fn next(&mut self) -> Sse {
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                let mut sse = Sse {
                    id: None,
                    event: "message".to_owned(),
                    data: Value::Null,
                };
                let mut any = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        sse.id = Some(v.parse().unwrap());
                        any = true;
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        sse.event = v.to_owned();
                        any = true;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        sse.data = serde_json::from_str(v).unwrap();
                        any = true;
                    }
                }
                if any {
                    return sse;
                }
                continue;
            }
            // A chunk: its size in hex, the data, CRLF.
            let mut size = String::new();
            self.reader.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk).unwrap();
            chunk.truncate(size);
            self.text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

/// A trace event as the stream shows it.
fn shown(e: &TraceEvent) -> Value {
    json!({
        "seq": e.seq,
        "time_ms": e.time.as_duration().as_millis() as u64,
        "task": e.task.get(),
        "from": e.from.to_string(),
        "to": e.to.to_string(),
        "cause": e.cause.to_string(),
    })
}

#[test]
fn a_client_that_reconnects_with_last_event_id_sees_every_event_exactly_once() {
    let api = Api::with(Setup {
        llm_delay: Duration::from_millis(3),
        ..Setup::default()
    });
    let mut first = Stream::open(&api.addr(), "/v1/events", None);
    for _ in 0..4 {
        let body = json!({"type": "script", "input": {"steps": 6}}).to_string();
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    let mut seen = Vec::new();
    while seen.len() < 12 {
        seen.push(first.next());
    }
    // Gone mid-run.
    drop(first);
    let last = seen.last().and_then(|e| e.id);
    let mut second = Stream::open(&api.addr(), "/v1/events", last);
    let mut ended = 0;
    while ended < 4 {
        let event = second.next();
        if event.data["to"] == "Completed(ok)" {
            ended += 1;
        }
        seen.push(event);
    }
    assert!(seen.iter().all(|e| e.event == "transition"), "{seen:?}");
    let trace = api.trace();
    // 4 tasks: submitted, then per step scheduled, waiting, answered; then the end.
    assert_eq!(trace.len(), 4 * (1 + 6 * 3 + 2));
    let ids: Vec<u64> = seen.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(ids, trace.iter().map(|e| e.seq).collect::<Vec<_>>());
    let data: Vec<Value> = seen.iter().map(|e| e.data.clone()).collect();
    assert_eq!(data, trace.iter().map(shown).collect::<Vec<_>>());
}

#[test]
fn one_task_s_events_and_a_gap_past_the_ring() {
    let api = Api::with(Setup {
        ring: 8,
        ..Setup::default()
    });
    // One after the other, so task 2's events are 13 to 24.
    for id in 1..=2 {
        let body = json!({"type": "script", "input": {"steps": 3}}).to_string();
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
        api.wait_for(&format!("/v1/tasks/{id}"), |t| t["state"] == "completed");
    }
    // 2 × 12 events; the ring keeps the last 8: 17 to 24.
    let mut stream = Stream::open(&api.addr(), "/v1/events", Some(3));
    let gap = stream.next();
    assert_eq!(gap.event, "gap");
    assert_eq!(gap.id, None);
    assert_eq!(gap.data, json!({"after": 3, "resumes_at": 17}));
    let ids: Vec<u64> = (0..8).map(|_| stream.next().id.unwrap()).collect();
    assert_eq!(ids, (17..=24).collect::<Vec<_>>());
    // Only task 2's events (all of them in the ring).
    let mut task = Stream::open(&api.addr(), "/v1/events?task=2", Some(16));
    let mine: Vec<Value> = (0..8).map(|_| task.next().data["task"].clone()).collect();
    assert_eq!(mine, vec![json!(2); 8]);
}

#[test]
fn a_last_event_id_beyond_the_newest_event_gets_a_gap_and_then_the_new_events() {
    let api = Api::with(Setup::default());
    let body = json!({"type": "script", "input": {"steps": 3}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    // Task 1's 12 events are all there is; 1000 is no event's id (another store's).
    let newest = api.trace().last().map(|e| e.seq);
    assert_eq!(newest, Some(12));
    let mut stream = Stream::open(&api.addr(), "/v1/events", Some(1000));
    // Keep-alives come every 15 s, so a stream that waits for event 1001 would never
    // time out: the first event is read on a thread, and waited for with a deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let first = stream.next();
        let _ = tx.send(first);
        stream
    });
    let gap = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("an event within 10 s: a gap, not a wait for event 1001");
    let mut stream = reader.join().unwrap();
    assert_eq!(
        (gap.event.as_str(), gap.id, gap.data),
        ("gap", None, json!({"after": 1000, "resumes_at": 13}))
    );
    // The stream goes on with what is published from now on: task 2's events.
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let next: Vec<(Option<u64>, Value)> = (0..12)
        .map(|_| {
            let e = stream.next();
            (e.id, e.data["task"].clone())
        })
        .collect();
    assert_eq!(
        next,
        (13..=24).map(|id| (Some(id), json!(2))).collect::<Vec<_>>()
    );
}
