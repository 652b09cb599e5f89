//! `spool cluster init|status|drain` on a database of the test binary's own
//! PostgreSQL cluster (one database per test): the exact lines each prints, and the one
//! line, exit status 1, of what it cannot do. The leases, nodes and inbox items the
//! status shows are made with `spool_postgres::Cluster`, as a node would make them.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_pgtest::PgCluster;
use spool_postgres::Cluster;

/// The password every URL carries: the test cluster trusts its clients, so it is
/// never checked, and it must never be shown.
const PASSWORD: &str = "s3cret-pw";

/// A new database `name`: its URL with [`PASSWORD`], and its name as spool shows it.
fn database(name: &str) -> (String, String) {
    let url = PgCluster::shared()
        .create_database(name)
        .expect("a database of the test's own");
    (url.replacen('@', &format!(":{PASSWORD}@"), 1), url)
}

/// Runs `spool cluster ARGS` without the environment's database URL.
fn spool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("cluster")
        .args(args)
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spool runs")
}

/// What `out` printed on stdout, checking that it succeeded and said nothing on stderr.
fn succeeded(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!stdout.contains(PASSWORD), "{stdout}");
    stdout
}

/// Checks that `out` failed with status `code`, `line` alone on stderr, nothing on
/// stdout.
fn fails_with(out: &Output, code: i32, line: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert_eq!(stderr, format!("{line}\n"));
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
}

