//! Cluster-wide request budgets on the executor side: a node's slices of the budgets
//! ([`NodeBudget`]), shared by all its shards, and an executor wrapper that holds a
//! request back until the node's slice has room ([`BudgetedExecutor`]).
//!
//! Each shard's scheduler keeps its own request limits, exact within the shard. A
//! budget set with [`Cluster::set_budget`](spool_postgres::Cluster::set_budget) holds
//! for the whole cluster: every node leases a slice of it
//! ([`Cluster::lease_slice`](spool_postgres::Cluster::lease_slice)) for what it needs
//! now, and starts a request of the kind only while its slice has room — a slot in
//! flight, taken when the request goes to the inner executor and given back when the
//! inner executor answers it or it is canceled; a count of the current minute of
//! PostgreSQL's clock; the request's estimated tokens
//! ([`Request::tokens`](spool_core::Request::tokens)) out of the estimated tokens of the
//! current minute. A request estimated above the kind's whole tokens-per-minute budget
//! counts as the whole budget: it goes alone in a minute, once the node holds the whole
//! minute's budget and has sent nothing in it. Held requests go on in the order they
//! arrived at the executor (FIFO); the shards of a node take free room in the order
//! they ask for it.
//!
//! A background thread renews the node's slices: every third of their ttl, and as soon
//! as (but at most every [`BudgetOptions::renew_every`]) a request waits for room or
//! the node holds room it does not use, which it gives back. A slice the thread could
//! not renew is given up by the node's own monotonic clock a fifth of its ttl before
//! PostgreSQL would let it expire: the node then starts no request of the kind until
//! a renewal succeeds.
//!
//! ```no_run
//! use spool_cluster::budget::{BudgetOptions, BudgetedExecutor, NodeBudget};
//!
//! let url = "postgres://spool@127.0.0.1:5432/agents";
//! let budget = NodeBudget::start(url, "node-a", BudgetOptions::new())?;
//! let llm = BudgetedExecutor::new(spool_core::from_fn(|_| Ok("hi".into())), &budget);
//! // Register `llm` as the executor of Kind::Llm in every shard's runtime.
//! # drop(llm);
//! budget.stop();
//! # Ok::<(), spool_cluster::ClusterError>(())
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spool_core::{
    CancelSignal, Executor, OutboundRequest, Replier, Replies, ReplySink, RequestKey, Response,
    Time,
};
use spool_postgres::Cluster;
use spool_postgres::cluster::{Slice, SliceWant};

use crate::error::ClusterError;

/// How long a slice lives unless renewed, by default.
pub const DEFAULT_SLICE_TTL: Duration = Duration::from_secs(10);

/// How often, at most, a node renews its slices when it needs more room or gives room
/// back, by default.
pub const DEFAULT_RENEW_EVERY: Duration = Duration::from_millis(20);

/// How soon a held request is looked at again, by default.
pub const DEFAULT_RECHECK: Duration = Duration::from_millis(10);

/// How a node leases its slices of the cluster's budgets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetOptions {
    /// How long a slice lives unless renewed ([`DEFAULT_SLICE_TTL`]): what a dead
    /// node's unused in-flight slice is lost for.
    pub ttl: Duration,
    /// How often, at most, slices are renewed when a request waits for room or room is
    /// given back ([`DEFAULT_RENEW_EVERY`]).
    pub renew_every: Duration,
    /// How soon the executor asks to be polled again while it holds requests
    /// ([`DEFAULT_RECHECK`]).
    pub recheck: Duration,
}

impl Default for BudgetOptions {
    fn default() -> BudgetOptions {
        BudgetOptions {
            ttl: DEFAULT_SLICE_TTL,
            renew_every: DEFAULT_RENEW_EVERY,
            recheck: DEFAULT_RECHECK,
        }
    }
}

impl BudgetOptions {
    /// The defaults.
    pub fn new() -> BudgetOptions {
        BudgetOptions::default()
    }

    /// Slices live `ttl` unless renewed.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> BudgetOptions {
        self.ttl = ttl;
        self
    }

    /// Slices are renewed at most every `every` when room is wanted or given back.
    #[must_use]
    pub fn renew_every(mut self, every: Duration) -> BudgetOptions {
        self.renew_every = every;
        self
    }

    /// Held requests are looked at again every `recheck`.
    #[must_use]
    pub fn recheck(mut self, recheck: Duration) -> BudgetOptions {
        self.recheck = recheck;
        self
    }
}

