//! How every command ends, run as a user runs it: a usage error (an argument that does
//! not fit: a bad option value, a bad cron expression, a malformed name) exits 2, any
//! other failure (a missing file, an unknown schedule, a store that cannot be used)
//! exits 1, each with one line on stderr; and a command whose stdout was closed by its
//! reader (`spool inspect S | head`) stops quietly with status 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `spool ARGS` in `dir`, without the environment that changes what it does.
fn spool(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_TOKEN")
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spool runs")
}

/// A directory holding `j`, a demo's journal, and `s.spool`, a store with the schedule
/// `tick`.
fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["demo", "--agents", "3", "--journal", "j", "-q"][..],
        &[
            "schedule", "add", "tick", "--every", "1h", "--prompt", "x", "--store", "s.spool",
        ],
    ] {
        let out = spool(dir.path(), args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

#[test]
fn usage_errors_exit_2_and_other_failures_1_with_one_line() {
    let dir = setup();
    let missing = "No such file or directory (os error 2)";
    // (arguments, exit status, what stderr starts with)
    let cases: &[(&[&str], i32, String)] = &[
        // A file that is not there, or not a journal: not a usage error.
        (
            &["replay", "nope"],
            1,
            format!("spool replay: cannot read nope: {missing}\n"),
        ),
        (
            &["inspect", "nope"],
            1,
            format!("spool inspect: nope: cannot read it: {missing}\n"),
        ),
        // A bad cron expression is a usage error wherever it is given.
        (
            &["schedule", "next", "0 25 * * *"],
            2,
            "spool schedule next: hour: 25 is out of range 0-23\n".to_owned(),
        ),
        (
            &[
                "schedule",
                "add",
                "bad",
                "--cron",
                "0 25 * * *",
                "--prompt",
                "x",
                "--store",
                "s.spool",
            ],
            2,
            "spool schedule add: bad --cron: hour: 25 is out of range 0-23\n".to_owned(),
        ),
        (
            &[
                "schedule", "add", "../etc", "--every", "1s", "--prompt", "x", "--store", "s.spool",
            ],
            2,
            "spool schedule add: bad schedule slug \"../etc\": only lower-case letters, \
             digits and '-' are allowed\n"
                .to_owned(),
        ),
        (
            &["schedule", "pause", "a/b", "--store", "s.spool"],
            2,
            "spool schedule pause: bad schedule slug \"a/b\": only lower-case letters, \
             digits and '-' are allowed\n"
                .to_owned(),
        ),
        // A well-formed name that is not there, a store that is not there: failures.
        (
            &["schedule", "show", "nope", "--store", "s.spool"],
            1,
            "spool schedule show: no schedule is named \"nope\"\n".to_owned(),
        ),
        (
            &[
                "schedule", "add", "tick", "--every", "1s", "--prompt", "x", "--store", "s.spool",
            ],
            1,
            "spool schedule add: a schedule named \"tick\" exists already (rm it first)\n"
                .to_owned(),
        ),
        (
            &["schedule", "list", "--store", "none.spool"],
            1,
            "spool schedule list: there is no store at none.spool\n".to_owned(),
        ),
        (
            &["serve", "--store", "s.spool", "--token-file", "nope"],
            1,
            format!("spool serve: cannot read the token file nope: {missing}\n"),
        ),
        (
            &["top", "--addr", "https://x"],
            2,
            "spool top: --addr \"https://x\" is not a URL like http://127.0.0.1:7420 \
             (https is not supported)\n"
                .to_owned(),
        ),
        // Nothing to read is a usage error, said by the command (a store may come from
        // SPOOL_DATABASE_URL, which clap does not read).
        (
            &["inspect"],
            2,
            "spool inspect: nothing to inspect: name a store, a snapshot or a journal file, a \
             store with --postgres URL (or SPOOL_DATABASE_URL), or a running server with \
             --addr URL\n"
                .to_owned(),
        ),
        // Clap's own usage errors.
        (
            &[
                "schedule", "add", "x", "--once", "soon", "--prompt", "x", "--store", "s.spool",
            ],
            2,
            "error: invalid value 'soon' for '--once <RFC3339>': not an RFC 3339 instant"
                .to_owned(),
        ),
        (
            &["demo", "--agents", "0"],
            2,
            "error: invalid value '0' for '--agents <N>'".to_owned(),
        ),
        (
            &["run", "--store", "s.spool", "--limit", "llm=x"],
            2,
            "error: invalid value 'llm=x' for '--limit <KIND=SPEC>'".to_owned(),
        ),
    ];
    for (args, code, start) in cases {
        let out = spool(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(stderr.starts_with(start.as_str()), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {:?}", out.stdout);
        if !start.starts_with("error: ") {
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        }
    }
    // Nothing was added by the refused commands.
    let list = spool(dir.path(), &["schedule", "list", "--store", "s.spool"]);
    assert!(
        String::from_utf8_lossy(&list.stdout).ends_with("\n1 schedule\n"),
        "{list:?}"
    );
}

/// Runs `spool ARGS` in `dir` with stdout a pipe whose reader has gone already.
fn spool_into_closed_pipe(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("spool runs")
}

#[test]
fn a_closed_stdout_ends_each_command_quietly() {
    let dir = setup();
    for args in [
        &["inspect", "j"][..],
        &["inspect", "s.spool"],
        &["replay", "j"],
        &["schedule", "next", "* * * * *", "--count", "3"],
        &["schedule", "list", "--store", "s.spool"],
        &["schedule", "list", "--json", "--store", "s.spool"],
        &["schedule", "show", "tick", "--store", "s.spool"],
        &["schedule", "runs", "tick", "--store", "s.spool"],
        &["schedule", "pause", "tick", "--store", "s.spool"],
        &["demo", "--agents", "2", "-q"],
    ] {
        let out = spool_into_closed_pipe(dir.path(), args);
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).as_ref()
            ),
            (Some(0), ""),
            "{args:?}"
        );
    }
    // The change asked for was made before its line could not be printed.
    let show = spool(
        dir.path(),
        &["schedule", "show", "tick", "--store", "s.spool"],
    );
    assert!(
        String::from_utf8_lossy(&show.stdout).contains("enabled                false\n"),
        "{show:?}"
    );
}
