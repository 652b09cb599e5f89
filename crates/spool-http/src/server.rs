//! `Server`: the router on a tokio runtime of its own, on a thread of its own, so the
//! run loop's thread and the embedder's threads stay as they are.
//!
//! It runs its own accept loop over hyper's HTTP/1 connections rather than
//! `axum::serve`, for what that has not: a cap on open connections (past it a client
//! gets a short `503` and the connection is closed), a time limit on a request's head
//! and on an idle connection, a `413` as soon as a declared `Content-Length` is over the
//! body limit, a `421` for a `Host` the server does not answer for, and a shutdown
//! bounded in time (requests already taken in are answered within it; what is left
//! after it is cut).

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, oneshot, watch};
use tower::ServiceExt;

use crate::problem::Problem;
use crate::routes::router;
use crate::state::AppState;

/// The address `spool serve` binds unless told otherwise: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";

/// How long a shutdown lets the requests already taken in finish before it cuts
/// every connection still open.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request's head (request line and headers) may take to arrive: the first
/// from the connection's opening, each later one from its first byte; a connection
/// whose head is not complete by then is closed.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may stay open with no request under way (a kept-alive
/// connection between requests, or one that never sends a byte) before it is closed.
/// A response still being sent (an event stream) is a request under way.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How many connections may be open at once; past it a new one is answered `503`
/// with `Retry-After: 1` and closed. Kept well under the usual limit of 1024 open
/// files a process has.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The tokio runtime or its thread could not be started.
    #[error("the server's runtime could not start: {0}")]
    Runtime(std::io::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A host given to [`ServerBuilder::allow_host`] is not a host name.
    #[error(
        "cannot allow the host {0:?}: give a name or address, with or without :PORT, or * for any host"
    )]
    Host(String),
}

/// Sets up a [`Server`].
#[derive(Debug)]
pub struct ServerBuilder {
    addr: SocketAddr,
    workers: usize,
    shutdown_timeout: Duration,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    allowed_hosts: Vec<String>,
}

/// A running HTTP server. Dropping it without [`shutdown`](Server::shutdown) leaves it
/// running until the process ends.
///
/// # Example
/// ```no_run
/// use spool_core::TaskRegistry;
/// use spool_runtime::Runtime;
///
/// let registry = TaskRegistry::new();
/// let (builder, views) = spool_http::publish_views(
///     Runtime::builder().registry(registry.clone()),
///     spool_http::DEFAULT_PUBLISH_EVERY,
///     spool_http::DEFAULT_EVENT_RING,
/// );
/// let mut runtime = builder.build();
/// let state = spool_http::AppState::new(runtime.handle(), registry, views, "secret").unwrap();
/// let server = spool_http::Server::builder().start(state).unwrap();
/// eprintln!("listening on http://{}", server.addr());
/// let stopper = server.stopper();
/// // On another thread, to stop: `stopper.drain()` (the requests going on are
/// // answered), then the runtime's `handle.shutdown()`.
/// runtime.run(); // until a handle calls shutdown
/// drop(runtime); // requests that still wait on it are answered 503
/// server.shutdown();
/// ```
pub struct Server {
    addr: SocketAddr,
    control: Arc<Control>,
    cut: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Starts a [`Server`]'s shutdown from another thread (a signal handler's): see
/// [`drain`](Stopper::drain).
#[derive(Clone)]
pub struct Stopper(Arc<Control>);

impl fmt::Debug for Stopper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stopper").finish_non_exhaustive()
    }
}

impl Stopper {
    /// Stops taking connections, ends the event streams, lets every request already
    /// taken in be answered (a kept-alive connection is closed after its answer), and
    /// waits until every connection has closed or the shutdown timeout has passed since
    /// the first call. Returns whether every connection closed. The run loop must still
    /// run meanwhile, for the requests waiting on it to be answered.
    pub fn drain(&self) -> bool {
        self.0.drain()
    }
}

