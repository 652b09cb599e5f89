//! When the server goes away: a restart while a sink commits groups, a cut connection,
//! a server gone longer than `retry_for`, and a writer that another took over while
//! its connection was cut.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spool_core::{Commit, DurableNotifier, JournalSink};
use spool_pgtest::PgCluster;
use spool_postgres::{PgOptions, PgStore, PgStoreError};

use crate::common::{database, entry, sql};
use crate::proxy::Proxy;

/// Polls `done` until it holds, failing the test after `limit` (which only bounds a
/// broken run).
fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A cluster of this test's own, whose commits wait for the disk.
fn own_cluster() -> PgCluster {
    PgCluster::builder()
        .setting("synchronous_commit", "on")
        .start()
        .expect("a cluster starts")
}

/// Ends the server session holding the store's writer lock (the writer's connection).
fn cut_writer(url: &str) {
    let ended: bool = sql(url)
        .query_one(
            "SELECT pg_terminate_backend(pid) FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND objsubid = 2
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .expect("the writer's session")
        .get(0);
    assert!(ended);
}

/// The server restarts while a sink commits groups of 5 entries: the writer stops,
/// tries again, and goes on; every group is said durable, none fails, and the journal
/// holds every entry once, in order.
#[test]
fn a_restart_while_committing_loses_nothing() {
    let cluster = own_cluster();
    let url = cluster
        .create_database("restart_while_committing")
        .expect("a database");
    let store = PgStore::connect_with(&url, PgOptions::new().queue_groups(8)).expect("connects");
    let durable = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(None));
    let mut sink = store.clone();
    let (d, f) = (Arc::clone(&durable), Arc::clone(&failed));
    sink.notify_with(DurableNotifier::new(move |notice| match notice {
        Ok(n) => d.store(n, Ordering::SeqCst),
        Err(e) => *f.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string()),
    }));
    sink.start(b"start").expect("started");
    // The server restarts while groups are queued and not yet durable (the restart
    // waits for that, so it always lands inside a commit's work); groups go on being
    // committed until it is over, then 100 more.
    let submitted = AtomicU64::new(0);
    let restarted = AtomicBool::new(false);
    let groups = std::thread::scope(|scope| {
        scope.spawn(|| {
            wait_for(
                "50 groups durable, more queued",
                Duration::from_secs(60),
                || {
                    let done = durable.load(Ordering::SeqCst);
                    done >= 50 && submitted.load(Ordering::SeqCst) > done
                },
            );
            cluster.restart().expect("the server restarts");
            restarted.store(true, Ordering::SeqCst);
        });
        let (mut groups, mut after) = (0u64, 0u64);
        while after < 100 {
            let ended = restarted.load(Ordering::SeqCst);
            for n in 0..5 {
                sink.record(&entry(groups * 5 + n)).expect("recorded");
            }
            assert_eq!(sink.commit().expect("committed"), Commit::Queued);
            groups += 1;
            submitted.store(groups, Ordering::SeqCst);
            if ended {
                after += 1;
            }
        }
        groups
    });
    wait_for("every group durable", Duration::from_secs(60), || {
        durable.load(Ordering::SeqCst) == groups
            || failed.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    });
    assert_eq!(*failed.lock().unwrap_or_else(|p| p.into_inner()), None);
    drop(sink);
    drop(store);
    let store = PgStore::connect(&url).expect("connects again");
    let journal = store.recover().expect("reads").expect("a journal");
    assert_eq!(
        journal.entries,
        (0..groups * 5).map(entry).collect::<Vec<_>>()
    );
    store.verify().expect("checks out");
}

/// A writer whose connection is cut writes its next entry through a new one.
#[test]
fn a_cut_connection_is_made_again() {
    let url = database("cut_connection");
    let store = PgStore::connect(&url).expect("connects");
    store.start_journal(b"start").expect("started");
    assert_eq!(store.append(&entry(1)).expect("appended"), 1);
    cut_writer(&url);
    assert_eq!(store.append(&entry(2)).expect("appended after the cut"), 2);
    cut_writer(&url);
    assert_eq!(
        store
            .write_checkpoint(b"later")
            .expect("written after the cut"),
        2
    );
    assert_eq!(store.append(&entry(3)).expect("appended"), 3);
    let journal = store.recover().expect("reads").expect("a journal");
    assert_eq!(
        (journal.start, journal.entries),
        (b"later".to_vec(), vec![entry(3)])
    );
    let stats = store.write_stats();
    assert_eq!((stats.entries, stats.checkpoints), (3, 2));
}

