//! The reaper: a small shell process that stops a cluster and removes its directory once
//! the test process that made it has ended, however it ended. Statics are never dropped
//! and a killed process runs no destructor, so clean-up cannot be left to `Drop` alone.
//!
//! The reaper reads its standard input, a pipe whose only writing end this process holds
//! (close-on-exec, so no other child inherits it). The pipe closes when the process ends
//! or when [`Reaper`] is dropped; the reaper then stops the server and removes the
//! directory. It ignores the terminal's signals, so an interrupted `cargo test` is
//! cleaned up too.

use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use std::os::unix::process::CommandExt;

use crate::account::{Account, shell_quote};
use crate::error::PgError;

/// A running reaper. Dropping it closes its pipe and waits for the clean-up to finish.
#[derive(Debug)]
pub(crate) struct Reaper {
    /// The shell process.
    child: Child,
    /// The writing end of its standard input; closing it starts the clean-up.
    pipe: Option<ChildStdin>,
}

impl Reaper {
    /// Starts a reaper for the cluster in `dir` (data directory `data`), whose server
    /// runs as `account` with the binaries in `bindir`.
    pub(crate) fn spawn(
        dir: &Path,
        data: &Path,
        bindir: &Path,
        account: &Account,
    ) -> Result<Reaper, PgError> {
        let pg_ctl = bindir.join("pg_ctl");
        let script = format!(
            "trap '' INT HUP TERM QUIT PIPE; cat >/dev/null; \
             if [ -f {data}/postmaster.pid ]; then {prefix}{pg_ctl} stop -D {data} -m immediate -w; fi; \
             rm -rf {dir}",
            data = shell_quote(&data.to_string_lossy()),
            prefix = account.shell_prefix(),
            pg_ctl = shell_quote(&pg_ctl.to_string_lossy()),
            dir = shell_quote(&dir.to_string_lossy()),
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C sent to the test's group does not reach it.
            .process_group(0)
            .spawn()
            .map_err(|source| PgError::Spawn {
                program: "sh (the cluster's reaper)".to_owned(),
                source,
            })?;
        let pipe = child.stdin.take();
        Ok(Reaper { child, pipe })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        drop(self.pipe.take());
        // The clean-up is done when the reaper exits; an error here leaves nothing to do.
        let _ = self.child.wait();
    }
}
