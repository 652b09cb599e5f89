//! What the tests that run `spool top` in a real terminal share: a tmux server of the
//! test's own, tmux itself (installed if missing), and finding a line on its screen.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tmux server of the test's own (its socket in the test's directory), killed with
/// its sessions when dropped, whatever the test did. Its session is called `top`.
pub(crate) struct Tmux {
    /// The server's socket.
    pub(crate) socket: PathBuf,
}

impl Tmux {
    /// Starts a tmux server with its socket in `dir`, and in it a detached session
    /// `top`, `columns` × `rows`, that runs `spool top` on the server at `addr` with the
    /// token in `token_file`, then says `top-exited-CODE` and stays open.
    pub(crate) fn top(
        dir: &Path,
        addr: &str,
        token_file: &Path,
        columns: &str,
        rows: &str,
    ) -> Tmux {
        let tmux = Tmux {
            socket: dir.join("tmux"),
        };
        let top = format!(
            "'{}' top --addr http://{addr} --token-file '{}'; echo top-exited-$?; exec sleep 600",
            env!("CARGO_BIN_EXE_spool"),
            token_file.display()
        );
        tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            columns,
            "-y",
            rows,
            "sh",
            "-c",
            &top,
        ]);
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    /// Runs `tmux ARGS` on this server, which must succeed.
    pub(crate) fn run(&self, args: &[&str]) {
        let status = self.command().args(args).status().expect("tmux runs");
        assert!(status.success(), "tmux {args:?}: {status}");
    }

    /// The `top` pane's text now.
    pub(crate) fn screen(&self) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Reads the pane until `done` accepts it, the same twice in a row (a screen being
    /// redrawn is not taken); fails with the last screen at the deadline.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        within: Duration,
        done: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        loop {
            let screen = self.screen();
            if done(&screen) && screen == last {
                return screen;
            }
            last = screen.clone();
            assert!(
                Instant::now() < deadline,
                "no {what} on screen within {within:?}; it shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

/// tmux, installed by `scripts/test-deps.sh` if missing; without it the test fails,
/// never skips.
pub(crate) fn ensure_tmux() {
    let present = || {
        Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if present() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-deps.sh");
    let status = Command::new("bash").arg(&script).status();
    assert!(
        present(),
        "tmux is missing and {} did not install it ({status:?}): install tmux to run \
         the `spool top` end-to-end test",
        script.display()
    );
}

/// The line of `screen` that contains `needle`.
pub(crate) fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{screen}"))
}
