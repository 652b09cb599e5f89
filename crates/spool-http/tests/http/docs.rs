//! The examples of `docs/http.md` that `spool serve` cannot give (its agent asks no
//! question), run against this suite's server: a block marked
//! `<!-- checked: fixture -->` is a `console` block of `curl` commands, run by `sh`
//! against [`Api`] (its task type `script`, its token in `$T`), each compared with the
//! lines after it as `spool-cli`'s docs test compares them (`…` cuts, what varies
//! normalized: see `crates/spool-cli/tests/docs/`). A command with `-X` (a POST, PUT, …)
//! runs once; a read is tried again until its answer fits, for up to 10 s, since what it
//! reads (a question a task asks) comes when the task gets there. `SPOOL_BLESS_DOCS=1`
//! writes what ran into the doc, as there.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Api, TOKEN};

#[path = "../../../spool-cli/tests/docs/normalize.rs"]
mod normalize;

use normalize::{difference, fits, normalized};

/// The address the docs show.
const DOC_ADDR: &str = "127.0.0.1:7420";

/// A command of a checked block, with the output the doc shows.
struct Step {
    /// Its lines as written.
    lines: Vec<String>,
    /// The command as `sh` takes it.
    command: String,
    /// The output shown.
    expected: Vec<String>,
}

/// The checked blocks of `text`: the index of each one's first line, and its lines.
fn fixture_blocks(text: &str) -> Vec<(usize, Vec<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "<!-- checked: fixture -->" {
            continue;
        }
        let start = i + 2;
        let end = (start..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap();
        found.push((
            start,
            lines[start..end].iter().map(|l| (*l).to_owned()).collect(),
        ));
    }
    found
}

fn steps(lines: &[String]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in lines {
        if continued || line.starts_with("$ ") {
            if continued {
                let step = steps.last_mut().unwrap();
                step.lines.push(line.clone());
                step.command.push('\n');
                step.command.push_str(line);
            } else {
                steps.push(Step {
                    lines: vec![line.clone()],
                    command: line["$ ".len()..].to_owned(),
                    expected: Vec::new(),
                });
            }
            continued = line.ends_with('\\');
        } else {
            steps.last_mut().unwrap().expected.push(line.clone());
        }
    }
    steps
}

/// Runs `command` under `sh` against `addr`; its stdout's lines, as the doc shows them.
fn run(command: &str, addr: &str) -> Vec<String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command.replace(DOC_ADDR, addr))
        .env("T", format!("Authorization: Bearer {TOKEN}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("`{command}` did not end within 20 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = reader.join().unwrap().replace(addr, DOC_ADDR);
    text.strip_suffix('\n')
        .unwrap_or(&text)
        .split('\n')
        .filter(|_| !text.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_http_docs_examples_of_this_suites_task_type_hold() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/http.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let blocks = fixture_blocks(&text);
    assert!(!blocks.is_empty(), "no fixture block in docs/http.md");
    let api = Api::start();
    let addr = api.addr();
    let mut failures = String::new();
    let mut rewritten: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for (start, lines) in &blocks {
        let mut new = Vec::new();
        let mut differs = false;
        for step in steps(lines) {
            let expected = normalized(&step.expected);
            let once = step.command.contains(" -X ");
            let deadline = Instant::now() + Duration::from_secs(10);
            let actual = loop {
                let actual = run(&step.command, &addr);
                if once || fits(&expected, &normalized(&actual)) || Instant::now() >= deadline {
                    break actual;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            new.extend(step.lines.iter().cloned());
            if fits(&expected, &normalized(&actual)) {
                new.extend(step.expected);
            } else {
                differs = true;
                failures.push_str(&difference(&step.command, &step.expected, &actual));
                new.extend(actual);
            }
        }
        if differs {
            rewritten.push((*start, lines.len(), new));
        }
    }
    let blessing = std::env::var_os("SPOOL_BLESS_DOCS").is_some_and(|v| v == "1");
    if blessing && !rewritten.is_empty() {
        let now = std::fs::read_to_string(&path).unwrap();
        assert_eq!(now, text, "docs/http.md changed while it was checked");
        let mut out: Vec<String> = text.lines().map(str::to_owned).collect();
        for (start, len, new) in rewritten.into_iter().rev() {
            out.splice(start..start + len, new);
        }
        std::fs::write(&path, out.join("\n") + "\n").unwrap();
    } else {
        assert!(
            failures.is_empty(),
            "docs/http.md differs from what the server answers (SPOOL_BLESS_DOCS=1 writes \
             what it answered into it; review the diff):{failures}"
        );
    }
}