impl Server {
    /// Starts setting up a server on [`DEFAULT_ADDR`].
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            addr: SocketAddr::from(([127, 0, 0, 1], 7420)),
            workers: 2,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allowed_hosts: Vec::new(),
        }
    }

    /// The address it listens on (the port the system chose, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A [`Stopper`], to start the shutdown from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper(Arc::clone(&self.control))
    }

    /// Stops taking connections, lets the requests going on finish within the
    /// shutdown timeout (counted from the first [`Stopper::drain`], if one came
    /// first), cuts the connections still open after it, and waits for the server's
    /// thread.
    pub fn shutdown(mut self) {
        let drained = self.control.drain();
        if !drained {
            tracing::warn!(
                open = self.control.open(),
                "the HTTP server's shutdown timeout passed; cutting the connections still open"
            );
        }
        if let Some(cut) = self.cut.take() {
            let _ = cut.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ServerBuilder {
    /// Listens on `addr` (port 0: one the system chooses).
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> ServerBuilder {
        self.addr = addr;
        self
    }

    /// Worker threads of the server's tokio runtime (default 2; the handlers only
    /// read views or hand commands to the loop).
    #[must_use]
    pub fn workers(mut self, workers: usize) -> ServerBuilder {
        self.workers = workers.max(1);
        self
    }

    /// How long a shutdown waits for the requests already taken in (default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`]); the connections still open after it are cut.
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.shutdown_timeout = timeout;
        self
    }

    /// How long a request's head may take: the first from the connection's opening,
    /// each later one from its first byte (default [`DEFAULT_HEADER_READ_TIMEOUT`]).
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a connection may stay open with no request under way (default
    /// [`DEFAULT_IDLE_TIMEOUT`]).
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.idle_timeout = timeout;
        self
    }

    /// How many connections may be open at once (default
    /// [`DEFAULT_MAX_CONNECTIONS`], at least 1); past it a new connection is answered
    /// `503 Service Unavailable` with `Retry-After: 1` once its request's head has come
    /// (or after a second without it), and closed; the request is not served.
    #[must_use]
    pub fn max_connections(mut self, max: usize) -> ServerBuilder {
        self.max_connections = max.max(1);
        self
    }

    /// Answers requests whose `Host` is `host` as well: `name` (any port) or
    /// `name:port` (that port only); `[::1]:7420` for an IPv6 address; `*` for any
    /// `Host` at all. By default the server answers only the names of the address it is
    /// bound to, and on every address (`0.0.0.0`, `::`) any IP address and `localhost`
    /// (see `docs/http.md`); others get `421 Misdirected Request`.
    #[must_use]
    pub fn allow_host(mut self, host: impl Into<String>) -> ServerBuilder {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Binds the address and starts serving `state`'s router; returns once it
    /// listens.
    ///
    /// # Errors
    /// [`ServeError::Bind`] if the address cannot be bound, [`ServeError::Runtime`]
    /// if the runtime or its thread cannot start, [`ServeError::Host`] for an allowed
    /// host that is not one.
    pub fn start(self, state: AppState) -> Result<Server, ServeError> {
        let mut any = false;
        let mut extra = Vec::new();
        for host in &self.allowed_hosts {
            if host.trim() == "*" {
                any = true;
            } else {
                extra.push(split_host(host).ok_or_else(|| ServeError::Host(host.clone()))?);
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.workers)
            .thread_name("spool-http")
            .enable_io()
            .enable_time()
            .build()
            .map_err(ServeError::Runtime)?;
        let std_listener =
            std::net::TcpListener::bind(self.addr).map_err(|source| ServeError::Bind {
                addr: self.addr,
                source,
            })?;
        std_listener
            .set_nonblocking(true)
            .map_err(ServeError::Runtime)?;
        let addr = std_listener.local_addr().map_err(ServeError::Runtime)?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(ServeError::Runtime)?
        };
        let gate = Arc::new(Gate {
            hosts: if any {
                HostRule::Any
            } else {
                HostRule::new(addr, extra)
            },
            body_limit: state.inner.body_limit,
        });
        let control = Arc::new(Control {
            draining: watch::Sender::new(false),
            counts: Mutex::new(Counts::default()),
            changed: Condvar::new(),
            shutdown_timeout: self.shutdown_timeout,
            streams: state.clone(),
        });
        let settings = Settings {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
        };
        let (cut, cut_rx) = oneshot::channel::<()>();
        let app = router(state);
        let serving = Arc::clone(&control);
        let thread = std::thread::Builder::new()
            .name("spool-http-server".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    accept_loop(listener, app, gate, settings, serving).await;
                    // Stopped taking connections; the ones open finish until the
                    // shutdown says to cut (or the server is dropped: then it runs
                    // until the process ends).
                    let _ = cut_rx.await;
                });
                // Every connection task still there is dropped: its connection closes.
                runtime.shutdown_background();
            })
            .map_err(ServeError::Runtime)?;
        Ok(Server {
            addr,
            control,
            cut: Some(cut),
            thread: Some(thread),
        })
    }
}

