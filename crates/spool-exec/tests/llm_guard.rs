//! The OpenAI-compatible executor against a stand-in provider on 127.0.0.1 (a raw
//! `TcpListener`, a thread per connection): credentials in the base URL are sent
//! but never shown (a 500, a connection closed without an answer, a refused
//! connection, an invalid URL: each message exact and free of them), and the bytes of
//! the answers being read at once stay within the pool's budget.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{
    Executor, Kind, OutboundRequest, Replies, ReplySink, Request, RequestError, RequestKey,
    Response, Time,
};
use spool_exec::{ConfigError, OpenAiConfig, OpenAiExecutor};

/// What the stand-in does with a request.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `500` with the body `boom`.
    Fail,
    /// Reads the request and closes the connection without a word.
    Close,
    /// `200` with a chat completion whose content is `n` bytes, with its length or
    /// (`chunked`) without.
    Answer { n: usize, chunked: bool },
}

/// One request as the stand-in read it: the request line and the headers.
#[derive(Clone, Debug)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The stand-in provider: a port of its own, every request recorded.
struct StandIn {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Answers whose head went out.
    started: Arc<AtomicUsize>,
}

impl StandIn {
    fn start(mode: Mode) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let started = Arc::new(AtomicUsize::new(0));
        let (seen2, started2) = (seen.clone(), started.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (seen, started) = (seen2.clone(), started2.clone());
                thread::spawn(move || serve(stream, mode, &seen, &started));
            }
        });
        StandIn {
            port,
            seen,
            started,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, mode: Mode, seen: &Mutex<Vec<Seen>>, started: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.trim_end().split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let record = Seen {
        line: line.trim_end().to_owned(),
        headers,
    };
    let length = record
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    seen.lock().unwrap().push(record);
    let mut stream = stream;
    match mode {
        Mode::Fail => {
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\nconnection: close\r\n\r\nboom",
            );
        }
        Mode::Close => {}
        Mode::Answer { n, chunked } => {
            let content = "x".repeat(n);
            let answer = json!({
                "choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"total_tokens": 1},
            })
            .to_string();
            let head = if chunked {
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_owned()
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    answer.len()
                )
            };
            let _ = stream.write_all(head.as_bytes());
            started.fetch_add(1, Ordering::SeqCst);
            if chunked {
                for piece in answer.as_bytes().chunks(16 * 1024) {
                    let _ = write!(stream, "{:x}\r\n", piece.len());
                    let _ = stream.write_all(piece);
                    let _ = stream.write_all(b"\r\n");
                }
                let _ = stream.write_all(b"0\r\n\r\n");
            } else {
                let _ = stream.write_all(answer.as_bytes());
            }
        }
    }
    let _ = stream.flush();
}

/// Collects what the executor answers.
#[derive(Default)]
struct Collect(Mutex<Vec<Response>>);

impl ReplySink for Collect {
    fn send(&self, response: Response) -> bool {
        self.0.lock().unwrap().push(response);
        true
    }
}

fn key(number: u32) -> RequestKey {
    serde_json::from_value(json!({"task": 1, "number": number, "slot": 0})).unwrap()
}

/// Runs one request through `executor` on this thread; its answer.
fn ask(executor: &mut OpenAiExecutor, number: u32) -> Response {
    let collect = Arc::new(Collect::default());
    let sink: Arc<dyn ReplySink> = collect.clone();
    let mut batch = Vec::new();
    let mut replies = Replies::new(Time::ZERO, &mut batch, &sink);
    let payload = json!({"messages": [{"role": "user", "content": "hi"}]});
    executor.execute(
        OutboundRequest {
            key: key(number),
            request: Request::new(Kind::Llm, payload),
        },
        &mut replies,
    );
    let mut answers = collect.0.lock().unwrap();
    assert_eq!(answers.len(), 1, "one answer per request");
    answers.remove(0)
}

/// The base URL with a user, a password and a query key.
fn secret_url(port: u16) -> String {
    format!("http://user:pw@127.0.0.1:{port}/v1?api-key=K&x=1")
}

fn executor(base: &str) -> OpenAiExecutor {
    OpenAiExecutor::new(
        OpenAiConfig::new(base, "m")
            .max_retries(0)
            .timeout(Duration::from_secs(10)),
    )
}

fn failed(response: &Response) -> String {
    match &response.result {
        Err(RequestError::Failed { message }) => message.clone(),
        other => panic!("not a failure: {other:?}"),
    }
}

