//! Damaged stores through the real `spool` binary: a store written by a demo run,
//! damaged on disk in copies, then `spool inspect` and a resumed `spool demo --store`
//! on each copy. Each is either a typed error — exit 1, a message on stderr, no panic —
//! or a run whose every answer matches its script. Never a different answer.
//!
//! The stores are closed cleanly by the run that wrote them, so SQLite's write-ahead
//! log is merged into the file and removed: what is damaged is the whole store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Instant;

use spool_core::SeededRng;

/// Runs the binary with `args` and `store` last.
fn spool(args: &[&str], store: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .args(args)
        .arg(store)
        .output()
        .expect("the spool binary runs")
}

/// A demo of `agents` agents run to the end on a new store in `dir`; its path.
fn demo_store(dir: &Path, agents: usize) -> PathBuf {
    let path = dir.join("demo.spool");
    let agents = agents.to_string();
    let out = spool(
        &[
            "demo",
            "--agents",
            &agents,
            "--max-latency-ms",
            "1",
            "--quiet",
            "--store",
        ],
        &path,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !dir.join("demo.spool-wal").exists(),
        "a store closed cleanly has its write-ahead log merged"
    );
    path
}

/// Exit code, stdout and stderr, for messages.
fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What `spool inspect` and a resumed `spool demo --store` did with a damaged copy.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The run went on and every answer matched its script.
    Answers,
    /// A typed error, exit 1 and a message.
    Error,
}

/// Writes `bytes` at `path`, readable by its owner alone as spool makes a store (a
/// store others can read is opened with a warning, on stderr before the error).
fn write_copy(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("the copy is made");
    file.write_all(bytes).expect("the copy is written");
}

/// Writes `bytes` to a fresh copy at `path` (no log or lock files beside it) and runs
/// `spool inspect`, then a resumed demo of `agents`, on it. Panics, with `what` and
/// all the output, on anything but an error or every answer right.
fn check_copy(path: &Path, bytes: &[u8], agents: usize, what: &str) -> (Outcome, Outcome) {
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(side));
    }
    write_copy(path, bytes);
    let inspect = spool(&["inspect"], path);
    let inspected = judge(&inspect, what, "inspect", |stdout| {
        stdout.contains(&format!("tasks: {agents} ("))
    });
    let count = agents.to_string();
    let demo = spool(
        &[
            "demo",
            "--agents",
            &count,
            "--max-latency-ms",
            "1",
            "--quiet",
            "--store",
        ],
        path,
    );
    let ran = judge(&demo, what, "demo", |stdout| {
        stdout.contains(&format!(
            "tasks:      {agents} completed ok, 0 failed, 0 canceled"
        )) && stdout.contains(&format!(
            "check:      ok, {agents}/{agents} answers match their script"
        ))
    });
    (inspected, ran)
}

/// The outcome of one command on a damaged copy; panics unless it is a clean error or
/// a success whose output `right` accepts.
fn judge(out: &Output, what: &str, command: &str, right: impl Fn(&str) -> bool) -> Outcome {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "{what}: `spool {command}` panicked\n{}",
        text(out)
    );
    match out.status.code() {
        Some(0) => {
            assert!(
                right(&stdout),
                "{what}: `spool {command}` succeeded with other answers\n{}",
                text(out)
            );
            Outcome::Answers
        }
        Some(1) => {
            // An error is said on stderr, as what could not be done: never a summary
            // whose check failed (that would be a different answer).
            assert!(
                stderr.starts_with(&format!("spool {command}: ")) && !stdout.contains("FAILED"),
                "{what}: `spool {command}` failed without a typed error\n{}",
                text(out)
            );
            Outcome::Error
        }
        _ => panic!("{what}: `spool {command}` exited oddly\n{}", text(out)),
    }
}

