//! A run's pipes, served by one thread that never blocks on any of them: stdout and
//! stderr read, the input written, and a bounded grace period once the run has ended.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::{ChildStderr, ChildStdin, ChildStdout};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::output::{Captured, Flow, read_some};
use super::watch::Event;

/// How long the output may still take to reach its end once the command has ended (or
/// was killed) and what was left of its group was killed. Past it, what was read is the
/// output and the pipes are closed: a process that left the group (a new session) may
/// hold them open for as long as it likes, and neither the answer nor the tool's threads
/// wait for it.
const OUTPUT_GRACE: Duration = Duration::from_millis(100);

/// How many reads (of 8 KiB) of each output, at most, take in what is still in the
/// pipes at the end of the grace period: 2 MiB, many times what a pipe holds.
const FINAL_READS: usize = 256;

/// The request's input on its way to the program.
pub(super) struct Input {
    pub(super) pipe: ChildStdin,
    pub(super) text: Vec<u8>,
    pub(super) written: usize,
}

/// A run's pipes, all served by one thread that never blocks on any of them, so that it
/// can stop when told, whoever else holds them.
pub(super) struct Pipes {
    pub(super) stdout: Option<ChildStdout>,
    pub(super) stderr: Option<ChildStderr>,
    pub(super) stdin: Option<Input>,
    /// How many bytes of each output are kept.
    pub(super) cap: usize,
}

/// What one pass over the pipes found ready.
#[derive(Default)]
struct Ready {
    stdout: bool,
    stderr: bool,
    stdin: bool,
    stop: bool,
}

impl Pipes {
    /// Reads stdout and stderr to their end and writes the input, and reports the output
    /// once both ended; when `stop` is closed (the run has ended), goes on for
    /// [`OUTPUT_GRACE`] at most, then reports what was read and closes the pipes. A
    /// program that exits without reading all its input is no error.
    pub(super) fn serve(mut self, stop: &UnixStream, events: &Sender<Event>) {
        if !self.make_nonblocking() {
            return;
        }
        if self
            .stdin
            .as_ref()
            .is_some_and(|input| input.text.is_empty())
        {
            self.stdin = None;
        }
        let mut stdout = Captured::default();
        let mut stderr = Captured::default();
        let mut reported = false;
        let mut stopped = false;
        let mut give_up_at: Option<Instant> = None;
        let mut buffer = [0u8; 8192];
        loop {
            if !reported && self.stdout.is_none() && self.stderr.is_none() {
                reported = true;
                let output = Event::Output {
                    stdout: std::mem::take(&mut stdout),
                    stderr: std::mem::take(&mut stderr),
                };
                let _ = events.send(output);
            }
            if reported && (self.stdin.is_none() || stopped) {
                return;
            }
            let Some(timeout) = poll_timeout(give_up_at) else {
                break;
            };
            let ready = match self.wait(stop, stopped, timeout) {
                Ok(ready) => ready,
                Err(Errno::EINTR) => continue,
                Err(error) => {
                    tracing::warn!(%error, "cannot poll the pipes of a process");
                    break;
                }
            };
            self.serve_ready(&ready, &mut stdout, &mut stderr, &mut buffer);
            if ready.stop && !stopped {
                stopped = true;
                let now = Instant::now();
                give_up_at = Some(now.checked_add(OUTPUT_GRACE).unwrap_or(now));
            }
        }
        if !reported {
            self.drain(&mut stdout, &mut stderr, &mut buffer);
            let _ = events.send(Event::Output { stdout, stderr });
        }
    }

