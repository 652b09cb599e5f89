//! An OTLP/HTTP receiver on loopback: it takes `POST /v1/traces` (protobuf), decodes
//! each body with the protocol's own types and keeps the spans, answering 200.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// One post the receiver took.
#[derive(Clone, Debug)]
pub(crate) struct Post {
    /// The path posted to.
    pub(crate) path: String,
    /// The `Content-Type`.
    pub(crate) content_type: String,
    /// The headers, by lower-case name.
    pub(crate) headers: BTreeMap<String, String>,
    /// The body, decoded.
    pub(crate) request: ExportTraceServiceRequest,
}

/// The receiver: its address, and what it took.
pub(crate) struct Receiver {
    addr: String,
    posts: Arc<Mutex<Vec<Post>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Listens on a free loopback port.
    pub(crate) fn start() -> Receiver {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind loopback");
        let addr = format!("http://{}", server.server_addr());
        let posts = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (posts.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = Vec::new();
                let _ = std::io::Read::read_to_end(request.as_reader(), &mut body);
                let headers: BTreeMap<String, String> = request
                    .headers()
                    .iter()
                    .map(|h| {
                        (
                            h.field.as_str().as_str().to_ascii_lowercase(),
                            h.value.to_string(),
                        )
                    })
                    .collect();
                let decoded = ExportTraceServiceRequest::decode(body.as_slice());
                let status = match decoded {
                    Ok(decoded) => {
                        kept.lock().expect("posts").push(Post {
                            path: request.url().to_owned(),
                            content_type: headers.get("content-type").cloned().unwrap_or_default(),
                            headers,
                            request: decoded,
                        });
                        200
                    }
                    Err(_) => 400,
                };
                let _ = request.respond(tiny_http::Response::empty(status));
            }
        });
        Receiver {
            addr,
            posts,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The posts taken so far.
    pub(crate) fn posts(&self) -> Vec<Post> {
        self.posts.lock().expect("posts").clone()
    }

    /// Every span of every post, waiting (up to 10 s) until there are at least `n`.
    pub(crate) fn spans(&self, n: usize) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans: Vec<Span> = self
                .posts()
                .into_iter()
                .flat_map(|p| p.request.resource_spans)
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .collect();
            if spans.len() >= n || Instant::now() >= deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An attribute's value as text: strings as they are, numbers in decimal, arrays as
/// `[a, b]`.
pub(crate) fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::DoubleValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::ArrayValue(items)) => format!(
            "[{}]",
            items.values.iter().map(text).collect::<Vec<_>>().join(", ")
        ),
        other => format!("{other:?}"),
    }
}

/// A span's attributes, by key, as text.
pub(crate) fn attributes(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let value = kv.value.as_ref().map(text).unwrap_or_default();
            (kv.key.clone(), value)
        })
        .collect()
}
