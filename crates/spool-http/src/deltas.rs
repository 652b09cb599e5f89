//! The pieces of answers under way (a model's streamed tokens) for the event stream:
//! the runtime's progress ([`RuntimeBuilder::on_progress`]) kept in a bounded ring,
//! each numbered in the order it came, and which requests are still live (their
//! answer not yet handed to the loop). Nothing here is journaled: a piece lives in the
//! ring until newer ones push it out, and is served to a resumed stream only while
//! its request is live.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use spool_core::{Delta, RequestKey};
use spool_runtime::{Progress, RuntimeBuilder};
use tokio::sync::watch;

/// How many pieces the ring keeps unless told otherwise.
pub const DEFAULT_DELTA_RING: usize = 4096;

/// One piece as kept: its number, its request, its event's data.
#[derive(Clone, Debug)]
pub(crate) struct KeptDelta {
    /// Its number in the order pieces came, counted up from the hub's base.
    pub(crate) number: u64,
    pub(crate) key: RequestKey,
    /// The event's data: `{"task", "request", "seq", "text", "tool_calls", ...}`.
    pub(crate) data: Arc<str>,
}

/// What the ring holds.
#[derive(Debug)]
struct Ring {
    capacity: usize,
    /// The number before the first piece's: drawn at random for each hub, so that
    /// the numbers of one server process are not those of another.
    base: u64,
    /// The number of the newest piece (`base`: none yet).
    newest: u64,
    kept: VecDeque<KeptDelta>,
    /// Requests that have had pieces and whose answer is not handed to the loop yet.
    live: BTreeSet<RequestKey>,
}

/// The pieces of answers under way, shared by the runtime's executors (which add to
/// them) and the event streams (which read them). Cheap to clone. Made by
/// [`publish_deltas`]; given to the API with
/// [`AppState::with_deltas`](crate::AppState::with_deltas).
#[derive(Clone)]
pub struct DeltaHub {
    ring: Arc<Mutex<Ring>>,
    /// The number of the newest piece, changed at each.
    added: watch::Sender<u64>,
}

impl fmt::Debug for DeltaHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ring = self.lock();
        f.debug_struct("DeltaHub")
            .field("capacity", &ring.capacity)
            .field("newest", &ring.newest)
            .field("live", &ring.live.len())
            .finish()
    }
}

impl Default for DeltaHub {
    fn default() -> DeltaHub {
        DeltaHub::new(DEFAULT_DELTA_RING)
    }
}

/// Installs on `builder` a watcher of the executors' progress that keeps the last
/// `ring` pieces for the event stream; returns the builder and the hub to give the
/// API ([`AppState::with_deltas`](crate::AppState::with_deltas)).
pub fn publish_deltas(builder: RuntimeBuilder, ring: usize) -> (RuntimeBuilder, DeltaHub) {
    let hub = DeltaHub::new(ring);
    let watcher = hub.clone();
    let builder = builder.on_progress(move |progress| watcher.take(progress));
    (builder, hub)
}

impl DeltaHub {
    /// A hub keeping the last `capacity` pieces (at least 1).
    pub fn new(capacity: usize) -> DeltaHub {
        let base = random_base();
        DeltaHub {
            ring: Arc::new(Mutex::new(Ring {
                capacity: capacity.max(1),
                base,
                newest: base,
                kept: VecDeque::new(),
                live: BTreeSet::new(),
            })),
            added: watch::Sender::new(base),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the runtime's progress: a piece is kept and its request is live; an
    /// answer handed to the loop ends its request's life here.
    pub fn take(&self, progress: &Progress<'_>) {
        match progress {
            Progress::Delta { key, delta } => {
                let newest = {
                    let mut ring = self.lock();
                    ring.newest += 1;
                    let number = ring.newest;
                    ring.live.insert(*key);
                    if ring.kept.len() >= ring.capacity {
                        ring.kept.pop_front();
                    }
                    ring.kept.push_back(KeptDelta {
                        number,
                        key: *key,
                        data: data(*key, delta).into(),
                    });
                    number
                };
                self.added.send_replace(newest);
            }
            Progress::Answered { key } => {
                self.lock().live.remove(key);
            }
            _ => {}
        }
    }

    /// The number of the newest piece (the hub's base: none yet).
    pub(crate) fn newest(&self) -> u64 {
        self.lock().newest
    }

    /// Whether `number` is one this hub gave a piece (not one of another process, or
    /// one still to come).
    pub(crate) fn gave(&self, number: u64) -> bool {
        let ring = self.lock();
        ring.base < number && number <= ring.newest
    }

    /// A receiver that changes at each piece.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.added.subscribe()
    }

    /// The pieces kept after number `after`, oldest first (only `task`'s, if given;
    /// only those of live requests, if `live_only`).
    pub(crate) fn after(&self, after: u64, task: Option<u64>, live_only: bool) -> Vec<KeptDelta> {
        let ring = self.lock();
        let start = ring.kept.partition_point(|d| d.number <= after);
        ring.kept
            .range(start..)
            .filter(|d| task.is_none_or(|t| d.key.task().get() == t))
            .filter(|d| !live_only || ring.live.contains(&d.key))
            .cloned()
            .collect()
    }
}

/// A hub's base: 31 random bits times 2^32, so that its numbers stay within 19 digits
/// (an id's part) with room for 2^32 pieces, and a hub of another process (or
/// another hub) starts elsewhere but for a chance of one in 2^31.
fn random_base() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    // Each `RandomState` has keys of its own, drawn at random for the process.
    let random = std::hash::RandomState::new().build_hasher().finish();
    (random & 0x7fff_ffff) << 32
}

/// A piece's event data: its task, its request's number, and the piece.
fn data(key: RequestKey, delta: &Delta) -> String {
    let mut value = json!({"task": key.task().get(), "request": key.number()});
    if let (Value::Object(fields), Ok(Value::Object(piece))) =
        (&mut value, serde_json::to_value(delta))
    {
        fields.extend(piece);
    }
    value.to_string()
}
