//! A node killed with SIGKILL (in a child process: nothing of it runs on) holds its
//! shards until their leases expire; then the other node takes them, recovers their
//! tasks with the same ids, and sends their requests again with the same keys.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use spool_postgres::Cluster;

use crate::support::{Asked, Waiter, cluster_db, live_tasks, options, shard_ids, start, wait_for};

/// The database's URL, in the child's environment.
const CHILD_URL: &str = "SPOOL_CLUSTER_FAILOVER_CHILD_URL";

/// The lease ttl of both nodes.
const TTL: Duration = Duration::from_millis(1500);

/// The child's side of `a_killed_node_s_shards_are_taken_after_the_ttl`: a node that
/// takes every shard, submits a waiting task to each, prints `task SHARD ID` for each
/// once durable and `ready`, then prints the shards it holds whenever they change,
/// until killed (or for at most 60 seconds, if its parent is gone).
#[test]
#[ignore = "the child process of failover::a_killed_node_s_shards_are_taken_after_the_ttl"]
fn failover_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let asked = Asked::default();
    let node = start(&url, options("child", TTL), &asked);
    for (shard, _, handle) in node.shards() {
        let id = handle
            .submit(Waiter::task(&format!("w{shard}")))
            .unwrap()
            .id;
        println!("task {shard} {}", id.get());
    }
    println!("ready");
    let started = Instant::now();
    let mut shown = Vec::new();
    while started.elapsed() < Duration::from_secs(60) {
        let now = shard_ids(&node);
        if now != shown {
            println!("holds {now:?}");
            shown = now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Four shards, all taken first by a child process's node, which submits a task to
/// each; a second node joins and the child hands two shards over; the child is
/// SIGKILLed. Its two shards stay its own until their leases expire, then the
/// second node takes them: every task is live there under its id, and every
/// request is sent again with its key.
#[cfg(unix)]
#[test]
fn a_killed_node_s_shards_are_taken_after_the_ttl() {
    let url = cluster_db("a_killed_node_s_shards_are_taken_after_the_ttl", 4);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "failover::failover_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL, &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut tasks = Vec::new();
    loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        // The test harness's `test ... ` may come before the child's first line.
        if line.ends_with("ready") {
            break;
        }
        if let Some((_, rest)) = line.split_once("task ") {
            let (_, id) = rest.split_once(' ').unwrap();
            tasks.push(id.parse::<u64>().unwrap());
        }
    }
    assert_eq!(tasks.len(), 4);

    let asked = Asked::default();
    let node = start(&url, options("survivor", TTL), &asked);
    // The child hands over its two highest shards.
    loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        if line.ends_with("holds [0, 1]") {
            break;
        }
    }
    wait_for(
        "the survivor runs shards 2 and 3",
        Duration::from_secs(20),
        || shard_ids(&node) == [2, 3],
    );
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    reader.join().unwrap();

    // Until the child's leases expire, its shards are its own.
    let cluster = Cluster::connect(&url).unwrap();
    let owners = |cluster: &Cluster| -> Vec<Option<String>> {
        cluster
            .status()
            .unwrap()
            .shards
            .into_iter()
            .map(|s| s.owner)
            .collect()
    };
    assert_eq!(
        owners(&cluster)[..2],
        [Some("child".to_owned()), Some("child".to_owned())]
    );
    wait_for(
        "the survivor runs every shard",
        Duration::from_secs(30),
        || shard_ids(&node) == [0, 1, 2, 3],
    );
    let took = killed.elapsed();
    println!("the killed node's shards ran on the survivor after {took:?} (lease ttl {TTL:?})");
    // The child's last renewal was at most a third of the ttl before it died: its
    // leases ran out at least two thirds of the ttl after (less what the kill took).
    assert!(took >= TTL / 2, "{took:?}");
    assert_eq!(owners(&cluster), vec![Some("survivor".to_owned()); 4]);

    let mut live = Vec::new();
    for (_, _, handle) in node.shards() {
        live.extend(live_tasks(&handle));
    }
    tasks.sort_unstable();
    assert_eq!(live, tasks);
    wait_for(
        "every request is sent again",
        Duration::from_secs(10),
        || asked.lock().unwrap().len() == 4,
    );
    let mut resent: Vec<(u64, String)> = asked
        .lock()
        .unwrap()
        .iter()
        .map(|(key, name)| (key.task().get(), name.clone()))
        .collect();
    resent.sort();
    let expected: Vec<(u64, String)> = tasks
        .iter()
        .map(|id| (*id, format!("w{}", spool_cluster::shard_of_task(*id))))
        .collect();
    assert_eq!(resent, expected);
    node.stop().unwrap();
}