/// `text` with every duration (`0s`, `59s`, `1m05s`) read as `T`, and runs of spaces
/// as one: the layout of a status whose ages depend on when it was read.
fn without_ages(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.split_whitespace()
                .map(|word| {
                    let bare = word.trim_end_matches(')');
                    let duration = bare.starts_with(|c: char| c.is_ascii_digit())
                        && bare.ends_with(['s', 'm', 'h'])
                        && bare.chars().all(|c| c.is_ascii_alphanumeric());
                    if duration {
                        format!("T{}", &word[bare.len()..])
                    } else {
                        word.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits, up to 10 s, for `done` to hold.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn init_makes_a_cluster_once_and_refuses_another_count() {
    let (url, name) = database("cluster_cli_init");
    let out = spool(&["init", "--postgres", &url, "--shards", "4"]);
    assert_eq!(
        succeeded(&out),
        format!("made {name} a cluster of 4 shards\n")
    );
    let out = spool(&["init", "--postgres", &url, "--shards", "4"]);
    assert_eq!(
        succeeded(&out),
        format!("{name} is a cluster of 4 shards already: nothing changed\n")
    );
    let out = spool(&["init", "--postgres", &url, "--shards", "8"]);
    fails_with(
        &out,
        1,
        &format!(
            "spool cluster init: {name} is a cluster of 4 shards: it cannot be made one of 8 \
             (the count of shards never changes)"
        ),
    );
    // Without --shards: one shard, which this cluster is not either.
    let out = spool(&["init", "--postgres", &url]);
    fails_with(
        &out,
        1,
        &format!(
            "spool cluster init: {name} is a cluster of 4 shards: it cannot be made one of 1 \
             (the count of shards never changes)"
        ),
    );
    assert_eq!(Cluster::connect(&url).expect("a cluster").shards(), 4);
}

#[test]
fn init_takes_one_shard_by_default_and_at_most_512() {
    let (url, name) = database("cluster_cli_default");
    let out = spool(&["init", "--postgres", &url]);
    assert_eq!(
        succeeded(&out),
        format!("made {name} a cluster of 1 shard\n")
    );
    for bad in ["0", "513"] {
        let out = spool(&["init", "--postgres", &url, "--shards", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: invalid value '{bad}' for '--shards <N>': {bad} is not in 1..=512\n"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn a_database_that_is_no_cluster_yet_says_to_run_init() {
    let (url, name) = database("cluster_cli_not_yet");
    let no_cluster = |url: &str, what: &str| {
        for args in [
            vec!["status", "--postgres", url],
            vec!["drain", "node-a", "--postgres", url],
        ] {
            let out = spool(&args);
            fails_with(
                &out,
                1,
                &format!(
                    "spool cluster {}: {name} is not a spool cluster ({what}): run `spool \
                     cluster init`",
                    args[0]
                ),
            );
        }
    };
    no_cluster(&url, "it has no `spool` schema");
    // A store one process ran is no cluster either, until init makes it one.
    drop(spool_postgres::PgStore::connect(&url).expect("a store"));
    no_cluster(&url, "it is a store run by one process");
    succeeded(&spool(&["init", "--postgres", &url]));
    succeeded(&spool(&["status", "--postgres", &url]));
}

#[test]
fn no_database_is_a_usage_error() {
    let out = spool(&["status"]);
    fails_with(
        &out,
        2,
        "spool cluster status: no database given: name the cluster's with --postgres URL \
         (or SPOOL_DATABASE_URL)",
    );
}

#[test]
fn status_shows_owners_epochs_leases_inboxes_and_nodes() {
    let (url, name) = database("cluster_cli_status");
    succeeded(&spool(&["init", "--postgres", &url, "--shards", "4"]));
    let cluster = Cluster::connect(&url).expect("the cluster");

    // No node yet: every shard free.
    let out = spool(&["status", "--postgres", &url]);
    assert_eq!(
        succeeded(&out),
        format!(
            "\
cluster {name}: 4 shards, 0 nodes

SHARD  OWNER  EPOCH  LEASE  INBOX  LAG
0      -      0      free   0      0
1      -      0      free   0      0
2      -      0      free   0      0
3      -      0      free   0      0

no node has joined
"
        )
    );

    // node-a holds shards 0 and 1; node-b held shard 2 and let it expire; shard 3 is
    // free; two submissions wait in shard 1's inbox.
    cluster.join("node-a", "10.0.0.1:8080").expect("joined");
    cluster.join("node-b", "10.0.0.2:8080").expect("joined");
    let a = cluster
        .take("node-a", 2, Duration::from_secs(600))
        .expect("taken");
    assert_eq!(
        a.iter().map(|l| (l.shard, l.epoch)).collect::<Vec<_>>(),
        [(0, 1), (1, 1)]
    );
    let b = cluster
        .take("node-b", 1, Duration::from_millis(50))
        .expect("taken");
    assert_eq!(b.iter().map(|l| l.shard).collect::<Vec<_>>(), [2]);
    cluster.enqueue(1, "key-1", b"one").expect("enqueued");
    cluster.enqueue(1, "key-2", b"two").expect("enqueued");
    wait_for("shard 2's lease to expire", || {
        cluster.status().expect("a status").shards[2].expired
    });

    let out = spool(&["status", "--postgres", &url]);
    assert_eq!(
        without_ages(&succeeded(&out)),
        without_ages(&format!(
            "\
cluster {name}: 4 shards, 2 nodes

SHARD  OWNER   EPOCH  LEASE                 INBOX  LAG
0      node-a  1      0s (expires in 9m59s)  0      0
1      node-a  1      0s (expires in 9m59s)  2      0
2      node-b  1      expired               0      0
3      -       0      free                  0      0

NODE    ADDR           HEARTBEAT  DRAINING  SHARDS
node-a  10.0.0.1:8080  0s ago     no        0, 1
node-b  10.0.0.2:8080  0s ago     no        -
"
        ))
    );

    let out = spool(&["status", "--postgres", &url, "--json"]);
    let mut status: Value = serde_json::from_str(&succeeded(&out)).expect("JSON");
    // The durations depend on when it was read: checked for their range, then left out.
    for shard in status["shards"].as_array_mut().expect("shards") {
        let held = shard["lease"] == "held";
        let object = shard.as_object_mut().expect("a shard");
        for field in ["lease_age_ms", "expires_in_ms"] {
            let value = object.remove(field).expect(field);
            if held {
                assert!(value.as_u64().is_some_and(|ms| ms <= 600_000), "{value}");
            } else {
                assert_eq!(value, Value::Null);
            }
        }
    }
    for node in status["nodes"].as_array_mut().expect("nodes") {
        let object = node.as_object_mut().expect("a node");
        for field in ["up_for_ms", "heartbeat_age_ms"] {
            let value = object.remove(field).expect(field);
            assert!(value.as_u64().is_some_and(|ms| ms < 600_000), "{value}");
        }
    }
    assert_eq!(
        status,
        json!({
            "database": name,
            "shards": [
                {"shard": 0, "owner": "node-a", "epoch": 1, "lease": "held", "inbox": 0, "lag": 0},
                {"shard": 1, "owner": "node-a", "epoch": 1, "lease": "held", "inbox": 2, "lag": 0},
                {"shard": 2, "owner": "node-b", "epoch": 1, "lease": "expired", "inbox": 0, "lag": 0},
                {"shard": 3, "owner": null, "epoch": 0, "lease": "free", "inbox": 0, "lag": 0},
            ],
            "nodes": [
                {"node": "node-a", "addr": "10.0.0.1:8080", "draining": false, "shards": [0, 1]},
                {"node": "node-b", "addr": "10.0.0.2:8080", "draining": false, "shards": []},
            ],
        })
    );
}

#[test]
fn drain_marks_a_node_that_then_takes_nothing() {
    let (url, name) = database("cluster_cli_drain");
    succeeded(&spool(&["init", "--postgres", &url, "--shards", "3"]));
    let cluster = Cluster::connect(&url).expect("the cluster");
    cluster.join("node-a", "10.0.0.1:8080").expect("joined");
    cluster.join("node-b", "10.0.0.2:8080").expect("joined");
    cluster
        .take("node-a", 2, Duration::from_secs(600))
        .expect("taken");

    let out = spool(&["drain", "node-a", "--postgres", &url]);
    assert_eq!(
        succeeded(&out),
        "node `node-a` is draining: it takes no more shards; it holds shards 0, 1\n"
    );
    let out = spool(&["drain", "node-b", "--postgres", &url]);
    assert_eq!(
        succeeded(&out),
        "node `node-b` is draining: it takes no more shards; it holds none now\n"
    );
    // Marked: neither takes the free shard 2.
    assert_eq!(
        cluster
            .take("node-b", 1, Duration::from_secs(600))
            .expect("asked"),
        []
    );
    let out = spool(&["status", "--postgres", &url]);
    let status = without_ages(&succeeded(&out));
    assert!(
        status.ends_with(
            "NODE ADDR HEARTBEAT DRAINING SHARDS\n\
             node-a 10.0.0.1:8080 T ago yes 0, 1\n\
             node-b 10.0.0.2:8080 T ago yes -"
        ),
        "{status}"
    );
    assert!(status.starts_with(&format!("cluster {name}: 3 shards, 2 nodes")));

    let out = spool(&["drain", "ghost", "--postgres", &url]);
    fails_with(
        &out,
        1,
        "spool cluster drain: node `ghost` has not joined the cluster",
    );
}

/// A command that would write a store refuses a cluster's database: its shards are
/// written by the nodes that lease them, and a lone writer would take shard 0 from its
/// node. It says how to change it instead; nothing is written.
#[test]
fn a_lone_writer_refuses_a_clusters_database() {
    let (url, name) = database("cluster_cli_lone_writer");
    succeeded(&spool(&["init", "--postgres", &url, "--shards", "2"]));
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args([
            "schedule", "add", "nightly", "--every", "1h", "--prompt", "hi",
        ])
        .args(["--postgres", &url])
        .env_remove("SPOOL_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spool runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "{name} holds a cluster of 2 shards, written by its nodes: change it through a \
             node's API (`--addr http://NODE --token-file FILE`), or run `spool serve \
             --postgres` to start a node\n"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    let cluster = Cluster::connect(&url).expect("the cluster");
    assert!(
        cluster
            .status()
            .expect("its status")
            .shards
            .iter()
            .all(|s| s.epoch == 0)
    );
}
