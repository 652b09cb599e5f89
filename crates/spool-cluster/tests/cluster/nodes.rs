//! Shards taken by one node, split between two, handed over by a node that stops, and
//! taken back under a newer epoch after a newer writer fenced the node's.

use std::time::{Duration, Instant};

use spool_cluster::{Node, first_task_id, shard_of_task};
use spool_pgtest::PgCluster;
use spool_postgres::{Cluster, PgOptions, PgStore};

use crate::support::{Asked, Waiter, cluster_db, live_tasks, options, shard_ids, start, wait_for};

/// A lone node of a cluster of four shards holds all four once started, each under
/// its first lease (epoch 1), and each shard numbers its tasks from its own range.
#[test]
fn one_node_takes_every_shard() {
    let url = cluster_db("one_node_takes_every_shard", 4);
    let asked = Asked::default();
    let node = start(&url, options("a", Duration::from_secs(2)), &asked);
    let shards: Vec<(u32, u64)> = node.shards().iter().map(|(s, e, _)| (*s, *e)).collect();
    assert_eq!(shards, [(0, 1), (1, 1), (2, 1), (3, 1)]);
    for shard in 0..4 {
        let id = node
            .handle(shard)
            .unwrap()
            .submit(Waiter::task("w"))
            .unwrap()
            .id;
        assert_eq!(id.get(), first_task_id(shard));
        assert_eq!(id.get(), (u64::from(shard) << 44) + 1);
        assert_eq!(shard_of_task(id.get()), shard);
    }
    assert!(node.handle(4).is_none());
    node.stop().unwrap();
}

/// A second node makes the first hand over its highest shards: two each.
#[test]
fn two_nodes_split_the_shards() {
    let url = cluster_db("two_nodes_split_the_shards", 4);
    let asked = Asked::default();
    let a = start(&url, options("a", Duration::from_secs(1)), &asked);
    assert_eq!(shard_ids(&a), [0, 1, 2, 3]);
    let b = start(&url, options("b", Duration::from_secs(1)), &asked);
    wait_for(
        "a split of two shards each",
        Duration::from_secs(20),
        || shard_ids(&a).len() == 2 && shard_ids(&b).len() == 2,
    );
    assert_eq!(shard_ids(&a), [0, 1]);
    assert_eq!(shard_ids(&b), [2, 3]);
    // B's leases are the shards' second: A's were the first.
    let epochs: Vec<u64> = b.shards().iter().map(|(_, e, _)| *e).collect();
    assert_eq!(epochs, [2, 2]);
    b.stop().unwrap();
    a.stop().unwrap();
}

/// Three nodes share four shards 2, 1, 1 — every node runs some, the shares add up
/// to the shard count — and none is left without an owner.
#[test]
fn three_nodes_share_four_shards_two_one_one() {
    let url = cluster_db("three_nodes_share_four_shards", 4);
    let asked = Asked::default();
    let a = start(&url, options("a", Duration::from_secs(1)), &asked);
    let b = start(&url, options("b", Duration::from_secs(1)), &asked);
    let c = start(&url, options("c", Duration::from_secs(1)), &asked);
    wait_for("a split of 2, 1 and 1", Duration::from_secs(20), || {
        [
            shard_ids(&a).len(),
            shard_ids(&b).len(),
            shard_ids(&c).len(),
        ] == [2, 1, 1]
    });
    let mut all: Vec<_> = [&a, &b, &c].iter().flat_map(|n| shard_ids(n)).collect();
    all.sort_unstable();
    assert_eq!(all, [0, 1, 2, 3]);
    c.stop().unwrap();
    b.stop().unwrap();
    a.stop().unwrap();
}

