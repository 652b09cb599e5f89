//! The executor adapter: each core [`Executor`] on its own thread(s), fed request
//! batches over a crossbeam channel, its answers carried back to the loop's mailbox.
//!
//! This module knows nothing of the loop: it reports through [`WorkerReport`], which
//! the loop's mailbox type converts from, so the edge runs one way (loop → adapter).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use spool_core::{
    CancelSignal, Delta, Executor, Kind, OutboundRequest, Replies, ReplySink, RequestError,
    RequestKey, Response, Time,
};

use crate::clock::Clock;
use crate::error::RuntimeError;
use crate::progress::ProgressRoute;

/// How many emptied batches of each kind are kept for reuse.
const SPARE_BATCHES: usize = 16;

/// How long dropping the executors waits for their threads to stop; a thread still
/// busy after it is detached.
pub(crate) const JOIN_BOUND: Duration = Duration::from_secs(1);

/// What an executor thread tells the loop.
pub(crate) enum WorkerReport {
    /// Answers, and an emptied request batch for the loop to reuse.
    Answers(Vec<Response>, Vec<OutboundRequest>),
    /// The executor panicked; its thread is gone.
    Died { executor: usize, message: String },
}

/// Messages to an executor thread.
enum ExecMsg {
    /// Requests, and an emptied answer batch for the executor to reuse.
    Batch(Vec<OutboundRequest>, Vec<Response>),
    Cancel(CancelSignal),
    Stop,
}

/// Which requests an executor takes.
#[derive(Clone, Debug)]
pub(crate) enum Route {
    Exact(Kind),
    AllTools,
}

/// Makes the executor of each worker thread.
pub(crate) type Factory = Box<dyn FnMut() -> Box<dyn Executor> + Send>;

/// The runtime's [`ReplySink`]: a [`Replier`](spool_core::Replier)'s answers go to the
/// loop's mailbox, one message each; its progress goes to the watchers, if any.
struct ChannelSink<M> {
    sender: Sender<M>,
    progress: Option<Arc<ProgressRoute>>,
}

impl<M: From<WorkerReport> + Send + 'static> ReplySink for ChannelSink<M> {
    fn send(&self, response: Response) -> bool {
        if let Some(route) = &self.progress {
            route.answered(std::slice::from_ref(&response));
        }
        self.sender
            .send(M::from(WorkerReport::Answers(vec![response], Vec::new())))
            .is_ok()
    }

    fn progress(&self, key: RequestKey, delta: Delta) -> bool {
        match &self.progress {
            Some(route) => {
                route.delta(key, &delta);
                true
            }
            None => false,
        }
    }
}

struct ExecutorEntry {
    name: String,
    sender: Sender<ExecMsg>,
    workers: usize,
    buffer: Vec<OutboundRequest>,
    dead: Option<String>,
}

/// Every executor of a runtime: their routes, their threads, the requests buffered for
/// them, and the emptied batches kept so that steady batching allocates nothing.
pub(crate) struct Executors {
    entries: Vec<ExecutorEntry>,
    routes: Vec<(Route, usize)>,
    spare_requests: Vec<Vec<OutboundRequest>>,
    spare_answers: Vec<Vec<Response>>,
    threads: Vec<JoinHandle<()>>,
    /// Given to each worker, which holds it until it returns.
    exited: Option<Sender<()>>,
    /// Disconnected once every worker has returned.
    exits: Option<Receiver<()>>,
    flush_at: usize,
    /// Where the executors' progress goes, if anyone watches it.
    progress: Option<Arc<ProgressRoute>>,
}

impl fmt::Debug for Executors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.name))
            .finish()
    }
}

impl Executors {
    /// No executors; a buffer is sent once it holds `flush_at` requests.
    pub(crate) fn new(flush_at: usize) -> Executors {
        Executors {
            entries: Vec::new(),
            routes: Vec::new(),
            spare_requests: Vec::new(),
            spare_answers: Vec::new(),
            threads: Vec::new(),
            exited: None,
            exits: None,
            flush_at,
            progress: None,
        }
    }

