//! The executor's tokio runtime and the tasks that keep its servers running
//! ([`Supervisor`]), and their stop: every server ended (a stdio server with its whole
//! process group) before the runtime goes.

use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::config::ServerConfig;
use crate::error::StartError;
use crate::group::{EOF_GRACE, KILL_WAIT, TERM_GRACE};
use crate::server::{ServerLink, supervise};

/// The name of the runtime's thread.
const THREAD: &str = "spool-mcp";

/// Past the servers' own graces, how much longer a stop waits for their tasks.
const STOP_MARGIN: Duration = Duration::from_secs(1);

/// The runtime that runs every server's connection and every call, and the servers'
/// tasks. Dropped, it stops them as [`Supervisor::stop`] does, then shuts the runtime
/// down.
pub(crate) struct Supervisor {
    /// `None` only while it is dropped.
    runtime: Option<Runtime>,
    /// `true` once the servers are to stop.
    stop: watch::Sender<bool>,
    /// A sender each server's task holds until it has ended its server (and one kept
    /// here, for the next task, until the stop), and the end that sees them all gone.
    ends: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

impl Supervisor {
    /// A runtime of one worker thread, with no server yet.
    ///
    /// # Errors
    /// [`StartError::Runtime`] if the runtime cannot be made.
    pub(crate) fn new() -> Result<Supervisor, StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(THREAD)
            .enable_all()
            .build()
            .map_err(|error| StartError::Runtime(error.to_string()))?;
        Ok(Supervisor {
            runtime: Some(runtime),
            stop: watch::channel(false).0,
            ends: Mutex::new(Some(mpsc::channel())),
        })
    }

    /// The runtime; `None` only while the supervisor is dropped.
    pub(crate) fn runtime(&self) -> Option<&Runtime> {
        self.runtime.as_ref()
    }

    /// Starts the task that keeps the server `config` running, until the stop.
    pub(crate) fn supervise(&self, config: ServerConfig) -> Option<Arc<ServerLink>> {
        let runtime = self.runtime.as_ref()?;
        let done = self.lock().as_ref().map(|(sender, _)| sender.clone())?;
        let _entered = runtime.enter();
        Some(supervise(config, self.stop.subscribe(), done))
    }

    /// Stops every server and waits until each has ended: the connection closed (a
    /// stdio server's standard input with it), then a stdio server's process group
    /// given SIGTERM and then SIGKILL while anything of it still runs (see `group`).
    /// Returns at once if the servers were stopped already; a caller that comes while
    /// another stops them waits with it.
    pub(crate) fn stop(&self) {
        let mut ends = self.lock();
        let Some((sender, receiver)) = ends.take() else {
            return;
        };
        drop(sender);
        self.stop.send_replace(true);
        if std::thread::current().name() == Some(THREAD) {
            // The last clone went on the runtime's own thread (a call's task): waiting
            // here would hold the thread the servers' tasks need to end them.
            return;
        }
        let deadline = Instant::now() + EOF_GRACE + TERM_GRACE + KILL_WAIT + STOP_MARGIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match receiver.recv_timeout(left) {
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    tracing::warn!(
                        "the MCP servers did not all stop within {:?}",
                        EOF_GRACE + TERM_GRACE + KILL_WAIT + STOP_MARGIN
                    );
                    return;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>> {
        self.ends.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
        // Ends what is left (calls still out) without waiting for it.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
