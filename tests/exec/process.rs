//! The subprocess tool with real processes, through a real runtime and tasks: answers,
//! exit statuses, output caps, the environment, the working directory, no shell unless
//! configured, and the whole process group killed on timeout, cancel, deadline and drop.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::{CancelReason, Kind, RequestError, TaskError, TaskState};
use spool_exec::{ProcessConfig, ProcessTool};
use spool_runtime::Runtime;

#[path = "common/process.rs"]
mod common;
use common::{KillOnDrop, ask};

/// How long anything here may take before the test counts it as hung.
const LIMIT: Duration = Duration::from_secs(10);

fn runtime(config: ProcessConfig) -> Runtime {
    Runtime::builder()
        .executor(Kind::tool("cmd"), ProcessTool::new(config))
        .build()
}

/// Runs one call of `config`'s command with `payload`: the tool's answer and how long
/// the task took.
fn call(config: ProcessConfig, payload: Value) -> (Result<Value, RequestError>, Duration) {
    let mut runtime = runtime(config);
    let started = Instant::now();
    let id = runtime.submit(ask(payload)).unwrap().id;
    runtime.run_until_idle();
    let took = started.elapsed();
    let result = match runtime.task_state(id) {
        Some(TaskState::Completed(Ok(value))) => Ok(value),
        Some(TaskState::Completed(Err(TaskError::Request { number: 1, error }))) => Err(error),
        other => panic!("the task ended as {other:?}"),
    };
    (result, took)
}

/// An answer with the given status and output, nothing truncated.
fn exited(status: i32, stdout: &str, stderr: &str) -> Value {
    json!({
        "status": status,
        "signal": null,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": {"stdout": false, "stderr": false},
    })
}

/// Polls `probe` every 5 ms until it gives a value; panics after `LIMIT`.
fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// The pids a shell command wrote to `file` (`echo $$ $!`): its own, which is its
/// group's id, and its background child's.
fn read_pids(file: &Path) -> (i32, i32) {
    wait_until("the command's pids", || {
        let text = fs::read_to_string(file).ok()?;
        let mut words = text.split_whitespace().map(|w| w.parse::<i32>());
        match (words.next(), words.next()) {
            (Some(Ok(leader)), Some(Ok(child))) if text.ends_with('\n') => Some((leader, child)),
            _ => None,
        }
    })
}

/// Live (not zombie) processes whose process group is `pgid`, from /proc.
fn live_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid, pgrp, ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z") {
            members.push(pid);
        }
    }
    members
}

/// Waits until no process of group `pgid` is alive and its leader (the tool's child)
/// has been reaped; returns how long that took.
fn assert_group_gone(pgid: i32) -> Duration {
    let started = Instant::now();
    wait_until("the process group to die", || {
        live_members(pgid).is_empty().then_some(())
    });
    wait_until("the leader to be reaped", || {
        (!Path::new(&format!("/proc/{pgid}")).exists()).then_some(())
    });
    started.elapsed()
}

/// A shell command that starts `sleep 30` in the background, writes `$$ $!` to the
/// file in `$PIDFILE`, then sleeps 30 s itself.
fn sleeper(pidfile: &Path) -> ProcessConfig {
    ProcessConfig::new("sleep 30 & echo $$ $! > \"$PIDFILE\"; sleep 30")
        .shell(true)
        .env("PIDFILE", pidfile.to_str().unwrap())
}

#[test]
fn success_with_arguments_from_the_request() {
    let config = ProcessConfig::new("printf")
        .arg("%s-%s\n")
        .allow_env("PATH");
    let (result, _) = call(config, json!({"args": ["a", "b c"]}));
    assert_eq!(result, Ok(exited(0, "a-b c\n", "")));

    let (result, _) = call(ProcessConfig::new("/bin/echo").arg("hello"), Value::Null);
    assert_eq!(result, Ok(exited(0, "hello\n", "")));
}

#[test]
fn a_failing_exit_is_an_answer() {
    let config = ProcessConfig::new("echo oops >&2; exit 3").shell(true);
    let (result, _) = call(config, json!({}));
    assert_eq!(result, Ok(exited(3, "", "oops\n")));

    // Ended by a signal: no status, the signal's number.
    let config = ProcessConfig::new("echo partial; kill -TERM $$").shell(true);
    let (result, _) = call(config, json!({}));
    assert_eq!(
        result,
        Ok(json!({
            "status": null,
            "signal": 15,
            "stdout": "partial\n",
            "stderr": "",
            "truncated": {"stdout": false, "stderr": false},
        }))
    );
}

