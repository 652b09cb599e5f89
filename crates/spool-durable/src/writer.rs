//! The writer thread of a backend: takes groups of writes from a bounded queue and
//! has the backend commit them (several waiting groups in one transaction), then says
//! when they are durable. Store clones share it; the last one to go closes the queue
//! and waits for the thread, so the backend is closed when it returns.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

use spool_core::{DurableNotifier, JournalError};

use crate::op::Op;

/// The most writes one transaction takes from waiting groups (a single group may be
/// larger: a loop turn is never split).
const BATCH_OPS: usize = 4096;

/// What a backend's writer does, on the writer thread: the building block a backend
/// gives [`WriterThread::start`].
pub trait Batch: Send + 'static {
    /// The backend's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Writes `ops` in order in one transaction; returns each op's number (an entry's
    /// sequence number, a checkpoint's id). Nothing is changed if it fails.
    ///
    /// # Errors
    /// Whatever the backend's write fails with.
    fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, Self::Error>;

    /// The backend's error for a failure of the writer thread itself (it could not be
    /// started, it is gone, it panicked, it wrote nothing), saying `message`.
    fn writer_error(message: String) -> Self::Error;

    /// Called once on the writer thread when it is done (the queue closed), before it
    /// lets go of the backend. Does nothing unless the backend needs it.
    fn close(&mut self) {}
}

/// What the writer is given.
enum Job<E> {
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
        reply: mpsc::Sender<Result<Vec<u64>, E>>,
    },
}

/// A backend's writer thread and its bounded queue, shared by a store's clones (behind
/// an `Arc`). Dropping it closes the queue and waits for the thread, which commits what
/// was queued first.
pub struct WriterThread<B: Batch> {
    queue: Option<SyncSender<Job<B::Error>>>,
    thread: Option<JoinHandle<()>>,
}

impl<B: Batch> std::fmt::Debug for WriterThread<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterThread")
            .field("open", &self.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: Batch> WriterThread<B> {
    /// Starts the writer thread, named `name`, on `batch`, with a queue of `groups`
    /// jobs.
    ///
    /// # Errors
    /// [`Batch::writer_error`] saying `no writer thread: ...` if the thread cannot be
    /// spawned.
    pub fn start(mut batch: B, groups: usize, name: &str) -> Result<WriterThread<B>, B::Error> {
        let (queue, jobs) = mpsc::sync_channel(groups);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let mut current = None;
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&mut batch, &jobs, &mut current);
                }));
                if ran.is_err() {
                    gave_up::<B>(current, &jobs);
                }
                batch.close();
            })
            .map_err(|e| B::writer_error(format!("no writer thread: {e}")))?;
        Ok(WriterThread {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Hands a sink's group to the writer, waiting while the queue is full
    /// (back-pressure): once committed, `notifier` hears that the sink's first `number`
    /// groups are durable (or that they failed).
    ///
    /// # Errors
    /// [`Batch::writer_error`] if the writer thread is gone.
    pub fn send_group(
        &self,
        ops: Vec<Op>,
        number: u64,
        notifier: DurableNotifier,
    ) -> Result<(), B::Error> {
        self.send(Job::Group {
            ops,
            number,
            notifier,
        })
    }

    /// Has the writer write `ops` after everything queued before, and waits for their
    /// numbers.
    ///
    /// # Errors
    /// The backend's error if the write failed; [`Batch::writer_error`] if the writer
    /// thread is gone.
    pub fn call(&self, ops: Vec<Op>) -> Result<Vec<u64>, B::Error> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Call { ops, reply })?;
        answer.recv().map_err(|_| gone::<B>())?
    }

    /// Has the writer write `op` after everything queued before, and waits for its
    /// number.
    ///
    /// # Errors
    /// As [`call`](WriterThread::call).
    pub fn call_one(&self, op: Op) -> Result<u64, B::Error> {
        let ids = self.call(vec![op])?;
        ids.first()
            .copied()
            .ok_or_else(|| B::writer_error("the writer wrote nothing".to_owned()))
    }

    /// Hands `job` to the writer, waiting while the queue is full (back-pressure).
    fn send(&self, job: Job<B::Error>) -> Result<(), B::Error> {
        self.queue
            .as_ref()
            .and_then(|queue| queue.send(job).ok())
            .ok_or_else(gone::<B>)
    }
}

impl<B: Batch> Drop for WriterThread<B> {
    fn drop(&mut self) {
        // The queue closes; the writer commits what is in it, then returns and lets
        // go of the backend.
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn gone<B: Batch>() -> B::Error {
    B::writer_error("the store's writer thread is gone".to_owned())
}

/// The writer panicked (a bug): the group it was writing and every job still queued
/// fail, so that no driver waits for ever.
fn gave_up<B: Batch>(current: Option<DurableNotifier>, jobs: &Receiver<Job<B::Error>>) {
    let error = || B::writer_error("the store's writer thread panicked".to_owned());
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
fn run<B: Batch>(
    batch: &mut B,
    jobs: &Receiver<Job<B::Error>>,
    current: &mut Option<DurableNotifier>,
) {
    // After a group fails, later groups are not written (they would leave a gap in
    // the journal): each is told the error. A journal's new start clears it.
    let mut failed: Option<JournalError> = None;
    let mut next: Option<Job<B::Error>> = None;
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
                let result = batch.write(&refs);
                if Op::starts(&refs) && result.is_ok() {
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
                    if let Err(error) = batch.write(&refs) {
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
