//! The history each shard's store keeps is the node's: `NodeOptions::history` reaches
//! the store a shard is opened on.

use std::time::Duration;

use spool_durable::History;
use spool_postgres::PgStore;

use crate::support::{Asked, Waiter, cluster_db, options, start, wait_for};

/// The checkpoint ids shard 0's store keeps as segments, once its latest checkpoint
/// is at least `at_least` (read while the node runs, without taking the writer's place).
fn segments_once(url: &str, at_least: u64) -> Vec<u64> {
    let reader = PgStore::connect_read_only(url).unwrap();
    let mut ids = Vec::new();
    wait_for(
        "the checkpoints of shard 0",
        Duration::from_secs(20),
        || {
            ids = reader
                .segments()
                .unwrap()
                .iter()
                .map(|segment| segment.checkpoint)
                .collect();
            ids.last().is_some_and(|last| *last >= at_least)
        },
    );
    ids
}

/// A node with history off keeps one segment of each shard's journal; with the
/// default every segment written is kept.
#[test]
fn a_node_keeps_the_history_it_is_told() {
    for (name, history, all) in [
        ("node_history_default", History::default(), true),
        ("node_history_off", History::off(), false),
    ] {
        let url = cluster_db(name, 1);
        let asked = Asked::default();
        let node = start(
            &url,
            options("a", Duration::from_secs(2))
                .checkpoint_every(2)
                .history(history),
            &asked,
        );
        let handle = node.handle(0).unwrap();
        for n in 0..6 {
            handle.submit(Waiter::task(&format!("w{n}"))).unwrap();
        }
        let ids = segments_once(&url, 4);
        let last = *ids.last().unwrap();
        let kept: Vec<u64> = if all {
            (1..=last).collect()
        } else {
            vec![last]
        };
        assert_eq!(ids, kept, "{name}");
        node.stop().unwrap();
    }
}