#[test]
fn stdin_from_the_request() {
    let (result, _) = call(
        ProcessConfig::new("/bin/cat"),
        json!({"stdin": "line one\nline two"}),
    );
    assert_eq!(result, Ok(exited(0, "line one\nline two", "")));

    // More than a pipe holds, both ways: no deadlock between writing and reading.
    let big = "0123456789abcdef".repeat(20_000);
    let config = ProcessConfig::new("/bin/cat").max_output(big.len());
    let (result, took) = call(config, json!({"stdin": big}));
    assert_eq!(result, Ok(exited(0, &big, "")));
    assert!(took < LIMIT, "took {took:?}");
}

#[test]
fn output_over_the_cap_is_cut_with_a_marker() {
    let config = ProcessConfig::new("/usr/bin/printf")
        .arg("0123456789abcdefghij")
        .max_output(10);
    let (result, _) = call(config, json!({}));
    assert_eq!(
        result,
        Ok(json!({
            "status": 0,
            "signal": null,
            "stdout": "0123456789\n[… truncated: 10 more bytes]",
            "stderr": "",
            "truncated": {"stdout": true, "stderr": false},
        }))
    );

    // A megabyte on stderr is read to the end (the program is not blocked on a full
    // pipe) and counted; stdout, under the cap, is whole.
    let config = ProcessConfig::new("echo fine; head -c 1000000 /dev/zero | tr '\\0' x >&2")
        .shell(true)
        .max_output(1000);
    let (result, _) = call(config, json!({}));
    let expected_stderr = format!("{}\n[… truncated: 999000 more bytes]", "x".repeat(1000));
    assert_eq!(
        result,
        Ok(json!({
            "status": 0,
            "signal": null,
            "stdout": "fine\n",
            "stderr": expected_stderr,
            "truncated": {"stdout": false, "stderr": true},
        }))
    );

    // The cut never splits a character: "ééé" is 6 bytes; a cap of 3 keeps "é" (2).
    let config = ProcessConfig::new("/usr/bin/printf")
        .arg("ééé")
        .max_output(3);
    let (result, _) = call(config, json!({}));
    assert_eq!(
        result.unwrap()["stdout"],
        json!("é\n[… truncated: 4 more bytes]")
    );
}

#[test]
fn timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let timeout = Duration::from_millis(500);
    let (result, took) = call(sleeper(&pidfile).timeout(timeout), json!({}));
    assert_eq!(result, Err(RequestError::Timeout { after: timeout }));
    assert!(took >= timeout, "answered after {took:?}");
    assert!(took < Duration::from_secs(3), "answered after {took:?}");

    let (leader, child) = read_pids(&pidfile);
    let gone_after = assert_group_gone(leader);
    assert!(!live_members(leader).contains(&child));
    assert!(gone_after < Duration::from_secs(2), "{gone_after:?}");
}

#[test]
fn what_the_program_leaves_running_is_killed_when_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    // The background sleep holds stdout open; the answer does not wait for it.
    let config = ProcessConfig::new("sleep 30 & echo $$ $! > \"$PIDFILE\"; echo started")
        .shell(true)
        .env("PIDFILE", pidfile.to_str().unwrap());
    let (result, took) = call(config, json!({}));
    assert_eq!(result, Ok(exited(0, "started\n", "")));
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    let (leader, _) = read_pids(&pidfile);
    assert_group_gone(leader);
}

/// A shell command that starts a process in a session of its own (`setsid`), out of
/// the tool's reach, holding stdin, stdout and stderr open for 30 s; waits until it has
/// written its pid to the file in `$PIDFILE`, then prints `hi` and exits.
fn leaves_the_group() -> &'static str {
    "setsid sh -c 'echo $$ > \"$1\"; exec sleep 30' escapee \"$PIDFILE\" & \
     while [ ! -s \"$PIDFILE\" ]; do sleep 0.01; done; echo hi"
}

#[test]
fn a_process_that_left_the_group_does_not_hold_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("escapee");
    let _cleanup = KillOnDrop(vec![pidfile.clone()]);
    let config = ProcessConfig::new(leaves_the_group())
        .shell(true)
        .env("PIDFILE", pidfile.to_str().unwrap())
        .timeout(Duration::from_secs(20));
    // Its stdin too is held and never read: more than a pipe holds is still no hang.
    let input = "x".repeat(300_000);
    let (result, took) = call(config, json!({"stdin": input}));
    assert_eq!(result, Ok(exited(0, "hi\n", "")));
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    // It held the pipes all along: it is still running, in a session of its own.
    let escapee: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = fs::read_to_string(format!("/proc/{escapee}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    assert_ne!(fields[0], "Z", "{stat}");
    // The session id (the 4th field after the name) is its own pid.
    assert_eq!(fields[3], escapee.to_string(), "{stat}");
}

#[test]
fn canceling_the_task_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let mut runtime = runtime(sleeper(&pidfile));
    let id = runtime.submit(ask(json!({}))).unwrap().id;
    let handle = runtime.handle();
    let (pids_tx, pids_rx) = mpsc::channel();
    let embedder = {
        let pidfile = pidfile.clone();
        thread::spawn(move || {
            let pids = read_pids(&pidfile);
            pids_tx.send(pids).unwrap();
            handle.cancel(id).unwrap();
        })
    };
    let started = Instant::now();
    runtime.run_until_idle();
    embedder.join().unwrap();
    assert!(started.elapsed() < LIMIT);
    assert_eq!(
        runtime.task_state(id),
        Some(TaskState::Canceled(CancelReason::Requested))
    );

    let (leader, child) = pids_rx.recv().unwrap();
    let gone_after = assert_group_gone(leader);
    assert!(!live_members(leader).contains(&child));
    assert!(gone_after < Duration::from_secs(2), "{gone_after:?}");
    // The tool answered nothing for the canceled request.
    thread::sleep(Duration::from_millis(100));
    runtime.run_until_idle();
    assert_eq!(runtime.scheduler().stats().dropped_answers, 0);
}

