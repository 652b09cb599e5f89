//! Throwaway clusters: they start, answer, keep to themselves, survive a restart, and are
//! removed when dropped or when their process ends without dropping them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use spool_pgtest::{PgCluster, PgError};

/// Set in the child process of [`the_reaper_cleans_up_after_a_process_that_never_drops`].
const CHILD_ENV: &str = "SPOOL_PGTEST_REAPER_CHILD";

fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|error| panic!("connect to {url}: {error}"))
}

fn start() -> PgCluster {
    PgCluster::start().unwrap_or_else(|error| panic!("a cluster starts: {error}"))
}

/// Whether process `pid` has ended (gone, or a zombie nobody has waited for yet).
fn process_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// Polls `done` until it holds or `within` has passed.
fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_cluster_starts_and_answers_a_query() {
    let cluster = start();
    let url = cluster.url();
    assert_eq!(
        url,
        format!("postgres://spool@127.0.0.1:{}/postgres", cluster.port())
    );
    let row = connect(&url)
        .query_one("SELECT 40 + 2", &[])
        .expect("the query runs");
    assert_eq!(row.get::<_, i32>(0), 42);
}

#[test]
fn settings_reach_the_server() {
    let cluster = PgCluster::builder()
        .setting("synchronous_commit", "on")
        .setting("application_name", "it's spool")
        .start()
        .expect("a cluster starts");
    let mut client = connect(&cluster.url());
    let show = |client: &mut Client, name: &str| -> String {
        client
            .query_one(&format!("SHOW {name}"), &[])
            .expect("SHOW runs")
            .get(0)
    };
    assert_eq!(show(&mut client, "synchronous_commit"), "on");
    assert_eq!(show(&mut client, "fsync"), "off");
    assert_eq!(show(&mut client, "listen_addresses"), "127.0.0.1");
    let sockets = show(&mut client, "unix_socket_directories");
    assert_eq!(PathBuf::from(sockets), cluster.dir().join("socket"));
}

#[test]
fn a_server_that_does_not_start_says_why_and_leaves_nothing() {
    let error = PgCluster::builder()
        .setting("shared_buffers", "lots")
        .start()
        .expect_err("an invalid setting stops the server");
    let PgError::Start { reason, log, tail } = &error else {
        panic!("not a start error: {error}");
    };
    assert_eq!(reason, "pg_ctl start failed");
    assert!(
        tail.contains(r#"invalid value for parameter "shared_buffers": "lots""#),
        "{tail}"
    );
    let dir = log.parent().expect("the log is in the cluster's directory");
    assert!(
        !dir.exists(),
        "{} is left after a failed start",
        dir.display()
    );
}

#[test]
fn two_clusters_run_at_once_on_different_ports() {
    let first = start();
    let second = start();
    assert_ne!(first.port(), second.port());
    assert_ne!(first.dir(), second.dir());
    connect(&first.url())
        .batch_execute("CREATE TABLE only_in_first (x int)")
        .expect("created");
    let found: i64 = connect(&second.url())
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_first'",
            &[],
        )
        .expect("the query runs")
        .get(0);
    assert_eq!(found, 0);
}

#[test]
fn create_database_gives_isolated_databases() {
    let cluster = PgCluster::shared();
    let a = cluster.create_database("isolated_a").expect("created");
    let b = cluster.create_database("isolated_b").expect("created");
    assert_eq!(
        a,
        format!("postgres://spool@127.0.0.1:{}/isolated_a", cluster.port())
    );
    connect(&a)
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
        .expect("a");
    let error = connect(&b)
        .query("SELECT x FROM t", &[])
        .expect_err("no table t in b");
    assert_eq!(
        error.code(),
        Some(&postgres::error::SqlState::UNDEFINED_TABLE)
    );
    let again = cluster
        .create_database("isolated_a")
        .expect_err("the name is taken");
    assert!(
        matches!(&again, PgError::Query { sql, .. } if sql == "CREATE DATABASE isolated_a"),
        "{again}"
    );
    for name in ["", "Upper", "1st", "semi;colon", &"x".repeat(64)] {
        let error = cluster
            .create_database(name)
            .expect_err("not a plain identifier");
        assert!(
            matches!(&error, PgError::DatabaseName { name: n } if n == name),
            "{error}"
        );
    }
}

#[test]
fn restart_keeps_the_data_and_the_url() {
    let cluster = start();
    let url = cluster.create_database("kept").expect("created");
    connect(&url)
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (5)")
        .expect("t");
    let before = cluster.postmaster_pid().expect("running");
    cluster.restart().expect("restarts");
    assert_ne!(cluster.postmaster_pid().expect("running"), before);
    assert_eq!(cluster.database_url("kept"), url);
    let x: i32 = connect(&url)
        .query_one("SELECT x FROM t", &[])
        .expect("t is there")
        .get(0);
    assert_eq!(x, 5);
}

#[test]
fn stop_and_start_again_keep_the_data() {
    let cluster = start();
    connect(&cluster.url())
        .batch_execute("CREATE TABLE t (x int)")
        .expect("created");
    let pid = cluster.postmaster_pid().expect("running");
    cluster.stop().expect("stops");
    assert!(process_ended(pid), "the server {pid} still runs after stop");
    assert!(
        Client::connect(&cluster.url(), NoTls).is_err(),
        "a stopped server answered"
    );
    cluster.start_again().expect("starts again");
    connect(&cluster.url())
        .query("SELECT x FROM t", &[])
        .expect("t is there");
}

#[test]
fn drop_stops_the_server_and_removes_its_directory() {
    let cluster = start();
    let pid = cluster.postmaster_pid().expect("running");
    let dir = cluster.dir().to_owned();
    drop(cluster);
    assert!(process_ended(pid), "the server {pid} still runs after drop");
    assert!(!dir.exists(), "{} is still there after drop", dir.display());
}

#[test]
fn the_server_never_runs_as_root() {
    let cluster = start();
    let pid = cluster.postmaster_pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let uid: u32 = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
        .expect("a Uid line");
    let me = std::fs::metadata("/proc/self").expect("own process").uid();
    if me == 0 {
        assert_ne!(uid, 0, "the server runs as root");
        let owner = std::fs::metadata(cluster.data_dir())
            .expect("the data directory")
            .uid();
        assert_eq!(owner, uid);
    } else {
        assert_eq!(uid, me, "the server runs as another user than the test");
    }
}

/// Runs this test again in a child process that starts the shared cluster, prints its
/// server's pid and directory, and exits without dropping anything: the reaper must stop
/// the server and remove the directory.
#[test]
fn the_reaper_cleans_up_after_a_process_that_never_drops() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let cluster = PgCluster::shared();
        let pid = cluster.postmaster_pid().expect("running");
        // After a newline: the harness has written "test NAME ... " without one.
        println!("\npid={pid}");
        println!("dir={}", cluster.dir().display());
        std::process::exit(0);
    }
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "the_reaper_cleans_up_after_a_process_that_never_drops",
        ])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value = |key: &str| -> String {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the child's output: {stdout}"))
            .to_owned()
    };
    let pid: u32 = value("pid=").parse().expect("a pid");
    let dir = PathBuf::from(value("dir="));
    let within = Duration::from_secs(30);
    assert!(
        wait_for(within, || process_ended(pid)),
        "the server {pid} outlived its process"
    );
    assert!(
        wait_for(within, || !Path::new(&dir).exists()),
        "{} outlived its process",
        dir.display()
    );
}
