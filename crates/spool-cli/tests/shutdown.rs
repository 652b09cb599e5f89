//! `spool serve`'s shutdown is bounded: SIGTERM stops it within `--shutdown-timeout`
//! (plus the executors' second) whatever a client does: a POST already taken in is
//! answered, a head or a body that never comes is cut, and a call to a model that never
//! answers is not waited for. Two SIGTERMs at once are one (`timeout` sends one to the
//! process and one to its group). Each test prints the time from SIGTERM to exit.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

mod support;

use support::Server;

const TOKEN: &str = "shutdown-test-token";

/// The `--shutdown-timeout` of the tests.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What the exit may take beyond the timeout: the loop's last turn, the store's last
/// commit, the executors' second, and a loaded machine (two shared cores).
const MARGIN: Duration = Duration::from_secs(6);

/// What the server logs when its drain ran to the shutdown timeout and it cuts the
/// connections still open.
const CUT: &str = "the HTTP server's shutdown timeout passed; cutting the connections still open";

/// What the server logs last on a clean stop.
const STOPPED: &str = "spool serve: stopped; everything taken in is in the store";

/// How long a test waits for an exit that does not come before it fails.
const GIVE_UP: Duration = Duration::from_secs(30);

const SUBMIT: &str = r#"{"type": "agent", "input": {"prompt": "hello"}}"#;

fn start(dir: &Path, env: &[(&str, &str)]) -> Server {
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
    let store = dir.join("s.spool");
    let token = dir.join("token");
    Server::start_with(
        [
            "serve".as_ref(),
            "--addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--llm-latency-ms".as_ref(),
            "1".as_ref(),
            "--shutdown-timeout".as_ref(),
            "2".as_ref(),
            "--store".as_ref(),
            store.as_os_str(),
            "--token-file".as_ref(),
            token.as_os_str(),
        ],
        env,
    )
}

fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(GIVE_UP)).unwrap();
    stream
}

/// The head of `POST /v1/tasks` for a body of `length` bytes, asking to be told
/// (`100 Continue`) once the server reads the body: then it has taken the request in.
fn post_head(addr: &str, length: usize) -> String {
    format!(
        "POST /v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\
         Expect: 100-continue\r\n\r\n"
    )
}

/// Reads up to the end of a head (`\r\n\r\n`).
fn read_head(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => bytes.push(byte[0]),
            other => panic!(
                "no head ({other:?}) after {:?}",
                String::from_utf8_lossy(&bytes)
            ),
        }
    }
    String::from_utf8(bytes).unwrap()
}

/// Waits for the exit after a SIGTERM sent at `sent`: it must be clean, and within
/// the timeout and the margin. Prints and returns the time it took.
fn exit_within(server: &mut Server, sent: Instant, what: &str) -> Duration {
    let status = server.wait_exit(GIVE_UP);
    let took = sent.elapsed();
    println!(
        "{what}: SIGTERM to exit in {:.3} s (--shutdown-timeout {} s)",
        took.as_secs_f64(),
        TIMEOUT.as_secs()
    );
    let Some(status) = status else {
        panic!(
            "{what}: still running {GIVE_UP:?} after SIGTERM; it said:\n{}",
            server.log()
        );
    };
    assert!(
        status.success(),
        "{what}: {status}; it said:\n{}",
        server.log()
    );
    assert!(
        took < TIMEOUT + MARGIN,
        "{what}: {took:?}; it said:\n{}",
        server.log()
    );
    took
}

/// A POST whose head came before SIGTERM and whose body comes after it is answered
/// (the loop runs on while the server drains); with `twice`, a second SIGTERM right
/// after the first changes nothing.
fn a_post_in_flight_is_answered(twice: bool, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &[]);
    let mut post = connect(&server.addr);
    post.write_all(post_head(&server.addr, SUBMIT.len()).as_bytes())
        .unwrap();
    assert_eq!(read_head(&mut post), "HTTP/1.1 100 Continue\r\n\r\n");
    let sent = Instant::now();
    server.signal();
    server.wait_log("SIGTERM; shutting down");
    if twice {
        server.signal();
    }
    post.write_all(SUBMIT.as_bytes()).unwrap();
    let mut answer = String::new();
    post.read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("{what}: no answer ({e}); it said:\n{}", server.log()));
    assert!(
        answer.starts_with("HTTP/1.1 202 Accepted\r\n"),
        "{what}: {answer}"
    );
    assert!(
        answer.ends_with(r#""id":1}"#) || answer.contains(r#""id":1"#),
        "{answer}"
    );
    exit_within(&mut server, sent, what);
    // Answered and the connection closed: the drain had nothing left to wait for, and
    // did not run to its timeout. (Its last line read first: the warning would come
    // before it.)
    server.wait_log(STOPPED);
    let log = server.log();
    assert!(
        !log.contains(CUT),
        "{what}: the drain ran to its timeout:\n{log}"
    );
}

#[test]
fn a_post_taken_in_before_sigterm_is_answered() {
    a_post_in_flight_is_answered(false, "a POST in flight");
}

#[test]
fn two_sigterms_at_once_are_one_and_still_drain() {
    a_post_in_flight_is_answered(true, "a POST in flight, two SIGTERMs");
}

#[test]
fn a_head_that_never_ends_does_not_hold_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &[]);
    // Half a head on a new connection...
    let mut half = connect(&server.addr);
    write!(half, "POST /v1/tasks HTTP/1.1\r\nHost: {}\r\n", server.addr).unwrap();
    // ... and a request answered on a second one: connections are taken in the order
    // they came, so the first is the server's by then.
    // (200, or 503 before the views' first publication: either is an answer.)
    let mut other = connect(&server.addr);
    write!(
        other,
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut answer = String::new();
    other.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    let sent = Instant::now();
    server.signal();
    exit_within(&mut server, sent, "a head never finished");
}

#[test]
fn a_body_shorter_than_its_length_does_not_hold_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &[]);
    let mut post = connect(&server.addr);
    post.write_all(post_head(&server.addr, SUBMIT.len() + 100).as_bytes())
        .unwrap();
    assert_eq!(read_head(&mut post), "HTTP/1.1 100 Continue\r\n\r\n");
    post.write_all(SUBMIT.as_bytes()).unwrap();
    let sent = Instant::now();
    server.signal();
    exit_within(&mut server, sent, "a body shorter than its Content-Length");
    // The handler waits for the rest of the body: the drain runs to its timeout and
    // the connection is cut.
    server.wait_log(CUT);
}

/// A model endpoint that takes requests and never answers; tells `seen` of each
/// request's first bytes.
fn silent_model(seen: mpsc::Sender<()>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 1024];
            if matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                let _ = seen.send(());
            }
            // Held open, never answered.
            held.push(stream);
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_model_call_that_never_answers_does_not_hold_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    let (seen, calls) = mpsc::channel();
    let base_url = silent_model(seen);
    let mut server = start(
        dir.path(),
        &[
            ("OPENAI_BASE_URL", &base_url),
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_MODEL", "test-model"),
        ],
    );
    let mut post = connect(&server.addr);
    write!(
        post,
        "POST /v1/tasks HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SUBMIT}",
        server.addr,
        SUBMIT.len()
    )
    .unwrap();
    let mut answer = String::new();
    post.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 202 Accepted\r\n"), "{answer}");
    // The agent's call is out, and hangs.
    calls
        .recv_timeout(GIVE_UP)
        .unwrap_or_else(|_| panic!("no call reached the model; it said:\n{}", server.log()));
    let sent = Instant::now();
    server.signal();
    exit_within(&mut server, sent, "a model call that never answers");
}
