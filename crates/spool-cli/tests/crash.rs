//! Crash recovery with a real process: the demo runs on a store and dies at 50 seeded
//! moments, then runs to the end. Most lives are killed with SIGKILL after a random
//! time; one in five ends inside the store's Nth group commit, and one in five inside
//! its Nth checkpoint write, from within the transaction (the test-only
//! `SPOOL_CRASH_AT=commit:N` / `checkpoint:N`, which ends the process with status 137
//! as a kill would). Every agent completes exactly once with the answer its script
//! calls for, and every answer a life had acknowledged (durable, then counted) is there
//! when the next life starts. The same lives run on each backend: an SQLite file
//! (`--store`) and a PostgreSQL database (`--postgres`, on the test binary's own
//! cluster).

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use spool_core::SeededRng;

/// Lives that die before one runs the demo to the end on the same store.
const KILLS: usize = 50;
const AGENTS: &str = "2000";

/// How one life is made to die.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Death {
    /// SIGKILL after this long.
    Kill(Duration),
    /// Inside the store's Nth commit (`SPOOL_CRASH_AT`), or SIGKILL after a while.
    InCommit(u64),
    /// Inside the store's Nth checkpoint write (the first: a life writes few), or
    /// SIGKILL after a while.
    InCheckpoint(u64),
}

/// The status of a process the store's crash moment ended (`spool_store::CRASH_STATUS`).
const CRASH_STATUS: i32 = 137;

/// What one life of the demo printed: its `acked N` lines and its resume line.
#[derive(Debug, Default)]
struct Life {
    last_acked: u64,
    resumed_with: Option<u64>,
    lines: Vec<String>,
    /// What it wrote on stderr.
    errors: String,
}

fn parse(lines: Vec<String>) -> Life {
    let mut life = Life::default();
    for line in &lines {
        if let Some(n) = line.strip_prefix("acked ") {
            // A kill can cut the last line short ("acked " or "acked 1" of "acked 12"):
            // a line that does not read is not counted (fewer acknowledged is the safe
            // side), and a cut number is only ever smaller than the one printed.
            if let Ok(n) = n.trim().parse() {
                life.last_acked = n;
            }
        }
        if let Some(rest) = line.strip_prefix("store: resumed at ") {
            // "... with N tasks, A answers taken"
            let answers = rest
                .split(", ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("a resume line with the answers taken");
            life.resumed_with = Some(answers);
        }
    }
    life.lines = lines;
    life
}

/// The store the lives go on from.
enum Store {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by its URL.
    Postgres(String),
}

impl Store {
    /// The options that name it.
    fn args(&self) -> [OsString; 2] {
        match self {
            Store::Sqlite(path) => ["--store".into(), path.into()],
            Store::Postgres(url) => ["--postgres".into(), url.into()],
        }
    }
}

/// Runs one life as [`live_once`]. On PostgreSQL, a life refused because the store is
/// in use starts again, until [`LOCK_LET_GO`] has passed: the server lets go of the
/// writer lock of the life killed before it once it notices that life's connection
/// closed, moments after the kill (an SQLite file's lock goes with the process).
fn live(store: &Store, death: Option<Death>) -> (Life, Option<i32>) {
    let deadline = Instant::now() + LOCK_LET_GO;
    loop {
        let (life, code) = live_once(store, death);
        let in_use = code == Some(1) && life.errors.contains("is in use by another spool process");
        if !(in_use && matches!(store, Store::Postgres(_))) || Instant::now() > deadline {
            return (life, code);
        }
        println!("refused while the last life's lock was held: started again");
        thread::sleep(Duration::from_millis(20));
    }
}

/// How long a PostgreSQL server may take to let go of a killed life's writer lock.
const LOCK_LET_GO: Duration = Duration::from_secs(10);

/// Runs one life; makes it die as `death` says, if it is still running.
fn live_once(store: &Store, death: Option<Death>) -> (Life, Option<i32>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
    command
        .env_remove("OPENAI_BASE_URL")
        .env_remove("SPOOL_CRASH_AT");
    let kill_after = match death {
        None => None,
        Some(Death::Kill(after)) => Some(after),
        Some(Death::InCommit(n)) => {
            command.env("SPOOL_CRASH_AT", format!("commit:{n}"));
            None
        }
        Some(Death::InCheckpoint(n)) => {
            command.env("SPOOL_CRASH_AT", format!("checkpoint:{n}"));
            None
        }
    };
    let mut child = command
        .args([
            "demo",
            "--agents",
            AGENTS,
            "--max-latency-ms",
            "5",
            "--quiet",
            "--report-acks",
        ])
        .args(store.args())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the spool binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = tx.send(lines);
    });
    if let Some(after) = kill_after {
        thread::sleep(after);
        // SIGKILL on Unix; an error means it had already exited.
        let _ = child.kill();
    }
    // A life set to die inside a commit or a checkpoint write is waited for until it
    // does (or ends the run first), however slowly a loaded machine gets it there.
    let started = Instant::now();
    while child.try_wait().expect("the child is waited for").is_none() {
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("a life of the demo ran for {HANG_GUARD:?} without ending");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait().expect("the child is waited for");
    let lines = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("its output");
    reader.join().expect("the reader thread");
    let mut life = parse(lines);
    life.errors = errors.join().expect("the stderr reader");
    (life, status.code())
}

