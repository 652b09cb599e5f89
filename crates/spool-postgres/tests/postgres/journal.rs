//! Writing and reading back a journal: through the sink (groups, checkpoints in parts)
//! and the store's own methods (entries, whole checkpoints, kept checkpoints, maker).

use std::sync::mpsc;
use std::time::Duration;

use spool_core::{Commit, DurableNotice, DurableNotifier, JournalSink};
use spool_durable::History;
use spool_postgres::{PgOptions, PgStore};

use crate::common::{database, entry, run, scheduler, snapshot};

/// Entries appended after a start, read back after the store is connected again.
#[test]
fn appended_entries_are_recovered_after_reconnecting() {
    let url = database("appended_entries_recovered");
    let store = PgStore::connect(&url).expect("connects");
    assert_eq!(store.recover().expect("reads"), None);
    assert_eq!(store.start_journal(b"start").expect("starts"), 1);
    assert_eq!(store.append(&entry(1)).expect("appends"), 1);
    assert_eq!(store.append(&entry(2)).expect("appends"), 2);
    drop(store);
    let store = PgStore::connect(&url).expect("connects again");
    let journal = store.recover().expect("reads").expect("a journal");
    assert_eq!(journal.start, b"start");
    assert_eq!(journal.entries, vec![entry(1), entry(2)]);
    assert_eq!(store.append(&entry(3)).expect("appends"), 3);
    store.verify().expect("the store checks out");
}

/// Waits for the notice that says `groups` groups are durable (a failure is the
/// test's failure); the deadline only bounds a broken run.
fn wait_durable(notices: &mpsc::Receiver<DurableNotice>, groups: u64) {
    loop {
        match notices.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(n)) if n >= groups => return,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("a group failed: {e}"),
            Err(e) => panic!("no notice that {groups} groups are durable: {e}"),
        }
    }
}

/// Groups committed through a sink with a notifier are queued, said durable in order,
/// and recovered whole after the store is connected again.
#[test]
fn queued_groups_are_durable_in_order_and_recovered() {
    let url = database("queued_groups_recovered");
    let store = PgStore::connect_with(&url, PgOptions::new().queue_groups(4)).expect("connects");
    let mut sink = store.clone();
    let (tell, notices) = mpsc::channel();
    sink.notify_with(DurableNotifier::new(move |notice| {
        let _ = tell.send(notice);
    }));
    sink.start(b"start").expect("started");
    for group in 0..50u64 {
        for n in 0..3 {
            sink.record(&entry(group * 3 + n)).expect("recorded");
        }
        assert_eq!(sink.commit().expect("committed"), Commit::Queued);
    }
    wait_durable(&notices, 50);
    drop(sink);
    drop(store);
    let store = PgStore::connect(&url).expect("connects again");
    let journal = store.recover().expect("reads").expect("a journal");
    let expected: Vec<_> = (0..150).map(entry).collect();
    assert_eq!(journal.entries, expected);
    let stats = store.write_stats();
    assert_eq!(
        (stats.entries, stats.checkpoints),
        (0, 0),
        "a new handle's counts"
    );
    store.verify().expect("the store checks out");
}

