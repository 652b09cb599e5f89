//! One connection: hyper's HTTP/1 over a stream that times request heads, idleness
//! and stalled bodies, and the handler that counts the requests under way.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::ServiceExt;

use super::screen::Screen;

/// Serves one connection until it closes, or until the server drains: then the
/// request under way is answered and the connection closed.
pub(super) async fn connection(
    stream: TcpStream,
    service: ConnectionService,
    settings: Settings,
    mut draining: watch::Receiver<bool>,
) {
    let io = TimedIo::new(stream, Arc::clone(&service.activity), settings);
    let conn = http1::Builder::new()
        .keep_alive(true)
        // The head's timer is `TimedIo`'s: hyper's would run from the moment a
        // kept-alive connection waits for its next request.
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), service);
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

/// The limits each connection runs under.
#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub(super) header_read_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) max_connections: usize,
}

/// Returns once the server drains (or can no longer be told to).
pub(super) async fn until_draining(draining: &mut watch::Receiver<bool>) {
    let _ = draining.wait_for(|d| *d).await;
}

/// Whether a connection has a request under way, shared by its reader (which times
/// heads and idleness) and its requests.
#[derive(Default)]
pub(super) struct Activity {
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
enum ReadTimer {
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
    armed: Option<ReadTimer>,
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
            // says nothing holds one of the capped connections only as long as a slow
            // head would.
            armed: Some(ReadTimer::Head),
            taken: 0,
            timer: Box::pin(tokio::time::sleep(settings.header_read_timeout)),
        }
    }

    fn arm(&mut self, which: ReadTimer) {
        let after = match which {
            ReadTimer::Idle | ReadTimer::Body => self.settings.idle_timeout,
            ReadTimer::Head => self.settings.header_read_timeout,
        };
        self.armed = Some(which);
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
            this.armed = None;
        }
        let busy = this.activity.busy.load(Ordering::SeqCst) > 0;
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let got = buf.filled().len() > before;
                if busy {
                    // Each byte of a body starts its wait anew.
                    this.armed = None;
                } else if got && this.armed != Some(ReadTimer::Head) {
                    this.arm(ReadTimer::Head);
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
                        this.armed = None;
                        return Poll::Pending;
                    }
                    if this.armed != Some(ReadTimer::Body) {
                        this.arm(ReadTimer::Body);
                    }
                } else if this.armed.is_none() {
                    this.arm(ReadTimer::Idle);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    let what = match this.armed {
                        Some(ReadTimer::Head) => "the request's head did not arrive in time",
                        Some(ReadTimer::Body) => "the request's body stopped coming",
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

/// One connection's requests: the screen, then the router; each answer's body holds
/// the request's [`Busy`] until it has been sent.
#[derive(Clone)]
pub(super) struct ConnectionService {
    pub(super) app: Router,
    pub(super) screen: Arc<Screen>,
    pub(super) activity: Arc<Activity>,
}

/// A request's response, once the router has made it.
pub(super) type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<Incoming>) -> ResponseFuture {
        let busy = Busy::new(Arc::clone(&self.activity));
        if let Some(refusal) = self.screen.refusal(&request) {
            let response = refusal.map(|inner| Tracked { inner, _busy: busy });
            return Box::pin(std::future::ready(Ok(response)));
        }
        let app = self.app.clone();
        let activity = Arc::clone(&self.activity);
        Box::pin(async move {
            let request = request.map(|body| Body::new(Watched::new(body, &activity)));
            let response = match app.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok(response.map(|inner| Tracked { inner, _busy: busy }))
        })
    }
}

/// A response body that keeps its request counted as under way until it is dropped
/// (sent, or the connection gone).
pub(super) struct Tracked {
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
