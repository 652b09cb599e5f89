//! `spool replay JOURNAL --policy ... --max-running ... --limit ...`, run as a user runs
//! it: a recorded journal's workload under FIFO, priority and fair share gives exact,
//! different tables; the recorded side is the recorded run's own figures; bad options
//! are one-line usage errors (exit 2), a damaged journal a one-line failure (exit 1);
//! without a what-if option the replay is as it was.
//!
//! `tests/fixtures/whatif.journal` is six built-in agents recorded on the test
//! scheduler in virtual time (so its figures are exact): three for the team `batch` at
//! low priority, two for `ui` at high priority, one for `ops`, under fair share with at
//! most two LLM calls at once. The binary's unit tests record it again and check that
//! it is that recording.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The fixtures' directory.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Runs `spool ARGS` in `dir`, without the environment that changes what it does.
fn spool(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spool runs")
}

/// `spool ARGS` in the fixtures' directory: its exit code, stdout and stderr.
fn replay(args: &[&str]) -> (Option<i32>, String, String) {
    let out = spool(&fixtures(), args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// With at most two tasks running, the order they get a slot in is the policy's: FIFO
/// lets the low-priority `batch` agents in first, priority the `ui` ones, fair share
/// takes turns; the recorded column is the same in all three.
#[test]
fn each_policy_gives_its_own_exact_table() {
    for (policy, table) in [
        ("fifo", FIFO),
        ("priority", PRIORITY),
        ("fair-share", FAIR_SHARE),
    ] {
        let args = [
            "replay",
            "whatif.journal",
            "--policy",
            policy,
            "--max-running",
            "2",
        ];
        assert_eq!(
            replay(&args),
            (Some(0), table.to_owned(), String::new()),
            "{policy}"
        );
    }
}

const FIFO: &str = r"what-if: the workload of whatif.journal (6 tasks submitted) under other rules, in virtual time

                recorded         what-if
policy          fair-share       fifo
limits          --limit llm=2    --max-running 2 --limit llm=2
tasks           6                6
completed       6                6
failed          0                0
canceled        0                0
makespan        73.0ms           85.0ms
wait p50        17.0ms           18.0ms
wait p95        43.0ms           48.0ms
requests sent   35               35
429s            0                0
peak in flight  5                4
unmatched       -                0

waits by agent (p50 / p95)
  batch (3)     41.0ms / 43.0ms  0.0ms / 18.0ms
  ops (1)       17.0ms / 17.0ms  48.0ms / 48.0ms
  ui (2)        7.0ms / 15.0ms   24.0ms / 43.0ms
";

const PRIORITY: &str = r"what-if: the workload of whatif.journal (6 tasks submitted) under other rules, in virtual time

                recorded         what-if
policy          fair-share       priority
limits          --limit llm=2    --max-running 2 --limit llm=2
tasks           6                6
completed       6                6
failed          0                0
canceled        0                0
makespan        73.0ms           82.0ms
wait p50        17.0ms           18.0ms
wait p95        43.0ms           52.0ms
requests sent   35               35
429s            0                0
peak in flight  5                4
unmatched       -                0

waits by agent (p50 / p95)
  batch (3)     41.0ms / 43.0ms  0.0ms / 52.0ms
  ops (1)       17.0ms / 17.0ms  37.0ms / 37.0ms
  ui (2)        7.0ms / 15.0ms   18.0ms / 24.0ms
";

const FAIR_SHARE: &str = r"what-if: the workload of whatif.journal (6 tasks submitted) under other rules, in virtual time

                recorded         what-if
policy          fair-share       fair-share
limits          --limit llm=2    --max-running 2 --limit llm=2
tasks           6                6
completed       6                6
failed          0                0
canceled        0                0
makespan        73.0ms           91.0ms
wait p50        17.0ms           18.0ms
wait p95        43.0ms           54.0ms
requests sent   35               35
429s            0                0
peak in flight  5                4
unmatched       -                0

waits by agent (p50 / p95)
  batch (3)     41.0ms / 43.0ms  0.0ms / 24.0ms
  ops (1)       17.0ms / 17.0ms  54.0ms / 54.0ms
  ui (2)        7.0ms / 15.0ms   18.0ms / 37.0ms
";

/// A number in a line of the demo's summary: the word before `after` (which follows
/// `label`).
fn figure(summary: &str, label: &str, after: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} in {summary}"));
    let (before, _) = line.split_once(after).unwrap_or_else(|| panic!("{line}"));
    before
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// A demo recorded for real: the recorded side of its what-if is the demo's own
/// summary — its tasks, their ends, its peak of requests in flight, its 429s, and the
/// requests it sent (those served, and the ones refused sent again).
#[test]
fn the_recorded_side_is_the_demos_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    let demo = spool(
        dir.path(),
        &["demo", "--agents", "40", "--journal", "d.journal", "-q"],
    );
    assert!(demo.status.success(), "{demo:?}");
    let summary = String::from_utf8_lossy(&demo.stdout);
    let out = spool(
        dir.path(),
        &["replay", "d.journal", "--policy", "fifo", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let recorded = &json["recorded"];
    assert_eq!(json["arrivals"], 40);
    assert_eq!(recorded["policy"], "fair-share");
    assert_eq!(recorded["limits"], "--limit llm=32");
    assert_eq!(recorded["tasks"], 40);
    assert_eq!(
        recorded["completed"],
        figure(&summary, "tasks:", "completed ok")
    );
    assert_eq!(recorded["failed"], figure(&summary, "tasks:", "failed"));
    assert_eq!(recorded["canceled"], figure(&summary, "tasks:", "canceled"));
    assert_eq!(
        recorded["peak_in_flight"],
        figure(&summary, "peaks:", "requests in flight")
    );
    let refused = figure(&summary, "limits:", "calls refused with 429");
    assert_eq!(recorded["rate_limited"], refused);
    assert_eq!(
        recorded["requests"],
        figure(&summary, "requests:", "(llm:") + refused
    );
    // The what-if run has the same work: every agent completes, every request matched.
    let what_if = &json["what_if"];
    assert_eq!(what_if["policy"], "fifo");
    assert_eq!(what_if["completed"], 40);
    assert_eq!(what_if["requests"], recorded["requests"]);
    assert_eq!(what_if["rate_limited"], refused);
    assert_eq!(what_if["unmatched"], serde_json::json!([]));
    assert_eq!(what_if["agents"].as_object().map(|a| a.len()), Some(40));
}

/// Options that do not fit are usage errors (exit 2), said on one line (clap's own
/// errors start with `error: `), before the journal is read.
#[test]
fn bad_options_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["replay", "whatif.journal", "--policy", "lottery"],
            "error: invalid value 'lottery' for '--policy <POLICY>'",
        ),
        (
            &["replay", "whatif.journal", "--max-running", "0"],
            "error: invalid value '0' for '--max-running <N>'",
        ),
        (
            &["replay", "whatif.journal", "--limit", "llm=x"],
            "error: invalid value 'llm=x' for '--limit <KIND=SPEC>'",
        ),
        (
            &["replay", "whatif.journal", "--history", "off"],
            "spool replay: --history is an option of a store (spool run, spool serve), not of \
             a replay\n",
        ),
        (
            &["replay", "whatif.journal", "--json"],
            "error: the following required arguments were not provided:",
        ),
        (
            &[
                "replay",
                "nope.journal",
                "--limit",
                "llm=2",
                "--limit",
                "llm=60/min",
            ],
            "spool replay: --limit llm is given twice; give each kind once, its parts \
             comma-separated\n",
        ),
    ];
    for (args, start) in cases {
        let (code, stdout, stderr) = replay(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(start), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        if !start.starts_with("error: ") {
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        }
    }
}

/// A journal that is not there, damaged or cut short: exit 1, one line naming it.
#[test]
fn a_damaged_journal_is_a_one_line_failure() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixtures().join("whatif.journal")).unwrap();
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0xff;
    std::fs::write(dir.path().join("damaged.journal"), damaged).unwrap();
    std::fs::write(dir.path().join("short.journal"), &bytes[..bytes.len() / 2]).unwrap();
    for (file, start) in [
        ("nope.journal", "spool replay: cannot read nope.journal: "),
        ("damaged.journal", "spool replay: damaged.journal: "),
        ("short.journal", "spool replay: short.journal: "),
    ] {
        let out = spool(dir.path(), &["replay", file, "--policy", "fifo"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(stderr.starts_with(start), "{file}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{file}: {stderr}");
        assert!(out.stdout.is_empty(), "{file}");
    }
}

/// Without a what-if option, `spool replay` replays the journal against its recording
/// as it always did.
#[test]
fn without_what_if_options_the_replay_is_as_it_was() {
    let (code, stdout, stderr) = replay(&["replay", "whatif.journal"]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("replayed "), "{stdout}");
    assert!(lines[0].contains(" trace events, trace hash "), "{stdout}");
    assert_eq!(lines[1], "no divergence from the recorded run");
}
