//! Runs the built `spool` binary: a small, fast demo end to end, and the usage errors.

use std::process::{Command, Output};

fn spool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        // The usage errors are compared as plain text: no colours forced on a pipe.
        .env_remove("CLICOLOR_FORCE")
        .args(args)
        .output()
        .expect("the spool binary runs")
}

#[test]
fn demo_runs_200_agents_and_checks_every_answer() {
    let out = spool(&[
        "demo",
        "--agents",
        "200",
        "--max-latency-ms",
        "3",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("spool demo: 200 agents, seed 42"),
        "{stdout}"
    );
    assert!(
        stdout.contains("tasks:      200 completed ok, 0 failed, 0 canceled"),
        "{stdout}"
    );
    assert!(stdout.contains("requests:   "), "{stdout}");
    assert!(stdout.contains("llm: "), "{stdout}");
    assert!(stdout.contains("tool:calc: 200"), "{stdout}");
    assert!(stdout.contains("wall time:  "), "{stdout}");
    assert!(stdout.contains("steps/s)"), "{stdout}");
    assert!(
        stdout.contains("check:      ok, 200/200 answers match"),
        "{stdout}"
    );
    assert!(!stdout.contains("FAILED"), "{stdout}");
    // --quiet: no progress lines.
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn the_same_seed_gives_the_same_workload() {
    let counts = |seed: &str| {
        let out = spool(&[
            "demo",
            "--agents",
            "200",
            "--max-latency-ms",
            "0",
            "--seed",
            seed,
            "--quiet",
        ]);
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = |prefix: &str| {
            stdout
                .lines()
                .find(|l| l.starts_with(prefix))
                .map(str::to_owned)
                .expect("summary line present")
        };
        (
            line("requests:"),
            line("steps:").split(" (").next().map(str::to_owned),
        )
    };
    assert_eq!(counts("9"), counts("9"));
    assert_ne!(counts("9").0, counts("10").0);
}

/// A usage error is a short message naming what was wrong, the usage line and a hint at
/// `--help`, on stderr with exit status 2: not the whole help.
#[test]
fn an_unknown_flag_is_a_usage_error() {
    let out = spool(&["demo", "--xyzzynicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: unexpected argument '--xyzzynicate' found\n\
         \n\
         Usage: spool demo [OPTIONS]\n\
         \n\
         For more information, try '--help'.\n"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_value_out_of_bounds_is_a_usage_error() {
    let out = spool(&["demo", "--agents", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: invalid value '0' for '--agents <N>': 0 is not in 1..=1000000\n\
         \n\
         For more information, try '--help'.\n"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn help_and_unknown_commands() {
    // `help` and `--help`: the commands, on stdout, exit 0.
    let help = spool(&["help"]);
    assert_eq!(help.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&help.stdout);
    assert!(stdout.starts_with("spool — a deterministic"), "{stdout}");
    assert!(
        stdout.contains("Usage: spool [OPTIONS] <COMMAND>"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n      --log-format <FORMAT>  "),
        "{stdout}"
    );
    for command in ["demo", "inspect", "replay", "help"] {
        assert!(
            stdout.contains(&format!("\n  {command} ")),
            "{command}: {stdout}"
        );
    }
    assert!(help.stderr.is_empty());
    let long = spool(&["--help"]);
    assert_eq!(long.status.code(), Some(0));
    assert_eq!(long.stdout, help.stdout);

    // `demo --help`: its options and the environment it reads.
    let out = spool(&["demo", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Usage: spool demo [OPTIONS]"), "{stdout}");
    assert!(
        // The column is as wide as the global `--log-format <FORMAT>`, listed last.
        stdout.contains("--agents <N>           Agents to run [default: 300]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n\nEnvironment for demo:\n  OPENAI_BASE_URL"),
        "{stdout}"
    );

    let out = spool(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("spool {}\n", env!("CARGO_PKG_VERSION"))
    );

    let out = spool(&["xyzzy"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: unrecognized subcommand 'xyzzy'\n\
         \n\
         Usage: spool [OPTIONS] <COMMAND>\n\
         \n\
         For more information, try '--help'.\n"
    );
    assert!(out.stdout.is_empty());

    let out = spool(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: 'spool' requires a subcommand but one was not provided\n\
         \x20 [subcommands: demo, inspect, replay, run, serve, top, schedule, cluster, history, fork, help]\n\
         \n\
         Usage: spool [OPTIONS] <COMMAND>\n\
         \n\
         For more information, try '--help'.\n"
    );
    assert!(out.stdout.is_empty());
}

/// A run recorded with `--journal` replays with `spool replay` to the same trace: the
/// replay reports no divergence and exits 0.
#[test]
fn a_recorded_demo_replays_without_divergence() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("run.journal");
    let journal_arg = journal.to_str().expect("a UTF-8 path");
    let out = spool(&[
        "demo",
        "--agents",
        "40",
        "--max-latency-ms",
        "2",
        "--quiet",
        "--journal",
        journal_arg,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("journal:    written to"), "{stdout}");
    let out = spool(&["replay", journal_arg]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("no divergence from the recorded run"),
        "{stdout}"
    );
    assert!(stdout.starts_with("replayed "), "{stdout}");
}

/// `spool inspect` of a demo's journal shows the state the journal ends in (every agent
/// done), saying as of which entry, not the empty snapshot it starts from. Times (the
/// wall clock's) are masked; everything else is exact for this seed.
#[test]
fn inspect_shows_the_state_a_journal_ends_in() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("run.journal");
    let journal_arg = journal.to_str().expect("a UTF-8 path");
    let out = spool(&[
        "demo",
        "--agents",
        "3",
        "--seed",
        "7",
        "--max-latency-ms",
        "2",
        "--quiet",
        "--journal",
        journal_arg,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // How many entries the journal has, as `spool replay` counts them.
    let replayed = spool(&["replay", journal_arg]);
    let replayed = String::from_utf8_lossy(&replayed.stdout);
    let entries: usize = replayed
        .strip_prefix("replayed ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of entries in {replayed:?}"));
    let out = spool(&["inspect", journal_arg]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // Each time (a task's age, the state's `at`) as `T`.
    let masked: Vec<String> = stdout
        .lines()
        .map(|line| {
            line.split(' ')
                .map(|word| {
                    let time = word.strip_suffix('s').is_some_and(|n| {
                        n.contains('.') && n.chars().all(|c| c.is_ascii_digit() || c == '.')
                    });
                    if time { "T" } else { word }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        masked,
        [
            format!(
                "a journal of {entries} entries; the state it ends in, as of entry {entries} of {entries}:"
            ),
            "ID       AGENT            TYPE             PRIORITY  AGE        STATE".to_owned(),
            "1        agent-0          react-agent      normal    T     Completed(ok)".to_owned(),
            "2        agent-1          react-agent      normal    T     Completed(ok)".to_owned(),
            "3        agent-2          react-agent      normal    T     Completed(ok)".to_owned(),
            "tasks: 3 (0 live: 0 ready, 0 waiting; 3 completed ok, 0 failed, 0 canceled) at T"
                .to_owned(),
            "counters: 3 submitted, 12 polls, 14 requests, 14 answers, 0 rate limited".to_owned(),
        ]
    );
}

/// `--journal` and `--store` are refused together, with a usage error.
#[test]
fn journal_and_store_do_not_go_together() {
    let out = spool(&["demo", "--journal", "a", "--store", "b"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "error: the argument '--journal <FILE>' cannot be used with '--store <PATH>'\n\
         \n\
         Usage: spool demo --journal <FILE>\n\
         \n\
         For more information, try '--help'.\n"
    );
    assert!(out.stdout.is_empty());
}

/// Exactly once does not hang on the retention: a run on a store whose results are
/// evicted as soon as they end, then a second run on the same store. The second run
/// finds every agent in the store's key record and submits none again: its executors
/// serve nothing, and its summary accounts for every agent.
#[test]
fn agents_whose_results_were_evicted_are_not_run_again_on_the_same_store() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = dir.path().join("run.spool");
    let store_arg = store.to_str().expect("a UTF-8 path");
    let args = [
        "demo",
        "--agents",
        "6",
        "--max-latency-ms",
        "1",
        "--quiet",
        "--retention-secs",
        "0",
        "--store",
        store_arg,
    ];
    let first = spool(&args);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{stdout}");
    assert!(stdout.contains("check:      ok, "), "{stdout}");

    let second = spool(&args);
    let stdout = String::from_utf8_lossy(&second.stdout);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("store: resumed at "), "{stdout}");
    let requests = stdout
        .lines()
        .find(|l| l.starts_with("requests:"))
        .expect("a requests line");
    // The count is the whole run's; this process's executors served nothing.
    assert!(
        requests.ends_with(
            " (in the whole run; this process: llm: 0, tool:calc: 0, tool:read_file: 0, \
             tool:search: 0)"
        ),
        "the second run sent requests again: {requests}\n{stdout}"
    );
    assert!(
        stdout.contains("6 ended with their results evicted after the retention"),
        "{stdout}"
    );
    assert!(
        stdout.contains("check:      ok, 0/6 answers match"),
        "{stdout}"
    );
}

/// Fails the test: `line` is not a progress line.
fn not_progress<T>(line: &str) -> T {
    panic!("not a progress line: {line:?}")
}

/// One plain progress line taken apart and written again in the format it must have:
/// `[  1.00s]   132/1500 agents done (132 ok, 0 failed) | 3339 requests, 2671 answered,
///   33 in flight[, 635 held][, backing off until T after a 429][ | 131.9 agents/s, ETA
/// 6s]`. Gives the line rebuilt, and whether it has the rate and ETA part.
fn rebuilt_progress_line(line: &str, total: usize) -> (String, bool) {
    let (elapsed, rest) = line
        .strip_prefix('[')
        .and_then(|l| l.split_once("s] "))
        .unwrap_or_else(|| not_progress(line));
    let elapsed: f64 = elapsed
        .trim()
        .parse()
        .unwrap_or_else(|_| not_progress(line));
    let (done, rest) = rest
        .trim_start()
        .split_once('/')
        .unwrap_or_else(|| not_progress(line));
    let done: u64 = done.parse().unwrap_or_else(|_| not_progress(line));
    let rest = rest
        .strip_prefix(&format!("{total} agents done ("))
        .unwrap_or_else(|| not_progress(line));
    let (ok, rest) = rest
        .split_once(" ok, ")
        .unwrap_or_else(|| not_progress(line));
    let (failed, rest) = rest
        .split_once(" failed) | ")
        .unwrap_or_else(|| not_progress(line));
    let (requests, rest) = rest
        .split_once(" requests, ")
        .unwrap_or_else(|| not_progress(line));
    let (answered, rest) = rest
        .split_once(" answered, ")
        .unwrap_or_else(|| not_progress(line));
    let (in_flight, rest) = rest
        .split_once(" in flight")
        .unwrap_or_else(|| not_progress(line));
    let number = |text: &str| -> u64 { text.trim().parse().unwrap_or_else(|_| not_progress(line)) };
    let (ok, failed) = (number(ok), number(failed));
    assert!(ok + failed <= done, "{line}");
    let mut again = format!(
        "[{elapsed:>6.2}s] {done:>5}/{total} agents done ({ok} ok, {failed} failed) | {} requests, {} answered, {:>4} in flight",
        number(requests),
        number(answered),
        number(in_flight),
    );
    let (extras, pace) = match rest.split_once(" | ") {
        Some((extras, pace)) => (extras, Some(pace)),
        None => (rest, None),
    };
    // Held requests and a back-off are said only when there are some.
    let mut extras = extras;
    if let Some((held, after)) = extras
        .strip_prefix(", ")
        .and_then(|e| e.split_once(" held"))
    {
        again.push_str(&format!(", {} held", number(held)));
        extras = after;
    }
    if let Some(until) = extras
        .strip_prefix(", backing off until ")
        .and_then(|e| e.strip_suffix(" after a 429"))
    {
        assert!(until.ends_with('s') && !until.contains(' '), "{line}");
        again.push_str(&format!(", backing off until {until} after a 429"));
    } else {
        assert_eq!(extras, "", "{line}");
    }
    if let Some(pace) = pace {
        let (rate, eta) = pace
            .split_once(" agents/s, ETA ")
            .unwrap_or_else(|| not_progress(line));
        let rate: f64 = rate.parse().unwrap_or_else(|_| not_progress(line));
        // `7s`, `2m05s`, `1h02m`, or `?` before any agent has ended.
        let parts = eta.split(['h', 'm', 's']).filter(|p| !p.is_empty());
        assert!(
            eta == "?"
                || (eta.ends_with(['s', 'm']) && parts.clone().all(|p| p.parse::<u64>().is_ok())),
            "{line}"
        );
        assert_eq!(eta == "?", done == 0, "{line}");
        again.push_str(&format!(" | {rate:.1} agents/s, ETA {eta}"));
    }
    (again, pace.is_some())
}

/// Off a terminal the progress is plain lines: once a second with the rate and the time
/// left, then the last one, from the final counters, without them.
#[test]
fn progress_off_a_terminal_is_plain_periodic_lines() {
    // Enough agents for the run to last over a second (about 3 s here).
    let out = spool(&["demo", "--agents", "1500"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let (last, periodic) = lines.split_last().expect("a progress line");
    assert!(!periodic.is_empty(), "no periodic line in\n{stderr}");
    for line in periodic {
        let (again, paced) = rebuilt_progress_line(line, 1500);
        assert_eq!(&again, line);
        assert!(paced, "{line}");
    }
    let (again, paced) = rebuilt_progress_line(last, 1500);
    assert_eq!(&again, last);
    assert!(!paced, "{last}");
    assert!(
        last.contains(" 1500/1500 agents done (1500 ok, 0 failed) | "),
        "{last}"
    );
    assert!(last.ends_with(" answered,    0 in flight"), "{last}");
    // No escape sequence or carriage return: nothing is drawn in place.
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "{stderr:?}"
    );
}

/// `--max-latency-ms` sets the upper end of the LLM's simulated latency as given, up as
/// well as down, and caps the tools'; the first line says the ranges used.
#[test]
fn the_latency_option_sets_the_range_the_banner_gives() {
    for (max, banner) in [
        (
            "400",
            "spool demo: 1 agents, seed 42, simulated latency llm 5-400 ms, tools 1-10 ms",
        ),
        (
            "3",
            "spool demo: 1 agents, seed 42, simulated latency llm 3-3 ms, tools 1-3 ms",
        ),
    ] {
        let out = spool(&["demo", "--agents", "1", "--max-latency-ms", max, "--quiet"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert_eq!(stdout.lines().next(), Some(banner), "{stdout}");
    }
}

/// The last progress line and the summary give the same count of requests, from the
/// same final counters, in a run where some LLM calls were refused with a 429 and sent
/// again (which the summary counts apart).
#[test]
fn the_last_progress_line_and_the_summary_count_the_same_requests() {
    let out = spool(&["demo", "--agents", "300", "--max-latency-ms", "3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("requests:   "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no requests line in\n{stdout}"));
    let last = stderr.lines().last().expect("a progress line");
    let progress: u64 = last
        .split(" | ")
        .nth(1)
        .and_then(|counters| counters.split(" requests, ").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of requests in {last:?}"));
    assert_eq!(summary, progress, "{stdout}\n{last}");
    let refused: u64 = stdout
        .lines()
        .find_map(|line| line.split("; ").nth(1))
        .and_then(|rest| rest.strip_suffix(" calls refused with 429, backed off and sent again"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of 429s in\n{stdout}"));
    assert!(
        refused > 0,
        "no 429 in this run: the counts would agree anyway\n{stdout}"
    );
}

/// Ctrl-C (SIGINT) stops the demo with a word: how far it got and that the store
/// keeps it, exit status 130; the same command then goes on from the store and ends
/// with every answer checked.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_demo_with_a_word_and_the_store_goes_on() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().expect("a temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir.path())
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_CRASH_AT")
        .args([
            "demo",
            "--store",
            "demo.spool",
            "--agents",
            "1000",
            "--max-latency-ms",
            "400",
            "--quiet",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the demo starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    // The first line comes once the signals are taken by the demo, not by default.
    let mut banner = String::new();
    stdout.read_line(&mut banner).expect("the first line");
    assert!(banner.starts_with("spool demo: 1000 agents"), "{banner}");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT sent");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the demo's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo did not stop within 60 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    stdout
        .read_to_string(&mut rest)
        .expect("the rest of stdout");
    assert_eq!(status.code(), Some(130), "{status:?}: {rest}");
    let line = rest.lines().last().unwrap_or_default();
    let (head, tail) = line
        .split_once(" of 1000 agents done, ")
        .unwrap_or_else(|| panic!("not a stop line: {rest:?}"));
    assert!(head.starts_with("stopped:    by a signal after "), "{line}");
    assert!(
        tail.ends_with(
            " requests; everything taken in is in demo.spool: the same command goes on from there"
        ),
        "{line}"
    );
    assert!(!rest.contains("check:"), "{rest}");

    let again = Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir.path())
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_CRASH_AT")
        .args([
            "demo",
            "--store",
            "demo.spool",
            "--agents",
            "1000",
            "--max-latency-ms",
            "1",
            "--quiet",
        ])
        .output()
        .expect("the demo runs again");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{stdout}");
    assert!(stdout.contains("\nstore: resumed at "), "{stdout}");
    assert!(
        stdout.contains("check:      ok, 1000/1000 answers match their script"),
        "{stdout}"
    );
}
