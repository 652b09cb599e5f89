//! `--report-acks`: prints `acked N` on stdout whenever the runtime has taken and (with
//! a store) made durable N answers, for tests that kill the demo at random and
//! check that nothing acknowledged was lost.

use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use spool_runtime::RuntimeHandle;

/// How often the counter is read.
const EVERY: Duration = Duration::from_millis(2);

/// The thread printing acknowledgements.
#[derive(Debug)]
pub(crate) struct Acks {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Acks {
    /// Starts reading the runtime's counters through `handle`: those as of the last
    /// group the store made durable, so a count printed is never lost.
    pub(crate) fn start(handle: RuntimeHandle) -> Acks {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("spool-acks".to_owned())
            .spawn(move || {
                let mut last = None;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    let Ok(answers) = handle.query(|runtime| runtime.durable_stats().answers)
                    else {
                        return;
                    };
                    if last != Some(answers) {
                        last = Some(answers);
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "acked {answers}");
                        let _ = out.flush();
                    }
                }
            })
            .ok();
        Acks { stop, thread }
    }

    /// Tells the thread to stop (join it with [`finish`](Acks::finish) once the runtime
    /// is dropped).
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(());
    }

    /// Waits for the thread.
    pub(crate) fn finish(mut self) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
