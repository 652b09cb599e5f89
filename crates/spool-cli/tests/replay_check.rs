//! `spool replay --check`, run as a user runs it: a recorded run checked against this
//! build's built-in agent passes (from a journal file and from a store's kept
//! history); a recording whose requests this code would not ask fails at the first
//! one, naming the task, step and request (exit 1).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use spool_core::{Journal, JournalEntry};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `spool ARGS` in `dir`: its exit code, stdout and stderr.
fn spool(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spool runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_recording_of_this_code_checks_clean() {
    let (code, out, err) = spool(&fixtures(), &["replay", "--check", "whatif.journal"]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            Some(0),
            "checked 277 entries: 35 recorded answers asked again the same, 6 endings the same\n",
            ""
        )
    );
}

#[test]
fn a_store_s_kept_history_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = spool(dir.path(), &["demo", "--store", "run.spool"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = spool(dir.path(), &["replay", "--check", "run.spool"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("checked ")
            && out.contains(" recorded answers asked again the same, ")
            && out.ends_with(" endings the same\n"),
        "{out}"
    );
    // Saved as a journal file to keep as a test, it checks the same.
    let (code, saved, err) = spool(
        dir.path(),
        &["replay", "run.spool", "--save", "kept.journal"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        saved.starts_with("wrote ") && saved.ends_with(" entries to kept.journal\n"),
        "{saved}"
    );
    let (code, again, err) = spool(dir.path(), &["replay", "--check", "kept.journal"]);
    assert_eq!((code, again, err), (Some(0), out, String::new()));
}

#[test]
fn the_first_request_this_code_would_not_ask_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixtures().join("whatif.journal")).unwrap();
    let mut journal = Journal::decode(&bytes).unwrap();
    // The recording says its third answered request was another one than this code
    // asks.
    let (index, key) = journal
        .entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            JournalEntry::Answered { key, .. } => Some((i, *key)),
            _ => None,
        })
        .nth(2)
        .unwrap();
    if let JournalEntry::Answered { asked, .. } = &mut journal.entries[index] {
        *asked = Some(0x5eed);
    }
    std::fs::write(
        dir.path().join("changed.journal"),
        journal.encode().unwrap(),
    )
    .unwrap();
    let (code, out, err) = spool(dir.path(), &["replay", "--check", "changed.journal"]);
    assert_eq!((code, err.as_str()), (Some(1), ""));
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("task {} diverges at step ", key.task()))
            && first.ends_with(&format!(
                "(request {}, journal entry {index}):",
                key.number()
            )),
        "{out}"
    );
    assert!(
        out.lines().nth(1).unwrap().starts_with(&format!(
            "  recorded: request {} (digest 0000000000005eed) answered with ",
            key.number()
        )),
        "{out}"
    );
    let got = out.lines().nth(2).unwrap();
    assert!(
        got.starts_with("  got:      ")
            && got.contains(&format!(" request {} (digest ", key.number())),
        "{out}"
    );
}

#[test]
fn check_and_what_if_options_do_not_mix() {
    let (code, _, err) = spool(
        &fixtures(),
        &["replay", "--check", "whatif.journal", "--policy", "fifo"],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("error: the argument '--check' cannot be used with"),
        "{err}"
    );
}
