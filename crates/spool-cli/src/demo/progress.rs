//! Progress on stderr while the demo runs: a thread that reads the runtime's queue state
//! through its handle and prints one line, overwritten in place on a terminal and as
//! plain lines (once a second) otherwise. While a 429 back-off holds requests, the line
//! says so and until when, rather than counting them in flight.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use spool_core::{Stats, Time};
use spool_runtime::RuntimeHandle;

/// The progress thread, running until [`Progress::stop`].
#[derive(Debug)]
pub(crate) struct Progress {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
    terminal: bool,
    total: usize,
}

impl Progress {
    /// Starts printing the progress of `total` agents, read through `handle`.
    ///
    /// # Errors
    /// If the operating system refuses to start the thread.
    pub(crate) fn start(handle: RuntimeHandle, total: usize) -> std::io::Result<Progress> {
        let terminal = std::io::stderr().is_terminal();
        let interval = if terminal {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        };
        let started = Instant::now();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("spool-progress".to_owned())
            .spawn(move || {
                // Ends on `stop` (or its sender dropped), or when the runtime is gone.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let Ok(state) = handle.queue_state() else {
                        return;
                    };
                    let requests = Requests {
                        held: state.held_requests,
                        backoff_until: state.backoff_until,
                    };
                    let line = line(&state.stats, requests, total, started.elapsed());
                    let mut err = std::io::stderr().lock();
                    let _ = if terminal {
                        write!(err, "\r{line}\x1b[K")
                    } else {
                        writeln!(err, "{line}")
                    };
                    let _ = err.flush();
                }
            })?;
        Ok(Progress {
            stop,
            thread: Some(thread),
            terminal,
            total,
        })
    }

    /// Tells the thread to stop. It may be waiting for the runtime's loop to answer a
    /// stats query, so join it (with [`Progress::finish`]) only after the runtime has
    /// been dropped, which answers that query with an error.
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(());
    }

    /// Waits for the thread and prints the last line, from the run's final counters
    /// and wall time.
    pub(crate) fn finish(mut self, stats: &Stats, elapsed: Duration) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let line = line(stats, Requests::default(), self.total, elapsed);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            writeln!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
    }
}

/// Where the requests not answered yet are, beside the counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Requests {
    /// Held back by a limiter (waiting for room, or backing off after a 429), not with
    /// an executor.
    held: usize,
    /// The end of the 429 back-off running, if one is.
    backoff_until: Option<Time>,
}

/// One progress line.
fn line(stats: &Stats, requests: Requests, total: usize, elapsed: Duration) -> String {
    let done = stats.completed + stats.failed + stats.canceled;
    let unanswered = stats
        .requests
        .saturating_sub(stats.answers + stats.dropped_answers);
    let held = u64::try_from(requests.held).unwrap_or(u64::MAX);
    let in_flight = unanswered.saturating_sub(held);
    let mut line = format!(
        "[{:>6.2}s] {done:>5}/{total} agents done ({} ok, {} failed) | {} requests, {} answered, {in_flight:>4} in flight",
        elapsed.as_secs_f64(),
        stats.completed,
        stats.failed,
        stats.requests,
        stats.answers,
    );
    if held > 0 {
        line.push_str(&format!(", {held} held"));
    }
    if let Some(until) = requests.backoff_until {
        line.push_str(&format!(", backing off until {until} after a 429"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> Stats {
        let mut stats = Stats::default();
        stats.completed = 10;
        stats.failed = 2;
        stats.requests = 52;
        stats.answers = 40;
        stats
    }

    #[test]
    fn requests_not_answered_are_in_flight_when_nothing_holds_them() {
        assert_eq!(
            line(
                &stats(),
                Requests::default(),
                20,
                Duration::from_millis(1500)
            ),
            "[  1.50s]    12/20 agents done (10 ok, 2 failed) | 52 requests, 40 answered,   12 in flight"
        );
    }

    /// Issue 10, defect 3: during a back-off the requests held are not "in flight", and
    /// the line says until when the kind backs off.
    #[test]
    fn a_back_off_is_shown_with_its_end_instead_of_requests_in_flight() {
        let requests = Requests {
            held: 12,
            backoff_until: Some(Time::from_duration(Duration::from_millis(301_250))),
        };
        assert_eq!(
            line(&stats(), requests, 20, Duration::from_secs(2)),
            "[  2.00s]    12/20 agents done (10 ok, 2 failed) | 52 requests, 40 answered,    0 in flight, 12 held, backing off until 301.250s after a 429"
        );
    }
}