/// A node stopped releases its leases at once: the other takes its shards well before
/// the leases would have expired, and goes on with their tasks under the same ids.
#[test]
fn a_stopped_node_hands_its_shards_over_at_once() {
    let ttl = Duration::from_secs(6);
    let url = cluster_db("a_stopped_node_hands_its_shards_over_at_once", 4);
    let asked = Asked::default();
    let a = start(&url, options("a", ttl), &asked);
    let b = start(&url, options("b", ttl), &asked);
    wait_for(
        "a split of two shards each",
        Duration::from_secs(30),
        || shard_ids(&a).len() == 2 && shard_ids(&b).len() == 2,
    );
    let mut submitted = Vec::new();
    for (shard, _, handle) in b.shards() {
        let id = handle
            .submit(Waiter::task(&format!("w{shard}")))
            .unwrap()
            .id;
        submitted.push(id.get());
    }
    wait_for("B's tasks ask the LLM", Duration::from_secs(10), || {
        asked.lock().unwrap().len() == 2
    });
    let stopped = Instant::now();
    b.stop().unwrap();
    wait_for("A holds every shard", ttl, || shard_ids(&a).len() == 4);
    let took = stopped.elapsed();
    println!("the stopped node's shards ran on the other after {took:?} (lease ttl {ttl:?})");
    assert!(took < ttl, "{took:?}");
    let mut live = Vec::new();
    for (_, _, handle) in a.shards() {
        live.extend(live_tasks(&handle));
    }
    assert_eq!(live, submitted);
    // The requests B had out are sent again by A with the same keys.
    wait_for(
        "A sends the requests again",
        Duration::from_secs(10),
        || asked.lock().unwrap().len() == 4,
    );
    // (Each shard's executor runs on its own thread: sorted, not in any order.)
    let asked = asked.lock().unwrap().clone();
    let sorted = |asked: &[(spool_core::RequestKey, String)]| {
        let mut keys: Vec<(u64, u32, String)> = asked
            .iter()
            .map(|(key, name)| (key.task().get(), key.number(), name.clone()))
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(sorted(&asked[2..]), sorted(&asked[..2]));
    a.stop().unwrap();
}

/// A writer with a newer epoch fences the node's writer of shard 0: the node's next
/// write there is refused, that shard's runtime stops (its handle is gone), and the
/// node takes the shard again under a newer lease, with its task kept.
#[test]
fn a_fenced_writer_stops_its_shard() {
    let url = cluster_db("a_fenced_writer_stops_its_shard", 2);
    let asked = Asked::default();
    let node: Node = start(&url, options("a", Duration::from_secs(1)), &asked);
    let old = node.handle(0).unwrap();
    let kept = old.submit(Waiter::task("kept")).unwrap().id;
    let newer = PgStore::connect_with(&url, PgOptions::new().shard(0).lease_epoch(50)).unwrap();
    let refused = old.submit(Waiter::task("refused"));
    assert_eq!(refused.unwrap_err(), spool_runtime::RuntimeError::Gone);
    drop(newer);
    wait_for(
        "shard 0 runs again under a newer lease",
        Duration::from_secs(20),
        || node.shards().iter().any(|(s, e, _)| *s == 0 && *e > 50),
    );
    assert_eq!(live_tasks(&node.handle(0).unwrap()), [kept.get()]);
    node.stop().unwrap();
}

/// A node whose database stops answering stops its shards by its own clock, before
/// their leases can have expired in the database (the ttl less the margin after the
/// last renewal), and takes them again under new leases once the database is back.
#[test]
fn a_node_that_cannot_renew_stops_its_shards_in_time() {
    let ttl = Duration::from_secs(2);
    let server = PgCluster::builder().start().unwrap();
    let url = server.create_database("cannot_renew").unwrap();
    Cluster::init(&url, 2).unwrap();
    let asked = Asked::default();
    let node = start(&url, options("a", ttl), &asked);
    let old = node.handle(1).unwrap();
    let id = old.submit(Waiter::task("w")).unwrap().id;
    server.stop().unwrap();
    let stopped = Instant::now();
    wait_for("the node stops its shards", ttl * 2, || {
        shard_ids(&node).is_empty()
    });
    let took = stopped.elapsed();
    println!("the shards stopped {took:?} after the database did (lease ttl {ttl:?})");
    // The last renewal was at most a third of the ttl before the database stopped,
    // and the node holds a shard for the ttl less a fifth after it.
    assert!(took < ttl, "{took:?}");
    // Its writer gives up when the lease would: the runtime ends then, rather than
    // wait for the database for as long as a writer of a store of its own would.
    wait_for("the old runtime is gone", Duration::from_secs(10), || {
        old.stats().is_err()
    });
    let gone = stopped.elapsed();
    assert!(gone < ttl * 3, "{gone:?}");
    server.start_again().unwrap();
    wait_for(
        "the node runs both shards again",
        Duration::from_secs(30),
        || {
            node.shards()
                .iter()
                .map(|(s, e, _)| (*s, *e))
                .collect::<Vec<_>>()
                == [(0, 2), (1, 2)]
        },
    );
    assert_eq!(live_tasks(&node.handle(1).unwrap()), [id.get()]);
    node.stop().unwrap();
}

/// A node restarted under its name finds the leases its earlier life left (unexpired,
/// and renewed by its heartbeat): it releases them and takes them again at once under
/// new epochs, instead of holding them without running them.
#[test]
fn a_restarted_node_takes_back_the_leases_it_left() {
    let url = cluster_db("a_restarted_node_takes_back_the_leases_it_left", 2);
    let cluster = Cluster::connect(&url).unwrap();
    cluster.join("a", "a.invalid:80").unwrap();
    let left = cluster.take("a", 2, Duration::from_secs(60)).unwrap();
    assert_eq!(left.iter().map(|l| l.epoch).collect::<Vec<_>>(), [1, 1]);
    let asked = Asked::default();
    let node = start(&url, options("a", Duration::from_secs(1)), &asked);
    wait_for("the node runs both shards", Duration::from_secs(10), || {
        node.shards()
            .iter()
            .map(|(s, e, _)| (*s, *e))
            .collect::<Vec<_>>()
            == [(0, 2), (1, 2)]
    });
    node.stop().unwrap();
}

/// A node marked as draining hands every shard over and takes none; the other node
/// runs them all.
#[test]
fn a_draining_node_hands_every_shard_over() {
    let url = cluster_db("a_draining_node_hands_every_shard_over", 4);
    let asked = Asked::default();
    let a = start(&url, options("a", Duration::from_secs(1)), &asked);
    let b = start(&url, options("b", Duration::from_secs(1)), &asked);
    wait_for(
        "a split of two shards each",
        Duration::from_secs(20),
        || shard_ids(&a).len() == 2 && shard_ids(&b).len() == 2,
    );
    Cluster::connect(&url).unwrap().drain("b").unwrap();
    wait_for("A runs every shard", Duration::from_secs(20), || {
        shard_ids(&a) == [0, 1, 2, 3] && shard_ids(&b).is_empty()
    });
    b.stop().unwrap();
    a.stop().unwrap();
}