#[test]
fn clones_in_a_pool_cancel_each_others_runs() {
    // A cancel signal reaches whichever worker takes it first; with 4 runs on 2
    // workers, tools that did not share their runs would miss some.
    let dir = tempfile::tempdir().unwrap();
    let tool = ProcessTool::new(
        ProcessConfig::new("run() { sleep 30 & echo $$ $! > \"$1\"; sleep 30; }; run").shell(true),
    );
    let mut runtime = Runtime::builder()
        .pool(Kind::tool("cmd"), 2, move || tool.clone())
        .build();
    let files: Vec<PathBuf> = (0..4)
        .map(|i| dir.path().join(format!("pids{i}")))
        .collect();
    let ids: Vec<_> = files
        .iter()
        .map(|file| {
            let payload = json!({"args": [file.to_str().unwrap()]});
            runtime.submit(ask(payload)).unwrap().id
        })
        .collect();
    let handle = runtime.handle();
    let embedder = {
        let files = files.clone();
        let ids = ids.clone();
        thread::spawn(move || {
            let pids: Vec<_> = files.iter().map(|file| read_pids(file)).collect();
            for id in ids {
                handle.cancel(id).unwrap();
            }
            pids
        })
    };
    runtime.run_until_idle();
    let pids = embedder.join().unwrap();
    for id in ids {
        assert_eq!(
            runtime.task_state(id),
            Some(TaskState::Canceled(CancelReason::Requested))
        );
    }
    for (leader, _) in pids {
        let gone_after = assert_group_gone(leader);
        assert!(gone_after < Duration::from_secs(2), "{gone_after:?}");
    }
}

#[test]
fn a_passed_deadline_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let mut runtime = runtime(sleeper(&pidfile));
    let deadline = Duration::from_millis(400);
    let started = Instant::now();
    let id = runtime
        .submit(ask(json!({})).deadline(deadline))
        .unwrap()
        .id;
    runtime.run_until_idle();
    let took = started.elapsed();
    assert!(
        took >= deadline && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(matches!(
        runtime.task_state(id),
        Some(TaskState::Completed(Err(TaskError::DeadlineExceeded {
            while_queued: false,
            ..
        })))
    ));

    let (leader, child) = read_pids(&pidfile);
    assert_group_gone(leader);
    assert!(!live_members(leader).contains(&child));
}

#[test]
fn dropping_the_runtime_kills_what_runs() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let mut runtime = runtime(sleeper(&pidfile));
    runtime.submit(ask(json!({}))).unwrap();
    let handle = runtime.handle();
    let (pids_tx, pids_rx) = mpsc::channel();
    let embedder = {
        let pidfile = pidfile.clone();
        thread::spawn(move || {
            pids_tx.send(read_pids(&pidfile)).unwrap();
            handle.shutdown().unwrap();
        })
    };
    runtime.run();
    embedder.join().unwrap();
    let (leader, child) = pids_rx.recv().unwrap();
    let before = live_members(leader);
    assert!(
        before.contains(&leader) && before.contains(&child),
        "{before:?}"
    );
    drop(runtime);
    assert_group_gone(leader);
}