/// A server stopped for longer than `retry_for` fails the write with `Unavailable`;
/// once it is back, the writer writes again.
#[test]
fn a_server_gone_longer_than_retry_for_is_unavailable() {
    let cluster = own_cluster();
    let url = cluster.create_database("server_gone").expect("a database");
    let options = PgOptions::new().retry_for(Duration::from_millis(500));
    let store = PgStore::connect_with(&url, options).expect("connects");
    store.start_journal(b"start").expect("started");
    cluster.stop().expect("the server stops");
    match store.append(&entry(1)) {
        Err(PgStoreError::Unavailable { what, seconds, .. }) => {
            assert_eq!((what, seconds), (store.name(), 0));
        }
        other => panic!("{other:?}, not Unavailable"),
    }
    cluster.start_again().expect("the server starts again");
    assert_eq!(store.append(&entry(1)).expect("appended"), 1);
    assert_eq!(
        store.recover().expect("reads").expect("a journal").entries,
        [entry(1)]
    );
}

/// A writer whose connection was cut while another writer connected (and so took the
/// next epoch) writes nothing more: `Fenced`, and the other's journal is as it left it.
#[test]
fn a_writer_taken_over_while_cut_off_is_fenced() {
    let url = database("fenced_writer");
    let first = PgStore::connect(&url).expect("connects");
    first.start_journal(b"start").expect("started");
    first.append(&entry(1)).expect("appended");
    cut_writer(&url);
    let second = PgStore::connect(&url).expect("the lock is free");
    assert_eq!(second.append(&entry(2)).expect("appended"), 2);
    drop(second);
    let refused = first.append(&entry(99)).expect_err("fenced");
    assert_eq!(
        refused.to_string(),
        format!(
            "{} was taken over by another writer (epoch 2, this writer's is 1): nothing more \
             is written by this one",
            first.name()
        )
    );
    assert!(matches!(
        spool_durable::DurableError::from(refused),
        spool_durable::DurableError::InUse { .. }
    ));
    assert_eq!(
        first.recover().expect("reads").expect("a journal").entries,
        [entry(1), entry(2)]
    );
}

/// A head row whose epoch moved on while the writer stayed connected (another writer
/// took the store over) fences the writer in the transaction that writes: the group
/// fails and none of it is written.
#[test]
fn a_newer_epoch_fences_the_writer_in_its_transaction() {
    let url = database("fenced_in_transaction");
    let store = PgStore::connect(&url).expect("connects");
    store.start_journal(b"start").expect("started");
    store.append(&entry(1)).expect("appended");
    sql(&url)
        .execute("UPDATE spool.head SET epoch = epoch + 1", &[])
        .expect("changed");
    match store.append(&entry(2)) {
        Err(PgStoreError::Fenced { ours, found, .. }) => assert_eq!((ours, found), (1, 2)),
        other => panic!("{other:?}, not Fenced"),
    }
    let kept: i64 = sql(&url)
        .query_one("SELECT count(*) FROM spool.entries", &[])
        .expect("counted")
        .get(0);
    assert_eq!(kept, 1, "nothing of the fenced write is there");
}