/// The slice a node holds of one kind's budget, by the node's clock.
#[derive(Copy, Clone, Debug)]
struct Held {
    /// At most this many in flight (`None`: no limit).
    in_flight: Option<u32>,
    /// At most this many sent in `minute` (`None`: no limit).
    per_minute: Option<u32>,
    /// At most this many estimated tokens sent in `minute` (`None`: no limit).
    tokens: Option<u64>,
    /// The kind's whole tokens-per-minute budget: what a request estimated above it
    /// counts as.
    tokens_budget: Option<u64>,
    /// The minute of PostgreSQL's clock the count is for.
    minute: i64,
    /// No later than when that minute ends.
    minute_ends: Instant,
    /// No later than when the slice expires, less a margin.
    valid_until: Instant,
}

/// What a node uses of one kind.
#[derive(Debug, Default)]
struct Use {
    /// Requests with the inner executors.
    in_flight: u32,
    /// Requests held back, waiting for room.
    waiting: u32,
    /// Requests sent in the slice's minute.
    sent: u32,
    /// The estimated tokens of the requests held back.
    waiting_tokens: u64,
    /// Estimated tokens sent in the slice's minute, each request's at most the whole
    /// budget.
    tokens_sent: u64,
    /// The slice, once leased.
    slice: Option<Held>,
    /// A renewal is under way: no request starts until it is done, so that what the
    /// renewal reported as used stays true.
    renewing: bool,
}

/// The node's use of every kind it has seen.
#[derive(Debug, Default)]
struct State {
    kinds: BTreeMap<String, Use>,
    /// A renewal was asked for.
    asked: bool,
    stopping: bool,
}

/// What a node's executors and its renewal thread share.
#[derive(Debug)]
struct Shared {
    options: BudgetOptions,
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing is left half changed under the lock by a panic.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks the renewal thread for a renewal.
    fn ask(&self, state: &mut State) {
        if !state.asked {
            state.asked = true;
            self.wake.notify_all();
        }
    }

    /// A request of `kind`, estimated at `tokens`, arrived and waits.
    fn enqueue(&self, kind: &str, tokens: u32) {
        let mut state = self.lock();
        let used = state.kinds.entry(kind.to_owned()).or_default();
        used.waiting = used.waiting.saturating_add(1);
        used.waiting_tokens = used.waiting_tokens.saturating_add(tokens.into());
    }

    /// A waiting request of `kind`, estimated at `tokens`, was canceled.
    fn unqueue(&self, kind: &str, tokens: u32) {
        let mut state = self.lock();
        if let Some(used) = state.kinds.get_mut(kind) {
            used.waiting = used.waiting.saturating_sub(1);
            used.waiting_tokens = used.waiting_tokens.saturating_sub(tokens.into());
        }
    }

    /// Takes room for a waiting request of `kind` estimated at `tokens`, if the slice
    /// has some; otherwise asks for a renewal.
    fn try_start(&self, kind: &str, tokens: u32) -> bool {
        let mut state = self.lock();
        let now = Instant::now();
        let used = state.kinds.entry(kind.to_owned()).or_default();
        // A request estimated above the whole budget counts as the whole budget.
        let cost = used
            .slice
            .and_then(|slice| slice.tokens_budget)
            .map_or(u64::from(tokens), |budget| u64::from(tokens).min(budget));
        let room = !used.renewing
            && used.slice.is_some_and(|slice| {
                now < slice.valid_until
                    && slice.in_flight.is_none_or(|max| used.in_flight < max)
                    && slice
                        .per_minute
                        .is_none_or(|max| now < slice.minute_ends && used.sent < max)
                    && slice.tokens.is_none_or(|max| {
                        now < slice.minute_ends && used.tokens_sent.saturating_add(cost) <= max
                    })
            });
        if room {
            used.in_flight = used.in_flight.saturating_add(1);
            used.sent = used.sent.saturating_add(1);
            used.tokens_sent = used.tokens_sent.saturating_add(cost);
            used.waiting = used.waiting.saturating_sub(1);
            used.waiting_tokens = used.waiting_tokens.saturating_sub(tokens.into());
        } else {
            self.ask(&mut state);
        }
        room
    }

    /// A request of `kind` left the inner executor (answered or canceled): its slot is
    /// free. Room the node no longer needs is given back at the next renewal.
    fn finish(&self, kind: &str) {
        let mut state = self.lock();
        let Some(used) = state.kinds.get_mut(kind) else {
            return;
        };
        used.in_flight = used.in_flight.saturating_sub(1);
        if used.waiting == 0 && used.slice.is_some_and(|s| s.in_flight.is_some()) {
            self.ask(&mut state);
        }
    }
}

