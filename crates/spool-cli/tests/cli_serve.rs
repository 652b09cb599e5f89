//! What `spool serve` says at start, run as a user runs it: on stderr the LLM it uses
//! (as `spool run` says it) and `listening on http://ADDR`; on stdout the web page's
//! address, with the token when the server made it, and without it (naming the file)
//! when it came from `--token-file`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// A `spool serve` on a free loopback port; killed when dropped.
struct Serve {
    child: Child,
    /// Its stderr up to and with its `listening on` line.
    stderr: String,
    /// The address it listens on.
    addr: String,
    /// Its stdout's first line.
    stdout: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `spool serve --addr 127.0.0.1:0 --store DIR/s.spool EXTRA...` and waits (up to
/// 30 s) for its `listening on` line and its first line on stdout.
fn serve(dir: &Path, extra: &[&str]) -> Serve {
    let store = dir.join("s.spool");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(&store)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spool serve starts");
    let (tx, rx) = mpsc::channel();
    let err = BufReader::new(child.stderr.take().unwrap());
    let err_tx = tx.clone();
    thread::spawn(move || {
        let mut said = String::new();
        for line in err.lines().map_while(Result::ok) {
            said.push_str(&line);
            said.push('\n');
            if line.starts_with("listening on http://") {
                let _ = err_tx.send(("stderr", said.clone()));
            }
        }
    });
    let out = BufReader::new(child.stdout.take().unwrap());
    thread::spawn(move || {
        if let Some(Ok(line)) = out.lines().next() {
            let _ = tx.send(("stdout", line));
        }
    });
    let (mut stderr, mut stdout) = (None, None);
    while stderr.is_none() || stdout.is_none() {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(("stderr", text)) => stderr = Some(text),
            Ok((_, line)) => stdout = Some(line),
            Err(_) => {
                let _ = child.kill();
                panic!("spool serve said on stderr {stderr:?} and on stdout {stdout:?}");
            }
        }
    }
    let stderr = stderr.unwrap();
    let addr = stderr
        .lines()
        .find_map(|l| l.strip_prefix("listening on http://"))
        .unwrap()
        .to_owned();
    Serve {
        child,
        stderr,
        addr,
        stdout: stdout.unwrap(),
    }
}

#[test]
fn serve_says_its_llm_and_the_web_page_with_the_token_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--llm-latency-ms", "7"]);
    let token = std::fs::read_to_string(dir.path().join("s.spool.token")).unwrap();
    let token = token.trim();
    assert_eq!(
        server.stdout,
        format!("web page: http://{}/#token={token}", server.addr)
    );
    let start = server
        .stderr
        .lines()
        .find(|l| l.starts_with("spool serve: 0 schedules"))
        .unwrap_or_else(|| panic!("no start line in\n{}", server.stderr));
    assert_eq!(
        start,
        format!(
            "spool serve: 0 schedules, 0 live tasks in {}; llm the scripted model (7 ms a \
             call); no limits",
            dir.path().join("s.spool").display()
        )
    );
    // Stderr, where a log collector reads, still does not hold it.
    assert!(!server.stderr.contains(token), "{}", server.stderr);
}

#[test]
fn a_token_from_a_file_is_not_printed_the_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token.txt");
    std::fs::write(&file, "a-token-the-user-keeps-1234\n").unwrap();
    let server = serve(dir.path(), &["--token-file", file.to_str().unwrap()]);
    assert_eq!(
        server.stdout,
        format!(
            "web page: http://{}/ (add #token= and the token in {})",
            server.addr,
            file.display()
        )
    );
    assert!(!server.stderr.contains("a-token-the-user-keeps"));
    assert!(
        server
            .stderr
            .contains("; llm the scripted model (20 ms a call); no limits\n"),
        "{}",
        server.stderr
    );
}
