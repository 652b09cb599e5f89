//! The cluster's tables: init and connect, leases taken, renewed, expired, released
//! and drained, shard writers fenced by their lease's epoch (a frozen one included),
//! the inbox and its notifications, idempotency keys and the status figures.

use std::time::{Duration, Instant};

use spool_postgres::cluster::{InboxItem, Lease, fair_share};
use spool_postgres::{Cluster, ClusterError, PgOptions, PgStore, PgStoreError};

use crate::common::{database, entry, scheduler, snapshot, sql};

/// A lease's time to live long enough never to expire in a test.
const LONG: Duration = Duration::from_secs(60);

/// Polls `check` until it gives a value, for up to 20 s.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The shards and epochs of `leases`.
fn held(leases: &[Lease]) -> Vec<(u32, u64)> {
    leases.iter().map(|l| (l.shard, l.epoch)).collect()
}

/// A lease writer of `shard` with `epoch`.
fn writer(url: &str, shard: u32, epoch: u64) -> Result<PgStore, PgStoreError> {
    PgStore::connect_with(
        url,
        PgOptions::new()
            .shard(shard)
            .lease_epoch(epoch)
            .retry_for(Duration::from_secs(5)),
    )
}

/// The sequence numbers of `shard`'s journal entries.
fn seqs(url: &str, shard: i32) -> Vec<i64> {
    sql(url)
        .query(
            "SELECT seq FROM spool.entries WHERE shard = $1 ORDER BY seq",
            &[&shard],
        )
        .expect("read")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn init_makes_a_cluster_once_and_refuses_another_count() {
    let url = database("cluster_init");
    assert_eq!(
        Cluster::connect(&url).expect_err("no cluster").to_string(),
        format!(
            "{url} is not a spool cluster (it has no `spool` schema): run `spool cluster init`"
        )
    );
    for asked in [0, 513] {
        assert_eq!(
            Cluster::init(&url, asked)
                .expect_err("out of range")
                .to_string(),
            format!("a cluster has 1 to 512 shards, not {asked}")
        );
    }
    let cluster = Cluster::init(&url, 4).expect("made");
    assert_eq!(cluster.shards(), 4);
    assert_eq!(Cluster::init(&url, 4).expect("again").shards(), 4);
    let refused = Cluster::init(&url, 5).expect_err("another count");
    assert!(matches!(
        refused,
        ClusterError::ShardCount {
            found: 4,
            asked: 5,
            ..
        }
    ));
    assert_eq!(
        refused.to_string(),
        format!(
            "{url} is a cluster of 4 shards: it cannot be made one of 5 (the count of shards never changes)"
        )
    );
    assert_eq!(Cluster::connect(&url).expect("connects").shards(), 4);
    let mut client = sql(&url);
    let heads: Vec<(i32, i64, i64, i64)> = client
        .query(
            "SELECT shard, last_seq, checkpoint, epoch FROM spool.head ORDER BY shard",
            &[],
        )
        .expect("read")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        heads,
        [(0, 0, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0)]
    );
    let status = cluster.status().expect("status");
    assert_eq!(status.shards.len(), 4);
    assert!(status.nodes.is_empty());
    for (i, shard) in status.shards.iter().enumerate() {
        assert_eq!(shard.shard, i as u32);
        assert_eq!(shard.owner, None);
        assert_eq!(shard.epoch, 0);
        assert_eq!((shard.lease_age, shard.expires_in), (None, None));
        assert!(!shard.expired);
        assert_eq!((shard.inbox, shard.lag), (0, 0));
    }
}

