//! `--postgres URL` (and `SPOOL_DATABASE_URL`) in `spool run`, `spool serve` and
//! `spool demo`: a store in a PostgreSQL database works as a file does, and what is
//! wrong with a database is said in one line, exit 1, never with the URL's password.
//! Each test takes a database of its own on the test binary's own cluster.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use spool_pgtest::PgCluster;

#[path = "support/mod.rs"]
mod support;

/// The password every URL of these tests carries: the cluster trusts its clients, so
/// it is never checked, and it must never be shown.
const PASSWORD: &str = "s3cret-pw";

/// A new database `name` of the shared cluster: its URL with [`PASSWORD`] in it, and
/// the name the store is shown by (the URL without it).
fn database(name: &str) -> (String, String) {
    let url = PgCluster::shared()
        .create_database(name)
        .expect("a database of the test's own");
    (with_password(&url), url)
}

/// `postgres://USER@...` as `postgres://USER:PASSWORD@...`.
fn with_password(url: &str) -> String {
    url.replacen("@", &format!(":{PASSWORD}@"), 1)
}

/// Runs `spool ARGS` in `dir` without the environment variables that change what it
/// does, and with `env` set.
fn spool(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_CRASH_AT")
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spool runs")
}

/// Checks that `out` failed with exit status 1 and `line` alone on stderr, nothing on
/// stdout, and no password anywhere.
fn fails_with(out: &Output, line: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr, format!("{line}\n"));
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    assert!(!stderr.contains(PASSWORD), "{stderr}");
}

/// A port on 127.0.0.1 where nothing listens: one the system gave and took back.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.local_addr().expect("its address").port()
}

#[test]
fn a_url_that_does_not_parse_is_one_line_without_its_password() {
    let dir = tempfile::tempdir().expect("a directory");
    let url = format!("postgres://spool:{PASSWORD}@127.0.0.1:notaport/db");
    for command in ["run", "serve"] {
        let out = spool(dir.path(), &[command, "--postgres", &url], &[]);
        fails_with(
            &out,
            &format!(
                "spool {command}: cannot open the store: `postgres://spool:***@127.0.0.1:notaport/db` \
                 is not a PostgreSQL URL: invalid connection string: invalid value for option `port`"
            ),
        );
    }
    let out = spool(dir.path(), &["demo", "--postgres", &url], &[]);
    fails_with(
        &out,
        "spool demo: cannot open the store postgres://spool:***@127.0.0.1:notaport/db: \
         `postgres://spool:***@127.0.0.1:notaport/db` is not a PostgreSQL URL: invalid \
         connection string: invalid value for option `port`",
    );
}

#[test]
fn a_server_that_refuses_is_named_by_its_address() {
    let dir = tempfile::tempdir().expect("a directory");
    let port = closed_port();
    let url = format!("postgres://spool:{PASSWORD}@127.0.0.1:{port}/db");
    let out = spool(dir.path(), &["run", "--postgres", &url], &[]);
    fails_with(
        &out,
        &format!(
            "spool run: cannot open the store: cannot connect to PostgreSQL at \
             127.0.0.1:{port}: error connecting to server: Connection refused (os error 111)"
        ),
    );
}

#[test]
fn a_database_with_another_programs_tables_is_not_a_store() {
    let dir = tempfile::tempdir().expect("a directory");
    let (url, name) = database("cli_foreign_tables");
    let mut client = postgres::Client::connect(&name, postgres::NoTls).expect("connects");
    client
        .batch_execute("CREATE TABLE accounts (id bigint PRIMARY KEY)")
        .expect("a table of another program");
    let out = spool(dir.path(), &["serve", "--postgres", &url], &[]);
    fails_with(
        &out,
        &format!(
            "spool serve: cannot open the store: {name} is not a spool store: it holds \
             another program's tables (`public.accounts`) and no `spool` schema"
        ),
    );
    let (url, name) = database("cli_foreign_schema");
    let mut client = postgres::Client::connect(&name, postgres::NoTls).expect("connects");
    client
        .batch_execute("CREATE SCHEMA spool; CREATE TABLE spool.jobs (id bigint)")
        .expect("another program's `spool` schema");
    let out = spool(dir.path(), &["run", "--postgres", &url], &[]);
    fails_with(
        &out,
        &format!(
            "spool run: cannot open the store: {name} is not a spool store: it has a `spool` \
             schema without spool's marker (another program's)"
        ),
    );
}