/// The credentials are sent (Basic auth from the URL's user and password, the query
/// as it was given) even though no message shows them.
#[test]
fn credentials_in_the_url_are_sent_as_given() {
    let stand_in = StandIn::start(Mode::Answer {
        n: 5,
        chunked: false,
    });
    let mut executor = executor(&secret_url(stand_in.port));
    let response = ask(&mut executor, 1);
    assert_eq!(
        response.result.map(|v| v["content"].clone()),
        Ok(Value::from("xxxxx"))
    );
    let seen = stand_in.seen();
    assert_eq!(
        seen[0].line,
        "POST /v1/chat/completions?api-key=K&x=1 HTTP/1.1"
    );
    // base64("user:pw")
    assert_eq!(seen[0].header("authorization"), Some("Basic dXNlcjpwdw=="));
}

#[test]
fn a_500_s_message_shows_no_credentials() {
    let stand_in = StandIn::start(Mode::Fail);
    let mut executor = executor(&secret_url(stand_in.port));
    let message = failed(&ask(&mut executor, 1));
    assert_eq!(
        message,
        format!(
            "POST http://***@127.0.0.1:{}/v1/chat/completions?api-key=***&x=*** failed \
             after 1 attempt; the last: HTTP 500 Internal Server Error: `boom`",
            stand_in.port
        )
    );
    assert_eq!(stand_in.seen().len(), 1);
}

#[test]
fn a_closed_connection_s_message_shows_no_credentials() {
    let stand_in = StandIn::start(Mode::Close);
    let mut executor = executor(&secret_url(stand_in.port));
    let message = failed(&ask(&mut executor, 1));
    assert_eq!(
        message,
        format!(
            "POST http://***@127.0.0.1:{}/v1/chat/completions?api-key=***&x=*** failed \
             after 1 attempt; the last: connection error: io: Peer disconnected",
            stand_in.port
        )
    );
}

#[test]
fn a_refused_connection_s_message_shows_no_credentials() {
    // A port nothing listens on: bound, then let go.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut executor = executor(&secret_url(port));
    let message = failed(&ask(&mut executor, 1));
    assert_eq!(
        message,
        format!(
            "POST http://***@127.0.0.1:{port}/v1/chat/completions?api-key=***&x=*** failed \
             after 1 attempt; the last: connection error: io: Connection refused (os error 111)"
        )
    );
}