/// One ASCII digit of a calculation's result changed on disk, inside the small journal
/// entry holding the LLM's final answer (`755 * 94 = 70970.` becoming `70971.`), is a
/// typed error naming the entry for both `spool inspect` and the resumed run; before,
/// the resumed run gave the agent a different answer.
#[test]
fn a_digit_changed_in_an_answer_on_disk_is_an_error_naming_the_entry() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let base = demo_store(dir.path(), 3);
    let mut bytes = std::fs::read(&base).expect("the store is read");
    // `"content":"A op B = R."`: the last digit of R.
    let marker = b"\"content\":\"";
    let mut changed = 0;
    for start in 0..bytes.len().saturating_sub(marker.len()) {
        if &bytes[start..start + marker.len()] != marker {
            continue;
        }
        let rest = &bytes[start + marker.len()..];
        let Some(end) = rest.iter().position(|&b| b == b'"') else {
            continue;
        };
        let content = &rest[..end];
        if content.windows(3).any(|w| w == b" = ") && content.ends_with(b".") {
            let at = start + marker.len() + end - 2;
            assert!(
                bytes[at].is_ascii_digit(),
                "{}",
                String::from_utf8_lossy(content)
            );
            bytes[at] = b'0' + (bytes[at] - b'0' + 1) % 10;
            changed += 1;
            break;
        }
    }
    assert_eq!(changed, 1, "a calculation's answer is in the store");
    let copy = dir.path().join("digit.spool");
    write_copy(&copy, &bytes);

    let inspect = spool(&["inspect"], &copy);
    let stderr = String::from_utf8_lossy(&inspect.stderr);
    assert_eq!(inspect.status.code(), Some(1), "{}", text(&inspect));
    let prefix = format!(
        "spool inspect: {}: the store is damaged: journal entry ",
        copy.display()
    );
    assert!(
        stderr.starts_with(&prefix) && stderr.ends_with(" does not match its checksum\n"),
        "{}",
        text(&inspect)
    );

    let demo = spool(
        &["demo", "--agents", "3", "--quiet", "--store"],
        copy.as_path(),
    );
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert_eq!(demo.status.code(), Some(1), "{}", text(&demo));
    assert!(
        stderr
            .starts_with("spool demo: cannot read the store: the store is damaged: journal entry ")
            && stderr.ends_with(" does not match its checksum\n"),
        "{}",
        text(&demo)
    );
    assert!(
        !String::from_utf8_lossy(&demo.stdout).contains("tasks:"),
        "{}",
        text(&demo)
    );
}

/// 512 bytes overwritten with noise at 60 seeded places of a 300-agent demo store
/// (several checkpoints, so starting a new journal releases chunks only older ones
/// used). Before, some made the resumed run panic (exit 101, "the runtime's journal
/// could not start"); now each is an error or a right run.
#[test]
fn a_store_with_512_bytes_overwritten_is_an_error_or_right_answers_never_a_panic() {
    const AGENTS: usize = 300;
    let dir = tempfile::tempdir().expect("a temp dir");
    let base = demo_store(dir.path(), AGENTS);
    let bytes = std::fs::read(&base).expect("the store is read");
    let mut rng = SeededRng::new(0xda3a_9e05);
    let copy = dir.path().join("overwritten.spool");
    let mut errors = 0;
    for _ in 0..60 {
        let at = rng.below(bytes.len() as u64 - 512) as usize;
        let mut damaged = bytes.clone();
        for byte in &mut damaged[at..at + 512] {
            *byte = rng.below(256) as u8;
        }
        let what = format!("512 bytes at {at}");
        let (inspected, ran) = check_copy(&copy, &damaged, AGENTS, &what);
        errors += usize::from(inspected == Outcome::Error) + usize::from(ran == Outcome::Error);
    }
    // Noise over whole rows: most copies are found damaged.
    assert!(errors > 0);
}

/// Every single-byte change of a store written by a short demo run, on a sample of
/// positions spread over the whole file (every 37th byte and, at each, a bit chosen by
/// the position): `spool inspect` and a resumed run on each copy give an error or the
/// right answers. (Every position of the same store is covered in process by the
/// binary's unit test `damage::every_byte_of_a_demo_store`.)
#[test]
fn single_byte_changes_of_a_demo_store_are_errors_or_right_answers() {
    const AGENTS: usize = 3;
    const STRIDE: usize = 37;
    let dir = tempfile::tempdir().expect("a temp dir");
    let base = demo_store(dir.path(), AGENTS);
    let bytes = std::fs::read(&base).expect("the store is read");
    let positions: Vec<usize> = (0..bytes.len()).step_by(STRIDE).collect();
    let next = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    let started = Instant::now();
    thread::scope(|scope| {
        for worker in 0..2 {
            let (bytes, positions, next, errors) = (&bytes, &positions, &next, &errors);
            let copy = dir.path().join(format!("copy-{worker}.spool"));
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&at) = positions.get(i) else { break };
                    let mut damaged = bytes.clone();
                    damaged[at] ^= 1 << (at % 8);
                    let what = format!("byte {at} ^ {:#04x}", 1 << (at % 8));
                    let (inspected, ran) = check_copy(&copy, &damaged, AGENTS, &what);
                    let found = usize::from(inspected == Outcome::Error)
                        + usize::from(ran == Outcome::Error);
                    errors.fetch_add(found, Ordering::Relaxed);
                }
            });
        }
    });
    eprintln!(
        "{} positions of {} bytes, {} errors, in {:.1} s",
        positions.len(),
        bytes.len(),
        errors.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert!(positions.len() * STRIDE >= bytes.len());
    assert!(errors.load(Ordering::Relaxed) > 0);
}