/// The limits each connection runs under.
#[derive(Clone, Copy, Debug)]
struct Settings {
    header_read_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
}

/// What a shutdown and the connections share: whether the server is draining, how
/// many connections are open, and by when the drain must be over.
struct Control {
    draining: watch::Sender<bool>,
    counts: Mutex<Counts>,
    changed: Condvar,
    shutdown_timeout: Duration,
    streams: AppState,
}

#[derive(Default)]
struct Counts {
    open: usize,
    deadline: Option<Instant>,
}

impl Control {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self) -> usize {
        self.counts().open
    }

    fn opened(self: &Arc<Control>) -> Open {
        self.counts().open += 1;
        Open(Arc::clone(self))
    }

    fn drain(&self) -> bool {
        let mut counts = self.counts();
        let deadline = *counts
            .deadline
            .get_or_insert_with(|| Instant::now() + self.shutdown_timeout);
        if !*self.draining.borrow() {
            self.draining.send_replace(true);
            self.streams.close_streams();
        }
        while counts.open > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            counts = self
                .changed
                .wait_timeout(counts, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// An open connection, counted until it is dropped.
struct Open(Arc<Control>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.counts().open -= 1;
        self.0.changed.notify_all();
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    gate: Arc<Gate>,
    settings: Settings,
    control: Arc<Control>,
) {
    let permits = Arc::new(Semaphore::new(settings.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut draining = control.draining.subscribe();
    loop {
        let accepted = tokio::select! {
            biased;
            () = until_draining(&mut draining) => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) => {
                // Out of file descriptors, or a connection reset before it was taken:
                // wait a little rather than spin, then take the next.
                tracing::warn!(%error, "the HTTP server could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refuse(stream, &refusing);
            continue;
        };
        let open = control.opened();
        let handler = Handler {
            app: app.clone(),
            gate: Arc::clone(&gate),
            activity: Arc::new(Activity::default()),
        };
        let draining = control.draining.subscribe();
        tokio::spawn(async move {
            connection(stream, handler, settings, draining).await;
            drop(permit);
            drop(open);
        });
    }
    // The listener is dropped here: new connections are refused by the system.
}

/// Returns once the server drains (or can no longer be told to).
async fn until_draining(draining: &mut watch::Receiver<bool>) {
    let _ = draining.wait_for(|d| *d).await;
}

/// The answer a connection past the cap gets.
const OVER_CAPACITY: &str = "{\"type\":\"https://spool.invalid/problems/unavailable\",\"title\":\"Service unavailable\",\"status\":503,\"detail\":\"the server has as many connections open as it takes; try again\"}";

/// How many connections past the cap are answered at once; past it, a connection is
/// closed unanswered.
const MAX_REFUSING: usize = 64;

/// How long a refused connection's request head is waited for, and how long what the
/// client sends after the answer is read before the connection is closed.
const REFUSE_WAIT: Duration = Duration::from_secs(1);

/// Answers a connection past the cap with a `503` and closes it, on a task of its own
/// (one of at most [`MAX_REFUSING`]; past them it is closed unanswered).
fn refuse(stream: TcpStream, refusing: &Arc<Semaphore>) {
    let Ok(permit) = Arc::clone(refusing).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        answer_refused(stream).await;
        drop(permit);
    });
}

/// Reads and drops the request's head (for up to [`REFUSE_WAIT`]), writes the `503`,
/// ends the writing side, and reads on (for up to [`REFUSE_WAIT`] again) until the
/// client closes. A socket closed with bytes of the client's unread, or closed before
/// they come, answers them with a reset, and a client told of a reset may drop the
/// answer it has not read yet.
async fn answer_refused(mut stream: TcpStream) {
    let mut scratch = [0u8; 4096];
    let head = tokio::time::timeout(REFUSE_WAIT, async {
        // The last bytes of the previous read: the empty line that ends a head may
        // come in two reads.
        let mut tail: Vec<u8> = Vec::with_capacity(scratch.len() + 2);
        loop {
            let n = read_some(&stream, &mut scratch).await?;
            if n == 0 {
                return Ok::<(), io::Error>(());
            }
            tail.extend_from_slice(&scratch[..n]);
            if tail.windows(3).any(|w| w == b"\n\r\n") || tail.windows(2).any(|w| w == b"\n\n") {
                return Ok(());
            }
            let keep = tail.len().saturating_sub(2);
            tail.drain(..keep);
        }
    })
    .await;
    if let Ok(Err(_)) = head {
        return;
    }
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{OVER_CAPACITY}",
        OVER_CAPACITY.len()
    );
    let written = tokio::time::timeout(REFUSE_WAIT, write_all(&stream, answer.as_bytes())).await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let _ = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_shutdown(cx)).await;
    let _ = tokio::time::timeout(REFUSE_WAIT, async {
        while read_some(&stream, &mut scratch).await.is_ok_and(|n| n > 0) {}
    })
    .await;
}

/// Reads what has come (0: the client ended its writing side).
async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            read => return read,
        }
    }
}

