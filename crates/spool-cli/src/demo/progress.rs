//! Progress on stderr while the demo runs: a thread that reads the runtime's counters
//! through its handle and prints one line, overwritten in place on a terminal and as
//! plain lines (once a second) otherwise.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use spool_core::Stats;
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
                    let Ok(stats) = handle.stats() else { return };
                    let line = line(&stats, total, started.elapsed());
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
        let line = line(stats, self.total, elapsed);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            writeln!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
    }
}

/// One progress line.
fn line(stats: &Stats, total: usize, elapsed: Duration) -> String {
    let done = stats.completed + stats.failed + stats.canceled;
    let in_flight = stats
        .requests
        .saturating_sub(stats.answers + stats.dropped_answers);
    format!(
        "[{:>6.2}s] {done:>5}/{total} agents done ({} ok, {} failed) | {} requests, {} answered, {in_flight:>4} in flight",
        elapsed.as_secs_f64(),
        stats.completed,
        stats.failed,
        stats.requests,
        stats.answers,
    )
}