#[test]
fn a_store_of_an_older_schema_is_refused() {
    let dir = tempfile::tempdir().expect("a directory");
    let (url, name) = database("cli_older_schema");
    drop(spool_postgres::PgStore::connect(&name).expect("a store is made"));
    let mut client = postgres::Client::connect(&name, postgres::NoTls).expect("connects");
    client
        .batch_execute("UPDATE spool.meta SET value = '0' WHERE key = 'schema_version'")
        .expect("the version made older");
    let out = spool(dir.path(), &["run", "--postgres", &url], &[]);
    fails_with(
        &out,
        &format!(
            "spool run: cannot open the store: {name} has schema version 0, older than this \
             build reads ({}): finish its run with the spool that wrote it, or start a new \
             store",
            spool_postgres::SCHEMA_VERSION
        ),
    );
}

#[test]
fn a_store_another_process_writes_is_refused() {
    let dir = tempfile::tempdir().expect("a directory");
    let (url, name) = database("cli_in_use");
    let writer = spool_postgres::PgStore::connect(&name).expect("the writer");
    for command in ["run", "serve"] {
        let out = spool(dir.path(), &[command, "--postgres", &url], &[]);
        fails_with(
            &out,
            &format!(
                "spool {command}: cannot open the store: {name} is in use by another spool \
                 process (it holds the store's writer lock; one process writes a store at a \
                 time)"
            ),
        );
    }
    drop(writer);
}

/// The demo on a database, end to end; the same command again goes on from it: every
/// agent was run, none is run again. `SPOOL_DATABASE_URL` names the same store.
#[test]
fn the_demo_runs_on_a_database_and_the_same_command_goes_on_from_it() {
    let dir = tempfile::tempdir().expect("a directory");
    let (url, _) = database("cli_demo");
    let args = ["demo", "--agents", "20", "--max-latency-ms", "1", "--quiet"];
    let first = spool(
        dir.path(),
        &[&args[..], &["--postgres", &url]].concat(),
        &[],
    );
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{stdout}");
    assert!(!stdout.contains("store: resumed at "), "{stdout}");
    assert!(
        stdout.contains("tasks:      20 completed ok, 0 failed, 0 canceled"),
        "{stdout}"
    );
    assert!(
        stdout.contains("check:      ok, 20/20 answers match their script"),
        "{stdout}"
    );

    let again = spool(dir.path(), &args, &[("SPOOL_DATABASE_URL", &url)]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\nstore: resumed at "), "{stdout}");
    let requests = stdout
        .lines()
        .find(|l| l.starts_with("requests:"))
        .expect("a requests line");
    assert!(
        requests.ends_with(
            " (in the whole run; this process: llm: 0, tool:calc: 0, tool:read_file: 0, \
             tool:search: 0)"
        ),
        "the second run sent requests again: {requests}\n{stdout}"
    );
    assert!(
        stdout.contains("check:      ok, 20/20 answers match their script"),
        "{stdout}"
    );
    assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD));

    // A store of the demo is not one for `spool run`, in a database as in a file.
    let run = spool(dir.path(), &["run", "--postgres", &url], &[]);
    fails_with(
        &run,
        &format!(
            "spool run: {} was made by spool demo (its scripted agents), not by spool run, \
             serve or schedule: give them a store of their own",
            url.replace(&format!(":{PASSWORD}"), "")
        ),
    );
}

