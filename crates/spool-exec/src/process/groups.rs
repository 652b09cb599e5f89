//! The process groups of the runs still going: where the executor's cancel and the
//! watchers' ends meet, and where a group is killed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use spool_core::RequestKey;

/// The process groups of the runs still going, by run: the executor's cancel and the
/// watchers' ends meet here.
///
/// A group's id is its leader's pid, and a pid is not reused while its process is
/// unreaped; leaders are reaped only after their run left this map (where supported,
/// see `wait_unreaped` in `tool.rs`), so a group found here is still the run's own to
/// kill.
#[derive(Debug, Default)]
pub(super) struct Groups {
    next: AtomicU64,
    live: Mutex<HashMap<u64, (RequestKey, Pid)>>,
}

impl Groups {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (RequestKey, Pid)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a started run; returns its id.
    pub(super) fn insert(&self, key: RequestKey, pgid: Pid) -> u64 {
        let run = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(run, (key, pgid));
        run
    }

    /// Ends run `run`: kills what is left of its group. `false` if it had already been
    /// ended by a cancel (or the tool was dropped): then nobody wants its answer.
    pub(super) fn finish(&self, run: u64) -> bool {
        let mut live = self.lock();
        match live.remove(&run) {
            Some((_, pgid)) => {
                kill_group(pgid);
                true
            }
            None => false,
        }
    }

    /// Kills the groups of every run of request `key`; returns how many.
    pub(super) fn cancel(&self, key: RequestKey) -> usize {
        let mut live = self.lock();
        let mut killed = 0;
        live.retain(|_, (k, pgid)| {
            if *k != key {
                return true;
            }
            kill_group(*pgid);
            killed += 1;
            false
        });
        killed
    }

    /// Kills every group still running.
    fn kill_all(&self) {
        for (_, (_, pgid)) in self.lock().drain() {
            kill_group(pgid);
        }
    }
}

/// Kills the runs still going when the last clone of a
/// [`ProcessTool`](crate::ProcessTool) is dropped.
#[derive(Debug)]
pub(super) struct Owner(pub(super) Arc<Groups>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.kill_all();
    }
}

fn kill_group(pgid: Pid) {
    match killpg(pgid, Signal::SIGKILL) {
        // Already gone: nothing to kill.
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => {
            tracing::warn!(pgid = pgid.as_raw(), %error, "could not kill a process group")
        }
    }
}
