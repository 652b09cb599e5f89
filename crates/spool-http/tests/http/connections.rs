//! The limits on connections, on loopback and bounded: a cap on open connections (a
//! client past it reads a whole 503, never a reset, and room comes back when one
//! closes), a head sent
//! too slowly and an idle connection are closed, an event stream is not, and a
//! declared body over the limit is refused before it is waited for.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::hosts::{Raw, parse};
use crate::support::{Api, Setup, TOKEN};

/// Connects, with reads bounded by 20 s.
fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Reads one answer with a `Content-Length` off a kept-alive connection.
fn read_answer(stream: &mut TcpStream) -> Raw {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&bytes));
        bytes.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    bytes.extend_from_slice(&body);
    parse(&String::from_utf8_lossy(&bytes))
}

/// Whether the server closed `stream` (a read gives the end, or a reset).
fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!("answered: {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(_) => true,
    }
}

/// Reads a refused connection's whole answer, up to the end the server sends: a
/// `503` with `Retry-After` and the problem.
#[track_caller]
fn assert_refused(stream: &mut TcpStream, what: &str) {
    let mut text = String::new();
    if let Err(error) = stream.read_to_string(&mut text) {
        panic!("{what}: {error} after {text:?}");
    }
    let refused = parse(&text);
    assert_eq!(refused.status, 503, "{what}: {refused:?}");
    assert!(
        refused.head.contains("\r\nretry-after: 1\r\n"),
        "{what}: {refused:?}"
    );
    assert!(
        refused.head.contains("\r\nconnection: close\r\n"),
        "{what}: {refused:?}"
    );
    assert_eq!(
        refused.json,
        json!({
            "type": "https://spool.invalid/problems/unavailable",
            "title": "Service unavailable",
            "status": 503,
            "detail": "the server has as many connections open as it takes; try again",
        }),
        "{what}"
    );
}

/// Waits for the views' first publication: until then `/healthz` is 503.
fn ready(api: &Api) {
    api.wait_for_text("/healthz", |_| true);
}

fn health(addr: &str) -> String {
    format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n")
}

