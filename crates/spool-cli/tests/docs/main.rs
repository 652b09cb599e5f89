//! The outputs the docs show, checked against real runs, so that they cannot drift from
//! what spool prints.
//!
//! A block of `README.md` or `docs/*.md` is checked when the line before its opening
//! fence is `<!-- checked: SESSION [OPTION]... -->`. The sessions:
//!
//! - `serve`: the commands of a `console` block (`$ ` lines, a trailing `\` going on to
//!   the next line) are run by `sh` in a directory of the test's own, against one
//!   `spool serve --store demo.spool --token-file token --llm-latency-ms 200` started for
//!   the file; the file's `serve` blocks are one session, run in the file's order. The
//!   directory holds the token `s3cret-token-for-the-docs` in `token` and `token.txt`,
//!   `$T` is `Authorization: Bearer s3cret-token-for-the-docs`, and `spool` is on the
//!   `PATH`. Before each command the test waits until the server is idle (no live
//!   task, its views still), so a command sees what the ones before it did, ended; in
//!   a block marked `busy` it waits only before the first. With the option `stderr` the block is what the
//!   server printed on stderr up to its `listening on` line.
//! - `cli`: the same, with no server: the file's `cli` blocks run in one directory.
//! - `fixture`: not run here: `crates/spool-http/tests/http/docs.rs` runs it against
//!   that suite's server, for examples `spool serve` cannot give.
//! - `top NAME`: the block is the `spool top` frame of the snapshot test `NAME`
//!   (`crates/spool-cli/src/top/snapshots/spool__top__tests__NAME.snap`), exactly: no
//!   normalizing, no `…`.
//!
//! Each command's output (stdout and stderr, as a terminal shows them) is compared,
//! line by line, with the lines after it, after both are normalized: what varies from
//! run to run is replaced by a placeholder on both sides, so the docs keep real-looking
//! values:
//!
//! | in the output | becomes |
//! |---|---|
//! | the server's address | `127.0.0.1:7420` (as the docs show it; commands are sent to the real one) |
//! | a loopback port (`127.0.0.1:46145`: a server on `--addr 127.0.0.1:0`) | `127.0.0.1:<PORT>` |
//! | an RFC 3339 instant (`2026-11-26T10:59:58.709104221Z`) | `<TIME>` |
//! | a clock time opening a line (`10:15:11 `) | `<CLOCK> ` |
//! | a time in seconds with a fraction (`3.040s`, `5.040340116s`, `0.056 s`) | `<S>` |
//! | two spaces or more (columns are as wide as their widest cell, which varies) | two spaces |
//! | the number of a JSON member named `…_ms`, the members of `waiting_ms`, `secs` and `nanos` | `<N>` |
//! | `ok N` (`/healthz`) | `ok <N>` |
//! | an HTTP `date:` header's value | `<DATE>` |
//! | the value of a Prometheus histogram's `_bucket`, `_sum`, `_max`, and of `spool_loop_turn_*` and `spool_views_generation` | `<N>` |
//!
//! In the docs, `…` in a line stands for any text, and a line that is only `…` for any
//! lines (none included), so that long answers can be cut. A command whose expected
//! output ends with a `…` line is stopped once its output matches (an event stream);
//! a `^C` line is where the test sends SIGINT to the command, once the output before it
//! has come (`spool run`), as a terminal would.
//!
//! On a mismatch the test fails with each command, what the doc says and what ran. With
//! `SPOOL_BLESS_DOCS=1` it writes what ran into the docs instead (the output of each
//! command that did not match; the others are kept as written, cuts included): review
//! the diff.

#![allow(clippy::unwrap_used)]

mod normalize;
#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use normalize::{difference, fits, normalized};
use support::Server;

/// The token of the docs' sessions.
const TOKEN: &str = "s3cret-token-for-the-docs";
/// The address the docs show.
const DOC_ADDR: &str = "127.0.0.1:7420";
/// How long one command may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// A checked block of a doc.
#[derive(Debug)]
struct Block {
    /// The doc, relative to the workspace.
    file: String,
    /// The index of its first content line in the file.
    start: usize,
    /// Its content lines.
    lines: Vec<String>,
    /// The session's name.
    session: String,
    /// The options after it.
    options: Vec<String>,
}

/// A command of a console block and the output the doc shows for it.
#[derive(Debug)]
struct Step {
    /// Its lines as written, `$ ` included.
    command_lines: Vec<String>,
    /// The command as `sh` takes it.
    command: String,
    /// The output the doc shows.
    expected: Vec<String>,
}