#[test]
fn runs_go_at_once_on_one_executor_thread() {
    // Four runs meet: each leaves a file in a shared directory and waits (300 rounds
    // of 10 ms and more) until all four are there. One after another, the first would
    // wait alone and exit 1; at once, all four exit 0. No wall-clock bound: a loaded
    // machine only makes them meet later.
    let dir = tempfile::tempdir().unwrap();
    let meet = dir.path().display();
    let script = format!(
        "/usr/bin/touch {meet}/$$; n=0; \
         while [ \"$(/usr/bin/ls {meet} | /usr/bin/wc -l)\" -lt 4 ] && [ $n -lt 300 ]; do \
         /usr/bin/sleep 0.01; n=$((n + 1)); done; \
         [ \"$(/usr/bin/ls {meet} | /usr/bin/wc -l)\" -ge 4 ]"
    );
    let mut runtime = runtime(ProcessConfig::new("/bin/sh").arg("-c").arg(script));
    let ids: Vec<_> = (0..4)
        .map(|_| runtime.submit(ask(json!({}))).unwrap().id)
        .collect();
    runtime.run_until_idle();
    for id in ids {
        assert_eq!(
            runtime.task_state(id),
            Some(TaskState::Completed(Ok(exited(0, "", ""))))
        );
    }
}

#[test]
fn the_environment_is_the_allow_list_and_the_configured_variables() {
    let path = std::env::var("PATH").unwrap();
    let others: Vec<String> = std::env::vars()
        .map(|(name, _)| name)
        .filter(|name| name != "PATH")
        .collect();
    assert!(!others.is_empty(), "the test needs a variable not allowed");
    let config = ProcessConfig::new("/usr/bin/env")
        .allow_env("PATH")
        .allow_env("SPOOL_TEST_NEVER_SET")
        .env("GREETING", "hello there");
    let (result, _) = call(config, json!({}));
    assert_eq!(
        result,
        Ok(exited(
            0,
            &format!("GREETING=hello there\nPATH={path}\n"),
            ""
        ))
    );

    // A configured variable wins over an allowed one of the same name.
    let config = ProcessConfig::new("/usr/bin/env")
        .allow_env("PATH")
        .env("PATH", "/nowhere");
    let (result, _) = call(config, json!({}));
    assert_eq!(result, Ok(exited(0, "PATH=/nowhere\n", "")));
}

#[test]
fn the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let real: PathBuf = dir.path().canonicalize().unwrap();
    fs::write(real.join("here.txt"), "x").unwrap();
    let config = ProcessConfig::new("/bin/sh")
        .args(["-c", "pwd -P; ls"])
        .workdir(&real);
    let (result, _) = call(config, json!({}));
    assert_eq!(
        result,
        Ok(exited(0, &format!("{}\nhere.txt\n", real.display()), ""))
    );

    let missing = real.join("missing");
    let config = ProcessConfig::new("/bin/pwd").workdir(&missing);
    let (result, _) = call(config, json!({}));
    assert_eq!(
        result,
        Err(RequestError::Failed {
            message: format!(
                "cannot start `/bin/pwd` in `{}`: No such file or directory (os error 2)",
                missing.display()
            )
        })
    );
}

#[test]
fn never_a_shell_unless_configured() {
    let tricky = ["a;b", "$(echo hi)", "`id`", "'q'", "x > y", "*"];
    let (result, _) = call(ProcessConfig::new("/bin/echo"), json!({ "args": tricky }));
    assert_eq!(
        result,
        Ok(exited(0, "a;b $(echo hi) `id` 'q' x > y *\n", ""))
    );

    // With a shell, the configuration is shell text and the request's arguments are
    // quoted, so they still arrive literally.
    let config = ProcessConfig::new("printf '%s|'").shell(true);
    let (result, _) = call(
        config,
        json!({ "args": ["a b", "$(echo no)", "it's", ";"] }),
    );
    assert_eq!(result, Ok(exited(0, "a b|$(echo no)|it's|;|", "")));
}

#[test]
fn errors_the_task_can_read() {
    let (result, _) = call(ProcessConfig::new("spool-no-such-program"), json!({}));
    assert_eq!(
        result,
        Err(RequestError::Failed {
            message: "cannot start `spool-no-such-program`: No such file or directory (os error 2)"
                .into()
        })
    );

    let invalid = |message: &str| {
        Err(RequestError::InvalidArguments {
            message: message.into(),
        })
    };
    let echo = || ProcessConfig::new("/bin/echo");
    let cases = [
        (
            json!({"args": ["ok", 7]}),
            "`args[1]` must be a string, not a number",
        ),
        (
            json!({"args": "ls -l"}),
            "`args` must be an array of strings, not a string",
        ),
        (
            json!({"stdin": ["x"]}),
            "`stdin` must be a string, not an array",
        ),
        (
            json!({"argv": []}),
            "unknown field `argv`: the payload takes `args` and `stdin`",
        ),
        (
            json!(["ls"]),
            "the payload must be an object {\"args\": [strings], \"stdin\": string}, not an array",
        ),
        (
            json!({"args": ["a\u{0}b"]}),
            "`args[0]` contains a NUL byte",
        ),
    ];
    for (payload, message) in cases {
        let (result, _) = call(echo(), payload.clone());
        assert_eq!(result, invalid(message), "{payload}");
    }
}
