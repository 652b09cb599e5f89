//! Progress on stderr while the demo runs: a thread that reads the runtime's queue state
//! through its handle and shows it. On a terminal it is an `indicatif` progress bar
//! (agents done of all, their rate and the time left, and the counters beside it),
//! redrawn four times a second; otherwise (a pipe, a file, a test) it is a plain line
//! once a second, with the rate and the time left at its end. The rate is smoothed
//! ([`Pace`]) and the time left is `?` until an agent has ended. While a 429 back-off
//! holds requests, the counters say so and until when, rather than counting them in
//! flight. The last line, from the run's final counters (the ones the summary prints),
//! is plain either way.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use spool_core::{Stats, Time};
use spool_runtime::RuntimeHandle;

/// The bar's layout: agents done of all, rate and time left ([`Pace`], as the
/// prefix), then the counters.
const BAR_TEMPLATE: &str =
    "[{elapsed_precise}] {bar:30.cyan/blue} {pos:>5}/{len} agents done ({prefix}) | {msg}";

/// How fast the smoothed rate follows the latest one: the weight of what was seen
/// falls to 1/e in this long.
const SMOOTHING: Duration = Duration::from_secs(5);

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
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(Pace::default().text(0, total));
            bar
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("spool-progress".to_owned())
            .spawn(move || {
                let mut pace = Pace::default();
                // Ends on `stop` (or its sender dropped), or when the runtime is gone.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let Ok(state) = handle.queue_state() else {
                        break;
                    };
                    let requests = Requests {
                        held: state.held_requests,
                        backoff_until: state.backoff_until,
                    };
                    let elapsed = started.elapsed();
                    let done = done(&state.stats);
                    pace.observe(elapsed, done);
                    match &bar {
                        Some(bar) => {
                            bar.set_position(done);
                            bar.set_prefix(pace.text(done, total));
                            bar.set_message(counters(&state.stats, requests));
                        }
                        None => {
                            let mut line = line(&state.stats, requests, total, elapsed);
                            line.push_str(" | ");
                            line.push_str(&pace.text(done, total));
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
    /// and wall time, and the requests `held` by a limiter when it stopped (none for a
    /// run that finished; some for one stopped by a signal).
    pub(crate) fn finish(mut self, stats: &Stats, elapsed: Duration, held: usize) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let requests = Requests {
            held,
            backoff_until: None,
        };
        let line = line(stats, requests, self.total, elapsed);
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

/// The rate at which agents end, smoothed, and the time left at that rate: fed the
/// agents done at each redraw, it knows no rate (and says `ETA ?`) until an agent has
/// ended; the first rate is the average since the start, and each later one moves
/// towards the rate since the last redraw by a weight that grows with the time
/// between them ([`SMOOTHING`]), so that agents ending in bursts do not make the time
/// left jump.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Pace {
    /// The last redraw: the time since the start, and the agents done then.
    last: Option<(Duration, u64)>,
    /// Agents a second, once one has ended.
    rate: Option<f64>,
}

impl Pace {
    /// Takes the agents `done` at `elapsed` since the start (times only go forward).
    pub(crate) fn observe(&mut self, elapsed: Duration, done: u64) {
        let since = self
            .last
            .map_or(elapsed, |(at, _)| elapsed.saturating_sub(at));
        if since.is_zero() {
            return;
        }
        match self.rate {
            None if done > 0 => self.rate = Some(done as f64 / elapsed.as_secs_f64()),
            None => {}
            Some(rate) => {
                let before = self.last.map_or(0, |(_, done)| done);
                let latest = done.saturating_sub(before) as f64 / since.as_secs_f64();
                let weight = 1.0 - (-since.as_secs_f64() / SMOOTHING.as_secs_f64()).exp();
                self.rate = Some(rate + weight * (latest - rate));
            }
        }
        self.last = Some((elapsed, done));
    }

    /// The rate and the time left for `total` agents with `done` ended:
    /// `8.0 agents/s, ETA 3s` (`ETA 2m05s` past a minute), `0.0 agents/s, ETA ?` while
    /// no rate is known.
    pub(crate) fn text(&self, done: u64, total: usize) -> String {
        let left = (total as u64).saturating_sub(done);
        let rate = self.rate.unwrap_or(0.0);
        let eta = if left == 0 {
            "0s".to_owned()
        } else if rate > 0.0 {
            duration_text((left as f64 / rate).ceil() as u64)
        } else {
            "?".to_owned()
        };
        format!("{rate:.1} agents/s, ETA {eta}")
    }
}

/// `seconds` as `7s`, `2m05s` or `1h02m`.
fn duration_text(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
    }
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

    /// The periodic lines off a terminal end with the rate and the time left.
    #[test]
    fn a_plain_line_ends_with_the_rate_and_the_time_left() {
        let at = Duration::from_millis(1500);
        let mut pace = Pace::default();
        pace.observe(at, 12);
        let mut line = line(&stats(), Requests::default(), 20, at);
        line.push_str(" | ");
        line.push_str(&pace.text(12, 20));
        assert_eq!(
            line,
            "[  1.50s]    12/20 agents done (10 ok, 2 failed) | 52 requests, 40 answered,   12 in flight | 8.0 agents/s, ETA 1s"
        );
    }

    /// No time left is given until an agent has ended; the first rate is the average
    /// since the start; later ones are smoothed, so that a burst of agents ending (or
    /// a pause) moves the time left gradually, never from 0 s to minutes.
    #[test]
    fn the_time_left_is_unknown_until_an_agent_ends_then_smoothed() {
        let secs = |s: f64| Duration::from_secs_f64(s);
        let mut pace = Pace::default();
        assert_eq!(pace.text(0, 100), "0.0 agents/s, ETA ?");
        pace.observe(secs(0.25), 0);
        pace.observe(secs(1.0), 0);
        assert_eq!(pace.text(0, 100), "0.0 agents/s, ETA ?");
        // The first agents ended: 10 in 2 s.
        pace.observe(secs(2.0), 10);
        assert_eq!(pace.text(10, 100), "5.0 agents/s, ETA 18s");
        // 10 more in the next second: the rate moves towards 10/s, by 1 - e^(-1/5).
        pace.observe(secs(3.0), 20);
        assert_eq!(pace.text(20, 100), "5.9 agents/s, ETA 14s");
        // A second with none ended: the rate falls, it does not drop to zero.
        pace.observe(secs(4.0), 20);
        assert_eq!(pace.text(20, 100), "4.8 agents/s, ETA 17s");
        // A burst: 70 in a second.
        pace.observe(secs(5.0), 90);
        assert_eq!(pace.text(90, 100), "16.6 agents/s, ETA 1s");
        // A redraw at the same moment changes nothing.
        let before = pace.clone();
        pace.observe(secs(5.0), 95);
        assert_eq!(pace, before);
        assert_eq!(pace.text(100, 100), "16.6 agents/s, ETA 0s");
    }

    /// Past a minute, the time left is given in minutes and seconds, then hours.
    #[test]
    fn long_times_left_are_given_in_minutes_and_hours() {
        let mut pace = Pace::default();
        pace.observe(Duration::from_secs(10), 1);
        assert_eq!(pace.text(1, 14), "0.1 agents/s, ETA 2m10s");
        assert_eq!(pace.text(1, 400), "0.1 agents/s, ETA 1h06m");
        assert_eq!(duration_text(59), "59s");
        assert_eq!(duration_text(60), "1m00s");
        assert_eq!(duration_text(3600), "1h00m");
    }

    /// The bar's message: the counters without the agents done, which the bar shows.
    #[test]
    fn the_bar_shows_the_counters_beside_it() {
        assert_eq!(
            counters(&stats(), Requests::default()),
            "10 ok, 2 failed | 52 requests, 40 answered,   12 in flight"
        );
    }

    /// During a back-off the requests held are not "in flight", and
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
