//! Task row versions while history is kept: checkpoints in parts that change few tasks
//! rebase as their reads grow, and every kept checkpoint still recovers what was
//! written at it; retention drops the versions no kept checkpoint reads.

use std::time::{Duration, SystemTime};

use spool_core::{JournalSink, Scheduler};
use spool_durable::{History, WallClock};
use spool_postgres::{PgOptions, PgStore, PgStoreError};

use crate::common::{add_counter, database, run, scheduler, snapshot, sql};

/// How many tasks the scheduler holds.
const TASKS: u32 = 40;

/// Writes checkpoints in parts to `store` (after the clock moves on 10 s each), the
/// scheduler doing what `before` says before each; returns each
/// checkpoint's id and the snapshot it was written from.
fn checkpoints(
    store: &PgStore,
    clock: &WallClock,
    s: &mut Scheduler,
    before: &[Before],
) -> Vec<(u64, Vec<u8>)> {
    let mut sink = store.clone();
    let mut written = Vec::new();
    for &what in before {
        match what {
            Before::Run(n) => run(s, n),
            Before::Add => {
                for _ in 0..3 {
                    add_counter(s, 2);
                }
            }
            Before::End => {
                // Two rounds of every task: the short ones end, and are forgotten.
                let ids: Vec<_> = s
                    .snapshot()
                    .expect("a snapshot")
                    .rows()
                    .iter()
                    .map(|row| row.id)
                    .collect();
                run(s, 2 * ids.len());
                let ended = ids.into_iter().filter(|id| s.forget(*id).is_some()).count();
                assert_eq!(ended, 3);
            }
        }
        clock.advance(Duration::from_secs(10));
        sink.checkpoint_parts(s.snapshot_changes().expect("parts"))
            .expect("checkpointed");
        sink.commit().expect("committed");
        let latest = store.checkpoints().expect("read");
        let id = latest.last().expect("one is kept").id;
        written.push((id, snapshot(s)));
    }
    written
}

