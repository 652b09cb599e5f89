//! Ctrl-C and SIGTERM, taken by a thread of their own (no handler, no unsafe code):
//! the first starts the shutdown, a second ends the process at once. Signals within
//! [`SAME_SIGNAL`] of the first are the same signal: `timeout`, a terminal's Ctrl-C or
//! a supervisor may send it to the process and to its group. `spool demo`, `spool run`
//! and `spool serve` take them here. Elsewhere than on Unix, Ctrl-C ends the process as
//! by default; the store keeps what was durable.

#[cfg(unix)]
use std::time::{Duration, Instant};

#[cfg(unix)]
use nix::sys::signal::{SigSet, Signal};

/// The target of the log lines about signals, which `RUST_LOG` filters name: the same
/// for the three commands.
#[cfg(unix)]
const TARGET: &str = "spool::run::signals";

/// The signals [`block`] took, for [`on_signal`] (named by `spool serve` as a
/// cluster's node).
#[cfg(all(unix, feature = "serve", feature = "postgres"))]
pub(crate) type SignalSet = SigSet;

/// Elsewhere: nothing.
#[cfg(all(not(unix), feature = "serve", feature = "postgres"))]
pub(crate) type SignalSet = ();

#[cfg(unix)]
/// Signals this soon after the first are taken as the same one.
pub(crate) const SAME_SIGNAL: Duration = Duration::from_secs(1);

#[cfg(unix)]
/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts); `None`
/// if they could not be blocked (they then end the process, as by default).
pub(crate) fn block() -> Option<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().ok().map(|()| set)
}

#[cfg(unix)]
/// What a signal after the first does, `since` the first.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Again {
    /// Within [`SAME_SIGNAL`]: the same signal, nothing more to do.
    Same,
    /// Later: the user means it; the process ends at once.
    Exit,
}

#[cfg(unix)]
/// What a signal `since` the first means.
pub(crate) fn again(since: Duration) -> Again {
    if since < SAME_SIGNAL {
        Again::Same
    } else {
        Again::Exit
    }
}

#[cfg(unix)]
/// Waits for the signals of `set` on a thread of its own; at the first, runs
/// `stop` on a thread of its own (so that a later signal is still heard while it
/// runs).
pub(crate) fn on_signal(
    set: SigSet,
    quiet: bool,
    command: &'static str,
    stop: impl FnOnce() + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name("spool-signals".to_owned())
        .spawn(move || {
            let mut stop = Some(stop);
            let mut first: Option<Instant> = None;
            while let Ok(signal) = set.wait() {
                if let Some(at) = first {
                    match again(at.elapsed()) {
                        Again::Same => {
                            tracing::debug!(target: TARGET, "{command}: {signal} again at once; one signal");
                            continue;
                        }
                        Again::Exit => {
                            tracing::warn!(target: TARGET, "{command}: {signal} again; stopping now");
                            std::process::exit(130);
                        }
                    }
                }
                first = Some(Instant::now());
                if !quiet {
                    tracing::info!(target: TARGET, "{command}: {signal}; shutting down");
                }
                if let Some(stop) = stop.take() {
                    let started = std::thread::Builder::new()
                        .name("spool-shutdown".to_owned())
                        .spawn(stop);
                    if let Err(error) = started {
                        tracing::warn!(target: TARGET, "{command}: cannot shut down ({error}); stopping now");
                        std::process::exit(130);
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(target: TARGET, "{command}: no signal thread ({error}); Ctrl-C kills the process");
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_signal_within_a_second_of_the_first_is_the_same_one() {
        assert_eq!(again(Duration::ZERO), Again::Same);
        assert_eq!(again(Duration::from_millis(999)), Again::Same);
        assert_eq!(again(Duration::from_secs(1)), Again::Exit);
        assert_eq!(again(Duration::from_secs(60)), Again::Exit);
    }
}

/// Elsewhere: nothing to block; Ctrl-C ends the process.
#[cfg(not(unix))]
pub(crate) fn block() -> Option<()> {
    None
}

/// Elsewhere: no signal thread.
#[cfg(not(unix))]
pub(crate) fn on_signal(
    _set: (),
    _quiet: bool,
    _command: &'static str,
    _stop: impl FnOnce() + Send + 'static,
) {
}