/// The store's connection breaks while the server's session lives on, holding the
/// writer's lock: the writer ends its own old session, takes the lock and goes on.
#[test]
fn a_broken_path_whose_session_lives_on_is_taken_over() {
    let cluster = spool_pgtest::PgCluster::shared();
    let direct = database("broken_path");
    let proxy = Proxy::start(cluster.port());
    let url = proxy.url(&direct, cluster.port());
    // Without ending the old session, the writer would wait for it for all of this.
    let options = PgOptions::new().retry_for(Duration::from_secs(10));
    let store = PgStore::connect_with(&url, options).expect("connects");
    store.start_journal(b"start").expect("started");
    assert_eq!(store.append(&entry(1)).expect("appended"), 1);
    let holder = |url: &str| -> Option<i32> {
        sql(url)
            .query_opt(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .expect("read")
            .map(|row| row.get(0))
    };
    let before = holder(&direct).expect("the writer holds the lock");
    proxy.cut();
    assert_eq!(holder(&direct), Some(before), "the old session lives on");
    assert_eq!(store.append(&entry(2)).expect("appended after the cut"), 2);
    let after = holder(&direct).expect("the writer holds the lock");
    assert_ne!(after, before);
    assert_eq!(
        store.recover().expect("reads").expect("a journal").entries,
        [entry(1), entry(2)]
    );
}

/// The connection breaks after `COMMIT` reached the server and before its answer came
/// back: the writer finds the batch committed, counts it once, and goes on after it.
#[test]
fn a_commit_whose_answer_was_lost_counts_once() {
    let cluster = spool_pgtest::PgCluster::shared();
    let direct = database("commit_answer_lost");
    let proxy = Proxy::start(cluster.port());
    let url = proxy.url(&direct, cluster.port());
    let options = PgOptions::new().retry_for(Duration::from_secs(10));
    let store = PgStore::connect_with(&url, options).expect("connects");
    store.start_journal(b"start").expect("started");
    assert_eq!(store.append(&entry(1)).expect("appended"), 1);
    proxy.cut_after_commit();
    assert_eq!(
        store.append(&entry(2)).expect("committed before the cut"),
        2
    );
    assert_eq!(store.append(&entry(3)).expect("appended"), 3);
    assert_eq!(
        store.recover().expect("reads").expect("a journal").entries,
        [entry(1), entry(2), entry(3)]
    );
    assert_eq!(store.write_stats().entries, 3);
    store.verify().expect("checks out");
}

/// A batch whose COMMIT went out unanswered, given up on because the server stayed
/// away past `retry_for`, is in doubt: the failure says so, and the next write finds
/// out that it was committed and goes on after it — it is neither lost from the count
/// nor taken for the next batch.
#[test]
fn a_batch_given_up_on_after_its_commit_is_settled_by_the_next_write() {
    let cluster = spool_pgtest::PgCluster::shared();
    let direct = database("commit_in_doubt");
    let proxy = Proxy::start(cluster.port());
    let url = proxy.url(&direct, cluster.port());
    let options = PgOptions::new().retry_for(Duration::from_millis(300));
    let store = PgStore::connect_with(&url, options).expect("connects");
    store.start_journal(b"start").expect("started");
    proxy.refuse(true);
    proxy.cut_after_commit();
    match store.append(&entry(1)) {
        Err(PgStoreError::Unavailable { reason, .. }) => assert!(
            reason.ends_with(
                "; the batch's COMMIT was sent and not answered: it may have been committed \
                 (the next write finds out)"
            ),
            "{reason}"
        ),
        other => panic!("{other:?}, not Unavailable"),
    }
    proxy.refuse(false);
    assert_eq!(store.append(&entry(2)).expect("appended after it"), 2);
    assert_eq!(
        store.recover().expect("reads").expect("a journal").entries,
        [entry(1), entry(2)]
    );
    assert_eq!(store.write_stats().entries, 2);
    store.verify().expect("checks out");
}

/// A server that lost commits it had acknowledged (here: its head row and entries put
/// back as they were two commits ago, as a failover to a replica that had not received
/// them would leave them) is said to have lost them, not to be damaged, and the writer
/// writes nothing more.
#[test]
fn a_server_that_lost_acknowledged_commits_is_said_to() {
    let url = database("lost_commits");
    let options = PgOptions::new().retry_for(Duration::from_secs(10));
    let store = PgStore::connect_with(&url, options).expect("connects");
    store.start_journal(b"start").expect("started");
    assert_eq!(store.append(&entry(1)).expect("appended"), 1);
    let mut sql = sql(&url);
    let old = sql
        .query_one(
            "SELECT last_seq, checkpoint, epoch, sum FROM spool.head WHERE shard = 0",
            &[],
        )
        .expect("the head row");
    let (last, checkpoint, epoch, sum): (i64, i64, i64, i64) =
        (old.get(0), old.get(1), old.get(2), old.get(3));
    assert_eq!(store.append(&entry(2)).expect("appended"), 2);
    assert_eq!(store.append(&entry(3)).expect("appended"), 3);
    cut_writer(&url);
    sql.execute("DELETE FROM spool.entries WHERE seq > 1", &[])
        .expect("entries taken back");
    sql.execute(
        "UPDATE spool.head SET last_seq = $1, checkpoint = $2, epoch = $3, sum = $4",
        &[&last, &checkpoint, &epoch, &sum],
    )
    .expect("the head put back");
    match store.append(&entry(4)) {
        Err(error @ PgStoreError::LostCommits { .. }) => assert_eq!(
            error.to_string(),
            format!(
                "{} lost commits it had acknowledged: its head row says entry 1 and \
                 checkpoint 1, behind this writer's last committed batch (entry 3, \
                 checkpoint 1); a server with synchronous_commit off, or a failover to a \
                 replica that had not received them, loses them",
                store.name()
            )
        ),
        other => panic!("{other:?}, not LostCommits"),
    }
}
