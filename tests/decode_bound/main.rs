//! Bounded decoding: decoding bad bytes never holds more than a small
//! multiple of its input, and fails with a typed error, never a panic.
//!
//! Real encodings — a snapshot of a scheduler with a few tasks of each sort, a journal
//! of a short run, each of the journal's entries, a task's saved state — have each
//! payload byte changed in turn (several ways), with the envelope's checksum made right
//! again so that the payload reaches postcard. Each mutant is decoded (and, where it
//! decodes, restored or rebuilt) under a counting allocator, and the most bytes held at
//! once during the decode is checked against the input's length.
//!
//! A binary of its own: it installs a counting global allocator. The count is kept per
//! thread (the test's), so the harness's own threads do not move it.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool::{
    AgentTask, AsyncTask, Config, Cx, HEADER_LEN, Journal, JournalEntry, NewTask, Outcome, Request,
    Response, SavedTask, Scheduler, Snapshot, Step, TaskContext, TaskRegistry, Time,
};

// ---------------------------------------------------------------------------------------
// The counting allocator
// ---------------------------------------------------------------------------------------

/// Counts, per thread, the bytes live through the system allocator, and the most live
/// since the peak was last reset.
struct Counting;

thread_local! {
    /// (bytes live, most bytes live since the last reset), this thread's.
    static LIVE: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
}