#[test]
fn a_store_run_by_one_process_is_not_a_cluster_until_init_and_keeps_its_journal() {
    let url = database("cluster_from_store");
    let store = PgStore::connect(&url).expect("a store");
    store.append(&entry(1)).expect("appended");
    drop(store);
    assert_eq!(
        Cluster::connect(&url).expect_err("not yet").to_string(),
        format!(
            "{url} is not a spool cluster (it is a store run by one process): run `spool cluster init`"
        )
    );
    let cluster = Cluster::init(&url, 2).expect("made");
    // The store's writer had epoch 1: the first lease is above it.
    let taken = cluster.take("a", 1, LONG).expect("taken");
    assert_eq!(held(&taken), [(0, 2)]);
    let store = writer(&url, 0, 2).expect("the lease's writer");
    assert_eq!(store.append(&entry(2)).expect("appended"), 2);
    assert_eq!(seqs(&url, 0), [1, 2]);
    drop(store);
    assert!(cluster.release("a", &taken[0]).expect("released"));
    // A writer without a lease (epoch 3) writes the shard meanwhile: the next lease is
    // above it too, and its writer is not refused.
    let alone = PgStore::connect(&url).expect("a store again");
    assert_eq!(alone.append(&entry(3)).expect("appended"), 3);
    drop(alone);
    let taken = cluster.take("b", 1, LONG).expect("taken");
    assert_eq!(held(&taken), [(0, 4)]);
    let store = writer(&url, 0, 4).expect("the lease's writer");
    assert_eq!(store.append(&entry(4)).expect("appended"), 4);
    assert_eq!(seqs(&url, 0), [1, 2, 3, 4]);
}

#[test]
fn two_nodes_taking_their_share_hold_disjoint_shards() {
    let url = database("cluster_spread");
    let cluster = Cluster::init(&url, 8).expect("made");
    cluster.join("a", "10.0.0.1:8080").expect("a joins");
    cluster.join("b", "10.0.0.2:8080").expect("b joins");
    let live = cluster.live_nodes(LONG).expect("live");
    assert_eq!(live, ["a", "b"]);
    let share = fair_share(cluster.shards(), live.len());
    assert_eq!(share, 4);
    let a = cluster.take("a", share, LONG).expect("a takes");
    let b = cluster.take("b", share, LONG).expect("b takes");
    assert_eq!(held(&a), [(0, 1), (1, 1), (2, 1), (3, 1)]);
    assert_eq!(held(&b), [(4, 1), (5, 1), (6, 1), (7, 1)]);
    // Taken this moment, by PostgreSQL's clock: the whole time to live is left.
    assert!(a.iter().chain(&b).all(|l| l.expires_in == LONG));
    assert!(
        cluster
            .take("a", share, LONG)
            .expect("none left")
            .is_empty()
    );
    assert!(cluster.take("c", 8, LONG).expect("none left").is_empty());
    let status = cluster.status().expect("status");
    let nodes: Vec<(&str, &str, &[u32])> = status
        .nodes
        .iter()
        .map(|n| (n.node.as_str(), n.addr.as_str(), n.shards.as_slice()))
        .collect();
    assert_eq!(
        nodes,
        [
            ("a", "10.0.0.1:8080", &[0, 1, 2, 3][..]),
            ("b", "10.0.0.2:8080", &[4, 5, 6, 7][..])
        ]
    );
}

#[test]
fn an_expired_lease_is_taken_by_another_node_with_the_next_epoch() {
    let url = database("cluster_expiry");
    let cluster = Cluster::init(&url, 2).expect("made");
    cluster.join("a", "a:1").expect("a joins");
    cluster.join("b", "b:1").expect("b joins");
    let a = cluster
        .take("a", 2, Duration::from_secs(1))
        .expect("a takes");
    assert_eq!(held(&a), [(0, 1), (1, 1)]);
    let b = eventually("a's leases expire", || {
        let taken = cluster.take("b", 2, LONG).expect("b takes");
        (!taken.is_empty()).then_some(taken)
    });
    assert_eq!(held(&b), [(0, 2), (1, 2)]);
    // a's heartbeat renews nothing: it holds nothing any more.
    assert!(cluster.heartbeat("a", LONG).expect("beats").is_empty());
    assert_eq!(
        held(&cluster.heartbeat("b", LONG).expect("beats")),
        [(0, 2), (1, 2)]
    );
    let status = cluster.status().expect("status");
    let owners: Vec<(Option<&str>, u64)> = status
        .shards
        .iter()
        .map(|s| (s.owner.as_deref(), s.epoch))
        .collect();
    assert_eq!(owners, [(Some("b"), 2), (Some("b"), 2)]);
}