    /// Sends the progress of the executors started from now on to `route`.
    pub(crate) fn watch_progress(&mut self, route: Option<Arc<ProgressRoute>>) {
        self.progress = route;
    }

    /// Tells the progress watchers that `key` ended without its executor's answer.
    pub(crate) fn ended(&self, key: RequestKey) {
        if let Some(route) = &self.progress {
            route.ended(key);
        }
    }

    /// Starts `workers` threads for one executor, each with an executor from
    /// `factory`, reporting to `inbound` and reading time from `clock`.
    pub(crate) fn start<M>(
        &mut self,
        route: Route,
        name: String,
        workers: usize,
        mut factory: Factory,
        inbound: &Sender<M>,
        clock: Clock,
    ) -> Result<(), RuntimeError>
    where
        M: From<WorkerReport> + Send + 'static,
    {
        let index = self.entries.len();
        let (sender, receiver) = crossbeam_channel::unbounded();
        let sink: Arc<dyn ReplySink> = Arc::new(ChannelSink {
            sender: inbound.clone(),
            progress: self.progress.clone(),
        });
        if self.exited.is_none() {
            let (exited, exits) = crossbeam_channel::bounded(0);
            self.exited = Some(exited);
            self.exits = Some(exits);
        }
        for worker in 0..workers {
            let executor = factory();
            let exited = self.exited.clone();
            let receiver = receiver.clone();
            let inbound = inbound.clone();
            let sink = Arc::clone(&sink);
            let progress = self.progress.clone();
            let thread_name = format!("spool-{name}-{worker}");
            let thread = thread::Builder::new()
                .name(thread_name.clone())
                .spawn(move || {
                    let _exited = exited;
                    let channels = WorkerChannels {
                        rx: receiver,
                        inbound,
                        sink,
                        progress,
                    };
                    worker_thread(index, executor, channels, clock);
                })
                .map_err(|error| RuntimeError::Spawn {
                    thread: thread_name,
                    reason: error.to_string(),
                })?;
            self.threads.push(thread);
        }
        self.entries.push(ExecutorEntry {
            name,
            sender,
            workers,
            buffer: Vec::new(),
            dead: None,
        });
        self.routes.push((route, index));
        Ok(())
    }

    /// The executor that serves `kind`: its own, or else the one for all tools.
    pub(crate) fn route(&self, kind: &Kind) -> Option<usize> {
        for (route, index) in &self.routes {
            if let Route::Exact(k) = route
                && k == kind
            {
                return Some(*index);
            }
        }
        if matches!(kind, Kind::Tool(_)) {
            for (route, index) in &self.routes {
                if matches!(route, Route::AllTools) {
                    return Some(*index);
                }
            }
        }
        None
    }

    /// The error a request routed to a dead executor gets, or `None` if it lives.
    pub(crate) fn died(&self, index: usize) -> Option<RequestError> {
        let entry = self.entries.get(index)?;
        entry
            .dead
            .as_ref()
            .map(|message| RequestError::ExecutorDied {
                kind: entry.name.clone(),
                message: message.clone(),
            })
    }

    /// Buffers a request for its executor; sends the buffer when it is full.
    pub(crate) fn push(&mut self, index: usize, request: OutboundRequest) {
        let Some(entry) = self.entries.get_mut(index) else {
            return;
        };
        entry.buffer.push(request);
        if entry.buffer.len() >= self.flush_at {
            flush_entry(entry, &mut self.spare_requests, &mut self.spare_answers);
        }
    }

    /// Sends a cancel signal, after the requests buffered before it.
    pub(crate) fn cancel(&mut self, index: usize, signal: CancelSignal) {
        let Some(entry) = self.entries.get_mut(index) else {
            return;
        };
        if entry.dead.is_none() {
            flush_entry(entry, &mut self.spare_requests, &mut self.spare_answers);
            let _ = entry.sender.send(ExecMsg::Cancel(signal));
        }
    }