/// A node's slices of the cluster's budgets, shared by the [`BudgetedExecutor`]s of
/// all its shards, and the thread that renews them. Stopped (or dropped), it releases
/// its slices.
#[derive(Debug)]
pub struct NodeBudget {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl NodeBudget {
    /// Connects to the cluster at `url` and starts renewing `node`'s slices (none yet:
    /// a kind's slice is leased when its first request arrives).
    ///
    /// # Errors
    /// [`ClusterError::Database`] if the cluster cannot be reached;
    /// [`ClusterError::Spawn`] if the renewal thread cannot start.
    pub fn start(
        url: &str,
        node: &str,
        options: BudgetOptions,
    ) -> Result<NodeBudget, ClusterError> {
        let cluster = Cluster::connect(url)?;
        let shared = Arc::new(Shared {
            options,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let renewer = Renewer {
            cluster,
            node: node.to_owned(),
            shared: Arc::clone(&shared),
        };
        let name = format!("spool-budget-{node}");
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || renewer.run())
            .map_err(|e| ClusterError::Spawn {
                thread: name,
                reason: e.to_string(),
            })?;
        Ok(NodeBudget {
            shared,
            thread: Some(thread),
        })
    }

    /// Stops renewing and releases the node's slices (their in-flight part at once;
    /// what was sent this minute counts until the minute ends). Requests still held
    /// stay held.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopping = true;
            self.shared.wake.notify_all();
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the budget renewal thread panicked");
        }
    }
}

impl Drop for NodeBudget {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The thread that leases and renews a node's slices.
struct Renewer {
    cluster: Cluster,
    node: String,
    shared: Arc<Shared>,
}

impl Renewer {
    fn run(self) {
        let options = self.shared.options.clone();
        let period = options.ttl / 3;
        let mut last: Option<Instant> = None;
        let mut next_round = Instant::now();
        loop {
            {
                let mut state = self.shared.lock();
                loop {
                    if state.stopping {
                        drop(state);
                        self.release();
                        return;
                    }
                    let now = Instant::now();
                    let soonest = last.map_or(now, |last| last + options.renew_every);
                    let until = if state.asked {
                        soonest.min(next_round)
                    } else {
                        next_round
                    };
                    if until <= now {
                        break;
                    }
                    state = self
                        .shared
                        .wake
                        .wait_timeout(state, until - now)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0;
                }
                state.asked = false;
            }
            self.renew_all();
            let now = Instant::now();
            last = Some(now);
            next_round = now + period;
        }
    }

    /// Renews the slice of every kind seen, one at a time, in the kinds' order.
    fn renew_all(&self) {
        let kinds: Vec<String> = self.shared.lock().kinds.keys().cloned().collect();
        for kind in kinds {
            let want = {
                let mut state = self.shared.lock();
                let Some(used) = state.kinds.get_mut(&kind) else {
                    continue;
                };
                used.renewing = true;
                SliceWant {
                    in_flight: used.in_flight.saturating_add(used.waiting),
                    in_flight_held: used.in_flight,
                    per_minute: used.sent.saturating_add(used.waiting),
                    sent: used.sent,
                    minute: used.slice.map(|slice| slice.minute),
                    tokens: used.tokens_sent.saturating_add(used.waiting_tokens),
                    tokens_sent: used.tokens_sent,
                }
            };
            let before = Instant::now();
            let leased = self
                .cluster
                .lease_slice(&self.node, &kind, want, self.shared.options.ttl);
            let mut state = self.shared.lock();
            let Some(used) = state.kinds.get_mut(&kind) else {
                continue;
            };
            used.renewing = false;
            match leased {
                Ok(slice) => self.apply(used, &slice, before),
                Err(error) => {
                    tracing::warn!(node = %self.node, kind, "cannot renew the budget's slice: {error}");
                }
            }
        }
    }

    /// Takes a leased slice: its times counted from `before` the call, so that the node
    /// never thinks them later than PostgreSQL does.
    fn apply(&self, used: &mut Use, slice: &Slice, before: Instant) {
        if used.slice.map(|held| held.minute) != Some(slice.minute) {
            used.sent = 0;
            used.tokens_sent = 0;
        }
        let margin = self.shared.options.ttl / 5;
        used.slice = Some(Held {
            in_flight: slice.in_flight,
            per_minute: slice.per_minute,
            tokens: slice.tokens,
            tokens_budget: slice.tokens_budget,
            minute: slice.minute,
            minute_ends: before + slice.minute_left,
            valid_until: before + slice.expires_in.saturating_sub(margin),
        });
    }

