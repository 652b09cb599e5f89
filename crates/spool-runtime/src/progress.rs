//! Progress of requests under way (a model's streamed tokens): what executors hand
//! the driver with [`Replier::progress`](spool_core::Replier::progress), passed to the
//! embedder's watchers on the executor's own thread, past the loop: progress is not
//! an input of the scheduler, so it is never journaled and changes no run.
//!
//! Every piece of a request is passed on before its answer leaves for the loop, and
//! the watchers are told when it does ([`Progress::Answered`]), so whatever they
//! publish of the pieces comes before what the loop publishes of the answer.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use spool_core::{Delta, RequestKey, Response};

/// What a progress watcher ([`RuntimeBuilder::on_progress`](crate::RuntimeBuilder::on_progress))
/// is told.
#[derive(Debug)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// A piece of the answer to `key`, as its executor made it.
    Delta {
        /// The request.
        key: RequestKey,
        /// The piece.
        delta: &'a Delta,
    },
    /// The request `key`, which had pieces, has ended: its answer leaves for the loop
    /// (no piece of it comes after this), or the runtime ended it without one (it was
    /// canceled, or failed because its executor died).
    Answered {
        /// The request.
        key: RequestKey,
    },
}

/// A progress watcher.
pub(crate) type Watcher = Arc<dyn Fn(&Progress<'_>) + Send + Sync>;

/// Where the executors' progress goes: the watchers, and the requests that have had
/// pieces but no answer yet.
pub(crate) struct ProgressRoute {
    watchers: Vec<Watcher>,
    live: Mutex<BTreeSet<RequestKey>>,
    /// How many requests are in `live`: answers pass without a lock while it is 0.
    count: AtomicUsize,
}

impl fmt::Debug for ProgressRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressRoute")
            .field("watchers", &self.watchers.len())
            .field("live", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl ProgressRoute {
    /// A route to `watchers`; `None` if there are none (progress is then dropped).
    pub(crate) fn new(watchers: Vec<Watcher>) -> Option<Arc<ProgressRoute>> {
        if watchers.is_empty() {
            return None;
        }
        Some(Arc::new(ProgressRoute {
            watchers,
            live: Mutex::new(BTreeSet::new()),
            count: AtomicUsize::new(0),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<RequestKey>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes a piece of `key`'s answer to every watcher.
    pub(crate) fn delta(&self, key: RequestKey, delta: &Delta) {
        {
            let mut live = self.lock();
            if live.insert(key) {
                self.count.store(live.len(), Ordering::Release);
            }
        }
        let progress = Progress::Delta { key, delta };
        for watcher in &self.watchers {
            watcher(&progress);
        }
    }

    /// Tells the watchers that the answers in `responses` leave for the loop, for those
    /// requests that had pieces. Called before they are sent.
    pub(crate) fn answered(&self, responses: &[Response]) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut ended = Vec::new();
        {
            let mut live = self.lock();
            for response in responses {
                if live.remove(&response.key) {
                    ended.push(response.key);
                }
            }
            self.count.store(live.len(), Ordering::Release);
        }
        for key in ended {
            self.tell_answered(key);
        }
    }

    /// Tells the watchers that `key` ended without an answer from its executor (the
    /// runtime canceled or failed it), if it had pieces: whatever they keep of it is
    /// no longer live.
    pub(crate) fn ended(&self, key: RequestKey) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let removed = {
            let mut live = self.lock();
            let removed = live.remove(&key);
            self.count.store(live.len(), Ordering::Release);
            removed
        };
        if removed {
            self.tell_answered(key);
        }
    }

    fn tell_answered(&self, key: RequestKey) {
        let progress = Progress::Answered { key };
        for watcher in &self.watchers {
            watcher(&progress);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use spool_core::{
        Delta, Executor, Kind, NewTask, OutboundRequest, Replies, Response, TaskState, async_task,
    };

    use super::Progress;
    use crate::run_loop::Runtime;

    /// Streams two pieces of its answer, then answers; or answers in the batch, after
    /// its pieces, when `batched`.
    struct Streams {
        batched: bool,
    }

    impl Executor for Streams {
        fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
            let replier = replies.replier();
            let key = request.key;
            replier.progress(key, Delta::text(0, "Hel"));
            replier.progress(key, Delta::text(1, "lo"));
            let answer = Response::ok(key, json!("Hello"));
            if self.batched {
                replies.send(answer);
            } else {
                replier.send(answer);
            }
        }
    }

    /// What a watcher saw, in order, for a run of one task asking twice.
    fn watched(batched: bool) -> Vec<String> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let watcher = Arc::clone(&seen);
        let mut runtime = Runtime::builder()
            .executor(Kind::Llm, Streams { batched })
            .on_progress(move |progress| {
                let line = match progress {
                    Progress::Delta { key, delta } => {
                        format!("{key} #{} {}", delta.seq, delta.text)
                    }
                    Progress::Answered { key } => format!("{key} answered"),
                };
                watcher.lock().unwrap().push(line);
            })
            .build();
        let id = runtime
            .submit(NewTask::new(async_task("twice", |cx| async move {
                let first = cx.llm(json!("one")).await?;
                let second = cx.llm(json!("two")).await?;
                Ok(json!([first, second]))
            })))
            .unwrap()
            .id;
        runtime.run_until_idle();
        assert_eq!(
            runtime.scheduler().task_state(id),
            Some(TaskState::Completed(Ok(json!(["Hello", "Hello"]))))
        );
        seen.lock().unwrap().clone()
    }

    /// Streams a piece of its answer, then panics, or (`hangs`) answers nothing, not
    /// even when canceled.
    struct StreamsThenStops {
        hangs: bool,
    }

    impl Executor for StreamsThenStops {
        fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
            replies
                .replier()
                .progress(request.key, Delta::text(0, "Hel"));
            assert!(self.hangs, "the executor breaks midway");
        }
    }

    /// A runtime whose executor stops after a piece, with a watcher that writes what
    /// it sees to the channel it returns.
    fn stopping(hangs: bool) -> (Runtime, std::sync::mpsc::Receiver<String>) {
        let (seen, lines) = std::sync::mpsc::channel();
        let seen = Mutex::new(seen);
        let runtime = Runtime::builder()
            .executor(Kind::Llm, StreamsThenStops { hangs })
            .on_progress(move |progress| {
                let line = match progress {
                    Progress::Delta { delta, .. } => format!("#{} {}", delta.seq, delta.text),
                    Progress::Answered { .. } => "answered".to_owned(),
                };
                let _ = seen.lock().unwrap().send(line);
            })
            .build();
        (runtime, lines)
    }

    fn asks_once() -> NewTask {
        NewTask::new(async_task("once", |cx| async move {
            cx.llm(json!("one")).await?;
            Ok(json!("done"))
        }))
    }

    /// A request failed by the runtime because its executor died ends its life for
    /// the watchers as an answer does.
    #[test]
    fn a_request_failed_because_its_executor_died_is_answered_to_the_watchers() {
        let (mut runtime, lines) = stopping(false);
        let id = runtime.submit(asks_once()).unwrap().id;
        runtime.run_until_idle();
        assert!(matches!(
            runtime.scheduler().task_state(id),
            Some(TaskState::Completed(Err(_)))
        ));
        let seen: Vec<String> = lines.try_iter().collect();
        assert_eq!(seen, ["#0 Hel", "answered"]);
    }

    /// A canceled request ends its life for the watchers even if its executor never
    /// answers it.
    #[test]
    fn a_canceled_request_is_answered_to_the_watchers() {
        let (mut runtime, lines) = stopping(true);
        let id = runtime.submit(asks_once()).unwrap().id;
        let handle = runtime.handle();
        let watcher = std::thread::spawn(move || {
            let wait = || lines.recv_timeout(std::time::Duration::from_secs(20));
            let mut seen = vec![wait().unwrap_or_default()];
            handle.cancel(id).unwrap();
            seen.push(wait().unwrap_or_default());
            let _ = handle.shutdown();
            seen
        });
        runtime.run();
        assert_eq!(watcher.join().unwrap(), ["#0 Hel", "answered"]);
    }

    /// Every piece reaches the watcher, in order, and the answer's leaving comes after
    /// them, whether the answer goes through a replier or with the batch.
    #[test]
    fn pieces_reach_the_watcher_before_their_answer_leaves() {
        for batched in [false, true] {
            let seen = watched(batched);
            let id = seen[0].split(':').next().unwrap().to_owned();
            let expected: Vec<String> = [
                "1 #0 Hel",
                "1 #1 lo",
                "1 answered",
                "2 #0 Hel",
                "2 #1 lo",
                "2 answered",
            ]
            .iter()
            .map(|line| format!("{id}:{line}"))
            .collect();
            assert_eq!(seen, expected, "batched: {batched}");
        }
    }
}
