//! `spool top` in a real terminal: `spool serve` with the built-in agent on a free
//! port (at most 5 tasks running, 3 LLM calls in flight), `spool top` in a detached tmux session (120 × 40) on a socket of the test's
//! own, 30 agent tasks submitted; the screen is read with `tmux capture-pane` until the
//! tasks show running, then until the queue has drained; the server stopped, it says
//! so and reconnects to the server started again; `q` ends it and leaves the pane
//! clean. tmux is installed by `scripts/test-deps.sh` if missing; without it the test
//! fails, never skips.
#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod support;

use support::Server;
use support::tmux::{Tmux, ensure_tmux, line_with};

/// `spool serve` on `addr` and the store in `dir`.
fn serve(dir: &Path, token: &Path, addr: &str) -> Server {
    let store = dir.join("s.spool");
    Server::start([
        OsStr::new("serve"),
        OsStr::new("--addr"),
        OsStr::new(addr),
        OsStr::new("--llm-latency-ms"),
        OsStr::new("1000"),
        OsStr::new("--max-running"),
        OsStr::new("5"),
        OsStr::new("--limit"),
        OsStr::new("llm=3"),
        OsStr::new("--store"),
        store.as_os_str(),
        OsStr::new("--token-file"),
        token.as_os_str(),
    ])
}

/// `POST /v1/tasks` with `body`: the status.
fn submit(addr: &str, token: &str, body: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[test]
fn spool_top_shows_the_queue_draining_and_quits_cleanly() {
    ensure_tmux();
    let dir = tempfile::tempdir().unwrap();
    let token_file: PathBuf = dir.path().join("token");
    let token = "top-test-token";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let server = serve(dir.path(), &token_file, &support::free_addr());
    let tmux = Tmux::top(dir.path(), &server.addr, &token_file, "120", "40");
    let first = tmux.wait_for("connected dashboard", Duration::from_secs(30), |s| {
        s.contains("· connected") && s.contains("no live tasks")
    });
    assert!(
        line_with(&first, "Completed:").contains("Completed: 0   Failed: 0   Canceled: 0"),
        "{first}"
    );

    let agents = ["alice", "bob", "carol"];
    for n in 0..30 {
        let body = format!(
            r#"{{"type": "agent", "input": {{"prompt": "task {n}"}}, "agent": "{}"}}"#,
            agents[n % 3]
        );
        assert_eq!(submit(&server.addr, token, &body), 202);
    }

    // The tasks on screen while they run: each agent's share beside the table; five
    // running of at most five, the llm gate full (three in flight of three) and the
    // two other running tasks' calls held at it. The screen may show a refresh from
    // before the last submissions were published: it is waited for with all 30.
    let busy = tmux.wait_for("running tasks", Duration::from_secs(30), |s| {
        s.lines().any(|l| l.contains("Submitted: 30 "))
            && s.contains(" agent ")
            && s.contains("alice")
            && s.contains("SHARE")
            && s.contains("Running: 5/5 ")
            && s.contains("llm:  in flight 3/3  held 2")
    });
    println!("{busy}");
    assert!(
        line_with(&busy, "Submitted:").contains("Submitted: 30"),
        "{busy}"
    );
    assert!(
        line_with(&busy, "Running:").starts_with("│Running: 5/5   Queued: "),
        "{busy}"
    );
    assert_eq!(
        line_with(&busy, "llm:").trim_end_matches([' ', '│']),
        "│llm:  in flight 3/3  held 2"
    );
    // The header counts as the gate does: all five running tasks wait on a call, three
    // sent and two held (held ones are not in flight).
    assert!(
        line_with(&busy, "Running:").contains("Requests: 3 in flight, 2 held back"),
        "{busy}"
    );

    // Then drained: every task completed, none live.
    let drained = tmux.wait_for("drained queue", Duration::from_secs(90), |s| {
        s.contains("Completed: 30   Failed: 0   Canceled: 0   Submitted: 30")
            && s.contains("no live tasks")
    });
    assert!(
        line_with(&drained, "Running:")
            .contains("Running: 0/5   Queued: 0   Blocked: 0   Ready: 0   Requests: 0 in flight"),
        "{drained}"
    );
    assert!(
        line_with(&drained, "Scheduled:").contains("Scheduled: 30  Completed: 30  Rejected: 0"),
        "{drained}"
    );
    assert!(
        line_with(&drained, "spool top ·").contains(&format!(
            "spool top · http://{} · policy fifo · connected",
            server.addr
        )),
        "{drained}"
    );

    // The server goes away: top says so, keeps the last data, and tries again; the
    // server back on the same address and store, it goes on.
    let addr = server.addr.clone();
    drop(server);
    let gone = tmux.wait_for("server gone", Duration::from_secs(30), |s| {
        s.contains("server gone — reconnecting (attempt ")
    });
    assert!(gone.contains("Completed: 30   Failed: 0"), "{gone}");
    assert!(
        line_with(&gone, "last error:").len() > "│last error: ".len(),
        "{gone}"
    );
    let server = serve(dir.path(), &token_file, &addr);
    let back = tmux.wait_for("reconnection", Duration::from_secs(30), |s| {
        s.contains("· connected") && !s.contains("last error:")
    });
    assert!(
        line_with(&back, "Completed:").contains("Completed: 30   Failed: 0   Canceled: 0"),
        "{back}"
    );

    // `q` ends it with status 0 and the terminal is restored: the dashboard is gone.
    tmux.run(&["send-keys", "-t", "top", "q"]);
    let after = tmux.wait_for("exit", Duration::from_secs(10), |s| {
        s.contains("top-exited-")
    });
    assert!(after.contains("top-exited-0"), "{after}");
    assert!(!after.contains("spool top ·"), "{after}");
    assert!(!after.contains("Tasks 0 of 0"), "{after}");
    drop(server);
}
