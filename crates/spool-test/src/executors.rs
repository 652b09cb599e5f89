//! Real executors under virtual time: the core's [`Executor`] contract driven by
//! `TestScheduler` instead of threads. Requests reach an executor as they leave the
//! scheduler, its answers come back at the current virtual time, and its `poll` is
//! called with virtual time, again whenever the wake-up it asked for comes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use spool_core::{
    CancelSignal, Executor, Kind, OutboundRequest, Replies, ReplySink, Response, Time,
};

/// Answers sent later through a `Replier` (from any thread), kept until the test
/// scheduler next steps.
#[derive(Default)]
struct LateAnswers(Mutex<Vec<Response>>);

impl LateAnswers {
    fn lock(&self) -> MutexGuard<'_, Vec<Response>> {
        // A sender that panicked mid-push leaves a whole vector behind: read on.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ReplySink for LateAnswers {
    fn send(&self, response: Response) -> bool {
        self.lock().push(response);
        true
    }
}

/// One kind's real executor, with what decides when it is polled next.
struct Served {
    executor: Box<dyn Executor>,
    /// The wake-up the executor's last `poll` asked for.
    wake: Option<Time>,
    /// Given a request or a signal since its last `poll`.
    touched: bool,
}

/// The real executors of a test scheduler, by kind (ordered, so that they are polled
/// in the same order on every run).
pub(crate) struct Executors {
    served: BTreeMap<Kind, Served>,
    late: Arc<LateAnswers>,
    sink: Arc<dyn ReplySink>,
}

impl fmt::Debug for Executors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.served.iter().map(|(kind, served)| (kind, served.wake)))
            .finish()
    }
}

impl Default for Executors {
    fn default() -> Self {
        let late = Arc::new(LateAnswers::default());
        let sink: Arc<dyn ReplySink> = late.clone();
        Executors {
            served: BTreeMap::new(),
            late,
            sink,
        }
    }
}

impl Executors {
    pub(crate) fn insert(&mut self, kind: Kind, executor: Box<dyn Executor>) {
        self.served.insert(
            kind,
            Served {
                executor,
                wake: None,
                touched: false,
            },
        );
    }

    pub(crate) fn remove(&mut self, kind: &Kind) {
        self.served.remove(kind);
    }

    pub(crate) fn serves(&self, kind: &Kind) -> bool {
        self.served.contains_key(kind)
    }

    /// Hands `request` to its executor at `now`; answers given at once go to `answers`.
    pub(crate) fn execute(
        &mut self,
        now: Time,
        request: OutboundRequest,
        answers: &mut Vec<Response>,
    ) {
        let Some(served) = self.served.get_mut(&request.request.kind) else {
            return;
        };
        let mut replies = Replies::new(now, answers, &self.sink);
        served.executor.execute(request, &mut replies);
        served.touched = true;
    }

    /// Hands a cancel signal to the executor of its kind, if there is one.
    pub(crate) fn cancel(&mut self, now: Time, signal: CancelSignal, answers: &mut Vec<Response>) {
        let Some(served) = self.served.get_mut(&signal.kind) else {
            return;
        };
        let mut replies = Replies::new(now, answers, &self.sink);
        served.executor.cancel(signal, &mut replies);
        served.touched = true;
    }

    /// Polls every executor given work since its last poll or whose wake-up has come,
    /// in kind order, and takes the answers sent later through a `Replier`.
    pub(crate) fn poll(&mut self, now: Time, answers: &mut Vec<Response>) {
        for served in self.served.values_mut() {
            if served.touched || served.wake.is_some_and(|at| at <= now) {
                let mut replies = Replies::new(now, answers, &self.sink);
                served.wake = served.executor.poll(now, &mut replies);
                served.touched = false;
            }
        }
        answers.append(&mut self.late.lock());
    }

    /// The earliest wake-up after `now` an executor asked for. (One at or before `now`
    /// was served by the last `poll`; asking again for the past is not a later event.)
    pub(crate) fn next_wake(&self, now: Time) -> Option<Time> {
        self.served
            .values()
            .filter_map(|served| served.wake)
            .filter(|at| *at > now)
            .min()
    }
}
