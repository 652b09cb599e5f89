//! Memory per waiting task: spool against tokio.
//!
//! A counting global allocator (wrapping the system allocator) keeps the bytes live at
//! any moment, as requested by `Layout::size()`; the allocator's own per-block overhead
//! is not counted, for either side.
//!
//! - spool: the core `Scheduler` (FIFO, no trace recording). 1,000,000 tasks are
//!   submitted and stepped; each makes one LLM request carrying a number and waits. The
//!   outbound requests are drained and dropped — in a real run the executor holds them,
//!   not the scheduler — but the scheduler keeps its own copy of each in-flight payload
//!   in the task's slot, and that is counted as spool's cost.
//! - tokio: a current-thread runtime with 1,000,000 spawned tasks, each awaiting a
//!   `oneshot::Receiver` whose sender is never used. The senders are kept in a `Vec`; the
//!   `Vec`'s buffer (one pointer per task) is subtracted, the channel's shared state is
//!   counted as tokio's cost (it is what the task waits on).
//!
//! Both sides subtract the task's own state: `size_of` of the spool task struct (boxed by
//! `NewTask::new`) and `size_of_val` of the tokio future (stored inline in tokio's task
//! cell). Each side is measured twice: tasks added in batches of 1,024 that are stepped
//! before the next batch (steady state: run queue and outbox stay small), and all at
//! once (a burst: the run queue and outbox grow to a million entries, then drain and
//! give back what they grew by).
//!
//! spool's task table is a `Vec`-backed slab that grows by a quarter when full, so its
//! cost per task depends on how full the last growth step is; a second count, 600,000
//! tasks, lands at another point of that cycle.
//!
//! Run with `cargo bench --bench memory`. Without `--bench` (`cargo test --benches`) it
//! runs with 10,000 and 6,000 tasks as a quick check; those figures are not the
//! measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::mem::{size_of, size_of_val};
use std::sync::atomic::{AtomicUsize, Ordering};

use spool::{
    AgentTask, Config, NewTask, OutboundRequest, QueueEntry, Request, Scheduler, Step, TaskContext,
    Time, Value,
};
use tokio::sync::oneshot;

/// Counts the bytes live through the system allocator.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the counter is only arithmetic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is valid per the caller.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Tasks added and stepped together in the steady-state measurement.
const BATCH: usize = 1024;

/// A spool task that asks once and waits for an answer that never comes. Its state is
/// the same as the step benchmark's task: a step counter and a running sum.
#[derive(Debug, Default)]
struct Waiter {
    step: u64,
    sum: u64,
}

impl AgentTask for Waiter {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(answer) = cx.take_answer() {
            self.sum += answer.result.ok().and_then(|v| v.as_u64()).unwrap_or(0);
            return Step::done(self.sum);
        }
        cx.llm(Value::from(self.step));
        self.step += 1;
        Step::Wait
    }
}

/// One measurement's figures.
struct Figures {
    tasks: usize,
    /// Live bytes the waiting tasks account for, before subtracting anything.
    total: usize,
    /// The bytes per task subtracted as the task's own state.
    own: usize,
    /// Other bytes subtracted in all (tokio: the `Vec` of senders).
    other: usize,
}

impl Figures {
    fn per_task_gross(&self) -> f64 {
        (self.total - self.other) as f64 / self.tasks as f64
    }

    fn per_task_net(&self) -> f64 {
        self.per_task_gross() - self.own as f64
    }
}

/// `tasks` spool tasks, each waiting on one unanswered request; added `batch` at a time.
fn spool(tasks: usize, batch: usize) -> Figures {
    let before = live();
    let now = Time::ZERO;
    let mut sched = Scheduler::new(Config::new());
    let mut submitted = 0;
    while submitted < tasks {
        let n = batch.min(tasks - submitted);
        for _ in 0..n {
            sched
                .submit(now, NewTask::new(Waiter::default()))
                .expect("the table has room");
        }
        submitted += n;
        while sched.step(now).is_some() {}
        // The executor would hold these; here nobody does.
        while let Some(out) = sched.poll_request() {
            drop(out);
        }
    }
    let after = live();
    assert_eq!(sched.live_len(), tasks);
    assert_eq!(
        sched.in_flight_len(),
        tasks,
        "every task has one request in flight"
    );
    assert_eq!(sched.ready_len(), 0);
    assert_eq!(sched.stats().requests, tasks as u64);
    let figures = Figures {
        tasks,
        total: after - before,
        own: size_of::<Waiter>(),
        other: 0,
    };
    drop(sched);
    figures
}

