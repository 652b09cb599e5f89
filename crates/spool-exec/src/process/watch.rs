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

/// What a run's watcher has seen so far, and what it still holds for the helpers.
///
/// Fields drop in declaration order: when the watcher returns early, the stop socket is
/// closed before the waiter's permit is given back.
struct Seen {
    /// Stdout and stderr, once reported.
    output: Option<(Captured, Captured)>,
    /// The program's exit status, once reaped.
    status: Option<ExitStatus>,
    /// Whether the program has ended (its group killed).
    ended: bool,
    /// Closed (dropped) once the program has ended: the pipes' thread then gives up on
    /// output that never ends.
    stop: Option<UnixStream>,
    /// Dropped once the group is dead: the waiter may then reap the leader.
    permit: Option<Sender<()>>,
}

impl Watch {
    /// Collects the run's end and output and answers; `stop` is closed as soon as the
    /// program has ended (and at the latest when this returns), so the pipes' thread
    /// gives up on output that never ends.
    pub(super) fn run(self, inbox: &Receiver<Event>, permit: Sender<()>, stop: UnixStream) {
        let mut seen = Seen {
            output: None,
            status: None,
            ended: false,
            stop: Some(stop),
            permit: Some(permit),
        };
        while seen.status.is_none() || seen.output.is_none() {
            let go_on = match self.next_event(inbox) {
                Ok(Event::Output { stdout, stderr }) => {
                    seen.output = Some((stdout, stderr));
                    true
                }
                Ok(Event::Exited) => self.exited(&mut seen),
                Ok(Event::Reaped(result)) => self.reaped(&mut seen, result),
                Err(RecvTimeoutError::Timeout) => {
                    self.timed_out(seen.ended);
                    false
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.lost(seen.ended);
                    false
                }
            };
            if !go_on {
                return;
            }
        }
        drop(seen.permit);
        drop(seen.stop);
        let (Some(exit), Some((stdout, stderr))) = (seen.status, seen.output) else {
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

    /// The next event from the helpers, waiting until the run's deadline if it has one.
    fn next_event(&self, inbox: &Receiver<Event>) -> Result<Event, RecvTimeoutError> {
        match self.deadline {
            Some(at) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        }
    }

    /// The program ended: kills what is left of its group and lets the waiter reap it
    /// and the pipes' thread give up; `false` if the run was no longer ours (it timed
    /// out or was canceled meanwhile) and nothing is to be answered.
    fn exited(&self, seen: &mut Seen) -> bool {
        seen.ended = true;
        let ours = self.groups.finish(self.run);
        // Let the waiter reap the leader now its group is dead, and the
        // pipes' thread give up on what still holds the output open.
        seen.permit = None;
        seen.stop = None;
        ours
    }

    /// The program was reaped with `result` (ended first, if that was not reported);
    /// `false` when the run is over: no longer ours, or the wait failed (answered).
    fn reaped(&self, seen: &mut Seen, result: io::Result<ExitStatus>) -> bool {
        if !seen.ended {
            seen.ended = true;
            seen.stop = None;
            if !self.groups.finish(self.run) {
                return false;
            }
        }
        match result {
            Ok(exit) => {
                seen.status = Some(exit);
                true
            }
            Err(error) => {
                self.answer(Err(RequestError::failed(format!(
                    "waiting for `{}` failed: {error}",
                    self.config.program
                ))));
                false
            }
        }
    }

    /// Past the deadline: answers a timeout if the run is still ours (its group killed
    /// now, or dead already once `ended`, the output at most the grace period away, so
    /// this is a near miss).
    fn timed_out(&self, ended: bool) {
        if ended || self.groups.finish(self.run) {
            tracing::debug!(program = %self.config.program, "process timed out; group killed");
            self.answer(Err(RequestError::Timeout {
                after: self.config.timeout,
            }));
        }
    }

    /// Every helper is gone without reporting (one of them panicked): answers a failure
    /// if the run is still ours.
    fn lost(&self, ended: bool) {
        if ended || self.groups.finish(self.run) {
            self.answer(Err(RequestError::failed(format!(
                "lost track of `{}`",
                self.config.program
            ))));
        }
    }

    fn answer(&self, result: Result<Value, RequestError>) {
        // `false`: the runtime is gone, and nobody is left to tell.
        let _ = self.replier.send(Response::new(self.key, result));
    }
}
