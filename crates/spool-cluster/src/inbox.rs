//! The inbox reader: a thread that submits what other nodes put in the inboxes of the
//! shards this node holds — woken by `NOTIFY` on the inbox channel, and reading every
//! held inbox each poll interval in case a notification was missed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spool_core::{Admission, KeyedSubmission, RejectReason, SubmitError};
use spool_postgres::Cluster;
use spool_postgres::cluster::{
    ClusterError as TablesError, InboxItem, InboxListener, Taken, TakenOutcome,
};
use spool_runtime::{RuntimeError, RuntimeHandle};

use crate::error::ClusterError;
use crate::held::Held;
use crate::options::{InboxDecoder, NodeOptions, ShardId};

/// How many items a read of one inbox takes at most (each up to the API's body
/// limit, 1 MiB: 64 MiB at most in memory).
const BATCH: u32 = 64;

/// The longest the reader waits before it looks whether it must stop or read a newly
/// held shard's inbox.
const SLICE: Duration = Duration::from_millis(50);

/// The inbox reader's thread, and how to stop it.
#[derive(Debug)]
pub(crate) struct InboxReader {
    stop: Arc<AtomicBool>,
    /// `None` once joined.
    thread: Option<JoinHandle<()>>,
}

impl InboxReader {
    /// Connects to the cluster at `url` and starts reading the inboxes of the shards
    /// in `held`, making each item's task with `decode`.
    pub(crate) fn start(
        url: &str,
        options: &NodeOptions,
        decode: InboxDecoder,
        held: Held,
    ) -> Result<InboxReader, ClusterError> {
        let cluster = Cluster::connect(url)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut reader = Reader {
            node: options.node_id.clone(),
            poll: options.inbox_poll,
            listener: None,
            cluster,
            decode,
            held,
            read: BTreeMap::new(),
            stop: Arc::clone(&stop),
        };
        let name = format!("spool inbox {}", options.node_id);
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || reader.run())
            .map_err(|e| ClusterError::Spawn {
                thread: name,
                reason: e.to_string(),
            })?;
        Ok(InboxReader {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the reader after the item it is submitting, and waits for it.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the inbox reader panicked");
        }
    }
}

/// A reader dropped without [`stop`](InboxReader::stop) (the node could not start)
/// stops after the item it is submitting, without being waited for.
impl Drop for InboxReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The reader thread's state.
struct Reader {
    node: String,
    poll: Duration,
    cluster: Cluster,
    /// `None` until listening works (and again after its connection was lost).
    listener: Option<InboxListener>,
    decode: InboxDecoder,
    held: Held,
    /// When each held shard's inbox was last read, under which epoch.
    read: BTreeMap<ShardId, (u64, Instant)>,
    stop: Arc<AtomicBool>,
}

impl Reader {
    fn run(&mut self) {
        while !self.stop.load(Ordering::Acquire) {
            let announced = self.wait();
            let now = Instant::now();
            let shards = self.held.list();
            self.read
                .retain(|shard, _| shards.iter().any(|(s, _, _)| s == shard));
            for (shard, epoch, handle) in shards {
                // Read a shard's inbox when announced, newly held, or not read for a
                // poll interval.
                let due = match self.read.get(&shard) {
                    Some(&(read_epoch, at)) => {
                        read_epoch != epoch
                            || now.duration_since(at) >= self.poll
                            || announced.contains(&shard)
                    }
                    None => true,
                };
                if !due || self.stop.load(Ordering::Acquire) {
                    continue;
                }
                self.read.insert(shard, (epoch, now));
                if let Err(error) = self.drain(shard, &handle) {
                    tracing::warn!(node = %self.node, shard, "cannot read the inbox: {error}");
                }
            }
        }
    }

