//! `spool schedule ... --addr URL` and `spool inspect --addr URL` manage a running
//! `spool serve` through its HTTP API, printing what the store commands print; a wrong
//! token and a server that is not there are one-line errors. On PostgreSQL the reading
//! commands (`--postgres URL`) read the store while `spool serve --postgres` writes it,
//! and a writing one is refused with a message that says to go through `--addr`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

mod support;

/// The token the tests' servers take.
const TOKEN: &str = "manage-live-token-0123456789";

/// Runs `spool ARGS` without the environment variables that would change what it
/// does, with `env` set.
fn spool(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("SPOOL_TOKEN")
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("spool runs")
}

/// Stdout of a command that must succeed.
fn ok(args: &[&str]) -> String {
    let out = spool(args, &[]);
    assert!(
        out.status.success(),
        "spool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Exit status and stderr of a command that must fail, which prints nothing on stdout.
fn fails(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = spool(args, env);
    assert!(!out.status.success(), "spool {args:?} succeeded");
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `spool serve` on a store in `dir`, on a free port, with the token [`TOKEN`] in
/// `dir/token`; and that file's path.
fn serve(dir: &Path, store: &[&str]) -> (Server, String) {
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let token = token.to_str().unwrap().to_owned();
    let mut args = vec![
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--llm-latency-ms",
        "1",
        "--token-file",
        &token,
    ];
    args.extend_from_slice(store);
    (Server::start(&args), token)
}

/// The next fire of `expr` in `tz` after now, as `spool schedule next` prints it.
fn next_fire(expr: &str, tz: &str) -> String {
    let out = ok(&["schedule", "next", expr, "--tz", tz, "--count", "1"]);
    out.split_whitespace().next().unwrap().to_owned()
}

#[test]
fn schedules_are_added_listed_changed_and_removed_through_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let (server, token) = serve(dir.path(), &["--store", store.to_str().unwrap()]);
    // Leaked, for the closure's lines of `'static` words.
    let url: &'static str = format!("http://{}", server.addr).leak();
    let token: &'static str = token.leak();
    let at = |args: &[&'static str]| [args, &["--addr", url, "--token-file", token]].concat();
    assert_eq!(
        ok(&at(&[
            "schedule",
            "add",
            "launch",
            "--once",
            "2030-01-01T09:00:00Z",
            "--prompt",
            "Ship it",
        ])),
        "added launch (once at 2030-01-01T09:00:00Z); next run 2030-01-01T09:00:00Z\n"
    );
    let added = ok(&at(&[
        "schedule",
        "add",
        "standup",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "America/New_York",
        "--prompt",
        "Summarise yesterday",
        "--overlap",
        "buffer-one",
        "--agent",
        "ops",
        "--priority",
        "high",
    ]));
    let next = next_fire("0 9 * * 1-5", "America/New_York");
    assert_eq!(
        added,
        format!("added standup (cron \"0 9 * * 1-5\" in America/New_York); next run {next}\n")
    );
    // The store's table, agents and priorities too.
    assert_eq!(
        ok(&at(&["schedule", "list"])),
        format!(
            "SLUG     STATE    WHEN                                    AGENT    PRIORITY  NEXT RUN              \
             LAST RUN  RESULT  RUNS  MISSED\n\
             launch   enabled  once at 2030-01-01T09:00:00Z            default  normal    2030-01-01T09:00:00Z  \
             -         -          0       0\n\
             standup  enabled  cron \"0 9 * * 1-5\" in America/New_York  ops      high      {next}  \
             -         -          0       0\n\
             2 schedules\n"
        )
    );
    let json: Value = serde_json::from_str(&ok(&at(&["schedule", "list", "--json"]))).unwrap();
    assert_eq!(
        (
            &json[1]["slug"],
            &json[1]["overlap"],
            &json[1]["agent"],
            &json[1]["priority"]
        ),
        (
            &Value::from("standup"),
            &Value::from("buffer-one"),
            &Value::from("ops"),
            &Value::from("high")
        )
    );
    assert_eq!(
        (
            &json[1]["status"]["last_fire"],
            &json[1]["status"]["buffered"],
            &json[1]["status"]["retry"]
        ),
        (&Value::Null, &serde_json::json!([]), &Value::Null)
    );
    // Refused as on a store: one line, exit 1, the same words.
    for (args, code, message) in [
        (
            &["add", "launch", "--every", "1h", "--prompt", "x"][..],
            1,
            "spool schedule add: a schedule named \"launch\" exists already (rm it first)\n",
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
        (
            &["runs", "nope"],
            1,
            "spool schedule runs: no schedule is named \"nope\"\n",
        ),
    ] {
        let args = at(&[&["schedule"], args].concat());
        assert_eq!(fails(&args, &[]), (code, message.to_owned()), "{args:?}");
    }

    assert_eq!(ok(&at(&["schedule", "pause", "launch"])), "paused launch\n");
    let created = json[0]["created_at"].as_str().unwrap().to_owned();
    assert_eq!(
        ok(&at(&["schedule", "show", "launch"])),
        format!(
            "slug                   launch\n\
             prompt                 \"Ship it\"\n\
             when                   once at 2030-01-01T09:00:00Z\n\
             enabled                false\n\
             overlap                skip\n\
             catch-up               latest\n\
             agent                  default\n\
             priority               normal\n\
             created                {created}\n\
             next run               - (paused)\n\
             last run               -\n\
             last fire              -\n\
             last result            -\n\
             runs                   0\n\
             missed                 0\n\
             consecutive failures   0\n\
             session                -\n"
        )
    );
    assert_eq!(
        ok(&at(&["schedule", "resume", "launch"])),
        "resumed launch; next run 2030-01-01T09:00:00Z\n"
    );
    // Run now: the server runs it (the first task of its store).
    assert_eq!(
        ok(&at(&["schedule", "run", "launch"])),
        "launch: run started as task 1\n"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let runs: Value =
            serde_json::from_str(&ok(&at(&["schedule", "runs", "launch", "--json"]))).unwrap();
        if runs[0]["state"] == "ok" {
            break runs;
        }
        assert!(Instant::now() < deadline, "the run did not end: {runs}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (fire, answer) = (
        runs[0]["fire"].as_str().unwrap(),
        runs[0]["answer"].as_str().unwrap(),
    );
    assert!(answer.contains("Ship it"), "{answer}");
    let shown: Value =
        serde_json::from_str(&ok(&at(&["schedule", "show", "launch", "--json"]))).unwrap();
    assert_eq!(shown["status"]["last_fire"], fire, "{shown}");
    assert_eq!(
        ok(&at(&["schedule", "runs", "launch"])),
        format!(
            "TASK  {:<width$}  STATE  ANSWER\n\
             \x20  1  {fire}  ok     {answer}\n\
             1 run held (1 started in all)\n",
            "FIRE",
            width = fire.len()
        )
    );
    // The task table of the live server, as of a store: its one task, ended.
    let inspect = ok(&["inspect", "--addr", url, "--token-file", token]);
    let lines: Vec<&str> = inspect.lines().collect();
    assert_eq!(lines.len(), 5, "{inspect}");
    assert_eq!(
        lines[0],
        format!("the server at {url}: its tasks as its API lists them:")
    );
    assert_eq!(
        lines[1],
        "ID       AGENT            TYPE             PRIORITY  AGE        STATE"
    );
    let cells: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        (cells[..4].to_vec(), cells[5]),
        (vec!["1", "default", "agent", "normal"], "Completed(ok)"),
        "{inspect}"
    );
    assert!(
        lines[3].starts_with(
            "tasks: 1 (0 live: 0 ready, 0 waiting; 1 completed ok, 0 failed, 0 canceled) at 20"
        ),
        "{inspect}"
    );
    assert!(lines[4].starts_with("counters: 1 submitted, "), "{inspect}");

    assert_eq!(ok(&at(&["schedule", "rm", "standup"])), "removed standup\n");
    assert!(
        ok(&at(&["schedule", "list"])).ends_with("\n1 schedule\n"),
        "standup is gone"
    );
    server.stop();
    // What the server wrote is the store's: its commands read the same schedule.
    let store = store.to_str().unwrap();
    let on_store = ok(&["schedule", "show", "launch", "--store", store]);
    assert!(
        on_store.contains("\nruns                   1\n")
            && on_store.contains("\nagent                  default\n"),
        "{on_store}"
    );
}

#[test]
fn a_wrong_token_and_a_server_not_there_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let (server, token) = serve(dir.path(), &["--store", store.to_str().unwrap()]);
    let url = format!("http://{}", server.addr);
    // The token from SPOOL_TOKEN when no file is given.
    assert_eq!(
        spool(
            &["schedule", "list", "--addr", &url],
            &[("SPOOL_TOKEN", TOKEN)]
        )
        .stdout,
        b"SLUG  STATE  WHEN  AGENT  PRIORITY  NEXT RUN  LAST RUN  RESULT  RUNS  MISSED\n0 schedules\n"
    );
    let refused = |command: &str| {
        format!(
            "spool {command}: the server at {url} refused the token (401): check --token-file or \
             SPOOL_TOKEN\n"
        )
    };
    for env in [&[("SPOOL_TOKEN", "not-the-token")][..], &[]] {
        assert_eq!(
            fails(&["schedule", "list", "--addr", &url], env),
            (1, refused("schedule list"))
        );
        assert_eq!(
            fails(&["inspect", "--addr", &url], env),
            (1, refused("inspect"))
        );
    }
    assert_eq!(
        fails(
            &[
                "schedule",
                "pause",
                "x",
                "--addr",
                &url,
                "--token-file",
                &token
            ],
            &[("SPOOL_TOKEN", "not-the-token")]
        ),
        (
            1,
            "spool schedule pause: no schedule is named \"x\"\n".to_owned()
        ),
        "--token-file wins over SPOOL_TOKEN"
    );
    server.stop();
    // Nothing listens there now.
    for (args, command) in [
        (&["schedule", "list"][..], "schedule list"),
        (&["schedule", "rm", "x"], "schedule rm"),
        (&["inspect"], "inspect"),
    ] {
        let args = [args, &["--addr", &url, "--token-file", &token]].concat();
        assert_eq!(
            fails(&args, &[]),
            (
                1,
                format!("spool {command}: cannot reach the server at {url}: connection refused\n")
            )
        );
    }
    let (code, error) = fails(&["schedule", "list", "--addr", "127.0.0.1:7420"], &[]);
    assert_eq!(
        (code, error.as_str()),
        (
            2,
            "spool schedule list: --addr \"127.0.0.1:7420\" is not a URL like \
             http://127.0.0.1:7420 (https is not supported)\n"
        )
    );
    assert_eq!(
        fails(&["schedule", "list"], &[]),
        (
            2,
            "spool schedule list: no store given: name one with --store PATH or --postgres \
             URL (or SPOOL_DATABASE_URL), or a running server with --addr URL\n"
                .to_owned()
        )
    );
    assert_eq!(
        fails(&["inspect"], &[]),
        (
            2,
            "spool inspect: nothing to inspect: name a store, a snapshot or a journal file, a \
             store with --postgres URL (or SPOOL_DATABASE_URL), or a running server with \
             --addr URL\n"
                .to_owned()
        )
    );
}

#[test]
fn a_postgres_store_is_read_while_its_server_writes_it() {
    let url = spool_pgtest::PgCluster::shared()
        .create_database("manage_live_read")
        .expect("a database of the test's own");
    let dir = tempfile::tempdir().unwrap();
    let (server, token) = serve(dir.path(), &["--postgres", &url]);
    let addr = format!("http://{}", server.addr);
    assert_eq!(
        ok(&[
            "schedule",
            "add",
            "launch",
            "--once",
            "2030-01-01T09:00:00Z",
            "--prompt",
            "Ship it",
            "--addr",
            &addr,
            "--token-file",
            &token,
        ]),
        "added launch (once at 2030-01-01T09:00:00Z); next run 2030-01-01T09:00:00Z\n"
    );
    // Read from the database, without the server's writer lock: all of it.
    assert_eq!(
        ok(&["schedule", "list", "--postgres", &url]),
        "SLUG    STATE    WHEN                          AGENT    PRIORITY  NEXT RUN              \
         LAST RUN  RESULT  RUNS  MISSED\n\
         launch  enabled  once at 2030-01-01T09:00:00Z  default  normal    2030-01-01T09:00:00Z  \
         -         -          0       0\n\
         1 schedule\n"
    );
    let env = [("SPOOL_DATABASE_URL", url.as_str())];
    let out = spool(&["schedule", "show", "launch"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\nagent                  default\n"),
        "SPOOL_DATABASE_URL names the store"
    );
    assert_eq!(
        ok(&[
            "schedule",
            "run",
            "launch",
            "--addr",
            &addr,
            "--token-file",
            &token
        ]),
        "launch: run started as task 1\n"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let inspect = loop {
        let inspect = ok(&["inspect", "--postgres", &url]);
        if inspect.contains(" Completed(ok)\n") {
            break inspect;
        }
        assert!(Instant::now() < deadline, "the run did not end:\n{inspect}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let lines: Vec<&str> = inspect.lines().collect();
    assert!(lines[0].starts_with("a store ("), "{inspect}");
    assert_eq!(
        lines[1],
        "ID       AGENT            TYPE             PRIORITY  AGE        STATE"
    );
    let cells: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        (cells[..4].to_vec(), cells[5]),
        (vec!["1", "default", "agent", "normal"], "Completed(ok)"),
        "{inspect}"
    );
    // A change needs the writer lock the server holds: refused, saying what to do.
    let (code, refused) = fails(&["schedule", "pause", "launch", "--postgres", &url], &[]);
    assert_eq!(code, 1);
    assert!(
        refused.starts_with("spool schedule pause: cannot open the store: ")
            && refused.ends_with(
                " is in use by another spool process (it holds the store's writer lock; one \
                 process writes a store at a time); while `spool serve` runs it, go through \
                 the server: --addr URL\n"
            ),
        "{refused}"
    );
    assert_eq!(refused.lines().count(), 1, "{refused}");
    server.stop();
    // A database with no store in it: read only, nothing is made in it.
    let empty = spool_pgtest::PgCluster::shared()
        .create_database("manage_live_empty")
        .expect("a database of the test's own");
    assert_eq!(
        fails(&["inspect", "--postgres", &empty], &[]),
        (
            1,
            format!(
                "spool inspect: cannot open the store: {empty} is not a spool store: the \
                 database is empty (a writer makes the store when it first connects)\n"
            )
        )
    );
}
