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

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use tokio::sync::{Semaphore, oneshot, watch};

use crate::router::router;
use crate::state::AppState;

mod conn;
mod refuse;
mod screen;

use conn::{Activity, ConnectionService, Settings, connection, until_draining};
use refuse::{MAX_REFUSING, refuse};
use screen::{HostRule, Screen, split_host};

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

/// Sets up a [`Server`]: made by [`Server::builder`], each setting has a default —
/// the address [`DEFAULT_ADDR`] (`127.0.0.1:7420`, loopback only; [`addr`](Self::addr)
/// sets another), two worker threads, and the timeouts and connection cap of the
/// `DEFAULT_*` constants — then [`start`](Self::start) binds and serves.
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
    /// Starts setting up a server. It listens on [`DEFAULT_ADDR`] (`127.0.0.1:7420`,
    /// loopback only) unless [`ServerBuilder::addr`] gives another address (port 0:
    /// one the system chooses, read back with [`Server::addr`]).
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
    /// Listens on `addr` instead of [`DEFAULT_ADDR`] (`127.0.0.1:7420`). Port 0 lets
    /// the system choose one ([`Server::addr`] says which); `0.0.0.0:PORT` listens on
    /// every interface, which makes the API reachable from other machines.
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
        let body_limit = state.inner.body_limit;
        let app = router(state.clone());
        self.start_app(app, body_limit, move || state.close_streams())
    }

    /// Binds the address and starts serving `app`, any router (one that routes among
    /// several [`AppState`]s' routers, for instance), with `body_limit` as the largest
    /// body a request may declare; `on_drain` is called once when a shutdown begins
    /// (to end event streams that would hold it). Returns once it listens.
    ///
    /// # Errors
    /// As [`start`](ServerBuilder::start).
    pub fn start_app(
        self,
        app: axum::Router,
        body_limit: usize,
        on_drain: impl Fn() + Send + Sync + 'static,
    ) -> Result<Server, ServeError> {
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
        let screen = Arc::new(Screen {
            hosts: if any {
                HostRule::Any
            } else {
                HostRule::new(addr, extra)
            },
            body_limit,
        });
        let control = Arc::new(Control {
            draining: watch::Sender::new(false),
            counts: Mutex::new(Counts::default()),
            changed: Condvar::new(),
            shutdown_timeout: self.shutdown_timeout,
            on_drain: Box::new(on_drain),
        });
        let settings = Settings {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
        };
        let (cut, cut_rx) = oneshot::channel::<()>();
        let serving = Arc::clone(&control);
        let thread = std::thread::Builder::new()
            .name("spool-http-server".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    accept_loop(listener, app, screen, settings, serving).await;
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

/// What a shutdown and the connections share: whether the server is draining, how
/// many connections are open, and by when the drain must be over.
struct Control {
    draining: watch::Sender<bool>,
    counts: Mutex<Counts>,
    changed: Condvar,
    shutdown_timeout: Duration,
    on_drain: Box<dyn Fn() + Send + Sync>,
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
            (self.on_drain)();
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
    screen: Arc<Screen>,
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
        let service = ConnectionService {
            app: app.clone(),
            screen: Arc::clone(&screen),
            activity: Arc::new(Activity::default()),
        };
        let draining = control.draining.subscribe();
        tokio::spawn(async move {
            connection(stream, service, settings, draining).await;
            drop(permit);
            drop(open);
        });
    }
    // The listener is dropped here: new connections are refused by the system.
}