#[test]
fn a_renewed_lease_is_kept_past_its_first_expiry() {
    let url = database("cluster_renew");
    let cluster = Cluster::init(&url, 1).expect("made");
    cluster.join("a", "a:1").expect("a joins");
    let taken = cluster
        .take("a", 1, Duration::from_millis(500))
        .expect("a takes");
    assert_eq!(held(&taken), [(0, 1)]);
    let renewed = cluster.heartbeat("a", LONG).expect("renewed");
    assert_eq!(
        renewed,
        [Lease {
            shard: 0,
            epoch: 1,
            expires_in: LONG
        }]
    );
    // Wait, by PostgreSQL's clock, until the first lease would have expired.
    let mut client = sql(&url);
    eventually("the first expiry passes", || {
        let passed: bool = client
            .query_one(
                "SELECT now() > taken_at + interval '500 milliseconds' FROM spool.shards",
                &[],
            )
            .expect("read")
            .get(0);
        passed.then_some(())
    });
    assert!(cluster.take("b", 1, LONG).expect("b takes").is_empty());
    assert_eq!(
        held(&cluster.heartbeat("a", LONG).expect("beats")),
        [(0, 1)]
    );
    assert_eq!(
        cluster
            .heartbeat("nobody", LONG)
            .expect_err("unknown")
            .to_string(),
        "node `nobody` has not joined the cluster"
    );
}

#[test]
fn a_released_lease_is_free_at_once_and_only_its_holder_releases_it() {
    let url = database("cluster_release");
    let cluster = Cluster::init(&url, 3).expect("made");
    let a = cluster.take("a", 3, LONG).expect("a takes");
    assert_eq!(held(&a), [(0, 1), (1, 1), (2, 1)]);
    assert!(!cluster.release("b", &a[0]).expect("not b's"));
    assert!(cluster.release("a", &a[0]).expect("released"));
    assert!(!cluster.release("a", &a[0]).expect("released already"));
    let b = cluster.take("b", 3, LONG).expect("b takes");
    assert_eq!(held(&b), [(0, 2)]);
    // a's old lease of shard 0 is not b's new one.
    assert!(!cluster.release("a", &a[0]).expect("another epoch"));
    assert_eq!(cluster.release_all("a").expect("released"), [1, 2]);
    assert_eq!(
        cluster.release_all("a").expect("nothing"),
        Vec::<u32>::new()
    );
    let status = cluster.status().expect("status");
    let owners: Vec<(Option<&str>, u64, bool)> = status
        .shards
        .iter()
        .map(|s| (s.owner.as_deref(), s.epoch, s.expires_in.is_none()))
        .collect();
    assert_eq!(
        owners,
        [(Some("b"), 2, false), (None, 1, true), (None, 1, true)]
    );
    cluster.join("b", "b:1").expect("b joins");
    assert_eq!(cluster.leave("b").expect("b leaves"), [0]);
    assert!(cluster.status().expect("status").nodes.is_empty());
}

#[test]
fn a_draining_node_takes_nothing_and_is_not_counted_live() {
    let url = database("cluster_drain");
    let cluster = Cluster::init(&url, 2).expect("made");
    cluster.join("a", "a:1").expect("a joins");
    cluster.join("b", "b:1").expect("b joins");
    assert!(!cluster.draining("a").expect("read"));
    cluster.drain("a").expect("drained");
    assert!(cluster.draining("a").expect("read"));
    assert!(cluster.take("a", 2, LONG).expect("takes").is_empty());
    assert_eq!(cluster.live_nodes(LONG).expect("live"), ["b"]);
    let status = cluster.status().expect("status");
    let draining: Vec<(&str, bool)> = status
        .nodes
        .iter()
        .map(|n| (n.node.as_str(), n.draining))
        .collect();
    assert_eq!(draining, [("a", true), ("b", false)]);
    assert_eq!(
        cluster.drain("c").expect_err("unknown").to_string(),
        "node `c` has not joined the cluster"
    );
    assert_eq!(
        cluster.join("", "x:1").expect_err("no name").to_string(),
        "a node's name must not be empty"
    );
    // Joining again (a restart) ends the drain.
    cluster.join("a", "a:2").expect("a joins again");
    assert!(!cluster.draining("a").expect("read"));
    assert_eq!(
        held(&cluster.take("a", 2, LONG).expect("takes")),
        [(0, 1), (1, 1)]
    );
}