/// How long a life may run before the test takes it for hung: a bound on a broken
/// build, not a moment of the test (a killed life dies at its `Death::Kill` time, a
/// life set to die inside a commit or a checkpoint write when it gets there).
const HANG_GUARD: Duration = Duration::from_secs(300);

#[test]
fn the_demo_killed_50_times_loses_nothing_acknowledged_and_completes_every_agent_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = Store::Sqlite(dir.path().join("demo.store"));
    killed_50_times(&store);
}

#[test]
fn the_demo_killed_50_times_on_postgres_loses_nothing_acknowledged_and_completes_every_agent_once()
{
    let url = spool_pgtest::PgCluster::shared()
        .create_database("crash_demo")
        .expect("a database of the test's own");
    let started = Instant::now();
    killed_50_times(&Store::Postgres(url));
    println!(
        "50 lives and the last on PostgreSQL: {:?}",
        started.elapsed()
    );
}

/// The demo on `store`, killed 50 times at seeded moments, then run to the end: every
/// agent completes exactly once, and no life resumes with fewer answers than the one
/// before it acknowledged.
fn killed_50_times(store: &Store) {
    let mut rng = SeededRng::new(0x5eed_c4a5);
    let mut acked_before = 0;
    let mut killed = 0;
    let (mut in_commit, mut in_checkpoint) = (0, 0);
    for i in 0..KILLS {
        let death = match i % 5 {
            3 => Death::InCommit(1 + rng.below(40)),
            4 => Death::InCheckpoint(1),
            _ => Death::Kill(Duration::from_millis(50 + rng.below(500))),
        };
        let (life, code) = live(store, Some(death));
        println!(
            "life {i}: {death:?}, status {code:?}, acked {}{}",
            life.last_acked,
            if life.errors.is_empty() {
                ""
            } else {
                "; stderr:\n"
            },
        );
        print!("{}", life.errors);
        if let Some(resumed) = life.resumed_with {
            assert!(
                resumed >= acked_before,
                "the last life acknowledged {acked_before} answers but this one resumed with {resumed}"
            );
        }
        acked_before = acked_before.max(life.last_acked);
        match (death, code) {
            (_, None) => killed += 1,
            (Death::InCommit(_), Some(CRASH_STATUS)) => {
                killed += 1;
                in_commit += 1;
            }
            (Death::InCheckpoint(_), Some(CRASH_STATUS)) => {
                killed += 1;
                in_checkpoint += 1;
            }
            _ => {}
        }
    }
    println!(
        "{killed} lives died: {in_commit} inside a commit, {in_checkpoint} inside a checkpoint write"
    );
    assert!(
        killed >= KILLS - 2,
        "only {killed} lives died (the others finished first)"
    );
    assert!(
        in_commit >= 8,
        "only {in_commit} lives died inside a commit"
    );
    assert!(
        in_checkpoint >= 5,
        "only {in_checkpoint} lives died inside a checkpoint write"
    );

    // The last life runs to the end and checks every agent's answer.
    let (last, code) = live(store, None);
    let text = last.lines.join("\n");
    assert_eq!(code, Some(0), "{text}");
    if let Some(resumed) = last.resumed_with {
        assert!(resumed >= acked_before, "{text}");
    }
    assert!(
        text.contains(&format!(
            "tasks:      {AGENTS} completed ok, 0 failed, 0 canceled"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "check:      ok, {AGENTS}/{AGENTS} answers match their script"
        )),
        "{text}"
    );

    // Exactly once: the store's run has one task per agent, each completed once.
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .arg("inspect")
        .args(match store {
            Store::Sqlite(path) => vec![path.into()],
            Store::Postgres(_) => store.args().to_vec(),
        })
        .output()
        .expect("spool inspect runs");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..2000 {
        let name = format!(" agent-{i} ");
        let rows = table.lines().filter(|l| l.contains(&name)).count();
        assert_eq!(rows, 1, "agent-{i} has {rows} tasks:\n{table}");
    }
    assert!(table.contains("tasks: 2000 (0 live"), "{table}");
}
