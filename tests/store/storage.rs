//! Storage grows with what is new: one agent's long conversation, resent whole on
//! every LLM call and checkpointed after every turn (the worst case), takes a store
//! within a small factor of the conversation's text, where keeping every snapshot
//! whole would take the square of it.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use spool_core::{Kind, NewTask, TaskState};
use spool_runtime::{Runtime, from_fn};
use spool_store::{Store, StoreSizes, WriteStats};

use crate::api::open_without_history;
use crate::tasks::{Chat, llm_answer};

/// What a chat run on a store came to.
#[derive(Debug)]
struct Figures {
    turns: u32,
    /// Bytes of text in the conversation: every user line and every answer.
    new_text: u64,
    /// The store at the end.
    end: StoreSizes,
    /// The most the store held at any turn (chunks and row bytes).
    peak: u64,
    /// What the store wrote over the run.
    written: WriteStats,
    /// The largest snapshot.
    largest_snapshot: u64,
}

/// Runs one chat of `turns` turns (answers of ~200 bytes) on a fresh store with a
/// checkpoint after every loop turn, measuring the store at every LLM call.
fn chat_run(turns: u32) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let store = open_without_history(dir.path().join("chat.spool"));
    let peak = Arc::new(Mutex::new((0u64, 0u64)));
    let llm = {
        let store = store.clone();
        let peak = peak.clone();
        from_fn(move |request| {
            let sizes = store.sizes().unwrap();
            let largest = store
                .checkpoints()
                .unwrap()
                .iter()
                .map(|c| c.snapshot_bytes)
                .max()
                .unwrap_or(0);
            let mut peak = peak.lock().unwrap();
            peak.0 = peak.0.max(sizes.stored());
            peak.1 = peak.1.max(largest);
            Ok(llm_answer(&request.request.payload, 200))
        })
    };
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, llm)
        .journal(store.clone())
        .checkpoint_every(1)
        .build();
    let id = runtime.submit(NewTask::new(Chat::new(turns))).unwrap().id;
    runtime.run_until_idle();
    assert_eq!(runtime.journal_error(), None);
    let Some(TaskState::Completed(Ok(Value::Array(messages)))) = runtime.task_state(id) else {
        panic!("the chat did not end with its transcript");
    };
    assert_eq!(messages.len(), 2 * turns as usize);
    let new_text: u64 = messages
        .iter()
        .map(|m| m.as_str().map_or(0, str::len) as u64)
        .sum();
    drop(runtime);
    store.verify().unwrap();
    let end = store.sizes().unwrap();
    let (peak, largest_snapshot) = *peak.lock().unwrap();
    Figures {
        turns,
        new_text,
        peak: peak.max(end.stored()),
        end,
        written: store.write_stats(),
        largest_snapshot,
    }
}

fn show(f: &Figures) {
    let w = &f.written;
    println!(
        "{} turns: new text {} B; store at the end {} B in {} chunks ({} B of index chunks) + {} B in rows, file {} B; \
         peak {} B; largest snapshot {} B; {} checkpoints and {} entries written: {} B written \
         ({} B of new chunks) where writing each whole takes {} B (snapshots {} B)",
        f.turns,
        f.new_text,
        f.end.chunk_bytes,
        f.end.chunks,
        f.end.index_bytes,
        f.end.row_bytes,
        f.end.file_bytes,
        f.peak,
        f.largest_snapshot,
        w.checkpoints,
        w.entries,
        w.written(),
        w.new_chunk_bytes,
        w.plain(),
        w.snapshot_bytes,
    );
}

/// One agent, 200 turns, the whole conversation in every request and a checkpoint
/// after every turn: at every turn the store holds at most 3× the conversation's
/// text (a snapshot holds it about twice: in the task and in its request in flight),
/// and over the whole run it writes O(new text) — its figure doubles when the
/// conversation doubles, where writing every snapshot whole quadruples.
#[test]
fn a_long_conversation_takes_storage_in_proportion_to_its_new_text() {
    let half = chat_run(100);
    let full = chat_run(200);
    show(&half);
    show(&full);
    for f in [&half, &full] {
        assert!(
            f.peak <= 3 * f.new_text,
            "{} turns: the store held {} B for {} B of text",
            f.turns,
            f.peak,
            f.new_text
        );
        assert!(f.end.stored() <= 3 * f.new_text);
        assert!(f.end.checkpoints <= 2);
        assert!(f.written.checkpoints >= u64::from(f.turns));
    }
    let grows = |of: fn(&Figures) -> u64| of(&full) as f64 / of(&half) as f64;
    let written = grows(|f| f.written.written());
    let plain = grows(|f| f.written.plain());
    let text = grows(|f| f.new_text);
    println!(
        "doubling the conversation: text ×{text:.2}, written ×{written:.2}, written whole ×{plain:.2}"
    );
    assert!(written < 1.25 * text, "written grows ×{written:.2}");
    assert!(plain > 1.75 * text, "snapshots grow ×{plain:.2}");
    assert!(full.written.plain() > 10 * full.written.written());
}

/// Not a check: the figures for `docs/performance.md` (run it with `--release`, see
/// there). Times appending entries and writing checkpoints of a growing conversation.
/// A runtime's run of agents in memory and on a store (with and without checkpoints,
/// and with `Durability::PowerLoss`) moved to `cargo bench --bench durable`, which
/// measures it at 1,000 to 100,000 agents with the in-memory run as its baseline.
#[test]
#[ignore = "a measurement, run by hand with --release"]
fn measure_store_speed() {
    use std::time::Instant;

    use spool_store::{Durability, StoreOptions};

    use crate::api::{answer, tick};
    use crate::tasks::prose;

    for durability in [Durability::Process, Durability::PowerLoss] {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions::new().durability(durability);
        let store = Store::open_with(dir.path().join("speed.spool"), options).unwrap();
        store
            .start_journal(&crate::api::snapshot(1, 10, 1))
            .unwrap();
        let n = if durability == Durability::Process {
            20_000
        } else {
            200
        };
        let started = Instant::now();
        for i in 0..n {
            store.append(&tick(i)).unwrap();
        }
        let small = started.elapsed() / n as u32;
        let big = answer(&prose(3, 4000));
        let started = Instant::now();
        for _ in 0..n / 10 {
            store.append(&big).unwrap();
        }
        let large = started.elapsed() / (n / 10) as u32;
        println!("{durability:?}: append a small entry {small:?}, a 4 kB answer {large:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("chat.spool")).unwrap();
    let mut chat = Chat::new(200);
    let mut scheduler = spool_core::Scheduler::new(spool_core::Config::new());
    scheduler
        .submit(spool_core::Time::ZERO, NewTask::new(chat.clone()))
        .unwrap();
    store
        .start_journal(&scheduler.snapshot().unwrap().encode().unwrap())
        .unwrap();
    let mut spent = std::time::Duration::ZERO;
    let mut last = 0;
    for turn in 0..200 {
        chat.messages.push(format!("user {turn}: go on."));
        chat.messages.push(prose(turn, 200));
        let mut scheduler = spool_core::Scheduler::new(spool_core::Config::new());
        scheduler
            .submit(spool_core::Time::ZERO, NewTask::new(chat.clone()))
            .unwrap();
        let bytes = scheduler.snapshot().unwrap().encode().unwrap();
        last = bytes.len();
        let started = Instant::now();
        store.write_checkpoint(&bytes).unwrap();
        spent += started.elapsed();
    }
    println!(
        "200 checkpoints of a growing conversation (the last {last} B): {:?} each on average",
        spent / 200
    );
}