#[test]
fn a_writer_whose_lease_was_taken_over_writes_nothing_more() {
    let url = database("cluster_fencing");
    let cluster = Cluster::init(&url, 2).expect("made");
    let a_lease = cluster
        .take("a", 2, Duration::from_millis(200))
        .expect("a takes");
    assert_eq!(held(&a_lease), [(0, 1), (1, 1)]);
    let a = writer(&url, 0, 1).expect("a's writer");
    assert_eq!(a.shard(), 0);
    assert_eq!(a.append(&entry(1)).expect("a writes"), 1);
    let b_lease = eventually("a's lease expires", || {
        let taken = cluster.take("b", 2, LONG).expect("b takes");
        (!taken.is_empty()).then_some(taken)
    });
    assert_eq!(held(&b_lease), [(0, 2), (1, 2)]);
    let b = writer(&url, 0, 2).expect("b's writer");
    let refused = a.append(&entry(2)).expect_err("a is fenced");
    assert!(
        matches!(
            refused,
            PgStoreError::Fenced {
                ours: 1,
                found: 2,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "{url} was taken over by another writer (epoch 2, this writer's is 1): nothing more is written by this one"
        )
    );
    assert_eq!(seqs(&url, 0), [1]);
    assert_eq!(b.append(&entry(2)).expect("b writes"), 2);
    assert_eq!(seqs(&url, 0), [1, 2]);
    // A writer with an older lease (a's, again) is refused at connect.
    let stale = writer(&url, 0, 1).expect_err("an older epoch");
    assert!(
        matches!(
            stale,
            PgStoreError::Fenced {
                ours: 1,
                found: 2,
                ..
            }
        ),
        "{stale:?}"
    );
    // The other shard is untouched; a reader of shard 0 sees b's journal.
    assert_eq!(seqs(&url, 1), Vec::<i64>::new());
    let reader = PgStore::connect_read_only_with(&url, PgOptions::new().shard(0)).expect("reads");
    assert_eq!(reader.shard(), 0);
    assert_eq!(reader.sizes().expect("sizes").entries, 2);
}

#[test]
fn a_writer_frozen_inside_a_transaction_neither_blocks_the_new_owner_nor_commits() {
    let url = database("cluster_frozen");
    let cluster = Cluster::init(&url, 2).expect("made");
    assert_eq!(
        held(&cluster.take("a", 2, LONG).expect("a takes")),
        [(0, 1), (1, 1)]
    );
    let a = writer(&url, 1, 1).expect("a's writer");
    assert_eq!(a.append(&entry(1)).expect("a writes"), 1);
    // A session of a's writer stopped mid-group, as a SIGSTOPped process leaves it: the
    // head row updated (and locked) and an entry written, not committed.
    let mut frozen = sql(&format!(
        "{url}?application_name=spool%20shard%201%20epoch%201"
    ));
    let mut tx = frozen.transaction().expect("begins");
    let head = tx
        .execute(
            "UPDATE spool.head SET last_seq = 2 WHERE shard = 1 AND epoch = 1",
            &[],
        )
        .expect("head updated");
    assert_eq!(head, 1);
    tx.execute(
        "INSERT INTO spool.entries (shard, seq, body, sum) VALUES (1, 2, '\\x00', 0)",
        &[],
    )
    .expect("entry written");
    // Its lease is taken over (released here, as an expiry would).
    assert_eq!(cluster.release_all("a").expect("released"), [0, 1]);
    assert_eq!(
        held(&cluster.take("b", 2, LONG).expect("b takes")),
        [(0, 2), (1, 2)]
    );
    let started = Instant::now();
    let b = writer(&url, 1, 2).expect("b's writer connects");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "b waited {:?}",
        started.elapsed()
    );
    assert!(tx.commit().is_err(), "the frozen transaction cannot commit");
    assert_eq!(seqs(&url, 1), [1]);
    assert!(matches!(
        a.append(&entry(2)).expect_err("a is fenced"),
        PgStoreError::Fenced {
            ours: 1,
            found: 2,
            ..
        }
    ));
    assert_eq!(b.append(&entry(2)).expect("b writes"), 2);
    assert_eq!(seqs(&url, 1), [1, 2]);
    b.verify().expect("the shard is whole");
}