/// An explicit `--store` wins over `SPOOL_DATABASE_URL`; both options at once are a
/// usage error; a command that needs a store and is given none says how to give one.
#[test]
fn the_options_and_the_environment_name_one_store() {
    let dir = tempfile::tempdir().expect("a directory");
    let unreachable = format!("postgres://spool:{PASSWORD}@127.0.0.1:{}/db", closed_port());
    let demo = spool(
        dir.path(),
        &[
            "demo",
            "--agents",
            "2",
            "--max-latency-ms",
            "1",
            "--quiet",
            "--store",
            "d.spool",
        ],
        &[("SPOOL_DATABASE_URL", &unreachable)],
    );
    assert!(demo.status.success(), "{demo:?}");
    assert!(dir.path().join("d.spool").exists());

    let both = spool(
        dir.path(),
        &["run", "--store", "s.spool", "--postgres", &unreachable],
        &[],
    );
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert_eq!(both.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: the argument '--store <PATH>' cannot be used with '--postgres <URL>'"
        ),
        "{stderr}"
    );

    for command in ["run", "serve"] {
        let none = spool(dir.path(), &[command], &[]);
        let stderr = String::from_utf8_lossy(&none.stderr);
        assert_eq!(none.status.code(), Some(2), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "spool {command}: no store given: name one with --store PATH or --postgres URL \
                 (or SPOOL_DATABASE_URL)\n"
            )
        );
    }
}

/// `spool serve --postgres`: it starts on the database, says so without the password,
/// writes the token it made to `DB.token` in its working directory, takes a task and
/// runs it; stopped and started again without limit options, it goes on from the
/// database under the limits it kept.
#[test]
fn serve_runs_a_store_in_a_database_and_goes_on_from_it() {
    let dir = tempfile::tempdir().expect("a directory");
    let (url, name) = database("cli_serve");
    let start = |options: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
        command
            .current_dir(dir.path())
            .env_remove("OPENAI_BASE_URL")
            .env_remove("SPOOL_CRASH_AT")
            .env("SPOOL_DATABASE_URL", &url)
            .args(["serve", "--addr", "127.0.0.1:0", "--llm-latency-ms", "1"])
            .args(options);
        support::Server::spawn(command)
    };
    let server = start(&["--max-running", "3"]);
    let token_file = dir.path().join("cli_serve.token");
    let token = std::fs::read_to_string(&token_file).expect("the token made at start");
    let token = token.trim();
    let log = server.log();
    assert!(
        log.contains(
            "spool serve: token written to cli_serve.token (use --token-file cli_serve.token \
             to keep it)"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "0 schedules, 0 live tasks in {name}; llm the scripted model (1 ms a call); \
             limits --max-running 3\n"
        )),
        "{log}"
    );
    let agent = support::client(std::time::Duration::from_secs(30));
    let mut response = agent
        .post(format!("http://{}/v1/tasks", server.addr))
        .header("Authorization", format!("Bearer {token}"))
        .send_json(serde_json::json!({"type": "agent", "input": {"prompt": "hello"}}))
        .expect("a task is submitted");
    let body: serde_json::Value = response.body_mut().read_json().expect("JSON");
    assert_eq!(response.status().as_u16(), 202, "{body}");
    let id = body["id"].as_u64().expect("the task's id");
    let path = format!("/v1/tasks/{id}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while support::get_ok(&agent, &server.addr, token, &path)["state"] != "completed" {
        assert!(std::time::Instant::now() < deadline, "the task did not end");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    server.stop();
    assert!(!log.contains(PASSWORD), "{log}");

    // A new token is made at each start without --token-file.
    let server = start(&[]);
    let log = server.log();
    assert!(
        log.contains(&format!(
            "0 schedules, 0 live tasks in {name}; llm the scripted model (1 ms a call); \
             limits --max-running 3\n"
        )),
        "{log}"
    );
    let token = std::fs::read_to_string(&token_file).expect("the token made at start");
    assert_eq!(
        support::get_ok(&agent, &server.addr, token.trim(), &path)["state"],
        "completed"
    );
    server.stop();
}

