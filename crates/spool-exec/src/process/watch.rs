//! A run's watcher: it collects what the helper threads report (the program's end, its
//! status, its output), kills what is left of the group, and answers.

use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use serde_json::{Value, json};
use spool_core::{Replier, RequestError, RequestKey, Response};

use super::config::ProcessConfig;
use super::groups::Groups;
use super::output::Captured;

/// What the helper threads tell a run's watcher.
pub(super) enum Event {
    /// The program ended and is not reaped yet (its group id cannot be reused).
    Exited,
    /// The program was reaped, with its status.
    Reaped(io::Result<ExitStatus>),
    /// Stdout and stderr, read to their end or to the end of the grace period.
    Output { stdout: Captured, stderr: Captured },
}

/// One run's watcher: collects what the helpers report and answers.
pub(super) struct Watch {
    pub(super) run: u64,
    pub(super) groups: Arc<Groups>,
    pub(super) config: Arc<ProcessConfig>,
    pub(super) key: RequestKey,
    pub(super) replier: Replier,
    pub(super) deadline: Option<Instant>,
}

impl Watch {
    /// Collects the run's end and output and answers; `stop` is closed as soon as the
    /// program has ended (and at the latest when this returns), so the pipes' thread
    /// gives up on output that never ends.
    pub(super) fn run(self, inbox: &Receiver<Event>, permit: Sender<()>, stop: UnixStream) {
        let mut permit = Some(permit);
        let mut stop = Some(stop);
        let mut ended = false;
        let mut status = None;
        let mut output = None;
        while status.is_none() || output.is_none() {
            let event = match self.deadline {
                Some(at) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Output { stdout, stderr }) => output = Some((stdout, stderr)),
                Ok(Event::Exited) => {
                    ended = true;
                    let ours = self.groups.finish(self.run);
                    // Let the waiter reap the leader now its group is dead, and the
                    // pipes' thread give up on what still holds the output open.
                    permit = None;
                    stop = None;
                    if !ours {
                        return;
                    }
                }
                Ok(Event::Reaped(result)) => {
                    if !ended {
                        ended = true;
                        stop = None;
                        if !self.groups.finish(self.run) {
                            return;
                        }
                    }
                    match result {
                        Ok(exit) => status = Some(exit),
                        Err(error) => {
                            self.answer(Err(RequestError::failed(format!(
                                "waiting for `{}` failed: {error}",
                                self.config.program
                            ))));
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Past the timeout. Once ended, the group is dead already (and the
                    // output at most the grace period away, so this is a near miss).
                    if ended || self.groups.finish(self.run) {
                        tracing::debug!(program = %self.config.program, "process timed out; group killed");
                        self.answer(Err(RequestError::Timeout {
                            after: self.config.timeout,
                        }));
                    }
                    return;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Every helper is gone without reporting: one of them panicked.
                    if ended || self.groups.finish(self.run) {
                        self.answer(Err(RequestError::failed(format!(
                            "lost track of `{}`",
                            self.config.program
                        ))));
                    }
                    return;
                }
            }
        }
        drop(permit);
        drop(stop);
        let (Some(exit), Some((stdout, stderr))) = (status, output) else {
            return;
        };
        let (stdout, stdout_cut) = stdout.render();
        let (stderr, stderr_cut) = stderr.render();
        self.answer(Ok(json!({
            "status": exit.code(),
            "signal": exit.signal(),
            "stdout": stdout,
            "stderr": stderr,
            "truncated": {"stdout": stdout_cut, "stderr": stderr_cut},
        })));
    }

    fn answer(&self, result: Result<Value, RequestError>) {
        // `false`: the runtime is gone, and nobody is left to tell.
        let _ = self.replier.send(Response::new(self.key, result));
    }
}
