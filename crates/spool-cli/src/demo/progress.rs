//! Progress on stderr while the demo runs: a thread that reads the runtime's queue state
//! through its handle and shows it. On a terminal it is an `indicatif` progress bar
//! (agents done of all, their rate and the time left, and the counters beside it),
//! redrawn four times a second; otherwise (a pipe, a file, a test) it is a plain line
//! once a second, with the rate and the time left at its end. While a 429 back-off
//! holds requests, the counters say so and until when, rather than counting them in
//! flight. The last line, from the run's final counters, is plain either way.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use spool_core::{Stats, Time};
use spool_runtime::RuntimeHandle;

/// The bar's layout: agents done of all, rate and time left, then the counters.
const BAR_TEMPLATE: &str =
    "[{elapsed_precise}] {bar:30.cyan/blue} {pos:>5}/{len} agents done ({rate}, ETA {eta}) | {msg}";

/// The progress thread, running until [`Progress::stop`].
#[derive(Debug)]
pub(crate) struct Progress {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
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
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(u64::try_from(total).unwrap_or(u64::MAX)),
                ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = ProgressStyle::with_template(BAR_TEMPLATE) {
                let style = style
                    .with_key(
                        "rate",
                        |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                            let _ = write!(out, "{:.1} agents/s", state.per_sec());
                        },
                    )
                    .progress_chars("=> ");
                bar.set_style(style);
            }
            bar
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("spool-progress".to_owned())
            .spawn(move || {
                // Ends on `stop` (or its sender dropped), or when the runtime is gone.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let Ok(state) = handle.queue_state() else {
                        break;
                    };
                    let requests = Requests {
                        held: state.held_requests,
                        backoff_until: state.backoff_until,
                    };
                    match &bar {
                        Some(bar) => {
                            bar.set_position(done(&state.stats));
                            bar.set_message(counters(&state.stats, requests));
                        }
                        None => {
                            let mut line = line(&state.stats, requests, total, started.elapsed());
                            line.push_str(&pace(done(&state.stats), total, started.elapsed()));
                            let mut err = std::io::stderr().lock();
                            let _ = writeln!(err, "{line}");
                            let _ = err.flush();
                        }
                    }
                }
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
            })?;
        Ok(Progress {
            stop,
            thread: Some(thread),
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
        let _ = writeln!(err, "{line}");
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

/// Agents that have ended, one way or another.
fn done(stats: &Stats) -> u64 {
    stats.completed + stats.failed + stats.canceled
}

/// The counters beside the agents done (which the bar shows itself): how they ended,
/// and where the requests are.
fn counters(stats: &Stats, requests: Requests) -> String {
    format!(
        "{} ok, {} failed | {}",
        stats.completed,
        stats.failed,
        requests_text(stats, requests)
    )
}

/// Where the requests are: sent, answered, in flight, held, and a back-off's end.
fn requests_text(stats: &Stats, requests: Requests) -> String {
    let unanswered = stats
        .requests
        .saturating_sub(stats.answers + stats.dropped_answers);
    let held = u64::try_from(requests.held).unwrap_or(u64::MAX);
    let in_flight = unanswered.saturating_sub(held);
    let mut text = format!(
        "{} requests, {} answered, {in_flight:>4} in flight",
        stats.requests, stats.answers,
    );
    if held > 0 {
        text.push_str(&format!(", {held} held"));
    }
    if let Some(until) = requests.backoff_until {
        text.push_str(&format!(", backing off until {until} after a 429"));
    }
    text
}

/// One plain progress line.
fn line(stats: &Stats, requests: Requests, total: usize, elapsed: Duration) -> String {
    format!(
        "[{:>6.2}s] {:>5}/{total} agents done ({} ok, {} failed) | {}",
        elapsed.as_secs_f64(),
        done(stats),
        stats.completed,
        stats.failed,
        requests_text(stats, requests),
    )
}

/// The rate so far and the time left at that rate, for a periodic line:
/// ` | 8.0 agents/s, ETA 3s`; the time left is `?` until an agent has ended.
fn pace(done: u64, total: usize, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    };
    let left = (total as u64).saturating_sub(done);
    let eta = if left == 0 {
        "0s".to_owned()
    } else if rate > 0.0 {
        format!("{}s", (left as f64 / rate).ceil() as u64)
    } else {
        "?".to_owned()
    };
    format!(" | {rate:.1} agents/s, ETA {eta}")
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

    /// The periodic lines off a terminal end with the rate so far and the time left.
    #[test]
    fn a_plain_line_ends_with_the_rate_and_the_time_left() {
        let at = Duration::from_millis(1500);
        let mut line = line(&stats(), Requests::default(), 20, at);
        line.push_str(&pace(12, 20, at));
        assert_eq!(
            line,
            "[  1.50s]    12/20 agents done (10 ok, 2 failed) | 52 requests, 40 answered,   12 in flight | 8.0 agents/s, ETA 1s"
        );
        assert_eq!(
            pace(0, 20, Duration::from_secs(2)),
            " | 0.0 agents/s, ETA ?"
        );
        assert_eq!(
            pace(20, 20, Duration::from_secs(2)),
            " | 10.0 agents/s, ETA 0s"
        );
        assert_eq!(pace(0, 20, Duration::ZERO), " | 0.0 agents/s, ETA ?");
    }

    /// The bar's message: the counters without the agents done, which the bar shows.
    #[test]
    fn the_bar_shows_the_counters_beside_it() {
        assert_eq!(
            counters(&stats(), Requests::default()),
            "10 ok, 2 failed | 52 requests, 40 answered,   12 in flight"
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