/// Writes all of `bytes`.
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Serves one connection until it closes, or until the server drains: then the
/// request under way is answered and the connection closed.
async fn connection(
    stream: TcpStream,
    handler: Handler,
    settings: Settings,
    mut draining: watch::Receiver<bool>,
) {
    let io = TimedIo::new(stream, Arc::clone(&handler.activity), settings);
    let conn = http1::Builder::new()
        .keep_alive(true)
        // The head's timer is `TimedIo`'s: hyper's would run from the moment a
        // kept-alive connection waits for its next request.
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), handler);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = until_draining(&mut draining) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%error, "an HTTP connection ended");
    }
}

/// Which requests are answered before the router: the `Host` check and the early
/// `413`.
#[derive(Debug)]
struct Gate {
    hosts: HostRule,
    body_limit: usize,
}

impl Gate {
    /// The answer to a request that goes no further, or `None`.
    fn refusal<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        if request.uri().path() != "/healthz" {
            let host = request
                .uri()
                .authority()
                .map(|a| Ok(a.as_str()))
                .or_else(|| request.headers().get(header::HOST).map(|h| h.to_str()));
            match host {
                // No host at all (HTTP/1.0): a browser always sends one, so this is
                // not a page led here by a name it resolved.
                None => {}
                Some(Ok(host)) if self.hosts.allows(host) => {}
                Some(Ok(host)) => return Some(misdirected(host)),
                Some(Err(_)) => return Some(misdirected("(not text)")),
            }
        }
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.body_limit as u64) {
            return Some(Problem::too_large(self.body_limit).into_response());
        }
        None
    }
}

fn misdirected(host: &str) -> Response<Body> {
    Problem::new(
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected",
        "Misdirected request",
        format!("this server does not answer for the host {host:?}"),
    )
    .into_response()
}

/// The hosts a request may name.
#[derive(Debug)]
enum HostRule {
    /// Any: `*` was allowed.
    Any,
    /// Bound to every address: an IP address or `localhost` on any port (a page that
    /// led a browser here through a name of its own always names a domain), and the
    /// hosts allowed besides.
    Every { extra: Vec<(String, Option<u16>)> },
    /// These names on the bound port, and the hosts allowed besides.
    Listed {
        port: u16,
        names: Vec<String>,
        extra: Vec<(String, Option<u16>)>,
    },
}

impl HostRule {
    fn new(bound: SocketAddr, extra: Vec<(String, Option<u16>)>) -> HostRule {
        let ip = bound.ip();
        if ip.is_unspecified() {
            return HostRule::Every { extra };
        }
        let mut names = Vec::new();
        if ip.is_loopback() {
            names.push("localhost".to_owned());
        }
        names.push(host_form(ip));
        HostRule::Listed {
            port: bound.port(),
            names,
            extra,
        }
    }

    fn allows(&self, host: &str) -> bool {
        let extra = match self {
            HostRule::Any => return true,
            HostRule::Every { extra } | HostRule::Listed { extra, .. } => extra,
        };
        let Some((name, given)) = split_host(host) else {
            return false;
        };
        // No port in `Host`: the scheme's, 80.
        let at = given.unwrap_or(80);
        let own = match self {
            HostRule::Listed { port, names, .. } => at == *port && names.contains(&name),
            _ => name == "localhost" || is_address(&name),
        };
        own || extra
            .iter()
            .any(|(n, p)| *n == name && p.is_none_or(|p| p == at))
    }
}