/// The checkpoints that rebased: their own base, with rows copied from older ones.
fn rebased(url: &str) -> Vec<i64> {
    sql(url)
        .query(
            "SELECT id FROM spool.checkpoints c WHERE shard = 0 AND parts AND id = base
               AND EXISTS (SELECT 1 FROM spool.tasks t
                           WHERE t.shard = 0 AND t.since = c.id AND t.origin < c.id)
             ORDER BY id",
            &[],
        )
        .expect("read")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// How many versions checkpoint `id` reads through: those from its base to it.
fn reads(url: &str, id: u64) -> i64 {
    sql(url)
        .query_one(
            "SELECT count(*) FROM spool.tasks t, spool.checkpoints c
             WHERE t.shard = 0 AND c.shard = 0 AND c.id = $1
               AND t.since >= c.base AND t.since <= c.id",
            &[&(id as i64)],
        )
        .expect("counted")
        .get(0)
}

/// What the scheduler does before a checkpoint.
#[derive(Clone, Copy)]
enum Before {
    /// Takes this many steps.
    Run(usize),
    /// Is given three counters of two steps.
    Add,
    /// Runs until they end, and forgets them (dropped from its table).
    End,
}

/// What the scheduler does before each of `count` checkpoints: a couple of steps (few
/// tasks change), and now and then short tasks that come and go.
fn steps(count: usize) -> Vec<Before> {
    (0..count)
        .map(|i| match i % 40 {
            38 => Before::Add,
            39 => Before::End,
            _ => Before::Run(2),
        })
        .collect()
}

/// How many tombstones the store holds.
fn tombstones(url: &str) -> i64 {
    sql(url)
        .query_one(
            "SELECT count(*) FROM spool.tasks WHERE shard = 0 AND body IS NULL",
            &[],
        )
        .expect("counted")
        .get(0)
}

#[test]
fn rebased_checkpoints_recover_what_was_written_at_each() {
    let url = database("versions_rebase");
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
    let options = || {
        PgOptions::new()
            .history(History::keep(None, None))
            .clock(clock.clone())
    };
    let store = PgStore::connect_with(&url, options()).expect("connects");
    let mut s = scheduler(TASKS);
    let mut sink = store.clone();
    sink.start(&snapshot(&s)).expect("started");
    sink.commit().expect("committed");
    let mut written = checkpoints(&store, &clock, &mut s, &[Before::Run(0)]);
    written.extend(checkpoints(&store, &clock, &mut s, &steps(60)));
    drop(sink);
    drop(store);
    // Another writer goes on from what the store holds.
    let store = PgStore::connect_with(&url, options()).expect("connects again");
    written.extend(checkpoints(&store, &clock, &mut s, &steps(40)));
    let rebases = rebased(&url);
    assert!(rebases.len() >= 3, "rebases: {rebases:?}");
    assert!(tombstones(&url) >= 3, "tasks were dropped");
    assert!(
        rebases.iter().any(|id| *id > 62),
        "the second writer rebases too: {rebases:?}"
    );
    for (id, expected) in &written {
        let journal = store.recover_from(*id).expect("kept");
        assert_eq!(&journal.start, expected, "checkpoint {id}");
        // A checkpoint reads at most about three times the tasks there are.
        let reads = reads(&url, *id);
        assert!(
            reads <= 3 * i64::from(TASKS) + 16,
            "checkpoint {id} reads {reads}"
        );
    }
    let latest = written.last().expect("written");
    let recovered = store.recover().expect("reads").expect("a journal");
    assert_eq!(recovered.start, latest.1);
    store.verify().expect("checks out");
}

#[test]
fn retention_after_rebases_keeps_what_the_kept_checkpoints_read() {
    let url = database("versions_retention");
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
    let age = History::keep(Some(Duration::from_secs(95)), None);
    let options = PgOptions::new().history(age).clock(clock.clone());
    let store = PgStore::connect_with(&url, options).expect("connects");
    let mut s = scheduler(TASKS);
    let mut sink = store.clone();
    sink.start(&snapshot(&s)).expect("started");
    sink.commit().expect("committed");
    let mut written = checkpoints(&store, &clock, &mut s, &[Before::Run(0)]);
    written.extend(checkpoints(&store, &clock, &mut s, &steps(80)));
    let kept: Vec<u64> = store
        .checkpoints()
        .expect("read")
        .iter()
        .map(|c| c.id)
        .collect();
    let oldest = kept[0];
    let latest = written.last().expect("written").0;
    assert!(oldest > 40, "{kept:?}");
    let base: i64 = sql(&url)
        .query_one(
            "SELECT min(base) FROM spool.checkpoints WHERE shard = 0",
            &[],
        )
        .expect("read")
        .get(0);
    assert!(base > 2, "the kept checkpoints read from a rebase: {base}");
    assert_eq!(kept, (oldest..=latest).collect::<Vec<u64>>());
    for (id, expected) in &written {
        if *id < oldest {
            assert!(
                matches!(store.recover_from(*id), Err(PgStoreError::NoCheckpoint(n)) if n == *id),
                "checkpoint {id} is dropped"
            );
        } else {
            let journal = store.recover_from(*id).expect("kept");
            assert_eq!(&journal.start, expected, "checkpoint {id}");
        }
    }
    // What is kept is what the oldest kept checkpoint reads (its live rows) and the
    // versions written after it.
    let mut client = sql(&url);
    let mut count = |query: &str| -> i64 {
        client
            .query_one(query, &[&(oldest as i64)])
            .expect("counted")
            .get(0)
    };
    let all = count("SELECT count(*) FROM spool.tasks WHERE shard = 0 AND $1::bigint > 0");
    let read_by_oldest = count(
        "SELECT count(*) FROM (
             SELECT DISTINCT ON (t.task) t.body FROM spool.tasks t, spool.checkpoints c
             WHERE t.shard = 0 AND c.shard = 0 AND c.id = $1
               AND t.since >= c.base AND t.since <= c.id
             ORDER BY t.task, t.since DESC) AS v
         WHERE body IS NOT NULL",
    );
    let newer = count("SELECT count(*) FROM spool.tasks WHERE shard = 0 AND since > $1");
    assert_eq!(all, read_by_oldest + newer);
    store.verify().expect("checks out");
}