fn note(bytes: isize) {
    // `try_with`: the slot may be gone while the thread is being torn down.
    let _ = LIVE.try_with(|live| {
        let (now, peak) = live.get();
        let now = now + bytes;
        live.set((now, peak.max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to `System`; the counter is only arithmetic
// on a const-initialized thread-local, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            note(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            note(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is valid per the caller.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns what it returned and the most bytes it held at once beyond
/// what was live when it started (what it returns included, until it returns).
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.with(|live| {
        let (now, _) = live.get();
        live.set((now, now));
        now
    });
    let out = f();
    let peak = LIVE.with(|live| live.get().1);
    (out, (peak - start).max(0) as usize)
}

// ---------------------------------------------------------------------------------------
// The bound
// ---------------------------------------------------------------------------------------

/// Bytes a decode may hold per byte of input.
///
/// Measured (the report is printed with `--nocapture`): the valid snapshot here (569
/// bytes) decodes holding 5.2× its length and the valid journal (433 bytes) 7.3×, as
/// records are larger in memory than in postcard; a mutant holds what it decoded
/// before it failed, its collections grown by doubling, at worst 7.2× (snapshot) and
/// 7.4× (journal). Decoding and restoring the snapshot holds 18.6× for the valid one
/// and 18.8× at worst (the restored tasks, an async task replayed, are the bulk).
/// Before decoding was bounded, one changed length prefix made the snapshot's decoder
/// hold 154× (88 kB) and the journal's 53×, room for elements never there.
///
/// 16× is about twice the worst decode: room for one more doubling, and a tenth of
/// what an unbounded length prefix reached.
const PER_INPUT_BYTE: usize = 16;
/// Bytes a decode may hold whatever its input: small allocations that do not grow
/// with it (an error's message, a collection's first four slots, an entry's task
/// rebuilt, a new scheduler's tables: restoring an empty snapshot holds 483 bytes).
const CONSTANT: usize = 4 * 1024;

fn bound(input: usize) -> usize {
    PER_INPUT_BYTE * input + CONSTANT
}

// ---------------------------------------------------------------------------------------
// Sources: real encodings
// ---------------------------------------------------------------------------------------

/// An explicit task whose state has a list, a map and text: asks once per topic.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Surveyor {
    topics: Vec<String>,
    answers: std::collections::BTreeMap<String, i64>,
    asked: Option<usize>,
}

impl AgentTask for Surveyor {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(i) = self.asked.take() {
            let answer = cx.take_answer().and_then(|a| a.result.ok());
            let value = answer.and_then(|v| v.as_i64()).unwrap_or(0);
            self.answers.insert(self.topics[i].clone(), value);
        }
        let next = self.answers.len();
        match self.topics.get(next) {
            Some(topic) => {
                cx.request(Request::llm(json!({ "topic": topic })).with_tokens(5));
                self.asked = Some(next);
                Step::Wait
            }
            None => Step::done(json!(self.answers)),
        }
    }

    fn type_name(&self) -> &'static str {
        "surveyor"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

fn surveyor(topics: &[&str]) -> Surveyor {
    Surveyor {
        topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        answers: Default::default(),
        asked: None,
    }
}

/// An async task saved by replay: asks twice, sleeps between, asks a tool.
async fn researcher(cx: Cx, input: Value) -> Outcome {
    let first = cx.llm(json!({ "q": input })).await?;
    cx.sleep(Duration::from_millis(250)).await;
    let second = cx.llm(json!({ "q": first })).await?;
    let tool = cx.tool("search", json!([first, second])).await?;
    Ok(json!({ "result": tool }))
}

fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_serde::<Surveyor>("surveyor")
        .with_async("researcher", researcher)
}

/// Answers every request that is out with its request number, then steps until idle.
fn answer_all(s: &mut Scheduler, now: Time) {
    let mut out = Vec::new();
    while let Some(request) = s.poll_request() {
        out.push(request.key);
    }
    for key in out {
        let _ = s.handle_response(now, Response::ok(key, json!(key.number())));
    }
    while s.step(now).is_some() {}
}

/// A scheduler with a few tasks of each sort, part-way through, recording its journal
/// from the start; and that journal.
fn small_run() -> (Scheduler, Journal) {
    let mut s = Scheduler::new(Config::new());
    let mut journal = Journal::starting_from(&s).unwrap();
    s.record_journal(true);
    let now = Time::ZERO;
    s.submit(now, NewTask::new(surveyor(&["rust", "serde", "postcard"])))
        .unwrap();
    s.submit(
        now,
        NewTask::new(surveyor(&["alpha", "beta"])).agent("reviewer"),
    )
    .unwrap();
    s.submit(
        now,
        NewTask::new(AsyncTask::replayable(
            "researcher",
            json!("bounded decoding"),
            researcher,
        )),
    )
    .unwrap();
    s.submit(
        now,
        NewTask::new(AsyncTask::replayable(
            "researcher",
            json!([1, 2, 3]),
            researcher,
        ))
        .agent("reviewer"),
    )
    .unwrap();
    while s.step(now).is_some() {}
    answer_all(&mut s, now);
    // Leave the second round of questions out with the executors.
    while s.step(now).is_some() {}
    while let Some(entry) = s.poll_journal() {
        journal.entries.push(entry);
    }
    (s, journal)
}

// ---------------------------------------------------------------------------------------
// Mutation
// ---------------------------------------------------------------------------------------

/// A change to one byte.
type Mutation = fn(u8) -> u8;

/// The ways each byte is changed: low bit, high bit, all bits, and set to 0xFF (the
/// largest one-byte step of a varint, which continues it).
const MUTATIONS: [(&str, Mutation); 4] = [
    ("^0x01", |b| b ^ 0x01),
    ("^0x80", |b| b ^ 0x80),
    ("^0xFF", |b| b ^ 0xFF),
    ("=0xFF", |_| 0xFF),
];

/// Every mutant of `bytes` that changes one byte at or after `from`, with `fix`
/// applied (an envelope's checksum made right again), skipping those equal to the
/// original.
fn mutants(bytes: &[u8], from: usize, fix: impl Fn(&mut [u8])) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for i in from..bytes.len() {
        for (name, mutate) in MUTATIONS {
            let mut m = bytes.to_vec();
            m[i] = mutate(m[i]);
            if m[i] == bytes[i] {
                continue;
            }
            fix(&mut m);
            out.push((format!("byte {i} {name}"), m));
        }
    }
    out
}

/// Sets an envelope's crc32 to its payload's.
fn fix_crc(bytes: &mut [u8]) {
    let crc = crc32(&bytes[HEADER_LEN..]);
    bytes[18..22].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32 (IEEE), as the envelope uses.
fn crc32(payload: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in payload {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

// ---------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------

/// What the mutants of one source came to.
#[derive(Debug, Default)]
struct Report {
    mutants: usize,
    rejected: usize,
    /// The valid input's peak.
    valid_peak: usize,
    /// The worst mutant: its peak and name.
    worst: (usize, String),
    problems: Vec<String>,
}

impl Report {
    fn ratio(peak: usize, input: usize) -> f64 {
        peak as f64 / input as f64
    }

    fn print(&self, what: &str, input: usize) {
        println!(
            "{what}: {input} bytes, {} mutants ({} rejected); valid peak {} B ({:.1}x), worst mutant {} B ({:.1}x, {})",
            self.mutants,
            self.rejected,
            self.valid_peak,
            Report::ratio(self.valid_peak, input),
            self.worst.0,
            Report::ratio(self.worst.0, input),
            self.worst.1,
        );
    }

    fn assert_clean(&self, what: &str, input: usize) {
        self.print(what, input);
        assert!(
            self.problems.is_empty(),
            "{what}: {} problems, the first: {:#?}",
            self.problems.len(),
            &self.problems[..self.problems.len().min(10)]
        );
    }
}

/// Decodes the valid input and each mutant with `decode` (which returns whether the
/// input was rejected with a typed error), checking no panic and the peak bound.
fn check(
    original: &[u8],
    mutants: Vec<(String, Vec<u8>)>,
    decode: impl Fn(&[u8]) -> bool,
) -> Report {
    let mut report = Report::default();
    let (rejected, peak) = peak_of(|| decode(original));
    assert!(!rejected, "the valid input decodes");
    report.valid_peak = peak;
    assert!(
        peak <= bound(original.len()),
        "the valid input holds {peak} bytes"
    );
    for (name, bytes) in mutants {
        report.mutants += 1;
        let (outcome, peak) = peak_of(|| catch_unwind(AssertUnwindSafe(|| decode(&bytes))));
        match outcome {
            Ok(rejected) => report.rejected += usize::from(rejected),
            Err(_) => report.problems.push(format!("{name}: panicked")),
        }
        if peak > report.worst.0 {
            report.worst = (peak, name.clone());
        }
        if peak > bound(bytes.len()) {
            report.problems.push(format!(
                "{name}: held {peak} bytes for {} of input ({:.1}x)",
                bytes.len(),
                Report::ratio(peak, bytes.len())
            ));
        }
    }
    report
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

/// A snapshot with each payload byte changed, its checksum made right: decoding (and
/// restoring what decodes) stays within the bound, and every failure is typed.
#[test]
fn mutated_snapshots_decode_within_the_bound() {
    let (s, _) = small_run();
    let bytes = s.snapshot().unwrap().encode().unwrap();
    let registry = registry();
    let report = check(&bytes, mutants(&bytes, HEADER_LEN, fix_crc), |b| {
        match Snapshot::decode(b) {
            Err(_) => true,
            // A restore's error is typed (a `RestoreError`); whatever it says, the
            // bytes were not refused by the decoder.
            Ok(snapshot) => {
                let _ = Scheduler::restore(&snapshot, &registry);
                false
            }
        }
    });
    report.assert_clean("snapshot", bytes.len());
}

/// The decode alone, without the restore: a decoder's own bound.
#[test]
fn mutated_snapshots_alone_decode_within_the_bound() {
    let (s, _) = small_run();
    let bytes = s.snapshot().unwrap().encode().unwrap();
    let report = check(&bytes, mutants(&bytes, HEADER_LEN, fix_crc), |b| {
        Snapshot::decode(b).is_err()
    });
    report.assert_clean("snapshot decode", bytes.len());
}

/// A checkpoint in parts: its header with each payload byte changed (checksum made
/// right), and each task row with each byte changed (rows carry no checksum of their
/// own; a store checks them). Putting them together stays within the bound of the
/// bytes given, and every failure is typed.
#[test]
fn mutated_checkpoint_parts_decode_within_the_bound() {
    let (mut s, _) = small_run();
    let parts = s.snapshot_changes().unwrap();
    assert!(parts.full && parts.rows.len() > 1);
    let rows_len: usize = parts.rows.iter().map(|(_, r)| r.len()).sum();
    let rows = || parts.rows.iter().map(|(id, r)| (*id, r.as_slice()));
    let report = check(
        &parts.header,
        mutants(&parts.header, HEADER_LEN, fix_crc),
        |header| Snapshot::from_parts(header, rows()).is_err(),
    );
    // The rows are input too: the bound is on the header and rows given.
    report.assert_clean(
        "checkpoint header (with its rows)",
        parts.header.len() + rows_len,
    );
    for (index, (id, row)) in parts.rows.iter().enumerate() {
        let report = check(row, mutants(row, 0, |_| {}), |damaged| {
            let all = parts
                .rows
                .iter()
                .enumerate()
                .map(|(i, (rid, r))| (*rid, if i == index { damaged } else { r.as_slice() }));
            Snapshot::from_parts(&parts.header, all).is_err()
        });
        report.assert_clean(
            &format!("task {id}'s row (with the header and other rows)"),
            parts.header.len() + rows_len,
        );
    }
}

/// A journal with each payload byte changed, its checksum made right.
#[test]
fn mutated_journals_decode_within_the_bound() {
    let (_, journal) = small_run();
    assert!(journal.entries.len() > 5);
    let bytes = journal.encode().unwrap();
    let report = check(&bytes, mutants(&bytes, HEADER_LEN, fix_crc), |b| {
        Journal::decode(b).is_err()
    });
    report.assert_clean("journal", bytes.len());
}

/// Each journal entry's bytes with each byte changed; a submission that decodes is
/// rebuilt through the registry (an async task's saved log is postcard too).
#[test]
fn mutated_journal_entries_decode_within_the_bound() {
    let (_, journal) = small_run();
    let registry = registry();
    let mut worst = (0.0f64, String::new());
    for (n, entry) in journal.entries.iter().enumerate() {
        let bytes = entry.to_bytes().unwrap();
        let report = check(
            &bytes,
            mutants(&bytes, 0, |_| {}),
            |b| match JournalEntry::from_bytes(b) {
                Err(_) => true,
                Ok(JournalEntry::Submit { task, .. }) => {
                    let _ = task.restore(&registry);
                    false
                }
                Ok(JournalEntry::SubmitAll { tasks, .. }) => {
                    for task in tasks {
                        let _ = task.restore(&registry);
                    }
                    false
                }
                Ok(_) => false,
            },
        );
        let ratio = Report::ratio(report.worst.0, bytes.len());
        if ratio > worst.0 {
            worst = (ratio, format!("entry {n}: {}", report.worst.1));
        }
        report.assert_clean(&format!("journal entry {n}"), bytes.len());
    }
    println!("journal entries: worst {:.1}x ({})", worst.0, worst.1);
}

/// A task's saved state (serde's JSON), each byte changed, decoded through the
/// registry's decoder.
#[test]
fn mutated_task_states_decode_within_the_bound() {
    let state = surveyor(&["one", "two", "three", "four"]);
    let SavedTask::State(bytes) = state.save().unwrap() else {
        panic!("a serde task saves its state");
    };
    let report = check(&bytes, mutants(&bytes, 0, |_| {}), |b| {
        SavedTask::decode_serde::<Surveyor>(b).is_err()
    });
    report.assert_clean("task state", bytes.len());
}
