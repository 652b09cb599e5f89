//! `spool schedule` as a user types it: exact output for cron fire times, each store
//! command, the errors (exit 1 with one line, nothing changed; exit 2 for usage), and a
//! store `spool run` holds refused with a message naming it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn spool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(args)
        .output()
        .expect("spool runs")
}

/// Stdout of a command that must succeed.
fn ok(args: &[&str]) -> String {
    let out = spool(args);
    assert!(
        out.status.success(),
        "spool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Exit code and stderr of a command that must fail.
fn fails(args: &[&str]) -> (i32, String) {
    let out = spool(args);
    assert!(!out.status.success(), "spool {args:?} succeeded");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn next_prints_utc_instants_with_the_local_time_beside_them() {
    let out = ok(&[
        "schedule",
        "next",
        "0 9 * * 1-5",
        "--tz",
        "America/New_York",
        "--after",
        "2027-03-12T15:00:00Z",
        "--count",
        "3",
    ]);
    // Friday 12 March 2027 after 09:00 EST; the clocks change on Sunday the 14th.
    assert_eq!(
        out,
        "2027-03-15T13:00:00Z  Mon 2027-03-15 09:00:00 EDT\n\
         2027-03-16T13:00:00Z  Tue 2027-03-16 09:00:00 EDT\n\
         2027-03-17T13:00:00Z  Wed 2027-03-17 09:00:00 EDT\n"
    );
    let utc = ok(&[
        "schedule",
        "next",
        "@daily",
        "--after",
        "2027-01-01T00:00:00Z",
    ]);
    assert_eq!(utc.lines().count(), 5);
    assert_eq!(utc.lines().next(), Some("2027-01-02T00:00:00Z"));
    assert_eq!(
        fails(&["schedule", "next", "61 * * * *"]),
        (
            2,
            "spool schedule next: minute: 61 is out of range 0-59\n".to_owned()
        )
    );
    let (code, err) = fails(&["schedule", "next", "* * * * *", "--tz", "Mars/Olympus"]);
    assert_eq!(code, 2);
    assert!(err.contains("Mars/Olympus"), "{err}");
}

#[test]
fn schedules_are_added_listed_changed_and_removed_on_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let path = store.to_str().unwrap();
    let added = ok(&[
        "schedule",
        "add",
        "standup",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "America/New_York",
        "--prompt",
        "Summarise yesterday",
        "--store",
        path,
    ]);
    assert!(
        added.starts_with("added standup (cron \"0 9 * * 1-5\" in America/New_York); next run 20"),
        "{added}"
    );
    ok(&[
        "schedule",
        "add",
        "tick",
        "--every",
        "90s",
        "--prompt",
        "Check",
        "--fresh-session",
        "--overlap",
        "buffer-one",
        "--store",
        path,
    ]);
    // Refused, with one line, and nothing changed: exit 2 for what does not fit the
    // command line, 1 for what the store refuses.
    for (args, code, message) in [
        (
            &["add", "../etc", "--every", "1s", "--prompt", "x"][..],
            2,
            "spool schedule add: bad schedule slug \"../etc\": only lower-case letters, digits and '-' are allowed\n",
        ),
        (
            &["add", "a/b", "--every", "1s", "--prompt", "x"],
            2,
            "spool schedule add: bad schedule slug \"a/b\": only lower-case letters, digits and '-' are allowed\n",
        ),
        (
            &["add", "bad", "--cron", "0 25 * * *", "--prompt", "x"],
            2,
            "spool schedule add: bad --cron: hour: 25 is out of range 0-23\n",
        ),
        (
            &[
                "add",
                "bad",
                "--cron",
                "0 9 * * *",
                "--tz",
                "Mars/Olympus",
                "--prompt",
                "x",
            ],
            2,
            "spool schedule add: bad --tz: unknown time zone \"Mars/Olympus\"\n",
        ),
        (
            &["add", "tick", "--every", "1s", "--prompt", "x"],
            1,
            "spool schedule add: a schedule named \"tick\" exists already (rm it first)\n",
        ),
        (
            &["pause", "nope"],
            1,
            "spool schedule pause: no schedule is named \"nope\"\n",
        ),
        (
            &["show", "nope"],
            1,
            "spool schedule show: no schedule is named \"nope\"\n",
        ),
    ] {
        let args = [&["schedule"], args, &["--store", path]].concat();
        assert_eq!(fails(&args), (code, message.to_owned()), "{args:?}");
    }
    let (code, _) = fails(&["schedule", "add", "x", "--every", "1s", "--store", path]);
    assert_eq!(code, 2, "no --prompt is a usage error");
    let list = ok(&["schedule", "list", "--store", path]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 4, "{list}");
    assert!(lines[0].starts_with("SLUG "), "{list}");
    assert!(
        lines[1].starts_with(
            "standup  enabled  cron \"0 9 * * 1-5\" in America/New_York  default  normal    20"
        ),
        "{list}"
    );
    assert!(
        lines[2].starts_with(
            "tick     enabled  every 1m30s                             default  normal    20"
        ),
        "{list}"
    );
    assert_eq!(lines[3], "2 schedules");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["schedule", "list", "--json", "--store", path])).unwrap();
    assert_eq!(json[1]["slug"], "tick");
    assert_eq!(json[1]["spec"]["every"], "1m30s");
    assert_eq!(json[1]["overlap"], "buffer-one");
    assert_eq!(json[1]["session_mode"], "fresh");
    assert_eq!(json[1]["prompt"], "Check");
    assert_eq!(json[1]["status"]["runs"], 0);

    assert_eq!(
        ok(&["schedule", "pause", "tick", "--store", path]),
        "paused tick\n"
    );
    let show = ok(&["schedule", "show", "tick", "--store", path]);
    assert!(show.contains("enabled                false\n"), "{show}");
    assert!(
        show.contains("next run               - (paused)\n"),
        "{show}"
    );
    assert!(
        ok(&["schedule", "resume", "tick", "--store", path])
            .starts_with("resumed tick; next run 20")
    );
    // Run now: the run is in the store, for `spool run` to run.
    let run = ok(&["schedule", "run", "tick", "--store", path]);
    assert!(run.starts_with("tick: run started as task "), "{run}");
    let show: serde_json::Value = serde_json::from_str(&ok(&[
        "schedule", "show", "tick", "--json", "--store", path,
    ]))
    .unwrap();
    assert_eq!(show["status"]["runs"], 1);
    assert_eq!(show["status"]["running"].as_array().map(Vec::len), Some(1));
    // Its run, in columns as wide as their cells, counted in words.
    let runs: serde_json::Value = serde_json::from_str(&ok(&[
        "schedule", "runs", "tick", "--json", "--store", path,
    ]))
    .unwrap();
    let task = runs[0]["task"].as_u64().unwrap();
    let fire = runs[0]["fire"].as_str().unwrap();
    let width = task.to_string().len().max(4);
    assert_eq!(
        ok(&["schedule", "runs", "tick", "--store", path]),
        format!(
            "{:>width$}  {:<fire_width$}  STATE    ANSWER\n\
             {task:>width$}  {fire}  running  -\n\
             1 run held (1 started in all)\n",
            "TASK",
            "FIRE",
            fire_width = fire.len(),
        )
    );
    assert_eq!(
        ok(&["schedule", "rm", "standup", "--store", path]),
        "removed standup\n"
    );
    let list = ok(&["schedule", "list", "--store", path]);
    assert!(list.ends_with("\n1 schedule\n"), "{list}");
    let (code, err) = fails(&[
        "schedule",
        "list",
        "--store",
        dir.path().join("none").to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("there is no store at"), "{err}");
}

#[test]
fn a_store_that_spool_run_holds_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("busy.spool");
    let path = store.to_str().unwrap();
    ok(&[
        "schedule", "add", "tick", "--every", "1h", "--prompt", "x", "--store", path,
    ]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["run", "--store", path])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It holds the store once it has started: it says so on stderr.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("spool run: 1 schedule, 0 live tasks in "),
        "{first}"
    );
    let (code, refused) = fails(&["schedule", "pause", "tick", "--store", path]);
    assert_eq!(code, 1);
    assert_eq!(
        refused,
        format!(
            "spool schedule pause: cannot open the store: the store {path} is in use by another \
             spool process (one process writes a store at a time; its lock is {path}.lock); \
             while `spool serve` runs it, go through the server: --addr URL\n"
        )
    );
    stop(&mut child);
    // Stopped, the store is free again.
    assert_eq!(
        ok(&["schedule", "pause", "tick", "--store", path]),
        "paused tick\n"
    );
    assert!(Path::new(&format!("{path}.lock")).exists());
}

