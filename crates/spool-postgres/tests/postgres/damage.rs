//! A store changed behind its back with SQL — a byte of an entry, a task row or a
//! checkpoint; an entry renumbered, two swapped, one deleted; the head row — is
//! `Corrupt` naming the row, on `recover` and on `verify`, never a different journal.

use spool_core::{Commit, JournalSink};
use spool_postgres::{PgStore, PgStoreError};

use crate::common::{database, entry, run, scheduler, snapshot, sql};

/// Writes the store at `url`: a journal started at a scheduler of 3 tasks, entries 1
/// and 2, a checkpoint in parts (checkpoint 2, the rows of the 3 tasks), entries 3 to
/// 5. Returns the id of the first task.
fn write(url: &str) -> u64 {
    let store = PgStore::connect(url).expect("connects");
    let mut sink = store.clone();
    let mut s = scheduler(3);
    sink.start(&snapshot(&s)).expect("started");
    store.append(&entry(1)).expect("appended");
    store.append(&entry(2)).expect("appended");
    run(&mut s, 5);
    let parts = s.snapshot_changes().expect("parts");
    let first = parts.rows[0].0.get();
    sink.checkpoint_parts(parts).expect("checkpointed");
    assert_eq!(sink.commit().expect("committed"), Commit::Durable);
    for n in 3..=5 {
        assert_eq!(store.append(&entry(n)).expect("appended"), n);
    }
    let journal = store.recover().expect("reads").expect("a journal");
    assert_eq!(journal.start, snapshot(&s));
    assert_eq!(journal.entries, [entry(3), entry(4), entry(5)]);
    store.verify().expect("checks out");
    first
}

/// Flips the middle byte of `body` in the row of `table` whose `key` is `id`.
fn flip(url: &str, table: &str, key: &str, id: u64) {
    let mut client = sql(url);
    let select = format!("SELECT body FROM spool.{table} WHERE shard = 0 AND {key} = $1");
    let mut body: Vec<u8> = client
        .query_one(&select, &[&(id as i64)])
        .expect("the row")
        .get(0);
    let middle = body.len() / 2;
    body[middle] ^= 0x01;
    let update = format!("UPDATE spool.{table} SET body = $1 WHERE shard = 0 AND {key} = $2");
    assert_eq!(
        client
            .execute(&update, &[&body, &(id as i64)])
            .expect("changed"),
        1
    );
}

/// The message of a `Corrupt` error (anything else fails the test).
fn corrupt<T: std::fmt::Debug>(result: Result<T, PgStoreError>, what: &str) -> String {
    match result {
        Err(PgStoreError::Corrupt(message)) => message,
        other => panic!("{what}: {other:?}, not Corrupt"),
    }
}

/// Each damage, on a store of its own: what `recover` and then `verify` say.
#[test]
fn every_damage_is_corrupt_naming_the_row() {
    type Damage = fn(&str, u64);
    let cases: [(&str, Damage, &str, &str); 7] = [
        (
            "entry_byte",
            |url, _| flip(url, "entries", "seq", 4),
            "journal entry 4 does not match its checksum",
            "journal entry 4 does not match its checksum",
        ),
        (
            "task_row_byte",
            |url, task| flip(url, "tasks", "task", task),
            "the row of task {task} does not match its checksum",
            "the row of task {task} does not match its checksum",
        ),
        (
            "checkpoint_byte",
            |url, _| flip(url, "checkpoints", "id", 2),
            "checkpoint 2 does not match its checksum",
            "checkpoint 2 does not match its checksum",
        ),
        (
            "renumbered",
            |url, _| {
                sql(url)
                    .execute("UPDATE spool.entries SET seq = 6 WHERE seq = 5", &[])
                    .map(drop)
                    .expect("changed");
            },
            "journal entry 6 does not match its checksum",
            "journal entry 6 does not match its checksum",
        ),
        (
            "swapped",
            |url, _| {
                sql(url)
                    .batch_execute(
                        "UPDATE spool.entries SET seq = -1 WHERE seq = 3;
                         UPDATE spool.entries SET seq = 3 WHERE seq = 5;
                         UPDATE spool.entries SET seq = 5 WHERE seq = -1;",
                    )
                    .expect("changed");
            },
            "journal entry 3 does not match its checksum",
            "journal entry 3 does not match its checksum",
        ),
        (
            "deleted",
            |url, _| {
                sql(url)
                    .execute("DELETE FROM spool.entries WHERE seq = 4", &[])
                    .map(drop)
                    .expect("deleted");
            },
            "journal entry 4 is missing (the next kept is 5)",
            "journal entry 4 is missing (the next kept is 5)",
        ),
        (
            "deleted_last",
            |url, _| {
                sql(url)
                    .execute("DELETE FROM spool.entries WHERE seq = 5", &[])
                    .map(drop)
                    .expect("deleted");
            },
            "journal entry 5, the last committed, is missing",
            "journal entry 5, the last committed, is missing",
        ),
    ];
    for (case, damage, on_recover, on_verify) in cases {
        let url = database(&format!("damaged_{case}"));
        let task = write(&url);
        damage(&url, task);
        let store = PgStore::connect_read_only(&url).expect("connects");
        let named = |text: &str| text.replace("{task}", &task.to_string());
        assert_eq!(
            corrupt(store.recover(), case),
            named(on_recover),
            "{case}: recover"
        );
        assert_eq!(
            corrupt(store.verify(), case),
            named(on_verify),
            "{case}: verify"
        );
        assert_eq!(
            spool_durable::DurableError::from(store.recover().expect_err("damaged")).to_string(),
            format!("the store is damaged: {}", named(on_recover))
        );
    }
}

/// A head row changed behind the store's back is found when a writer or a reader
/// connects.
#[test]
fn a_changed_head_row_is_found_on_connecting() {
    let url = database("damaged_head");
    write(&url);
    sql(&url)
        .execute("UPDATE spool.head SET last_seq = last_seq + 1", &[])
        .expect("changed");
    for connect in [PgStore::connect, PgStore::connect_read_only] {
        assert_eq!(
            corrupt(connect(&url), "connecting"),
            "the head row does not match its checksum"
        );
    }
}