/// A run checkpointed in parts through the sink (full, then only the tasks that
/// changed, then tasks removed) recovers the snapshot the scheduler takes whole, byte
/// for byte, as does the same run checkpointed whole.
#[test]
fn parts_and_whole_recover_the_same_snapshot() {
    let parts_url = database("parts_in_parts");
    let whole_url = database("parts_whole");
    // Without history: a checkpoint drops what came before it.
    let off = || PgOptions::new().history(History::off());
    let parts = PgStore::connect_with(&parts_url, off()).expect("connects");
    let whole = PgStore::connect_with(&whole_url, off()).expect("connects");
    let mut sink = parts.clone();
    let mut s = scheduler(20);
    let start = snapshot(&s);
    sink.start(&start).expect("started");
    whole.start_journal(&start).expect("started");
    let full = s.snapshot_changes().expect("parts");
    assert!(full.full);
    sink.checkpoint_parts(full).expect("checkpointed");
    assert_eq!(sink.commit().expect("committed"), Commit::Durable);
    for steps in [3, 1, 0, 40, 2000] {
        run(&mut s, steps);
        let changes = s.snapshot_changes().expect("parts");
        sink.checkpoint_parts(changes).expect("checkpointed");
        sink.commit().expect("committed");
        let expected = snapshot(&s);
        whole.write_checkpoint(&expected).expect("checkpointed");
        let from_parts = parts.recover().expect("reads").expect("a journal");
        let from_whole = whole.recover().expect("reads").expect("a journal");
        assert_eq!(from_parts.start, expected, "parts after {steps} steps");
        assert_eq!(from_whole.start, expected, "whole after {steps} steps");
    }
    let stats = parts.write_stats();
    assert_eq!(stats.checkpoints, 7, "the start and six in parts");
    assert!(stats.task_rows >= 20, "{stats:?}");
    // Only the latest checkpoint in parts is kept: the task rows are its.
    let kept: Vec<u64> = parts
        .checkpoints()
        .expect("read")
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(kept, [7]);
    parts.verify().expect("checks out");
    whole.verify().expect("checks out");
}

/// `keep_checkpoints` keeps that many checkpoints, with the entries after the oldest;
/// older ones are gone and `recover_from` says so.
#[test]
fn keep_checkpoints_keeps_the_last_ones_and_their_entries() {
    let url = database("keep_checkpoints_three");
    let store = PgStore::connect_with(
        &url,
        PgOptions::new().keep_checkpoints(3).history(History::off()),
    )
    .expect("connects");
    store.start_journal(b"s1").expect("started");
    for n in 1..=5u64 {
        store.append(&entry(n)).expect("appended");
        assert_eq!(
            store
                .write_checkpoint(format!("s{}", n + 1).as_bytes())
                .expect("written"),
            n + 1
        );
    }
    store.append(&entry(6)).expect("appended");
    let kept: Vec<(u64, u64, u64, u64)> = store
        .checkpoints()
        .expect("read")
        .iter()
        .map(|c| (c.id, c.after_entry, c.entries_after, c.snapshot_bytes))
        .collect();
    assert_eq!(kept, [(4, 3, 3, 2), (5, 4, 2, 2), (6, 5, 1, 2)]);
    let journal = store.recover_from(4).expect("kept");
    assert_eq!(journal.start, b"s4");
    assert_eq!(journal.entries, [entry(4), entry(5), entry(6)]);
    assert!(matches!(
        store.recover_from(3),
        Err(spool_postgres::PgStoreError::NoCheckpoint(3))
    ));
    let sizes = store.sizes().expect("sizes");
    assert_eq!(
        (sizes.entries, sizes.checkpoints, sizes.snapshot_bytes),
        (3, 3, 6)
    );
    assert!(sizes.file_bytes > 0);
    store.verify().expect("checks out");
}

/// The maker is recorded once and kept across connections; a read-only handle reads
/// it and cannot claim.
#[test]
fn the_maker_is_recorded_once() {
    let url = database("maker_recorded_once");
    let store = PgStore::connect(&url).expect("connects");
    assert_eq!(store.maker().expect("read"), None);
    assert_eq!(store.claim_maker("run").expect("claimed"), "run");
    assert_eq!(store.claim_maker("demo").expect("claimed"), "run");
    assert_eq!(
        store
            .claim_maker(" ")
            .expect_err("an empty name")
            .to_string(),
        "the store cannot do this: a store's maker must be named: the name given is empty"
    );
    drop(store);
    let reader = PgStore::connect_read_only(&url).expect("connects");
    assert_eq!(reader.maker().expect("read").as_deref(), Some("run"));
}