    /// Releases every slice the node leased.
    fn release(&self) {
        let kinds: Vec<String> = self.shared.lock().kinds.keys().cloned().collect();
        for kind in kinds {
            if let Err(error) = self.cluster.release_slice(&self.node, &kind) {
                tracing::warn!(node = %self.node, kind, "cannot release the budget's slice: {error}");
            }
        }
    }
}

/// The requests a [`BudgetedExecutor`] has with its inner executor, by key, with their
/// kinds: an answer or a cancel gives the slot back once.
#[derive(Debug, Default)]
struct Running(Mutex<BTreeMap<RequestKey, String>>);

impl Running {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<RequestKey, String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The request `key` left the inner executor: its slot goes back, once.
    fn finish(&self, key: &RequestKey, budget: &Shared) {
        let kind = self.lock().remove(key);
        if let Some(kind) = kind {
            budget.finish(&kind);
        }
    }
}

/// Where the inner executor's later answers go: the slot is given back, then the
/// answer goes on to the driver.
struct Tap {
    outer: Replier,
    running: Arc<Running>,
    budget: Arc<Shared>,
}

impl ReplySink for Tap {
    fn send(&self, response: Response) -> bool {
        self.running.finish(&response.key, &self.budget);
        self.outer.send(response)
    }
}

/// An executor that keeps to the node's slices of the cluster's budgets: a request
/// goes to the inner executor only once the node's slice of its kind has room (a
/// slot in flight, a count of the minute, its estimated tokens out of the minute's);
/// until then it is held, unanswered, and
/// [`poll`](Executor::poll) asks to be called again in [`BudgetOptions::recheck`].
/// Held requests go on in the order they arrived. A held request that is canceled is
/// dropped unanswered; a running one gives its slot back at once and the cancel goes
/// on to the inner executor.
pub struct BudgetedExecutor<E: Executor> {
    inner: E,
    budget: Arc<Shared>,
    held: VecDeque<(String, OutboundRequest)>,
    running: Arc<Running>,
    tap: Option<Arc<dyn ReplySink>>,
    batch: Vec<Response>,
}

impl<E: Executor> std::fmt::Debug for BudgetedExecutor<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetedExecutor")
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl<E: Executor> BudgetedExecutor<E> {
    /// `inner`, kept to `budget`'s slices.
    pub fn new(inner: E, budget: &NodeBudget) -> BudgetedExecutor<E> {
        BudgetedExecutor {
            inner,
            budget: Arc::clone(&budget.shared),
            held: VecDeque::new(),
            running: Arc::new(Running::default()),
            tap: None,
            batch: Vec::new(),
        }
    }

    /// How many requests are held back, waiting for room.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The sink the inner executor answers into, made at the first call from the
    /// driver's.
    fn tap(&mut self, replies: &Replies<'_>) -> Arc<dyn ReplySink> {
        let tap = self.tap.get_or_insert_with(|| {
            Arc::new(Tap {
                outer: replies.replier(),
                running: Arc::clone(&self.running),
                budget: Arc::clone(&self.budget),
            })
        });
        Arc::clone(tap)
    }

    /// Runs `call` on the inner executor with replies of its own; gives back the slot
    /// of every request it answered at once, and passes the answers on.
    fn with_inner<T>(
        &mut self,
        replies: &mut Replies<'_>,
        call: impl FnOnce(&mut E, &mut Replies<'_>) -> T,
    ) -> T {
        let tap = self.tap(replies);
        let mut batch = std::mem::take(&mut self.batch);
        let result = {
            let mut inner = Replies::new(replies.now(), &mut batch, &tap);
            call(&mut self.inner, &mut inner)
        };
        for response in batch.drain(..) {
            self.running.finish(&response.key, &self.budget);
            replies.send(response);
        }
        self.batch = batch;
        result
    }

    /// Sends held requests on, oldest first, while the slices have room.
    fn start_held(&mut self, replies: &mut Replies<'_>) {
        while let Some((kind, request)) = self.held.front() {
            if !self.budget.try_start(kind, request.request.tokens) {
                break;
            }
            let Some((kind, request)) = self.held.pop_front() else {
                break;
            };
            self.running.lock().insert(request.key, kind);
            self.with_inner(replies, |inner, replies| inner.execute(request, replies));
        }
    }
}

impl<E: Executor> Executor for BudgetedExecutor<E> {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let kind = request.request.kind.to_string();
        self.budget.enqueue(&kind, request.request.tokens);
        self.held.push_back((kind, request));
        self.start_held(replies);
    }

    fn cancel(&mut self, signal: CancelSignal, replies: &mut Replies<'_>) {
        if let Some(at) = self.held.iter().position(|(_, r)| r.key == signal.key) {
            if let Some((kind, request)) = self.held.remove(at) {
                self.budget.unqueue(&kind, request.request.tokens);
            }
            return;
        }
        self.running.finish(&signal.key, &self.budget);
        self.with_inner(replies, |inner, replies| inner.cancel(signal, replies));
        self.start_held(replies);
    }

    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        self.start_held(replies);
        let next = self.with_inner(replies, |inner, replies| inner.poll(now, replies));
        self.start_held(replies);
        if self.held.is_empty() {
            return next;
        }
        let recheck = now.saturating_add(self.budget.options.recheck);
        Some(next.map_or(recheck, |next| next.min(recheck)))
    }
}
