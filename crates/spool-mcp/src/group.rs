//! The end of a stdio server's processes. A stdio server runs in a process group of its
//! own, with whatever it starts (an `npx` or `uvx` launcher's server, its helpers); it
//! is ended as MCP's stdio transport says, for the whole group: its standard input is
//! closed, then the group gets SIGTERM if anything in it is still running after
//! [`EOF_GRACE`], then SIGKILL after [`TERM_GRACE`].

use std::time::Duration;

use tokio::process::Child;
use tokio::time::Instant;

/// How long a server has to exit once its standard input is closed.
pub(crate) const EOF_GRACE: Duration = Duration::from_secs(2);

/// How long what is left of the group has to exit after SIGTERM.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(2);

/// How long the group is waited for after SIGKILL (the kernel ends it at once; this
/// only bounds the wait for it to be seen gone).
pub(crate) const KILL_WAIT: Duration = Duration::from_secs(1);

/// How often a group that is ending is looked at: nothing tells when the last process of
/// a group (other than the server, spool's child) has ended.
const POLL: Duration = Duration::from_millis(20);

/// Ends the server `child` and its process group: its standard input must be closed
/// already (its connection dropped). Waits [`EOF_GRACE`] for the group to go, then
/// sends it SIGTERM and waits [`TERM_GRACE`], then SIGKILL. Returns once nothing of the
/// group runs, or [`KILL_WAIT`] after SIGKILL; the server is reaped.
pub(crate) async fn end(name: &str, mut child: Child) {
    let Some(pid) = child.id() else {
        // Reaped already: it ended, and with it the group's leader.
        return;
    };
    if gone(&mut child, pid, EOF_GRACE).await {
        return;
    }
    tracing::debug!(server = %name, pid, "MCP server `{name}` still runs after its input was closed: SIGTERM to its process group");
    signal(&mut child, pid, Stop::Term);
    if gone(&mut child, pid, TERM_GRACE).await {
        return;
    }
    tracing::warn!(server = %name, pid, "MCP server `{name}` still runs {TERM_GRACE:?} after SIGTERM: SIGKILL to its process group");
    signal(&mut child, pid, Stop::Kill);
    if !gone(&mut child, pid, KILL_WAIT).await {
        tracing::warn!(server = %name, pid, "MCP server `{name}`: its process group is not seen gone after SIGKILL");
    }
}

/// Waits up to `within` for nothing of the group `pgid` to run; reaps the server, its
/// leader, once it exited. `true` if the group is gone.
async fn gone(child: &mut Child, pgid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        // Reaps the leader: a zombie is not running, but would be seen as a member.
        let _ = child.try_wait();
        if !group_runs(child, pgid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The signals a group is stopped with.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Term,
    Kill,
}

/// Sends `stop` to the process group `pgid`.
#[cfg(unix)]
fn signal(_child: &mut Child, pgid: u32, stop: Stop) {
    use nix::errno::Errno;
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let Ok(raw) = i32::try_from(pgid) else {
        return;
    };
    let signal = match stop {
        Stop::Term => Signal::SIGTERM,
        Stop::Kill => Signal::SIGKILL,
    };
    match killpg(Pid::from_raw(raw), signal) {
        // Gone in between: nothing to stop.
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => tracing::warn!(pgid, %error, "cannot signal an MCP server's process group"),
    }
}

/// Elsewhere: no process groups; the server itself is killed.
#[cfg(not(unix))]
fn signal(child: &mut Child, _pgid: u32, _stop: Stop) {
    let _ = child.start_kill();
}

/// Whether anything of the group `pgid` still runs (a zombie does not). On Linux, from
/// `/proc`: orphans of the group that ended are not spool's to reap, and a zombie left
/// by an init that does not reap would otherwise be waited for.
#[cfg(target_os = "linux")]
fn group_runs(child: &mut Child, pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return signal_reaches(child, pgid);
    };
    entries.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(entry.path().join("stat"))
                .is_ok_and(|stat| runs_in_group(&stat, pgid))
    })
}

/// Elsewhere: whether a signal reaches the group (zombies count).
#[cfg(not(target_os = "linux"))]
fn group_runs(child: &mut Child, pgid: u32) -> bool {
    signal_reaches(child, pgid)
}

/// Whether the group `pgid` has a member a signal reaches (zombies count).
#[cfg(unix)]
fn signal_reaches(_child: &mut Child, pgid: u32) -> bool {
    use nix::sys::signal::killpg;
    use nix::unistd::Pid;
    i32::try_from(pgid).is_ok_and(|raw| killpg(Pid::from_raw(raw), None).is_ok())
}

/// Elsewhere: whether the server itself still runs.
#[cfg(not(unix))]
fn signal_reaches(child: &mut Child, _pgid: u32) -> bool {
    matches!(child.try_wait(), Ok(None))
}

/// Whether the process of `/proc/PID/stat` text `stat` is in group `pgid` and not a
/// zombie. The fields that matter follow the command's name, which is in parentheses
/// and may hold anything, so they are counted from its last `)`: state, parent, group.
#[cfg(any(target_os = "linux", test))]
fn runs_in_group(stat: &str, pgid: u32) -> bool {
    let Some((_, fields)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = fields.split_whitespace();
    let state = fields.next();
    let group = fields.nth(1).and_then(|group| group.parse::<u32>().ok());
    group == Some(pgid) && !matches!(state, None | Some("Z" | "X" | "x"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_says_the_group_and_whether_it_runs() {
        let sleeping = "4242 (sleep) S 4200 4200 4200 0 -1 4194304 100 0 0 0";
        assert!(runs_in_group(sleeping, 4200));
        assert!(!runs_in_group(sleeping, 4242));
        let zombie = "4243 (sleep) Z 1 4200 4200 0 -1 4227084 117 0 0 0";
        assert!(!runs_in_group(zombie, 4200));
        let odd_name = "4244 (a) b (c) R 4200 4200 4200 0";
        assert!(runs_in_group(odd_name, 4200));
        assert!(!runs_in_group("garbage", 4200));
    }
}