/// The demo on a server that serves TLS, through a URL that asks for `verify-full`
/// against the test's own CA: it runs to the end. The same URL with a root that did not
/// sign the server's certificate is refused in one line, which shows the certificate is
/// checked.
#[test]
fn the_demo_runs_over_tls_with_the_certificate_checked() {
    let dir = tempfile::tempdir().expect("a directory");
    let certs =
        spool_pgtest::TestCertificates::make(&["localhost", "127.0.0.1"]).expect("certificates");
    let cluster = PgCluster::builder()
        .tls(&certs)
        .start()
        .expect("a cluster with TLS");
    let ca = dir.path().join("ca.pem");
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&ca, certs.ca_pem()).expect("the CA written");
    std::fs::write(&other_ca, certs.other_ca_pem()).expect("the other CA written");
    let url = with_password(&cluster.create_database("cli_tls").expect("a database")).replacen(
        "@127.0.0.1:",
        "@localhost:",
        1,
    );

    let verified = format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display());
    let out = spool(
        dir.path(),
        &[
            "demo",
            "--agents",
            "5",
            "--max-latency-ms",
            "1",
            "--quiet",
            "--postgres",
            &verified,
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("tasks:      5 completed ok, 0 failed, 0 canceled"),
        "{stdout}"
    );
    assert!(
        stdout.contains("check:      ok, 5/5 answers match their script"),
        "{stdout}"
    );

    let untrusted = format!("{url}?sslmode=verify-ca&sslrootcert={}", other_ca.display());
    let out = spool(dir.path(), &["run", "--postgres", &untrusted], &[]);
    fails_with(
        &out,
        &format!(
            "spool run: cannot open the store: cannot connect to PostgreSQL at localhost:{}: \
             error performing TLS handshake: the server's certificate is not signed by the \
             roots in sslrootcert {}",
            cluster.port(),
            other_ca.display()
        ),
    );
}

/// A password the client reads with a `/`, `?` or `#` in it is never shown, in the name
/// a message gives the store.
#[test]
fn a_password_with_url_characters_in_it_is_never_shown() {
    let dir = tempfile::tempdir().expect("a directory");
    let port = closed_port();
    let url = format!("postgres://spool:se/cr?e#t@127.0.0.1:{port}/team");
    let out = spool(dir.path(), &["demo", "--postgres", &url], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "spool demo: cannot open the store postgres://spool@127.0.0.1:{port}/team: cannot \
             connect to PostgreSQL at 127.0.0.1:{port}: error connecting to server: Connection \
             refused (os error 111)\n"
        )
    );
}

/// A change to a schedule names a store that exists: in an empty database it is one
/// line, exit 1, and nothing is made there.
#[test]
fn a_schedule_change_in_an_empty_database_makes_nothing() {
    let dir = tempfile::tempdir().expect("a directory");
    let (url, shown) = database("schedule_change_in_an_empty_database");
    let out = spool(
        dir.path(),
        &["schedule", "pause", "nightly", "--postgres", &url],
        &[],
    );
    fails_with(
        &out,
        &format!(
            "spool schedule pause: cannot open the store: {shown} is not a spool store: the \
             database is empty (a writer makes the store when it first connects)"
        ),
    );
    let mut client = postgres::Client::connect(&shown, postgres::NoTls).expect("connects");
    let schema: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'spool')",
            &[],
        )
        .expect("asks")
        .get(0);
    assert!(!schema, "the command made a store in the database");
}

/// `--token-file` is a server's token: without `--addr` it is a usage error rather than
/// a token quietly not used on the store in SPOOL_DATABASE_URL.
#[test]
fn a_token_file_without_an_address_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("a directory");
    let token = dir.path().join("token");
    std::fs::write(&token, "abc").expect("a token file");
    let token = token.to_str().expect("a UTF-8 path");
    let env = [("SPOOL_DATABASE_URL", "postgres://spool@127.0.0.1:1/db")];
    for (args, command) in [
        (
            &["schedule", "list", "--token-file", token][..],
            "schedule list",
        ),
        (&["inspect", "--token-file", token][..], "inspect"),
    ] {
        let out = spool(dir.path(), args, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "spool {command}: --token-file is the token of a running server: give its \
                 address with --addr URL\n"
            )
        );
    }
}