    /// Makes our ends of the pipes non-blocking; `false` (with a warning) if one cannot
    /// be.
    fn make_nonblocking(&self) -> bool {
        for fd in [
            self.stdout.as_ref().map(AsFd::as_fd),
            self.stderr.as_ref().map(AsFd::as_fd),
            self.stdin.as_ref().map(|input| input.pipe.as_fd()),
        ]
        .into_iter()
        .flatten()
        {
            // Our ends only (the child's are other open files): the program's pipes stay
            // as they were.
            if let Err(error) = fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)) {
                tracing::warn!(%error, "cannot make a pipe of a process non-blocking");
                return false;
            }
        }
        true
    }

    /// Reads the outputs and writes the input that `ready` found ready, closing each
    /// that has ended (an input written to the end, or that the program reads no more).
    fn serve_ready(
        &mut self,
        ready: &Ready,
        stdout: &mut Captured,
        stderr: &mut Captured,
        buffer: &mut [u8; 8192],
    ) {
        if ready.stdout && read_some(&mut self.stdout, stdout, self.cap, buffer) == Flow::Ended {
            self.stdout = None;
        }
        if ready.stderr && read_some(&mut self.stderr, stderr, self.cap, buffer) == Flow::Ended {
            self.stderr = None;
        }
        if ready.stdin && self.stdin.as_mut().is_none_or(Input::write_some) {
            // Written to the end, or the program will read no more: closed.
            self.stdin = None;
        }
    }

    /// Takes in what is still in the output pipes at the end of the grace period.
    fn drain(&mut self, stdout: &mut Captured, stderr: &mut Captured, buffer: &mut [u8; 8192]) {
        // What the ended processes wrote is in the pipes already, however late this
        // thread ran: take it, but not more than a pipe holds many times over, from a
        // process that keeps writing.
        for _ in 0..FINAL_READS {
            if read_some(&mut self.stdout, stdout, self.cap, buffer) != Flow::Data {
                break;
            }
        }
        for _ in 0..FINAL_READS {
            if read_some(&mut self.stderr, stderr, self.cap, buffer) != Flow::Data {
                break;
            }
        }
    }

    /// Waits until a pipe, or `stop` (unless already `stopped`), is ready, or `timeout`.
    fn wait(&self, stop: &UnixStream, stopped: bool, timeout: PollTimeout) -> nix::Result<Ready> {
        let input = PollFlags::POLLIN;
        let candidates = [
            self.stdout.as_ref().map(|pipe| (pipe.as_fd(), input)),
            self.stderr.as_ref().map(|pipe| (pipe.as_fd(), input)),
            self.stdin
                .as_ref()
                .map(|stdin| (stdin.pipe.as_fd(), PollFlags::POLLOUT)),
            (!stopped).then(|| (stop.as_fd(), input)),
        ];
        let mut fds = Vec::with_capacity(candidates.len());
        let mut which = Vec::with_capacity(candidates.len());
        for (i, candidate) in candidates.into_iter().enumerate() {
            if let Some((fd, events)) = candidate {
                fds.push(PollFd::new(fd, events));
                which.push(i);
            }
        }
        poll(&mut fds, timeout)?;
        let mut ready = Ready::default();
        for (fd, i) in fds.iter().zip(which) {
            // Readable, writable, or closed at the other end: each is worth a look.
            if fd.revents().is_some_and(|events| !events.is_empty()) {
                match i {
                    0 => ready.stdout = true,
                    1 => ready.stderr = true,
                    2 => ready.stdin = true,
                    _ => ready.stop = true,
                }
            }
        }
        Ok(ready)
    }
}

/// How long the next poll may wait: for ever before the run has ended, then what is
/// left of the grace period ending at `give_up_at`; `None` once it is over.
fn poll_timeout(give_up_at: Option<Instant>) -> Option<PollTimeout> {
    match give_up_at {
        None => Some(PollTimeout::NONE),
        Some(at) => {
            let left = at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            Some(PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX))
        }
    }
}

impl Input {
    /// Writes what the pipe takes now; `true` when it is all written or the pipe is
    /// broken (the program and whoever shares its input closed it).
    fn write_some(&mut self) -> bool {
        match self.pipe.write(&self.text[self.written..]) {
            Ok(n) => {
                self.written += n;
                self.written >= self.text.len()
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                false
            }
            Err(_) => true,
        }
    }
}