/// Whether a name (as [`split_host`] gives it) is an IPv4 address or a bracketed
/// IPv6 one.
fn is_address(name: &str) -> bool {
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
}

/// An address as it is written in a `Host` header.
fn host_form(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// `name[:port]` as (lower-case name without a final dot, port); `None` if it is not
/// a host.
fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip: std::net::Ipv6Addr = v6.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?.parse().ok()?),
        };
        (format!("[{ip}]"), port)
    } else if let Ok(ip) = host.parse::<std::net::Ipv6Addr>() {
        (format!("[{ip}]"), None)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port.parse().ok()?)),
            None => (host.to_owned(), None),
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let fits = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    fits.then_some((name, port))
}

/// Whether a connection has a request under way, shared by its reader (which times
/// heads and idleness) and its requests.
#[derive(Default)]
struct Activity {
    /// Requests taken in and not yet fully answered.
    busy: AtomicUsize,
    /// Requests taken in so far.
    taken: AtomicU64,
    /// Request bodies not yet read to their end (nor dropped).
    bodies: AtomicUsize,
    /// The reader waiting for bytes, woken when the last answer is sent so that its
    /// idle timer starts.
    reader: Mutex<Option<Waker>>,
}

/// A request under way, from its head until its answer has been sent.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Busy {
        activity.busy.fetch_add(1, Ordering::SeqCst);
        activity.taken.fetch_add(1, Ordering::SeqCst);
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            let waker = self
                .0
                .reader
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// Which timer a connection's reader runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No request under way and no byte of the next: the idle timeout.
    Idle,
    /// A new connection, or bytes of a head have come: the header-read timeout.
    Head,
    /// A handler reads a body: the idle timeout from the last byte.
    Body,
}

/// A request's body, counted in [`Activity::bodies`] until it has been read to its
/// end or dropped.
struct Watched {
    inner: Incoming,
    open: Option<Arc<Activity>>,
}

impl Watched {
    fn new(inner: Incoming, activity: &Arc<Activity>) -> Watched {
        // An empty body (a GET) is never waited for.
        let open = (!http_body::Body::is_end_stream(&inner)).then(|| {
            activity.bodies.fetch_add(1, Ordering::SeqCst);
            Arc::clone(activity)
        });
        Watched { inner, open }
    }

