//! A submission put in a shard's inbox by another node is submitted by the shard's
//! owner under its key, once, and deleted from the inbox.

use std::time::Duration;

use spool_postgres::Cluster;

use crate::support::{Asked, cluster_db, options, start, wait_for};

/// The tasks of a shard's runtime, as `(id, key held by it)`, for the keys `keys`.
fn keyed(node: &spool_cluster::Node, shard: u32, keys: &[&str]) -> Vec<(u64, String)> {
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    node.handle(shard)
        .unwrap()
        .query(move |runtime| {
            keys.iter()
                .filter_map(|key| {
                    let record = runtime.scheduler().key(key)?;
                    Some((record.task.get(), key.clone()))
                })
                .collect()
        })
        .unwrap()
}

/// An item enqueued for shard 1 becomes one task there under its key, asks the LLM
/// once, and leaves the inbox; the same key enqueued again (as after a crash between
/// submitting and deleting) makes no second task.
#[test]
fn an_inbox_item_is_submitted_once_by_its_owner() {
    let url = cluster_db("an_inbox_item_is_submitted_once_by_its_owner", 2);
    let asked = Asked::default();
    let node = start(&url, options("a", Duration::from_secs(2)), &asked);
    let cluster = Cluster::connect(&url).unwrap();
    cluster.enqueue(1, "key-1", b"from-inbox").unwrap();
    wait_for("the inbox is drained", Duration::from_secs(10), || {
        cluster.pending(1, 10).unwrap().is_empty()
    });
    // Deleted once durable: the task is there as soon as the item is gone.
    let first = keyed(&node, 1, &["key-1"]);
    assert_eq!(first, [((1u64 << 44) + 1, "key-1".to_owned())]);
    wait_for("the task asks the LLM", Duration::from_secs(10), || {
        asked.lock().unwrap().len() == 1
    });

    cluster.enqueue(1, "key-1", b"from-inbox").unwrap();
    cluster.enqueue(1, "key-2", b"second").unwrap();
    wait_for(
        "the inbox is drained again",
        Duration::from_secs(10),
        || cluster.pending(1, 10).unwrap().is_empty(),
    );
    assert_eq!(
        keyed(&node, 1, &["key-1", "key-2"]),
        [
            ((1u64 << 44) + 1, "key-1".to_owned()),
            // The repeat of key-1 made no task (not even a refused one): key-2's is
            // the next id.
            ((1u64 << 44) + 2, "key-2".to_owned())
        ]
    );
    wait_for(
        "the second task asks the LLM",
        Duration::from_secs(10),
        || asked.lock().unwrap().len() == 2,
    );
    let names: Vec<String> = asked
        .lock()
        .unwrap()
        .iter()
        .map(|(_, n)| n.clone())
        .collect();
    assert_eq!(names, ["from-inbox", "second"]);
    // Shard 0's inbox was never used: nothing there.
    assert!(keyed(&node, 0, &["key-1", "key-2"]).is_empty());
    node.stop().unwrap();
}
