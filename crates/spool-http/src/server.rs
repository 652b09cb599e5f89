//! `Server`: the router on a tokio runtime of its own, on a thread of its own, so the
//! run loop's thread and the embedder's threads stay as they are.

use std::fmt;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::routes::router;
use crate::state::AppState;

/// The address `spool serve` binds unless told otherwise: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";

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
}

/// Sets up a [`Server`].
#[derive(Debug)]
pub struct ServerBuilder {
    addr: SocketAddr,
    workers: usize,
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
/// runtime.run(); // until a handle calls shutdown
/// server.shutdown();
/// ```
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts setting up a server on [`DEFAULT_ADDR`].
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            addr: SocketAddr::from(([127, 0, 0, 1], 7420)),
            workers: 2,
        }
    }

    /// The address it listens on (the port the system chose, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking connections, lets the requests going finish, and waits.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
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

    /// Binds the address and starts serving `state`'s router; returns once it
    /// listens.
    ///
    /// # Errors
    /// [`ServeError::Bind`] if the address cannot be bound, [`ServeError::Runtime`]
    /// if the runtime or its thread cannot start.
    pub fn start(self, state: AppState) -> Result<Server, ServeError> {
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
        let (stop, stopped) = oneshot::channel::<()>();
        let streams = state.clone();
        let app = router(state);
        let thread = std::thread::Builder::new()
            .name("spool-http-server".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let served = axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = stopped.await;
                            streams.close_streams();
                        })
                        .await;
                    if let Err(error) = served {
                        tracing::error!(%error, "the HTTP server stopped");
                    }
                });
                // Open event streams do not hold the process up.
                runtime.shutdown_background();
            })
            .map_err(ServeError::Runtime)?;
        Ok(Server {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}
