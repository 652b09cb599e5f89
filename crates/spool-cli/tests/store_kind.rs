//! A store records the kind of command that made it: `spool demo`'s stores and those of
//! `spool run`, `spool serve` and `spool schedule` are refused by the other kind, with
//! one line naming the store, its kind and what made it, and left untouched.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest a command may take: a store run by the wrong command may never end.
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `spool ARGS` in `dir`, killed (and the test failed) past [`DEADLINE`].
fn spool(args: &[&str], dir: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_CRASH_AT")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the spool binary runs");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("piped stderr")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the process's status") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("spool {args:?} still running after {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout read"),
        stderr: stderr.join().expect("stderr read"),
    }
}

fn ran(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The store's files (the database and any write-ahead log beside it), to check that
/// a refused command wrote nothing.
fn files(dir: &Path, store: &str) -> Vec<(String, Vec<u8>)> {
    let mut found: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("the directory")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(store) && !name.ends_with(".lock")
        })
        .map(|path| {
            (
                path.display().to_string(),
                std::fs::read(&path).expect("a file"),
            )
        })
        .collect();
    found.sort();
    found
}

/// A store made by `spool schedule add` is refused by `spool demo`: one line, exit 1,
/// and the store's files exactly as they were.
#[test]
fn the_demo_refuses_a_store_of_spool_run_and_leaves_it_as_it_was() {
    let dir = tempfile::tempdir().expect("a directory");
    let made = spool(
        &[
            "schedule",
            "add",
            "standup",
            "--every",
            "90s",
            "--prompt",
            "hi",
            "--store",
            "run.spool",
        ],
        dir.path(),
    );
    assert!(made.status.success(), "{}", ran(&made));
    let before = files(dir.path(), "run.spool");
    assert!(!before.is_empty());
    let out = spool(
        &["demo", "--store", "run.spool", "--agents", "5", "--quiet"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", ran(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{}", ran(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "spool demo: run.spool was made by spool run/serve (its schedules and agents), not by \
         spool demo: give the demo a store of its own\n"
    );
    assert_eq!(
        files(dir.path(), "run.spool"),
        before,
        "the store was written to"
    );
    // The schedule is still there for the commands it belongs to.
    let listed = spool(&["schedule", "list", "--store", "run.spool"], dir.path());
    assert!(listed.status.success(), "{}", ran(&listed));
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("standup"),
        "{}",
        ran(&listed)
    );
}

/// A store made by `spool demo` is refused by `spool run`, `spool serve` and the
/// `spool schedule` commands, each with one line and exit 1, and left as it was; the
/// demo goes on with it.
#[test]
fn run_serve_and_schedule_refuse_a_store_of_the_demo() {
    let dir = tempfile::tempdir().expect("a directory");
    let made = spool(
        &[
            "demo",
            "--store",
            "demo.spool",
            "--agents",
            "3",
            "--max-latency-ms",
            "1",
            "--quiet",
        ],
        dir.path(),
    );
    assert!(made.status.success(), "{}", ran(&made));
    let before = files(dir.path(), "demo.spool");
    let line = |command: &str| {
        format!(
            "{command}: demo.spool was made by spool demo (its scripted agents), not by spool \
             run, serve or schedule: give them a store of their own\n"
        )
    };
    for (args, command) in [
        (&["run", "--store", "demo.spool"][..], "spool run"),
        (
            &["serve", "--store", "demo.spool", "--addr", "127.0.0.1:0"][..],
            "spool serve",
        ),
        (
            &["schedule", "list", "--store", "demo.spool"][..],
            "spool schedule list",
        ),
        (
            &[
                "schedule",
                "add",
                "standup",
                "--every",
                "90s",
                "--prompt",
                "hi",
                "--store",
                "demo.spool",
            ][..],
            "spool schedule add",
        ),
    ] {
        let out = spool(args, dir.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", ran(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            line(command),
            "{args:?}"
        );
        assert_eq!(
            files(dir.path(), "demo.spool"),
            before,
            "{args:?} wrote to the store"
        );
    }
    assert!(
        !dir.path().join("demo.spool.token").exists(),
        "serve made a token for a store it refused"
    );
    let again = spool(
        &["demo", "--store", "demo.spool", "--agents", "3", "--quiet"],
        dir.path(),
    );
    assert!(again.status.success(), "{}", ran(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("store: resumed at"),
        "{}",
        ran(&again)
    );
}
