//! Crash recovery with a real process: the demo runs on a store and is killed with
//! SIGKILL at seeded random moments, 24 times, then runs to the end. Every agent
//! completes exactly once with the answer its script calls for, and every answer a
//! life had acknowledged (journaled, then counted by the loop) is there when the next
//! life starts.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use spool_core::SeededRng;

/// Kills, at least the 20.
const KILLS: usize = 24;
const AGENTS: &str = "3000";

/// What one life of the demo printed: its `acked N` lines and its resume line.
#[derive(Debug, Default)]
struct Life {
    last_acked: u64,
    resumed_with: Option<u64>,
    lines: Vec<String>,
}

fn parse(lines: Vec<String>) -> Life {
    let mut life = Life::default();
    for line in &lines {
        if let Some(n) = line.strip_prefix("acked ") {
            life.last_acked = n.trim().parse().expect("a count");
        }
        if let Some(rest) = line.strip_prefix("store: resumed at ") {
            // "... with N tasks, A answers taken"
            let answers = rest
                .split(", ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("a resume line with the answers taken");
            life.resumed_with = Some(answers);
        }
    }
    life.lines = lines;
    life
}

/// Runs one life; kills it with SIGKILL after `kill_after`, if it is still running.
fn live(store: &std::path::Path, kill_after: Option<Duration>) -> (Life, Option<i32>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .args([
            "demo",
            "--agents",
            AGENTS,
            "--max-latency-ms",
            "5",
            "--quiet",
            "--report-acks",
        ])
        .arg("--store")
        .arg(store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the spool binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = tx.send(lines);
    });
    if let Some(after) = kill_after {
        thread::sleep(after);
        // SIGKILL on Unix; an error means it had already exited.
        let _ = child.kill();
    }
    let status = child.wait().expect("the child is waited for");
    let lines = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("its output");
    reader.join().expect("the reader thread");
    (parse(lines), status.code())
}

#[test]
fn the_demo_killed_24_times_loses_nothing_acknowledged_and_completes_every_agent_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = dir.path().join("demo.store");
    let mut rng = SeededRng::new(0x5eed_c4a5);
    let mut acked_before = 0;
    let mut killed = 0;
    for _ in 0..KILLS {
        let after = Duration::from_millis(20 + rng.below(280));
        let (life, code) = live(&store, Some(after));
        if let Some(resumed) = life.resumed_with {
            assert!(
                resumed >= acked_before,
                "the last life acknowledged {acked_before} answers but this one resumed with {resumed}"
            );
        }
        acked_before = acked_before.max(life.last_acked);
        if code.is_none() {
            killed += 1;
        }
    }
    assert!(
        killed >= 20,
        "only {killed} lives were killed (the others finished first)"
    );

    // The last life runs to the end and checks every agent's answer.
    let (last, code) = live(&store, None);
    let text = last.lines.join("\n");
    assert_eq!(code, Some(0), "{text}");
    if let Some(resumed) = last.resumed_with {
        assert!(resumed >= acked_before, "{text}");
    }
    assert!(
        text.contains(&format!(
            "tasks:      {AGENTS} completed ok, 0 failed, 0 canceled"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "check:      ok, {AGENTS}/{AGENTS} answers match their script"
        )),
        "{text}"
    );

    // Exactly once: the store's run has one task per agent, each completed once.
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .arg("inspect")
        .arg(&store)
        .output()
        .expect("spool inspect runs");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    for i in 0..3000 {
        let name = format!(" agent-{i} ");
        let rows = table.lines().filter(|l| l.contains(&name)).count();
        assert_eq!(rows, 1, "agent-{i} has {rows} tasks:\n{table}");
    }
    assert!(table.contains("tasks: 3000 (0 live"), "{table}");
}