    /// Sends every buffered request.
    pub(crate) fn flush(&mut self) {
        for entry in &mut self.entries {
            flush_entry(entry, &mut self.spare_requests, &mut self.spare_answers);
        }
    }

    /// Marks an executor dead and stops its other workers; returns its name, or `None`
    /// if it was already dead (or unknown).
    pub(crate) fn mark_dead(&mut self, index: usize, message: &str) -> Option<String> {
        let entry = self.entries.get_mut(index)?;
        if entry.dead.is_some() {
            return None;
        }
        entry.dead = Some(message.to_owned());
        entry.buffer.clear();
        for _ in 0..entry.workers {
            let _ = entry.sender.send(ExecMsg::Stop);
        }
        Some(entry.name.clone())
    }

    /// Keeps emptied batches that came back with answers, for reuse.
    pub(crate) fn recycle(&mut self, answers: Vec<Response>, emptied: Vec<OutboundRequest>) {
        if self.spare_answers.len() < SPARE_BATCHES {
            self.spare_answers.push(answers);
        }
        if emptied.capacity() > 0 && self.spare_requests.len() < SPARE_BATCHES {
            self.spare_requests.push(emptied);
        }
    }
}

impl Drop for Executors {
    /// Tells every worker to stop, and waits up to [`JOIN_BOUND`] for them. A worker
    /// still busy after it (a call that hangs) is left to end on its own: the loop is
    /// gone, so its answer goes nowhere, and the request it had out is sent again from
    /// the store at the next start, as after a crash.
    fn drop(&mut self) {
        for entry in &self.entries {
            for _ in 0..entry.workers {
                let _ = entry.sender.send(ExecMsg::Stop);
            }
        }
        // Each worker holds a sender of `exited` until it returns: the channel
        // disconnects when the last has.
        drop(self.exited.take());
        let all_out = match &self.exits {
            Some(exits) => matches!(
                exits.recv_timeout(JOIN_BOUND),
                Err(RecvTimeoutError::Disconnected)
            ),
            None => true,
        };
        if all_out {
            for thread in self.threads.drain(..) {
                let _ = thread.join();
            }
        } else {
            let busy = self.threads.iter().filter(|t| !t.is_finished()).count();
            tracing::warn!(
                busy,
                "executor threads still busy {JOIN_BOUND:?} after the stop; leaving them \
                 (what they had out is sent again at the next start)"
            );
            // Dropping a handle detaches its thread.
            self.threads.clear();
        }
    }
}

fn flush_entry(
    entry: &mut ExecutorEntry,
    spare_requests: &mut Vec<Vec<OutboundRequest>>,
    spare_answers: &mut Vec<Vec<Response>>,
) {
    if entry.buffer.is_empty() || entry.dead.is_some() {
        return;
    }
    if entry.workers <= 1 {
        let next = spare_requests.pop().unwrap_or_default();
        let batch = std::mem::replace(&mut entry.buffer, next);
        let spare = spare_answers.pop().unwrap_or_default();
        let _ = entry.sender.send(ExecMsg::Batch(batch, spare));
        return;
    }
    // Split across the pool so every worker gets a share.
    let chunk = entry.buffer.len().div_ceil(entry.workers);
    let mut rest = std::mem::take(&mut entry.buffer);
    while !rest.is_empty() {
        let tail = rest.split_off(chunk.min(rest.len()));
        let spare = spare_answers.pop().unwrap_or_default();
        let _ = entry.sender.send(ExecMsg::Batch(rest, spare));
        rest = tail;
    }
}

/// What a worker thread talks through: its requests, the loop's mailbox, the sink of
/// its repliers and the progress route.
struct WorkerChannels<M> {
    rx: Receiver<ExecMsg>,
    inbound: Sender<M>,
    sink: Arc<dyn ReplySink>,
    progress: Option<Arc<ProgressRoute>>,
}