/// An unusable URL is named in the error without its credentials, in the answer and
/// in the configuration's error; the API key is not in `Debug`.
#[test]
fn an_invalid_url_and_the_debug_output_show_no_credentials() {
    let base = "ftp://user:pw@127.0.0.1/v1?api-key=K";
    let expected = ConfigError::InvalidBaseUrl {
        url: "ftp://***@127.0.0.1/v1?api-key=***".to_owned(),
        reason: "it must start with http:// or https://".to_owned(),
    };
    assert_eq!(
        OpenAiConfig::new(base, "m").validate(),
        Err(expected.clone())
    );
    let mut executor = executor(base);
    assert_eq!(failed(&ask(&mut executor, 1)), expected.to_string());
    let config = OpenAiConfig::new(secret_url(9), "m").api_key("sk-secret");
    let debug = format!("{config:?} {:?}", OpenAiExecutor::new(config.clone()));
    assert!(
        debug.contains(r#"base_url: "http://***@127.0.0.1:9/v1?api-key=***&x=***""#),
        "{debug}"
    );
    for secret in ["user:pw", "api-key=K", "sk-secret"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
    assert_eq!(
        config.endpoint(),
        "http://***@127.0.0.1:9/v1/chat/completions?api-key=***&x=***"
    );
}

/// Runs `count` requests at once on clones of `executor` (a pool's workers); their
/// answers, by request number.
fn ask_at_once(executor: &OpenAiExecutor, count: u32) -> Vec<Response> {
    let threads: Vec<_> = (1..=count)
        .map(|number| {
            let mut worker = executor.clone();
            thread::spawn(move || ask(&mut worker, number))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The length of the stand-in's answer with `n` bytes of content.
fn answer_len(n: usize) -> u64 {
    json!({
        "choices": [{"message": {"role": "assistant", "content": "x".repeat(n)}, "finish_reason": "stop"}],
        "usage": {"total_tokens": 1},
    })
    .to_string()
    .len() as u64
}

/// Four answers of known length at once against a budget of two: they wait for room
/// (none fails), and the bytes held never pass the budget.
#[test]
fn answers_of_known_length_wait_for_room_in_the_budget() {
    let n = 1 << 20;
    let size = answer_len(n);
    let stand_in = StandIn::start(Mode::Answer { n, chunked: false });
    let executor = OpenAiExecutor::new(
        OpenAiConfig::new(format!("http://127.0.0.1:{}", stand_in.port), "m")
            .max_retries(0)
            .timeout(Duration::from_secs(20))
            .max_total_answer_bytes(2 * size),
    );
    let answers = ask_at_once(&executor, 4);
    for answer in &answers {
        assert_eq!(
            answer
                .result
                .as_ref()
                .map(|v| v["content"].as_str().map(str::len)),
            Ok(Some(n))
        );
    }
    let held = executor.answer_bytes();
    assert_eq!((held.limit, held.held, held.refused), (2 * size, 0, 0));
    assert!(held.peak <= 2 * size, "{held:?}");
    assert!(held.peak >= size, "{held:?}");
    assert_eq!(stand_in.started.load(Ordering::SeqCst), 4);
}

/// An answer longer than the whole budget fails at once, saying so.
#[test]
fn an_answer_longer_than_the_budget_is_refused() {
    let n = 100_000;
    let stand_in = StandIn::start(Mode::Answer { n, chunked: false });
    let mut executor = OpenAiExecutor::new(
        OpenAiConfig::new(format!("http://127.0.0.1:{}", stand_in.port), "m")
            .max_retries(0)
            .max_total_answer_bytes(50_000),
    );
    assert_eq!(
        ask(&mut executor, 1).result,
        Err(RequestError::Malformed {
            message: "the answer is larger than 50000 bytes".to_owned()
        })
    );
    assert_eq!(executor.answer_bytes().held, 0);
}

/// Chunked answers (no length) are read a step at a time within the budget: what is
/// held never passes it; an answer that cannot grow is retried (here: no retries, so
/// it fails saying why) rather than waiting while it holds bytes.
#[test]
fn chunked_answers_stay_within_the_budget() {
    let n = 600_000;
    let stand_in = StandIn::start(Mode::Answer { n, chunked: true });
    let budget = 1 << 20;
    let executor = OpenAiExecutor::new(
        OpenAiConfig::new(format!("http://127.0.0.1:{}", stand_in.port), "m")
            .max_retries(0)
            .timeout(Duration::from_secs(20))
            .max_total_answer_bytes(budget),
    );
    let answers = ask_at_once(&executor, 4);
    let mut ok = 0;
    for answer in &answers {
        match &answer.result {
            Ok(value) => {
                assert_eq!(value["content"].as_str().map(str::len), Some(n));
                ok += 1;
            }
            Err(RequestError::Failed { message }) => assert!(
                message.ends_with(&format!(
                    "the answer outgrew the room left in the {budget}-byte budget of the \
                     LLM answers being read at once ({} bytes read)",
                    message
                        .rsplit('(')
                        .next()
                        .and_then(|m| m.split(' ').next())
                        .unwrap_or_default()
                )),
                "{message}"
            ),
            Err(other) => panic!("{other:?}"),
        }
    }
    let held = executor.answer_bytes();
    assert!(ok >= 1, "{answers:?}");
    assert_eq!(held.held, 0);
    assert!(held.peak <= budget, "{held:?}");
    assert_eq!(u64::try_from(4 - ok).unwrap(), held.refused);
}

/// A subprocess tool's `Debug` output names the variables set for the child, not their
/// values, which may be credentials.
#[test]
fn a_process_tool_s_debug_output_hides_its_environment_values() {
    let config = spool_exec::ProcessConfig::new("git")
        .allow_env("PATH")
        .env("GITHUB_TOKEN", "ghp-s3cret");
    let debug = format!("{config:?}");
    assert!(debug.contains(r#"env: ["GITHUB_TOKEN=***"]"#), "{debug}");
    assert!(!debug.contains("ghp-s3cret"), "{debug}");
}

/// The shown form of URLs: userinfo and every query value replaced, the rest kept.
#[test]
fn redacted_urls_keep_scheme_host_port_and_path() {
    use spool_exec::redact_url;
    for (url, shown) in [
        ("http://h:1/v1", "http://h:1/v1"),
        ("https://u@h/v1", "https://***@h/v1"),
        // The user info runs to the last `@` before the query: a path's `@` is taken
        // for the end of a password (hiding too much rather than too little).
        ("https://u:p@[::1]:8080/a@b?k=v", "https://***@b?k=***"),
        (
            "https://u:p@[::1]:8080/v1?k=v",
            "https://***@[::1]:8080/v1?k=***",
        ),
        ("http://h/p?token&a=&b=c=d", "http://h/p?***&a=***&b=***"),
        ("http://h/p?a=1#frag", "http://h/p?a=***#***"),
        ("http://u:p@h?x=1", "http://***@h?x=***"),
        ("u:p@h/v1", "***@h/v1"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

/// A password holding `/`, `?`, `#` or `@`, unencoded or encoded, is hidden whole: the
/// user info runs to the last `@` before any `?` or `#`, and a URL whose host cannot be
/// told (an `@` after a `?` or `#`, a host or port holding other characters) shows
/// only its scheme.
#[test]
fn redacted_urls_hide_passwords_holding_url_delimiters() {
    use spool_exec::redact_url;
    for (url, shown) in [
        ("http://user:ab/cd@host/v1", "http://***@host/v1"),
        ("http://user:ab@cd@host:8080/v1", "http://***@host:8080/v1"),
        (
            "http://user:a/b@c/d@host/v1?k=v",
            "http://***@host/v1?k=***",
        ),
        ("http://user:ab?cd@host/v1", "http://***"),
        ("http://user:ab#cd@host/v1", "http://***"),
        ("http://user:a/b?c#d@e@host/v1", "http://***"),
        ("http://user:ab%2Fcd@host/v1", "http://***@host/v1"),
        ("http://user:ab%3Fcd%23e%40f@host/v1", "http://***@host/v1"),
        (
            "https://user:ab/cd@[::1]:8080/v1",
            "https://***@[::1]:8080/v1",
        ),
        ("user:ab/cd@host/v1", "***@host/v1"),
        // Not a host and port: scheme only.
        ("http://user:ab@host:8o8o/v1", "http://***"),
        ("http://ho st/v1", "http://***"),
        ("not a url", "***"),
        // An `@` in a query could end a password holding a `?`: scheme only.
        ("http://host/v1?email=a@b", "http://***"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

/// The passwords [`redacted_urls_hide_passwords_holding_url_delimiters`] hides, each
/// with the text that must not be shown.
const HARD_PASSWORDS: [(&str, &[&str]); 6] = [
    ("ab/cd", &["ab/cd", "user:ab"]),
    ("ab?cd", &["ab?cd", "user:ab", "?cd"]),
    ("ab#cd", &["ab#cd", "user:ab", "#cd"]),
    ("ab@cd", &["ab@cd", "user:ab"]),
    ("ab%2Fcd", &["ab%2Fcd", "user:ab"]),
    ("a/b?c#d@e", &["a/b", "user:a", "c#d", "d@e"]),
];

/// A password holding URL delimiters shows neither in the configuration's error, nor
/// in its `Debug` output, nor in the endpoint `spool run` prints, nor in a failed
/// request's message.
#[test]
fn a_password_holding_url_delimiters_is_shown_nowhere() {
    // A port nothing listens on: bound, then let go.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (password, hidden) in HARD_PASSWORDS {
        let base = format!("ftp://user:{password}@127.0.0.1/v1");
        let Err(error) = OpenAiConfig::new(base.as_str(), "m").validate() else {
            panic!("{base} passed");
        };
        let http = format!("http://user:{password}@127.0.0.1:{port}/v1");
        let config = OpenAiConfig::new(http.as_str(), "m").max_retries(0);
        let endpoint = config.endpoint();
        let mut executor = OpenAiExecutor::new(config.clone());
        let message = match ask(&mut executor, 1).result {
            Err(RequestError::Failed { message }) => message,
            other => panic!("{http}: {other:?}"),
        };
        let shown = format!("{error} {error:?} {config:?} {endpoint} {message}");
        for secret in hidden {
            assert!(!shown.contains(secret), "{secret} of {password} in {shown}");
        }
        // The password with an unencoded `/`: its URL is shown, less the user info.
        if password == "ab/cd" {
            assert_eq!(
                error.to_string(),
                "the base URL `ftp://***@127.0.0.1/v1` is not usable: \
                 it must start with http:// or https://"
            );
            assert_eq!(
                endpoint,
                format!("http://***@127.0.0.1:{port}/v1/chat/completions")
            );
        }
    }
}
