//! Memory that must come back: what a restore allocates is freed with the restored
//! scheduler, however many snapshots are restored and whatever type names they carry.
//!
//! A binary of its own: it installs a counting global allocator. The count is kept per
//! thread (the test's), so the harness's own threads do not move it.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use serde_json::json;
use spool::{Config, NewTask, Scheduler, Snapshot, Step, TaskRegistry, TaskState, Time, task_fn};

/// Counts, per thread, the bytes and blocks live through the system allocator.
struct Counting;

thread_local! {
    /// (bytes, blocks) allocated minus freed by this thread.
    static LIVE: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
}

fn note(bytes: isize, blocks: isize) {
    // `try_with`: the slot may be gone while the thread is being torn down.
    let _ = LIVE.try_with(|live| {
        let (b, n) = live.get();
        live.set((b + bytes, n + blocks));
    });
}

/// The bytes and blocks this thread has live.
fn live() -> (isize, isize) {
    LIVE.with(Cell::get)
}

// SAFETY: every call is forwarded unchanged to `System`; the counter is only arithmetic
// on a const-initialized thread-local, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            note(layout.size() as isize, 1);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            note(layout.size() as isize, 1);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize), -1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is valid per the caller.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            note(new_size as isize - layout.size() as isize, 0);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How many snapshots are restored, and how many ended tasks each holds.
const SNAPSHOTS: usize = 100;
const TASKS: usize = 20;

/// A snapshot of a scheduler whose tasks have all ended, one per name in `names`: the
/// results are kept, with their type names, which no registry needs to know.
fn snapshot_of_results(names: &[&'static str]) -> Vec<u8> {
    let mut scheduler = Scheduler::new(Config::new());
    for name in names {
        let task = NewTask::new(task_fn(name, |_cx| Step::done("ok")));
        scheduler.submit(Time::ZERO, task).unwrap();
    }
    while scheduler.step(Time::ZERO).is_some() {}
    scheduler.snapshot().unwrap().encode().unwrap()
}

/// Restores `bytes` with a registry that knows no type, checks the results came back
/// under their names, and drops it all.
fn restore(bytes: &[u8], names: &[&'static str]) {
    let snapshot = Snapshot::decode(bytes).unwrap();
    let restored = Scheduler::restore(&snapshot, &TaskRegistry::new()).unwrap();
    let rows: Vec<_> = restored
        .tasks()
        .map(|row| (row.type_name.to_string(), row.state))
        .collect();
    let expected: Vec<_> = names
        .iter()
        .map(|name| (name.to_string(), TaskState::Completed(Ok(json!("ok")))))
        .collect();
    assert_eq!(rows, expected);
}

/// Restores snapshots whose ended tasks carry type names no registry knows, each
/// snapshot its own names (as snapshots from many runs, or a fuzzer's inputs, do): the
/// memory live on this thread after each restore is what it was before the first.
#[test]
fn restoring_snapshots_gives_back_all_it_allocated() {
    // The names are made (and kept) before counting: `task_fn` takes `&'static str`.
    let names: Vec<Vec<&'static str>> = (0..=SNAPSHOTS)
        .map(|k| {
            (0..TASKS)
                .map(|i| &*Box::leak(format!("job-{k}-{i}").into_boxed_str()))
                .collect()
        })
        .collect();
    let snapshots: Vec<Vec<u8>> = names
        .iter()
        .map(|names| snapshot_of_results(names))
        .collect();
    // The first restore is a warm-up: what the code allocates once for good (lazily
    // initialized statics) is not what this test is about.
    restore(&snapshots[0], &names[0]);

    let mut after = Vec::with_capacity(SNAPSHOTS);
    let before = live();
    for (bytes, names) in snapshots.iter().zip(&names).skip(1) {
        restore(bytes, names);
        after.push(live());
    }
    let grown: Vec<(isize, isize)> = after
        .iter()
        .map(|(bytes, blocks)| (bytes - before.0, blocks - before.1))
        .collect();
    assert!(
        grown.iter().all(|&growth| growth == (0, 0)),
        "(bytes, blocks) still live after each restore, beyond the {before:?} before: {grown:?}"
    );
}