/// Tasks spawned that have been polled at least once (and so are waiting).
static POLLED: AtomicUsize = AtomicUsize::new(0);

/// `tasks` tokio tasks, each awaiting a oneshot that is never sent; spawned `batch` at a
/// time, each batch polled once before the next is spawned.
fn tokio(tasks: usize, batch: usize) -> Figures {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    POLLED.store(0, Ordering::Relaxed);
    rt.block_on(async {
        let mut own = 0;
        let before = live();
        let mut senders = Vec::with_capacity(tasks);
        let senders_bytes = senders.capacity() * size_of::<oneshot::Sender<Value>>();
        let mut spawned = 0;
        while spawned < tasks {
            let n = batch.min(tasks - spawned);
            for _ in 0..n {
                let (tx, rx) = oneshot::channel::<Value>();
                senders.push(tx);
                let task = async move {
                    POLLED.fetch_add(1, Ordering::Relaxed);
                    let _ = rx.await;
                };
                own = size_of_val(&task);
                drop(tokio::spawn(task));
            }
            spawned += n;
            while POLLED.load(Ordering::Relaxed) < spawned {
                tokio::task::yield_now().await;
            }
        }
        let after = live();
        assert_eq!(POLLED.load(Ordering::Relaxed), tasks);
        assert_eq!(rt_metrics_alive(), tasks);
        drop(senders);
        Figures {
            tasks,
            total: after - before,
            own,
            other: senders_bytes,
        }
    })
}

/// Tasks alive on the current runtime.
fn rt_metrics_alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

fn print(name: &str, mode: &str, f: &Figures) {
    println!(
        "{name:<5} {mode:<34} {:>9} tasks: {:>7.1} MB live, {:>6.1} B/task gross, \
         own state {:>3} B/task, {:>6.1} B/task on top of the task's own state",
        f.tasks,
        (f.total - f.other) as f64 / 1e6,
        f.per_task_gross(),
        f.own,
        f.per_task_net(),
    );
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (tasks, between) = if bench {
        (1_000_000, 600_000)
    } else {
        (10_000, 6_000)
    };
    if !bench {
        println!("quick check with {tasks} tasks; `cargo bench --bench memory` measures 1,000,000");
    }

    println!(
        "sizes: spool Waiter {} B, OutboundRequest {} B, Request {} B, QueueEntry {} B, Value {} B",
        size_of::<Waiter>(),
        size_of::<OutboundRequest>(),
        size_of::<Request>(),
        size_of::<QueueEntry>(),
        size_of::<Value>(),
    );

    // Warm up both once, so one-off allocations (thread-locals, lazy statics) are not
    // counted against whichever goes first.
    let _ = spool(BATCH, BATCH);
    let _ = tokio(BATCH, BATCH);

    let steady = spool(tasks, BATCH);
    let burst = spool(tasks, tasks);
    let tokio_steady = tokio(tasks, BATCH);
    let tokio_burst = tokio(tasks, tasks);
    // Just past a power of two (2^19 = 524,288 for the full run): the task table's
    // buffer has doubled and is mostly empty.
    let spool_between = spool(between, BATCH);
    let tokio_between = tokio(between, BATCH);

    print("spool", "steady (batches of 1,024)", &steady);
    print("spool", "burst (all submitted, then stepped)", &burst);
    print("spool", "steady, another count", &spool_between);
    print("tokio", "steady (batches of 1,024)", &tokio_steady);
    print("tokio", "burst (all spawned, then polled)", &tokio_burst);
    print("tokio", "steady, same count", &tokio_between);
    println!(
        "tokio: subtracted {:.1} B/task for the Vec of oneshot senders kept alive",
        tokio_steady.other as f64 / tokio_steady.tasks as f64,
    );
    println!(
        "memory per waiting task on top of its own state ({tasks} tasks): spool {:.0} B \
         (target < 256), tokio {:.0} B, spool/tokio {:.2} [steady]; burst: spool {:.0} B, \
         tokio {:.0} B; at {between} tasks: spool {:.0} B, tokio {:.0} B",
        steady.per_task_net(),
        tokio_steady.per_task_net(),
        steady.per_task_net() / tokio_steady.per_task_net(),
        burst.per_task_net(),
        tokio_burst.per_task_net(),
        spool_between.per_task_net(),
        tokio_between.per_task_net(),
    );
}