/// What a block should hold instead, found by a run.
#[derive(Debug)]
struct Mismatch {
    /// The index of the block's first content line in its file.
    block_start: usize,
    /// The block's lines as read.
    old: Vec<String>,
    /// What they should be.
    new: Vec<String>,
    /// What differs, for the failure's message.
    report: String,
}

/// The workspace's root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The docs: `README.md` and `docs/*.md`, by name.
fn docs() -> Vec<String> {
    let root = workspace();
    let mut files = vec!["README.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The checked blocks of `file`, in its order.
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(args) = line
            .trim()
            .strip_prefix("<!-- checked:")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        let mut words = args.split_whitespace().map(str::to_owned);
        let session = words.next().unwrap_or_default();
        assert!(
            lines.get(i + 1).is_some_and(|l| l.starts_with("```")),
            "{file}:{}: a `checked` comment must come right before a code block",
            i + 1
        );
        let start = i + 2;
        let end = (start..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or_else(|| panic!("{file}:{}: the code block does not end", i + 2));
        found.push(Block {
            file: file.to_owned(),
            start,
            lines: lines[start..end].iter().map(|l| (*l).to_owned()).collect(),
            session,
            options: words.collect(),
        });
    }
    found
}

/// The commands of a console block, each with the output shown after it.
fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in &block.lines {
        if continued {
            let step = steps.last_mut().unwrap();
            step.command_lines.push(line.clone());
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command_lines: vec![line.clone()],
                command: command.to_owned(),
                expected: Vec::new(),
            });
            continued = line.ends_with('\\');
        } else {
            let step = steps.last_mut().unwrap_or_else(|| {
                panic!(
                    "{}:{}: a checked console block starts with a `$ ` command",
                    block.file,
                    block.start + 1
                )
            });
            step.expected.push(line.clone());
        }
    }
    steps
}

/// A command under way.
struct Running {
    /// `sh`, running the command.
    child: std::process::Child,
    /// Its process group, which signals go to (a terminal's Ctrl-C does the same).
    group: nix::unistd::Pid,
    /// What it has printed so far.
    output: Arc<Mutex<Vec<u8>>>,
    /// Whether its output has ended.
    ended: Arc<AtomicBool>,
    /// The thread that reads its output.
    reader: thread::JoinHandle<()>,
}

