//! The scheduler's hot loop on its own, for counting instructions per step.
//!
//! 100 tasks × 2,000 steps on the core `Scheduler`, each step a request answered at once
//! by the driver: the shape of the in-process benchmark, small enough for callgrind.
//! Instruction counts are repeatable on a noisy machine where timings are not:
//!
//! ```sh
//! cargo build --release --example hot_loop
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/hot.out target/release/examples/hot_loop
//! callgrind_annotate --inclusive=yes /tmp/hot.out | head -30
//! ```
//!
//! It prints the steps run; divide callgrind's total by it for instructions per step.
//! With the argument `async`, the same tasks are written as async code (`async_task`
//! awaiting `cx.llm(..)` per step), to count the async adapter's cost.

use std::hint::black_box;

use spool::{
    AgentTask, Config, Kind, NewTask, Request, Response, Scheduler, Step, TaskContext, Time, Value,
    async_task,
};

const TASKS: u64 = 100;
const STEPS: u64 = 2_000;

/// Makes `STEPS` requests, one per poll, taking each answer.
struct Counter {
    step: u64,
}

impl AgentTask for Counter {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(answer) = cx.take_answer() {
            black_box(answer);
        }
        if self.step < STEPS {
            cx.request(Request::new(Kind::Llm, Value::from(self.step)));
            self.step += 1;
            return Step::Wait;
        }
        Step::done(self.step)
    }
}

fn main() {
    let now = Time::ZERO;
    let mut scheduler = Scheduler::new(Config::new());
    let write_async = std::env::args().nth(1).as_deref() == Some("async");
    for _ in 0..TASKS {
        let task = if write_async {
            NewTask::new(async_task("counter", |cx| async move {
                let mut step = 0;
                while step < STEPS {
                    black_box(cx.llm(Value::from(step)).await?);
                    step += 1;
                }
                Ok(Value::from(step))
            }))
        } else {
            NewTask::new(Counter { step: 0 })
        };
        if let Err(e) = scheduler.submit(now, task) {
            eprintln!("submit failed: {e}");
            return;
        }
    }
    while scheduler.step(now).is_some() {
        while let Some(out) = scheduler.poll_request() {
            let answer = black_box(out.request.payload.into_value());
            let _ = scheduler.handle_response(now, Response::ok(out.key, answer));
        }
    }
    println!("{} steps", scheduler.stats().answers);
}
