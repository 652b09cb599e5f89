//! The writer thread: takes groups of writes from a bounded queue, encodes them and
//! commits them (several waiting groups in one transaction), and says when they are
//! durable. Store clones share it; the last one to go closes the queue and waits for
//! the thread, so the connection is closed (and the writer's lock let go) when it
//! returns.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

use spool_core::{DurableNotifier, JournalError};

use crate::error::PgStoreError;
use crate::write::{Op, Writer};

/// The most writes one transaction takes from waiting groups (a single group may be
/// larger: a loop turn is never split).
const BATCH_OPS: usize = 4096;

/// What the writer is given.
pub(crate) enum Job {
    /// A group from a sink: committed (maybe with the groups waiting after it), then
    /// `notifier` hears that its first `number` groups are durable.
    Group {
        ops: Vec<Op>,
        number: u64,
        notifier: DurableNotifier,
    },
    /// Writes from a caller that waits for their numbers (an entry's sequence number,
    /// a checkpoint's id) or the error.
    Call {
        ops: Vec<Op>,
        reply: mpsc::Sender<Result<Vec<u64>, PgStoreError>>,
    },
}

/// What store clones share: the writer thread (which owns the writing connection) and
/// its queue.
pub(crate) struct Shared {
    queue: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Shared {
    /// Starts the writer thread on `writer`, with a queue of `groups` jobs.
    pub(crate) fn start(mut writer: Writer, groups: usize) -> Result<Shared, PgStoreError> {
        let (queue, jobs) = mpsc::sync_channel(groups);
        let thread = std::thread::Builder::new()
            .name("spool-postgres-writer".to_owned())
            .spawn(move || {
                let mut current = None;
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&mut writer, &jobs, &mut current);
                }));
                if ran.is_err() {
                    gave_up(current, &jobs);
                }
                writer.close();
            })
            .map_err(|e| PgStoreError::Unsupported(format!("no writer thread: {e}")))?;
        Ok(Shared {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Hands `job` to the writer, waiting while the queue is full (back-pressure).
    pub(crate) fn send(&self, job: Job) -> Result<(), PgStoreError> {
        self.queue
            .as_ref()
            .and_then(|queue| queue.send(job).ok())
            .ok_or_else(gone)
    }

    /// Has the writer write `ops` after everything queued before, and waits.
    pub(crate) fn call(&self, ops: Vec<Op>) -> Result<Vec<u64>, PgStoreError> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Call { ops, reply })?;
        answer.recv().map_err(|_| gone())?
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The queue closes; the writer commits what is in it, then returns and lets
        // go of the connection.
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn gone() -> PgStoreError {
    PgStoreError::Unsupported("the store's writer thread is gone".to_owned())
}

/// The writer panicked (a bug): the group it was writing and every job still queued
/// fail, so that no driver waits for ever.
fn gave_up(current: Option<DurableNotifier>, jobs: &Receiver<Job>) {
    let error = || PgStoreError::Unsupported("the store's writer thread panicked".to_owned());
    if let Some(notifier) = current {
        notifier.failed(JournalError::sink(error()));
    }
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Group { notifier, .. } => notifier.failed(JournalError::sink(error())),
            Job::Call { reply, .. } => {
                let _ = reply.send(Err(error()));
            }
        }
    }
}

/// The writer's loop: until the queue closes, a call alone, or a group with the
/// groups waiting behind it in one transaction (`current` names whom to tell if
/// writing it panics).
fn run(writer: &mut Writer, jobs: &Receiver<Job>, current: &mut Option<DurableNotifier>) {
    // After a group fails, later groups are not written (they would leave a gap in
    // the journal): each is told the error. A journal's new start clears it.
    let mut failed: Option<JournalError> = None;
    let mut next: Option<Job> = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        match job {
            Job::Call { ops, reply } => {
                let refs: Vec<&Op> = ops.iter().collect();
                let result = writer.write(&refs);
                let starts = ops
                    .iter()
                    .any(|op| matches!(op, Op::Checkpoint { start: true, .. }));
                if starts && result.is_ok() {
                    failed = None;
                }
                let _ = reply.send(result);
            }
            Job::Group {
                ops,
                number,
                notifier,
            } => {
                let mut groups = vec![(ops, number, notifier)];
                let mut count = groups[0].0.len();
                while count < BATCH_OPS {
                    match jobs.try_recv() {
                        Ok(Job::Group {
                            ops,
                            number,
                            notifier,
                        }) => {
                            count += ops.len();
                            groups.push((ops, number, notifier));
                        }
                        Ok(call) => {
                            next = Some(call);
                            break;
                        }
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                }
                if failed.is_none() {
                    *current = groups.last().map(|g| g.2.clone());
                    let refs: Vec<&Op> = groups.iter().flat_map(|g| g.0.iter()).collect();
                    if let Err(error) = writer.write(&refs) {
                        failed = Some(JournalError::sink(error));
                    }
                }
                *current = None;
                notify(&groups, failed.as_ref());
            }
        }
    }
}

/// Tells each group's notifier (once per run of groups with the same one) that they
/// are durable, or that they failed.
fn notify(groups: &[(Vec<Op>, u64, DurableNotifier)], failed: Option<&JournalError>) {
    for (i, (_, number, notifier)) in groups.iter().enumerate() {
        let last_of_run = groups
            .get(i + 1)
            .is_none_or(|(_, _, after)| !after.same(notifier));
        if !last_of_run {
            continue;
        }
        match failed {
            None => notifier.durable(*number),
            Some(error) => notifier.failed(error.clone()),
        }
    }
}