/// Where the commands of a session run.
struct Place {
    dir: tempfile::TempDir,
    /// The server's real address, for a `serve` session.
    addr: Option<String>,
    agent: ureq::Agent,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::tempdir().unwrap();
        for name in ["token", "token.txt"] {
            std::fs::write(dir.path().join(name), format!("{TOKEN}\n")).unwrap();
        }
        Place {
            dir,
            addr: None,
            agent: support::client(Duration::from_secs(10)),
        }
    }

    /// Text the run printed, with this place's address and directory as the docs show
    /// them.
    fn as_shown(&self, text: &str) -> String {
        // `curl -i` prints the head's lines as they came, ending in CR LF.
        let mut text = text
            .replace("\r\n", "\n")
            .replace(&format!("{}/", self.dir.path().display()), "");
        if let Some(addr) = &self.addr {
            text = text.replace(addr.as_str(), DOC_ADDR);
        }
        text
    }

    /// Waits until the server has no live task and its views have not changed for
    /// 100 ms.
    fn settle(&self) {
        let Some(addr) = &self.addr else { return };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut still: Option<(String, Instant)> = None;
        loop {
            let health = self
                .agent
                .get(format!("http://{addr}/healthz"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .unwrap_or_default();
            let (_, queue) = support::get(&self.agent, addr, TOKEN, "/v1/queue");
            let idle = queue["details"].as_array().is_some_and(Vec::is_empty);
            match &still {
                Some((seen, since)) if idle && *seen == health => {
                    if since.elapsed() >= Duration::from_millis(100) {
                        return;
                    }
                }
                _ => still = idle.then(|| (health, Instant::now())),
            }
            assert!(
                Instant::now() < deadline,
                "the server did not become idle: {queue}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts `command` under `sh` in this place, in a process group of its own, its
    /// stderr into its stdout, which a thread collects.
    fn spawn(&self, command: &str) -> Running {
        let spool = PathBuf::from(env!("CARGO_BIN_EXE_spool"));
        let path = format!(
            "{}:{}",
            spool.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec 2>&1\n{command}"))
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("T", format!("Authorization: Bearer {TOKEN}"))
            .env("NO_COLOR", "1")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("RUST_LOG")
            .env_remove("SPOOL_CRASH_AT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh starts (the docs' commands need sh, and curl)");
        let group = nix::unistd::Pid::from_raw(-i32::try_from(child.id()).unwrap());
        let mut stdout = child.stdout.take().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(AtomicBool::new(false));
        let reader = {
            let (output, ended) = (output.clone(), ended.clone());
            thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = stdout.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    output.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                ended.store(true, Ordering::SeqCst);
            })
        };
        Running {
            child,
            group,
            output,
            ended,
            reader,
        }
    }

    /// Runs `step` and returns its output's lines as shown.
    fn run(&self, step: &Step) -> Vec<String> {
        let command = match &self.addr {
            Some(addr) => step.command.replace(DOC_ADDR, addr),
            None => step.command.clone(),
        };
        let Running {
            mut child,
            group,
            output,
            ended,
            reader,
        } = self.spawn(&command);
        let expected = normalized(&step.expected);
        let interrupt = expected.iter().position(|l| l == "^C");
        // With nothing before it, the interrupt would come before the command started.
        assert_ne!(
            interrupt,
            Some(0),
            "`$ {}`: a `^C` line needs the output that comes before it",
            step.command
        );
        let open_ended = expected.last().is_some_and(|l| l == "…");
        let complete = |bytes: &[u8]| -> Vec<String> {
            let text = String::from_utf8_lossy(bytes);
            let shown = self.as_shown(&text);
            match shown.rfind('\n') {
                Some(end) => shown[..end].split('\n').map(str::to_owned).collect(),
                None => Vec::new(),
            }
        };
        let deadline = Instant::now() + COMMAND_LIMIT;
        let mut interrupted_at: Option<usize> = None;
        let mut cut: Option<Vec<String>> = None;
        // When the output last grew: an output that differs from the doc before its
        // `^C` is interrupted once it has as many lines and has been still for a
        // second, so that what ran after the interrupt is seen (and blessed) too.
        let mut grown = (0, Instant::now());
        while !ended.load(Ordering::SeqCst) {
            let bytes = output.lock().unwrap().clone();
            let lines = complete(&bytes);
            if bytes.len() != grown.0 {
                grown = (bytes.len(), Instant::now());
            }
            let due = |k: usize| {
                fits(&expected[..k], &normalized(&lines))
                    || (lines.len() >= k && grown.1.elapsed() >= Duration::from_secs(1))
            };
            if let Some(k) = interrupt
                && interrupted_at.is_none()
                && due(k)
            {
                interrupted_at = Some(bytes.len());
                let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGINT);
            }
            if open_ended && fits(&expected, &normalized(&lines)) {
                cut = Some(lines);
                let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
                break;
            }
            if Instant::now() >= deadline {
                let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = child.wait();
        reader.join().unwrap();
        if let Some(lines) = cut {
            return lines;
        }
        let mut bytes = output.lock().unwrap().clone();
        if let Some(at) = interrupted_at {
            bytes.splice(at..at, b"^C\n".iter().copied());
        }
        let text = self.as_shown(&String::from_utf8_lossy(&bytes));
        text.strip_suffix('\n')
            .unwrap_or(&text)
            .split('\n')
            .map(str::to_owned)
            .filter(|_| !text.is_empty())
            .collect()
    }
}

/// Runs a console block's commands; a mismatch for the block if one's output differs.
fn check_console(place: &Place, block: &Block) -> Option<Mismatch> {
    let busy = block.options.iter().any(|o| o == "busy");
    let mut new = Vec::new();
    let mut report = String::new();
    for (i, step) in steps(block).iter().enumerate() {
        if i == 0 || !busy {
            place.settle();
        }
        let actual = place.run(step);
        new.extend(step.command_lines.iter().cloned());
        if fits(&normalized(&step.expected), &normalized(&actual)) {
            new.extend(step.expected.iter().cloned());
        } else {
            report.push_str(&difference(&step.command, &step.expected, &actual));
            new.extend(actual);
        }
    }
    (!report.is_empty()).then(|| Mismatch {
        block_start: block.start,
        old: block.lines.clone(),
        new,
        report,
    })
}

/// Compares a block that is shown whole with what it should be: `exactly`, or
/// normalized with `…` standing for what is cut.
fn check_whole(block: &Block, actual: Vec<String>, what: &str, exactly: bool) -> Option<Mismatch> {
    let fit = if exactly {
        block.lines == actual
    } else {
        fits(&normalized(&block.lines), &normalized(&actual))
    };
    (!fit).then(|| Mismatch {
        block_start: block.start,
        old: block.lines.clone(),
        report: format!(
            "\n{what}\n--- the doc says:\n{}\n--- it is:\n{}\n",
            block.lines.join("\n"),
            actual.join("\n")
        ),
        new: actual,
    })
}

/// The frame of a `spool top` snapshot test.
fn top_frame(name: &str) -> Vec<String> {
    let path = workspace().join(format!(
        "crates/spool-cli/src/top/snapshots/spool__top__tests__{name}.snap"
    ));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // After the header, which ends with its second `---` line.
    text.lines()
        .skip_while(|l| *l != "---")
        .skip(1)
        .skip_while(|l| *l != "---")
        .skip(1)
        .map(str::to_owned)
        .collect()
}

/// Runs the checked blocks of one file's session; the mismatches.
fn check_session(session: &str, blocks: &[&Block]) -> Vec<Mismatch> {
    let mut place = Place::new();
    let mut server = None;
    if session == "serve" {
        let started = Server::spawn({
            let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
            command
                .args([
                    "serve",
                    "--store",
                    "demo.spool",
                    "--token-file",
                    "token",
                    "--addr",
                    "127.0.0.1:0",
                    "--llm-latency-ms",
                    "200",
                ])
                .current_dir(place.dir.path())
                .env_remove("OPENAI_BASE_URL")
                .env_remove("RUST_LOG")
                .env_remove("SPOOL_CRASH_AT")
                .env("NO_COLOR", "1");
            command
        });
        place.addr = Some(started.addr.clone());
        server = Some(started);
    }
    let mut mismatches = Vec::new();
    for block in blocks {
        let found = match session {
            "top" => {
                let name = block.options.first().expect("`top NAME`");
                check_whole(
                    block,
                    top_frame(name),
                    &format!("the frame of {name}"),
                    true,
                )
            }
            "serve" if block.options.iter().any(|o| o == "stderr") => {
                let server = server.as_ref().unwrap();
                // The line that told the address may not be in the log yet.
                server.wait_log("listening on ");
                let log = place.as_shown(&server.log());
                let mut lines = Vec::new();
                for line in log.lines() {
                    lines.push(line.to_owned());
                    if line.starts_with("listening on ") {
                        break;
                    }
                }
                check_whole(block, lines, "spool serve's stderr at start", false)
            }
            "serve" | "cli" => check_console(&place, block),
            other => panic!(
                "{}:{}: unknown session `{other}` (serve, cli or top)",
                block.file, block.start
            ),
        };
        mismatches.extend(found);
    }
    if let Some(server) = server {
        server.stop();
    }
    mismatches
}

/// Writes `mismatches`' new contents into `file`, whose blocks must still be as read.
fn bless(file: &str, mismatches: &[Mismatch]) {
    let path = workspace().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // From the end, so that the earlier blocks' places hold.
    let mut sorted: Vec<&Mismatch> = mismatches.iter().collect();
    sorted.sort_by_key(|m| std::cmp::Reverse(m.block_start));
    for m in sorted {
        let range = m.block_start..m.block_start + m.old.len();
        assert_eq!(
            lines.get(range.clone()),
            Some(&m.old[..]),
            "{file} changed while the docs were checked"
        );
        lines.splice(range, m.new.iter().cloned());
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    std::fs::write(&path, out).unwrap();
}

#[test]
fn the_docs_show_what_spool_prints() {
    let blessing = std::env::var_os("SPOOL_BLESS_DOCS").is_some_and(|v| v == "1");
    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|out| out.status.success()),
        "the docs' examples are curl commands, run as written: install curl \
         (scripts/test-deps.sh does)"
    );
    let mut failures = String::new();
    let mut checked = 0;
    for file in docs() {
        let text = std::fs::read_to_string(workspace().join(&file)).unwrap();
        let found = blocks(&file, &text);
        checked += found.len();
        let mut sessions: BTreeMap<&str, Vec<&Block>> = BTreeMap::new();
        // `fixture` blocks are run against spool-http's test server, by its tests.
        for block in found.iter().filter(|b| b.session != "fixture") {
            sessions.entry(&block.session).or_default().push(block);
        }
        let mut mismatches = Vec::new();
        for (session, blocks) in sessions {
            mismatches.extend(check_session(session, &blocks));
        }
        if blessing && !mismatches.is_empty() {
            bless(&file, &mismatches);
        }
        for m in &mismatches {
            failures.push_str(&format!("\n=== {file}:{}{}", m.block_start, m.report));
        }
    }
    assert!(checked > 0, "no checked block in the docs");
    if !blessing {
        assert!(
            failures.is_empty(),
            "the docs differ from what spool prints (SPOOL_BLESS_DOCS=1 writes what it \
             printed into them; review the diff):{failures}"
        );
    } else if !failures.is_empty() {
        eprintln!("wrote into the docs:{failures}");
    }
}