    /// Waits up to [`SLICE`] for a notification; returns the shards announced.
    fn wait(&mut self) -> Vec<ShardId> {
        if self.listener.is_none() {
            match self.cluster.listen() {
                Ok(listener) => self.listener = Some(listener),
                Err(error) => {
                    tracing::warn!(node = %self.node, "cannot listen for the inboxes: {error}");
                }
            }
        }
        match self.listener.as_mut().map(|l| l.wait(SLICE)) {
            Some(Ok(shards)) => shards,
            Some(Err(error)) => {
                tracing::warn!(node = %self.node, "the inbox listener failed: {error}");
                self.listener = None;
                std::thread::sleep(SLICE);
                Vec::new()
            }
            None => {
                std::thread::sleep(SLICE);
                Vec::new()
            }
        }
    }

    /// Submits what waits in `shard`'s inbox, in order, each under its key; records
    /// what each became and deletes the items once their submissions are durable.
    /// Stops at a runtime that is gone (the shard was lost: its next owner reads the
    /// rest) and at a full queue (the items wait there until the shard has room).
    fn drain(&mut self, shard: ShardId, handle: &RuntimeHandle) -> Result<(), TablesError> {
        loop {
            let items = self.cluster.pending(shard, BATCH)?;
            let full = items.len() == BATCH as usize;
            let mut done = Vec::with_capacity(items.len());
            let mut held_back = false;
            for item in items {
                if self.stop.load(Ordering::Acquire) {
                    held_back = true;
                    break;
                }
                match self.submit(shard, handle, &item) {
                    Some(outcome) => done.push(Taken {
                        item: item.id,
                        key: item.key,
                        outcome,
                    }),
                    None => {
                        held_back = true;
                        break;
                    }
                }
            }
            if !done.is_empty() {
                self.cluster.ack_taken(shard, &done)?;
            }
            if held_back || !full {
                return Ok(());
            }
        }
    }

    /// Submits `item` to the shard's runtime and waits until it is durable: the task
    /// it made, or its key's task from before (an item submitted before a crash and
    /// not yet deleted makes no second task). `None` when it must wait in the inbox: the
    /// runtime is gone, or the shard's queue or task table is full. An item that is
    /// not a task, or that the scheduler refuses for good, is logged and recorded as
    /// refused: it would be refused again for ever.
    fn submit(
        &self,
        shard: ShardId,
        handle: &RuntimeHandle,
        item: &InboxItem,
    ) -> Option<TakenOutcome> {
        let task = match (self.decode)(shard, &item.body) {
            Ok(task) => task.key(item.key.clone()),
            Err(reason) => {
                tracing::error!(
                    node = %self.node, shard, key = %item.key,
                    "an inbox item is not a task and is dropped: {reason}"
                );
                return Some(TakenOutcome::Refused(reason));
            }
        };
        let refused = |reason: String| {
            tracing::error!(
                node = %self.node, shard, key = %item.key,
                "an inbox item was refused and is dropped: {reason}"
            );
            Some(TakenOutcome::Refused(reason))
        };
        // Keyed: an item whose key is taken (a repeat sent through another node, or
        // one submitted before a crash and not yet deleted) answers with the key's task
        // and leaves no refused task behind.
        let submission = match handle.submit_keyed(task) {
            Ok(keyed) => match keyed.outcome {
                KeyedSubmission::Submitted(submission) => Ok(submission),
                KeyedSubmission::Existing { record, .. } => {
                    return Some(TakenOutcome::Existing(record.task.get()));
                }
                KeyedSubmission::Reused { record, .. } => {
                    return Some(TakenOutcome::KeyReused(record.task.get()));
                }
                other => return refused(format!("the key was checked as {other:?}")),
            },
            Err(error) => Err(error),
        };
        match submission {
            Ok(submission) => match submission.admission {
                Admission::Rejected {
                    reason:
                        RejectReason::Duplicate { existing: id, .. }
                        | RejectReason::AlreadyEnded { original: id, .. },
                } => Some(TakenOutcome::Existing(id.get())),
                Admission::Rejected {
                    reason: RejectReason::QueueFull { .. } | RejectReason::AgentQueueFull { .. },
                } => None,
                Admission::Rejected { reason } => refused(reason.to_string()),
                _ => Some(TakenOutcome::Task(submission.id.get())),
            },
            Err(RuntimeError::Gone) => None,
            Err(RuntimeError::Submit(SubmitError::TableFull { .. })) => None,
            Err(error) => refused(error.to_string()),
        }
    }
}
