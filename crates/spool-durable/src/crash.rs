//! Crash moments for the crash tests: where a backend's writer ends the process from
//! inside a transaction.

/// **For crash tests only**: a moment at which a backend's writer ends the process
/// (with [`CRASH_STATUS`]: like a SIGKILL, it closes nothing), from inside a
/// transaction — every row written, before the commit. Written `commit:N` or
/// `checkpoint:N` ([`FromStr`](std::str::FromStr)); `spool demo` reads it from the
/// `SPOOL_CRASH_AT` environment variable. Never set it in production.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashAt {
    /// Inside the Nth transaction the writer commits (counted from 1, the journal's
    /// start not counted).
    Commit(u64),
    /// Inside the transaction of the Nth checkpoint (the journal's start not counted),
    /// after its rows are written and the old ones dropped.
    Checkpoint(u64),
}

impl std::str::FromStr for CrashAt {
    type Err = String;

    fn from_str(text: &str) -> Result<CrashAt, String> {
        let bad = || format!("`{text}` is not `commit:N` or `checkpoint:N` (N from 1)");
        let (what, n) = text.split_once(':').ok_or_else(bad)?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        match what.trim() {
            "commit" => Ok(CrashAt::Commit(n)),
            "checkpoint" => Ok(CrashAt::Checkpoint(n)),
            _ => Err(bad()),
        }
    }
}

/// The exit status of a process a [`CrashAt`] ended: SIGKILL's, 128 + 9.
pub const CRASH_STATUS: i32 = 137;

/// Counts a writer's commits and checkpoint writes and ends the process at the moment
/// a [`CrashAt`] names. A backend's writer owns one.
#[derive(Debug, Default)]
pub struct CrashCounter {
    at: Option<CrashAt>,
    commits: u64,
    checkpoints: u64,
}

impl CrashCounter {
    /// A counter that ends the process at `at` (never, for `None`).
    pub fn new(at: Option<CrashAt>) -> CrashCounter {
        CrashCounter {
            at,
            ..CrashCounter::default()
        }
    }

    /// Called inside each checkpoint write (the journal's start not counted), after
    /// its rows are written, before the transaction commits: ends the process inside
    /// the Nth.
    pub fn in_checkpoint(&mut self) {
        self.checkpoints += 1;
        if self.at == Some(CrashAt::Checkpoint(self.checkpoints)) {
            crash();
        }
    }

    /// Called inside each commit (the journal's start not counted), after every row is
    /// written, before the transaction commits: ends the process inside the Nth.
    pub fn in_commit(&mut self) {
        self.commits += 1;
        if self.at == Some(CrashAt::Commit(self.commits)) {
            crash();
        }
    }
}

/// Ends the process at once, as a kill would: no destructor runs, no thread is told,
/// the open transaction is left as it is (`exit` rather than `abort`, so that no core
/// file is written).
fn crash() -> ! {
    std::process::exit(CRASH_STATUS)
}