#[test]
fn a_connection_past_the_cap_reads_a_whole_503_and_room_comes_back() {
    let api = Api::with(Setup {
        server: |server| server.max_connections(50),
        ..Setup::default()
    });
    let addr = api.addr();
    ready(&api);
    // 50 connections, each kept alive after an answer: every one is counted.
    let mut open: Vec<TcpStream> = (0..50)
        .map(|i| {
            let mut stream = connect(&addr);
            stream.write_all(health(&addr).as_bytes()).unwrap();
            let answer = read_answer(&mut stream);
            assert_eq!(answer.status, 200, "connection {i}: {answer:?}");
            stream
        })
        .collect();
    // Ten more, each sending its request at once: each reads the whole 503 and then
    // the end, never a reset.
    for i in 0..10 {
        let mut stream = connect(&addr);
        stream.write_all(health(&addr).as_bytes()).unwrap();
        assert_refused(&mut stream, &format!("refused connection {i}"));
    }
    // A POST whose body is sent once its answer has begun (as a client waiting for
    // `100 Continue` does): the body is read and dropped, not reset.
    let body = r#"{"type": "script", "input": {"steps": 0}}"#;
    let mut stream = connect(&addr);
    write!(
        stream,
        "POST /v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 1];
    assert_eq!(stream.peek(&mut first).unwrap(), 1, "no answer to the head");
    stream.write_all(body.as_bytes()).unwrap();
    assert_refused(&mut stream, "a refused POST");
    // One that sends nothing is answered too, once the server stops waiting for its
    // request.
    assert_refused(&mut connect(&addr), "a silent refused connection");
    // The ones open are still served.
    open[0].write_all(health(&addr).as_bytes()).unwrap();
    assert_eq!(read_answer(&mut open[0]).status, 200);
    // One closes: a new client is served once the server has seen it go.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut stream = connect(&addr);
        stream.write_all(health(&addr).as_bytes()).unwrap();
        let answer = read_answer(&mut stream);
        if answer.status == 200 {
            break;
        }
        assert_eq!(answer.status, 503);
        assert!(Instant::now() < deadline, "no room came back");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_head_sent_a_line_at_a_time_is_cut_after_the_header_read_timeout() {
    let api = Api::with(Setup {
        server: |server| server.header_read_timeout(Duration::from_millis(500)),
        ..Setup::default()
    });
    let addr = api.addr();
    ready(&api);
    let mut stream = connect(&addr);
    // Each read waits 100 ms: the pace of the header lines.
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    stream
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = 0;
    loop {
        if stream
            .write_all(format!("X-Slow-{lines}: 1\r\n").as_bytes())
            .is_err()
            || closed(&mut stream)
        {
            break;
        }
        lines += 1;
        assert!(
            Instant::now() < deadline,
            "still open after {lines} header lines"
        );
    }
    // A head sent at once on a new connection is answered.
    let mut fresh = connect(&addr);
    fresh.write_all(health(&addr).as_bytes()).unwrap();
    assert_eq!(read_answer(&mut fresh).status, 200);
}

#[test]
fn idle_connections_are_closed_and_an_event_stream_is_not() {
    let api = Api::with(Setup {
        // A second: long enough that a test thread slowed by a loaded machine sends
        // its request before its connection is found idle.
        server: |server| {
            server
                .idle_timeout(Duration::from_secs(1))
                .header_read_timeout(Duration::from_secs(1))
        },
        ..Setup::default()
    });
    let addr = api.addr();
    ready(&api);
    let mut events = connect(&addr);
    events
        .write_all(
            format!(
                "GET /v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    // The stream's head has come: it is under way.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(events.read(&mut byte).unwrap(), 1);
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));
    // A connection that never sends a byte is closed...
    let mut silent = connect(&addr);
    assert!(closed(&mut silent), "the silent connection was not closed");
    // ... and so is one kept alive after its answer.
    let mut kept = connect(&addr);
    kept.write_all(health(&addr).as_bytes()).unwrap();
    assert_eq!(read_answer(&mut kept).status, 200);
    assert!(
        closed(&mut kept),
        "the kept-alive connection was not closed"
    );
    // The stream, open since before both, still carries events.
    let submitted = api.call(
        "POST",
        "/v1/tasks",
        Some(r#"{"type": "script", "input": {"steps": 0}}"#),
    );
    assert_eq!(submitted.status, 202, "{submitted:?}");
    let mut text = String::new();
    let mut chunk = [0u8; 4096];
    while !text.contains("event: transition") {
        let n = events.read(&mut chunk).unwrap();
        assert!(n > 0, "the stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
}

/// A connection that says nothing owes its first head from its opening: it is closed
/// after the header-read timeout, however long the idle timeout, so silent clients
/// hold the capped slots no longer than slow heads do.
#[test]
fn a_connection_that_sends_nothing_is_cut_after_the_header_read_timeout() {
    let api = Api::with(Setup {
        server: |server| {
            server
                .header_read_timeout(Duration::from_millis(500))
                .idle_timeout(Duration::from_secs(600))
        },
        ..Setup::default()
    });
    let addr = api.addr();
    ready(&api);
    // Reads wait up to 20 s: far past the header-read timeout, far short of the idle one.
    let mut silent = connect(&addr);
    assert!(closed(&mut silent), "the silent connection was not closed");
    // A connection that sends its head in time is answered and then kept alive.
    let mut prompt = connect(&addr);
    prompt.write_all(health(&addr).as_bytes()).unwrap();
    assert_eq!(read_answer(&mut prompt).status, 200);
    prompt
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert!(
        !closed(&mut prompt),
        "the kept-alive connection was closed before its idle timeout"
    );
}

#[test]
fn a_declared_body_over_the_limit_is_refused_before_it_is_sent() {
    let api = Api::start();
    let addr = api.addr();
    ready(&api);
    for (path, auth) in [
        ("/v1/tasks", format!("Authorization: Bearer {TOKEN}\r\n")),
        ("/v1/tasks", String::new()),
        (
            "/v1/confirmations/x",
            format!("Authorization: Bearer {TOKEN}\r\n"),
        ),
    ] {
        let mut stream = connect(&addr);
        // The head only: the body never comes.
        stream
            .write_all(
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n"
                )
                .as_bytes(),
            )
            .unwrap();
        let answer = read_answer(&mut stream);
        assert_eq!(answer.status, 413, "{answer:?}");
        assert_eq!(
            answer.json,
            json!({
                "type": "https://spool.invalid/problems/too-large",
                "title": "Request body too large",
                "status": 413,
                "detail": format!("the request body is over the limit of {} bytes", spool_http::DEFAULT_BODY_LIMIT),
            })
        );
    }
    // A body at the limit is read as before (and found not to be JSON).
    let body = " ".repeat(spool_http::DEFAULT_BODY_LIMIT);
    let answer = api.call("POST", "/v1/tasks", Some(&body));
    assert_eq!(answer.status, 400, "{answer:?}");
}

#[test]
fn a_body_that_stops_coming_is_cut_after_the_idle_timeout() {
    let api = Api::with(Setup {
        // A second: long enough that a test thread slowed by a loaded machine sends
        // its request before its connection is found idle.
        server: |server| server.idle_timeout(Duration::from_secs(1)),
        ..Setup::default()
    });
    let addr = api.addr();
    ready(&api);
    let mut stream = connect(&addr);
    // Ten bytes of the hundred it declares, then nothing.
    stream
        .write_all(
            format!(
                "POST /v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"type\": "
            )
            .as_bytes(),
        )
        .unwrap();
    // Answered 400 once the body has not moved for the idle timeout, and closed.
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let answer = parse(&text);
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(
        answer.json,
        json!({
            "type": "https://spool.invalid/problems/bad-request",
            "title": "Bad request",
            "status": 400,
            "detail": "the request body broke off before its end",
        })
    );
    // Nothing was submitted.
    assert_eq!(api.call("GET", "/v1/tasks", None).json["tasks"], json!([]));
}