fn worker_thread<M: From<WorkerReport>>(
    index: usize,
    mut executor: Box<dyn Executor>,
    channels: WorkerChannels<M>,
    clock: Clock,
) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        worker_loop(executor.as_mut(), &channels, clock)
    }));
    let inbound = &channels.inbound;
    if let Err(panic) = result {
        let message = if let Some(s) = panic.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = panic.downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic with a payload that is not text".to_owned()
        };
        let _ = inbound.send(M::from(WorkerReport::Died {
            executor: index,
            message,
        }));
    }
}

fn worker_loop<M: From<WorkerReport>>(
    executor: &mut dyn Executor,
    channels: &WorkerChannels<M>,
    clock: Clock,
) {
    let (rx, inbound, sink) = (&channels.rx, &channels.inbound, &channels.sink);
    let mut batch = Vec::new();
    let mut emptied = Vec::new();
    let mut next_poll: Option<Time> = None;
    loop {
        // A wake-up too far ahead for the monotonic clock is as good as none.
        let msg = match next_poll.and_then(|at| clock.try_instant(at)) {
            Some(at) => match rx.recv_deadline(at) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(msg) => Some(msg),
                Err(_) => return,
            },
        };
        let mut msg = msg;
        if let Some(ExecMsg::Batch(_, spare)) = &mut msg
            && batch.capacity() == 0
        {
            batch = std::mem::take(spare);
        }
        let mut replies = Replies::new(clock.now(), &mut batch, sink);
        match msg {
            Some(ExecMsg::Batch(mut requests, _)) => {
                for request in requests.drain(..) {
                    executor.execute(request, &mut replies);
                }
                emptied = requests;
            }
            Some(ExecMsg::Cancel(signal)) => executor.cancel(signal, &mut replies),
            Some(ExecMsg::Stop) => return,
            None => {}
        }
        next_poll = executor.poll(clock.now(), &mut replies);
        if !batch.is_empty() {
            if let Some(route) = &channels.progress {
                route.answered(&batch);
            }
            let answers =
                WorkerReport::Answers(std::mem::take(&mut batch), std::mem::take(&mut emptied));
            if inbound.send(M::from(answers)).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};
    use std::thread;
    use std::time::Duration;

    use serde_json::json;
    use spool_core::{Kind, NewTask, Step, from_fn, task_fn};

    use crate::run_loop::Runtime;

    /// A runtime whose model call never returns (until the test lets it go) drops
    /// within the bound: the busy thread is left, not joined.
    #[test]
    fn dropping_the_runtime_does_not_wait_for_a_call_that_hangs() {
        let (called, calls) = mpsc::channel();
        let (release, released) = crossbeam_channel::bounded::<()>(1);
        let mut runtime = Runtime::builder()
            .executor(
                Kind::Llm,
                from_fn(move |_| {
                    let _ = called.send(());
                    let _ = released.recv();
                    Ok(json!("late"))
                }),
            )
            .build();
        let mut asked = false;
        runtime
            .submit(NewTask::new(task_fn("hangs", move |cx| {
                if !asked {
                    asked = true;
                    cx.llm(json!("hello"));
                    return Step::Wait;
                }
                Step::done("answered")
            })))
            .unwrap();
        let handle = runtime.handle();
        thread::spawn(move || {
            // The call is under way: stop the loop.
            calls.recv().unwrap();
            let _ = handle.shutdown();
        });
        runtime.run();
        // If dropping waits for the call, the watchdog lets the call go after 30 s
        // (so that the test ends) and says so.
        let fired = Arc::new(AtomicBool::new(false));
        let (dropped, done) = mpsc::channel::<()>();
        let watchdog = {
            let fired = Arc::clone(&fired);
            thread::spawn(move || {
                if done.recv_timeout(Duration::from_secs(30)).is_err() {
                    fired.store(true, Ordering::SeqCst);
                    let _ = release.send(());
                }
            })
        };
        drop(runtime);
        let _ = dropped.send(());
        watchdog.join().unwrap();
        assert!(
            !fired.load(Ordering::SeqCst),
            "dropping the runtime waited for the call that hangs"
        );
    }
}