#[test]
fn the_inbox_keeps_order_notifies_and_forgets_what_is_acknowledged() {
    let url = database("cluster_inbox");
    let cluster = Cluster::init(&url, 4).expect("made");
    let mut listener = cluster.listen().expect("listens");
    let first = cluster.enqueue(2, "k1", b"one").expect("enqueued");
    let second = cluster.enqueue(2, "k2", b"two").expect("enqueued");
    let third = cluster.enqueue(3, "k3", b"three").expect("enqueued");
    assert!(first < second && second < third);
    let mut woken = Vec::new();
    eventually("both shards are announced", || {
        woken.extend(listener.wait(Duration::from_millis(200)).expect("waits"));
        woken.sort_unstable();
        woken.dedup();
        (woken == [2, 3]).then_some(())
    });
    let item = |id, shard, key: &str, body: &[u8]| InboxItem {
        id,
        shard,
        key: key.to_owned(),
        body: body.to_vec(),
    };
    assert_eq!(
        cluster.pending(2, 10).expect("pending"),
        [item(first, 2, "k1", b"one"), item(second, 2, "k2", b"two")]
    );
    assert_eq!(
        cluster.pending(2, 1).expect("pending"),
        [item(first, 2, "k1", b"one")]
    );
    let depths = |cluster: &Cluster| -> Vec<u64> {
        let status = cluster.status().expect("status");
        status.shards.iter().map(|s| s.inbox).collect()
    };
    assert_eq!(depths(&cluster), [0, 0, 2, 1]);
    assert_eq!(cluster.ack(3, &[first]).expect("not shard 3's"), 0);
    assert_eq!(cluster.ack(2, &[first]).expect("acknowledged"), 1);
    assert_eq!(
        cluster.pending(2, 10).expect("pending"),
        [item(second, 2, "k2", b"two")]
    );
    assert_eq!(depths(&cluster), [0, 0, 1, 1]);
    assert!(
        listener
            .wait(Duration::from_millis(50))
            .expect("waits")
            .is_empty()
    );
    assert_eq!(
        cluster
            .enqueue(4, "k", b"")
            .expect_err("no shard 4")
            .to_string(),
        "shard 4 does not exist: the cluster has 4 shards, numbered from 0"
    );
    assert_eq!(
        cluster.enqueue(1, "", b"").expect_err("no key").to_string(),
        "an idempotency key must not be empty"
    );
    sql(&url)
        .execute(
            "UPDATE spool.inbox SET body = 'x' WHERE id = $1",
            &[&(third as i64)],
        )
        .expect("changed behind its back");
    assert_eq!(
        cluster.pending(3, 10).expect_err("damaged").to_string(),
        format!(
            "the cluster's tables are damaged: inbox item {third} of shard 3 does not match its checksum"
        )
    );
}

#[test]
fn a_key_is_bound_to_the_shard_of_its_first_submission() {
    let url = database("cluster_keys");
    let cluster = Cluster::init(&url, 4).expect("made");
    assert_eq!(cluster.key_shard("k").expect("read"), None);
    assert_eq!(cluster.bind_key("k", 1).expect("bound"), 1);
    assert_eq!(cluster.bind_key("k", 3).expect("bound before"), 1);
    assert_eq!(cluster.key_shard("k").expect("read"), Some(1));
    assert_eq!(cluster.bind_key("other", 3).expect("bound"), 3);
    assert!(matches!(
        cluster.bind_key("k", 9).expect_err("no shard 9"),
        ClusterError::NoShard {
            shard: 9,
            shards: 4
        }
    ));
}

/// A shard's number, owner, epoch, inbox depth, lag and whether its lease expired.
type Figures<'a> = (u32, Option<&'a str>, u64, u64, u64, bool);

