//! What the tests that run `spool serve` as a process share: starting it and waiting
//! for the address it listens on, stopping it, an HTTP client, and reading JSON with
//! the bearer token; `cluster` adds what tests of several nodes share, `tmux` what
//! tests of `spool top` in a terminal share.

// Each test file is its own crate and uses part of this.
#![allow(dead_code)]

pub(crate) mod cluster;
pub(crate) mod tmux;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `spool serve` process, its address, and what it has said on stderr so far.
/// Killed when dropped, so that a failed assertion leaves nothing running.
pub(crate) struct Server {
    /// The process.
    pub(crate) child: Child,
    /// `HOST:PORT` it listens on.
    pub(crate) addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Runs `spool ARGS` (`serve` and its options; without `OPENAI_BASE_URL` and
    /// `SPOOL_CRASH_AT` from the test's environment), collects its stderr on a thread,
    /// and waits up to 30 s for its `listening on http://ADDR` line.
    pub(crate) fn start<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Server {
        Server::start_with(args, &[])
    }

    /// As [`start`](Server::start), with the environment variables `env` set (after
    /// `OPENAI_BASE_URL` and `SPOOL_CRASH_AT` are removed: `env` may set them).
    pub(crate) fn start_with<S: AsRef<OsStr>>(
        args: impl IntoIterator<Item = S>,
        env: &[(&str, &str)],
    ) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
        command
            .env_remove("OPENAI_BASE_URL")
            .env_remove("SPOOL_CRASH_AT")
            .envs(env.iter().copied())
            .args(args);
        Server::spawn(command)
    }

    /// As [`start`](Server::start), with a command of the test's own that ends in
    /// running `spool serve` (through `sh -c '...; exec "$0" "$@"'`, say).
    pub(crate) fn spawn(mut command: Command) -> Server {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the spool binary starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let written = log.clone();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.trim().strip_prefix("listening on http://") {
                    let _ = tx.send(addr.to_owned());
                }
                let mut log = written.lock().expect("the log");
                log.push_str(&line);
                log.push('\n');
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => Server { child, addr, log },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                // Let the reader take the last lines.
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "spool serve did not say it listens; it said:\n{}",
                    log.lock().expect("the log")
                );
            }
        }
    }

    /// What it has said on stderr so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().expect("the log").clone()
    }

    /// Sends it SIGTERM, as Ctrl-C would, and waits for it to end.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        self.signal();
        self.child.wait().expect("the server is waited for")
    }

    /// Sends it SIGTERM and returns at once.
    pub(crate) fn signal(&self) {
        let pid = i32::try_from(self.child.id()).expect("a pid");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM");
    }

    /// Waits up to `limit` for it to end: its exit status, or `None` if it still runs.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("the server is waited for") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits up to 30 s until its stderr holds `text`.
    pub(crate) fn wait_log(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "spool serve did not say {text:?}; it said:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops it with SIGTERM and checks it stopped cleanly.
    pub(crate) fn stop(mut self) {
        let status = self.terminate();
        assert!(
            status.success(),
            "spool serve did not stop cleanly ({status}); it said:\n{}",
            self.log()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP client that reports statuses instead of failing on them, each call
/// bounded by `timeout`.
pub(crate) fn client(timeout: Duration) -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build(),
    )
}

/// `GET path` with the bearer `token`: the status and the JSON body.
pub(crate) fn get(agent: &ureq::Agent, addr: &str, token: &str, path: &str) -> (u16, Value) {
    let mut response = agent
        .get(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .unwrap_or_else(|e| panic!("GET {path}: the body: {e}"));
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("GET {path} answered {status} with no JSON ({e}): {text}"));
    (status, body)
}

/// `GET path` with the bearer `token`: the JSON body, which must come with a 200.
pub(crate) fn get_ok(agent: &ureq::Agent, addr: &str, token: &str, path: &str) -> Value {
    let (status, body) = get(agent, addr, token, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// An address on loopback with a port that is free now, below the kernel's ephemeral
/// range (32768 and up on Linux), for a server that must come back on the same address:
/// a port `:0` hands out could be taken meanwhile by another test's server, or as a
/// client's own port.
pub(crate) fn free_addr() -> String {
    (0..12_000)
        .map(|i| format!("127.0.0.1:{}", 20_000 + (std::process::id() + i) % 12_000))
        .find(|addr| std::net::TcpListener::bind(addr).is_ok())
        .expect("a free port between 20000 and 32000")
}