/// Stops `spool run` with SIGTERM and checks it stopped cleanly.
fn stop(child: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "spool run after SIGTERM: {status}");
}

#[test]
fn once_catch_up_agent_and_priority_are_set_shown_and_given_to_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let path = store.to_str().unwrap();
    assert_eq!(
        ok(&[
            "schedule",
            "add",
            "launch",
            "--once",
            "2030-01-01T09:00:00Z",
            "--prompt",
            "Ship it",
            "--catch-up",
            "none",
            "--agent",
            "ops",
            "--priority",
            "high",
            "--store",
            path,
        ]),
        "added launch (once at 2030-01-01T09:00:00Z); next run 2030-01-01T09:00:00Z\n"
    );
    ok(&[
        "schedule",
        "add",
        "sweep",
        "--every",
        "1h",
        "--catch-up",
        "all:6h",
        "--prompt",
        "x",
        "--store",
        path,
    ]);
    let list = ok(&["schedule", "list", "--store", path]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "SLUG    STATE    WHEN                          AGENT    PRIORITY  NEXT RUN              \
             LAST RUN  RESULT  RUNS  MISSED",
            "launch  enabled  once at 2030-01-01T09:00:00Z  ops      high      2030-01-01T09:00:00Z  \
             -         -          0       0",
        ]
    );
    assert!(
        lines[2]
            .starts_with("sweep   enabled  every 1h                      default  normal    20"),
        "{list}"
    );
    let show = ok(&["schedule", "show", "launch", "--store", path]);
    for row in [
        "when                   once at 2030-01-01T09:00:00Z\n",
        "catch-up               none\n",
        "agent                  ops\n",
        "priority               high\n",
        "next run               2030-01-01T09:00:00Z\n",
    ] {
        assert!(show.contains(row), "{row:?} is not in\n{show}");
    }
    assert!(
        ok(&["schedule", "show", "sweep", "--store", path])
            .contains("catch-up               all:6h\nagent                  default\npriority               normal\n")
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["schedule", "list", "--json", "--store", path])).unwrap();
    assert_eq!(
        (
            &json[0]["spec"],
            &json[0]["catch_up"],
            &json[0]["agent"],
            &json[0]["priority"]
        ),
        (
            &serde_json::json!({"once": "2030-01-01T09:00:00Z"}),
            &serde_json::json!("none"),
            &serde_json::json!("ops"),
            &serde_json::json!("high")
        )
    );
    assert_eq!(json[1]["catch_up"], serde_json::json!({"all": "6h"}));
    // A run made now is the agent's, at its priority.
    let run = ok(&["schedule", "run", "launch", "--store", path]);
    assert!(run.starts_with("launch: run started as task "), "{run}");
    let inspect = ok(&["inspect", path]);
    let row = inspect
        .lines()
        .find(|l| l.contains(" ops "))
        .unwrap_or_else(|| panic!("no task of ops in\n{inspect}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..4], ["ops", "agent", "high"], "{row}");
}