#[test]
fn status_gives_each_shards_lease_inbox_and_lag_and_each_nodes_shards() {
    let url = database("cluster_status");
    let cluster = Cluster::init(&url, 3).expect("made");
    cluster.join("a", "10.0.0.1:1").expect("a joins");
    cluster.join("b", "10.0.0.2:1").expect("b joins");
    assert_eq!(
        held(&cluster.take("a", 2, LONG).expect("a takes")),
        [(0, 1), (1, 1)]
    );
    let store = writer(&url, 0, 1).expect("a's writer of shard 0");
    for n in 1..=3 {
        store.append(&entry(n)).expect("appended");
    }
    store
        .write_checkpoint(&snapshot(&scheduler(1)))
        .expect("checkpointed");
    for n in 4..=5 {
        store.append(&entry(n)).expect("appended");
    }
    cluster.enqueue(1, "k1", b"x").expect("enqueued");
    cluster.enqueue(1, "k2", b"y").expect("enqueued");
    let status = cluster.status().expect("status");
    let figures: Vec<Figures<'_>> = status
        .shards
        .iter()
        .map(|s| {
            (
                s.shard,
                s.owner.as_deref(),
                s.epoch,
                s.inbox,
                s.lag,
                s.expired,
            )
        })
        .collect();
    assert_eq!(
        figures,
        [
            (0, Some("a"), 1, 0, 2, false),
            (1, Some("a"), 1, 2, 0, false),
            (2, None, 0, 0, 0, false)
        ]
    );
    for shard in &status.shards[..2] {
        let age = shard.lease_age.expect("an age");
        let left = shard.expires_in.expect("an expiry");
        assert!(age < Duration::from_secs(20), "{age:?}");
        // Each is rounded to the millisecond on its own: together they are the whole
        // time to live, give or take that rounding.
        let whole = age + left;
        let ms = Duration::from_millis(1);
        assert!(
            whole >= LONG - ms && whole <= LONG + ms,
            "taken {age:?} ago, {left:?} left"
        );
    }
    assert_eq!(
        (status.shards[2].lease_age, status.shards[2].expires_in),
        (None, None)
    );
    let nodes: Vec<(&str, &str, bool, &[u32])> = status
        .nodes
        .iter()
        .map(|n| {
            (
                n.node.as_str(),
                n.addr.as_str(),
                n.draining,
                n.shards.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            ("a", "10.0.0.1:1", false, &[0, 1][..]),
            ("b", "10.0.0.2:1", false, &[][..])
        ]
    );
    assert!(
        status
            .nodes
            .iter()
            .all(|n| n.heartbeat_age < Duration::from_secs(20))
    );
}

#[test]
fn a_writer_of_another_shard_makes_its_head_row_and_writes_only_its_own() {
    let url = database("cluster_shard_writer");
    let zero = PgStore::connect(&url).expect("shard 0's writer");
    let three = PgStore::connect_with(&url, PgOptions::new().shard(3)).expect("shard 3's writer");
    assert_eq!((zero.shard(), three.shard()), (0, 3));
    assert_eq!(three.append(&entry(1)).expect("appended"), 1);
    assert_eq!(three.append(&entry(2)).expect("appended"), 2);
    assert_eq!(zero.append(&entry(1)).expect("appended"), 1);
    assert_eq!((seqs(&url, 0), seqs(&url, 3)), (vec![1], vec![1, 2]));
    // One writer per shard: the writer's lock is the shard's.
    assert!(matches!(
        PgStore::connect_with(&url, PgOptions::new().shard(3)).expect_err("in use"),
        PgStoreError::InUse { .. }
    ));
    drop(three);
    let reader = PgStore::connect_read_only_with(&url, PgOptions::new().shard(3)).expect("reads");
    assert_eq!(reader.sizes().expect("sizes").entries, 2);
    reader.verify().expect("whole");
}

#[test]
fn a_shard_with_entries_and_no_head_row_is_damage_not_a_new_journal() {
    let url = database("cluster_headless");
    let store = PgStore::connect_with(&url, PgOptions::new().shard(2)).expect("a writer");
    store.append(&entry(1)).expect("appended");
    drop(store);
    sql(&url)
        .execute("DELETE FROM spool.head WHERE shard = 2", &[])
        .expect("removed behind its back");
    assert_eq!(
        PgStore::connect_with(&url, PgOptions::new().shard(2))
            .expect_err("damaged")
            .to_string(),
        "the store is damaged: the head row is missing"
    );
}

#[test]
fn a_head_row_locked_by_a_session_that_is_no_lease_writer_is_said_after_the_wait() {
    let url = database("cluster_head_locked");
    let cluster = Cluster::init(&url, 2).expect("made");
    assert_eq!(
        held(&cluster.take("a", 1, LONG).expect("a takes")),
        [(0, 1)]
    );
    // A session named otherwise (a writer without a lease, a person at psql) holds the
    // head row: it is not ended.
    let mut other = sql(&url);
    let mut tx = other.transaction().expect("begins");
    tx.execute("SELECT 1 FROM spool.head WHERE shard = 0 FOR UPDATE", &[])
        .expect("locked");
    let refused = PgStore::connect_with(
        &url,
        PgOptions::new()
            .shard(0)
            .lease_epoch(1)
            .connect_timeout(Duration::from_secs(2)),
    )
    .expect_err("the row stays locked");
    // It waited at least the connect timeout, in tries of a second each.
    let PgStoreError::HeadLocked { shard, seconds, .. } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(*shard, 0);
    assert!((2..=3).contains(seconds), "{seconds}");
    assert_eq!(
        refused.to_string(),
        format!(
            "{url}: the head row of shard 0 stayed locked for {seconds} s by a session that is not a lease writer of the shard (a writer without a lease?)"
        )
    );
    tx.rollback().expect("let go");
    writer(&url, 0, 1).expect("connects once the row is free");
}

/// The server sessions of the database at `url` named as `shard`'s lease writer with
/// `epoch`.
fn lease_sessions(url: &str, shard: u32, epoch: u64) -> Vec<i32> {
    sql(url)
        .query(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = $1 ORDER BY pid",
            &[&format!("spool shard {shard} epoch {epoch}")],
        )
        .expect("read")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A lease writer's connection breaks while its server session lives on (which, inside
/// a transaction, would hold the head row): the writer ends that session before it
/// looks for its batch, and goes on.
#[test]
fn a_lease_writer_cut_off_ends_its_old_session_and_goes_on() {
    let server = spool_pgtest::PgCluster::shared();
    let direct = database("cluster_cut_lease");
    let proxy = crate::proxy::Proxy::start(server.port());
    let url = proxy.url(&direct, server.port());
    let cluster = Cluster::init(&direct, 1).expect("made");
    assert_eq!(
        held(&cluster.take("a", 1, LONG).expect("a takes")),
        [(0, 1)]
    );
    let store = PgStore::connect_with(
        &url,
        PgOptions::new()
            .lease_epoch(1)
            .retry_for(Duration::from_secs(10)),
    )
    .expect("a's writer");
    assert_eq!(store.append(&entry(1)).expect("appended"), 1);
    let before = lease_sessions(&direct, 0, 1);
    assert_eq!(before.len(), 1, "{before:?}");
    proxy.cut();
    assert_eq!(
        lease_sessions(&direct, 0, 1),
        before,
        "the old session lives on"
    );
    assert_eq!(store.append(&entry(2)).expect("appended after the cut"), 2);
    let after = lease_sessions(&direct, 0, 1);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before);
    assert_eq!(seqs(&direct, 0), [1, 2]);
}

/// A statement the server refuses is said in the server's own words, not as
/// "db error".
#[test]
fn a_refused_statement_is_said_in_the_servers_words() {
    let url = database("cluster_server_words");
    let cluster = Cluster::init(&url, 2).expect("a cluster");
    sql(&url)
        .batch_execute("DROP TABLE spool.keys")
        .expect("the table is dropped");
    assert_eq!(
        cluster.bind_key("k", 0).expect_err("no table").to_string(),
        "the cluster's database failed: relation \"spool.keys\" does not exist"
    );
}