    fn close(&mut self) {
        if let Some(activity) = self.open.take() {
            activity.bodies.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.close();
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.close();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A TCP stream whose reads fail with `TimedOut` when a head takes too long or the
/// connection sits idle too long (hyper then closes it).
struct TimedIo {
    stream: TcpStream,
    activity: Arc<Activity>,
    settings: Settings,
    phase: Option<Phase>,
    taken: u64,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl TimedIo {
    fn new(stream: TcpStream, activity: Arc<Activity>, settings: Settings) -> TimedIo {
        TimedIo {
            stream,
            activity,
            settings,
            // A new connection owes its first head at once: a client that connects and
            // says nothing holds a capped slot only as long as a slow head would.
            phase: Some(Phase::Head),
            taken: 0,
            timer: Box::pin(tokio::time::sleep(settings.header_read_timeout)),
        }
    }

    fn arm(&mut self, phase: Phase) {
        let after = match phase {
            Phase::Idle | Phase::Body => self.settings.idle_timeout,
            Phase::Head => self.settings.header_read_timeout,
        };
        self.phase = Some(phase);
        self.timer
            .as_mut()
            .reset(tokio::time::Instant::now() + after);
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // A request taken in since the last read: its head was complete in time.
        let taken = this.activity.taken.load(Ordering::SeqCst);
        if taken != this.taken {
            this.taken = taken;
            this.phase = None;
        }
        let busy = this.activity.busy.load(Ordering::SeqCst) > 0;
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let got = buf.filled().len() > before;
                if busy {
                    // Each byte of a body starts its wait anew.
                    this.phase = None;
                } else if got && this.phase != Some(Phase::Head) {
                    this.arm(Phase::Head);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                *this
                    .activity
                    .reader
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
                // Checked again now that a finished answer would wake this reader.
                if busy || this.activity.busy.load(Ordering::SeqCst) > 0 {
                    // A handler waits for a body's bytes: the client must send them.
                    // (Otherwise the read only watches for the client going away,
                    // under an answer still being sent: no timer.)
                    if this.activity.bodies.load(Ordering::SeqCst) == 0 {
                        this.phase = None;
                        return Poll::Pending;
                    }
                    if this.phase != Some(Phase::Body) {
                        this.arm(Phase::Body);
                    }
                } else if this.phase.is_none() {
                    this.arm(Phase::Idle);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    let what = match this.phase {
                        Some(Phase::Head) => "the request's head did not arrive in time",
                        Some(Phase::Body) => "the request's body stopped coming",
                        _ => "the connection was idle too long",
                    };
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// One connection's requests: the gate, then the router; each answer's body holds
/// the request's [`Busy`] until it has been sent.
#[derive(Clone)]
struct Handler {
    app: Router,
    gate: Arc<Gate>,
    activity: Arc<Activity>,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Handler {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: Request<Incoming>) -> Answer {
        let busy = Busy::new(Arc::clone(&self.activity));
        if let Some(refusal) = self.gate.refusal(&request) {
            let answer = refusal.map(|inner| Tracked { inner, _busy: busy });
            return Box::pin(std::future::ready(Ok(answer)));
        }
        let app = self.app.clone();
        let activity = Arc::clone(&self.activity);
        Box::pin(async move {
            let request = request.map(|body| Body::new(Watched::new(body, &activity)));
            let answer = match app.oneshot(request).await {
                Ok(answer) => answer,
                Err(never) => match never {},
            };
            Ok(answer.map(|inner| Tracked { inner, _busy: busy }))
        })
    }
}

/// A response body that keeps its request counted as under way until it is dropped
/// (sent, or the connection gone).
struct Tracked {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(bound: &str, extra: &[&str]) -> HostRule {
        let extra = extra
            .iter()
            .map(|h| split_host(h).expect("a host"))
            .collect();
        HostRule::new(bound.parse().expect("an address"), extra)
    }

    #[test]
    fn a_loopback_server_answers_its_own_names_on_its_port_only() {
        let rule = listed("127.0.0.1:7420", &[]);
        for host in ["127.0.0.1:7420", "localhost:7420", "LocalHost.:7420"] {
            assert!(rule.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7420",
            "localhost",
            "127.0.0.1:7421",
            "[::1]:7420",
            "localhost:x",
            "",
        ] {
            assert!(!rule.allows(host), "{host}");
        }
        let v6 = listed("[::1]:80", &[]);
        assert!(v6.allows("[::1]"));
        assert!(v6.allows("localhost:80"));
        assert!(!v6.allows("127.0.0.1"));
    }

    #[test]
    fn allowed_hosts_match_any_port_unless_they_name_one() {
        let rule = listed("127.0.0.1:7420", &["spool.example", "proxy.example:8443"]);
        assert!(rule.allows("spool.example"));
        assert!(rule.allows("spool.example:443"));
        assert!(rule.allows("proxy.example:8443"));
        assert!(!rule.allows("proxy.example"));
        assert!(!rule.allows("evil.example"));
        assert_eq!(split_host("a b"), None);
        assert_eq!(split_host("[::1]:x"), None);
        assert_eq!(
            split_host("[0:0::1]:9"),
            Some(("[::1]".to_owned(), Some(9)))
        );
    }

    #[test]
    fn every_address_answers_ip_addresses_and_localhost_on_any_port_and_allowed_hosts() {
        for bound in ["0.0.0.0:7420", "[::]:7420"] {
            let rule = listed(bound, &["spool.example"]);
            for host in [
                "127.0.0.1:7420",
                "127.0.0.1",
                "192.168.1.20:8080",
                "10.0.0.1.",
                "[::1]",
                "[::1]:9000",
                "[fe80::1]:7420",
                "[::ffff:10.0.0.1]",
                "localhost",
                "LocalHost:8080",
                "spool.example",
                "spool.example:443",
            ] {
                assert!(rule.allows(host), "{bound}: {host}");
            }
            for host in [
                "evil.example",
                "evil.example:7420",
                "127.0.0.1.evil.example",
                "10.0.0.1.nip.io:7420",
                "localhost.evil.example",
                "127.1",
                "0x7f.0.0.1",
                "[::1",
                "",
            ] {
                assert!(!rule.allows(host), "{bound}: {host}");
            }
        }
        assert!(listed("0.0.0.0:7420", &[]).allows("[::1]:7420"));
        assert!(!listed("0.0.0.0:7420", &[]).allows("spool.example"));
    }
}
