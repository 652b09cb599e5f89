//! The writer thread and the sink half a backend builds on, over a backend that logs
//! each transaction: what is written together, in what order, and what the runtime is
//! told.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spool_core::{Commit, DurableNotice, DurableNotifier};
use spool_durable::{Batch, Op, SinkGroup, WriterThread};

/// A backend's error in these tests.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TestError(String);

/// What the test backend did: each transaction's ops (a checkpoint's bytes as text),
/// and `closed` once it was closed.
type Log = Arc<Mutex<Vec<Vec<String>>>>;

/// A backend that logs each transaction. A checkpoint `hold` says so on `held` and
/// waits for a word on `release` before it is written, `bad` fails its transaction,
/// `panic` panics.
struct Logged {
    log: Log,
    held: Sender<()>,
    release: Receiver<()>,
    next: u64,
}

impl Batch for Logged {
    type Error = TestError;

    fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, TestError> {
        let names: Vec<String> = ops
            .iter()
            .map(|op| match op {
                Op::Checkpoint { snapshot, start } => {
                    let name = String::from_utf8_lossy(snapshot).into_owned();
                    if *start {
                        format!("start {name}")
                    } else {
                        name
                    }
                }
                Op::Entry(_) | Op::Parts(_) => "other".to_owned(),
            })
            .collect();
        if names.iter().any(|name| name == "hold") {
            self.held.send(()).expect("the test waits");
            self.release.recv().expect("the test releases the writer");
        }
        if names.iter().any(|name| name == "panic") {
            panic!("a bug in the backend");
        }
        if names.iter().any(|name| name == "bad") {
            return Err(TestError("bad write".to_owned()));
        }
        let ids = (0..ops.len())
            .map(|_| {
                self.next += 1;
                self.next
            })
            .collect();
        self.log.lock().expect("log").push(names);
        Ok(ids)
    }

    fn writer_error(message: String) -> TestError {
        TestError(message)
    }

    fn close(&mut self) {
        self.log
            .lock()
            .expect("log")
            .push(vec!["closed".to_owned()]);
    }
}

/// A writer over a new test backend, with a queue of 8 groups; the receiver hears
/// when a `hold` write is held, the sender releases it.
fn start() -> (WriterThread<Logged>, Log, Receiver<()>, Sender<()>) {
    let log = Log::default();
    let (release, gate) = mpsc::channel();
    let (held, holding) = mpsc::channel();
    let batch = Logged {
        log: Arc::clone(&log),
        held,
        release: gate,
        next: 0,
    };
    let writer = WriterThread::start(batch, 8, "test-writer").expect("a thread");
    (writer, log, holding, release)
}

fn checkpoint(name: &str) -> Vec<Op> {
    vec![Op::Checkpoint {
        snapshot: name.as_bytes().to_vec(),
        start: false,
    }]
}

/// A notifier that sends what it hears, tagged, as text.
fn notifier(tag: &'static str, heard: &Sender<String>) -> DurableNotifier {
    let heard = Mutex::new(heard.clone());
    DurableNotifier::new(move |notice: DurableNotice| {
        let text = match notice {
            Ok(groups) => format!("{tag} durable {groups}"),
            Err(error) => format!("{tag} failed: {error}"),
        };
        let _ = heard.lock().expect("sender").send(text);
    })
}

/// The next `n` notices, waiting for each at most ten seconds.
fn notices(heard: &Receiver<String>, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            heard
                .recv_timeout(Duration::from_secs(10))
                .expect("a notice")
        })
        .collect()
}

fn log_of(log: &Log) -> Vec<Vec<String>> {
    log.lock().expect("log").clone()
}

fn wait_held(holding: &Receiver<()>) {
    holding
        .recv_timeout(Duration::from_secs(10))
        .expect("the writer holds");
}

#[test]
fn groups_waiting_are_written_in_one_transaction_and_each_run_of_a_notifier_hears_once() {
    let (writer, log, holding, release) = start();
    let (tell, heard) = mpsc::channel();
    let a = notifier("a", &tell);
    let b = notifier("b", &tell);
    writer.send_group(checkpoint("hold"), 1, a.clone()).unwrap();
    wait_held(&holding);
    writer.send_group(checkpoint("g2"), 2, a.clone()).unwrap();
    writer.send_group(checkpoint("g3"), 3, a.clone()).unwrap();
    writer.send_group(checkpoint("h1"), 1, b).unwrap();
    writer.send_group(checkpoint("g4"), 4, a).unwrap();
    release.send(()).unwrap();
    assert_eq!(
        notices(&heard, 4),
        ["a durable 1", "a durable 3", "b durable 1", "a durable 4"]
    );
    drop(writer);
    assert_eq!(
        log_of(&log),
        [vec!["hold"], vec!["g2", "g3", "h1", "g4"], vec!["closed"]]
    );
    assert!(heard.try_recv().is_err(), "no more notices");
}

#[test]
fn a_call_is_written_alone_after_the_groups_before_it() {
    let (writer, log, holding, release) = start();
    let (tell, heard) = mpsc::channel();
    let a = notifier("a", &tell);
    writer.send_group(checkpoint("hold"), 1, a.clone()).unwrap();
    wait_held(&holding);
    writer.send_group(checkpoint("g2"), 2, a.clone()).unwrap();
    let called = std::thread::scope(|scope| {
        let call = scope.spawn(|| writer.call(checkpoint("c")));
        release.send(()).unwrap();
        call.join().unwrap()
    });
    assert_eq!(called.unwrap(), vec![3]);
    writer.send_group(checkpoint("g3"), 3, a).unwrap();
    assert_eq!(
        notices(&heard, 3),
        ["a durable 1", "a durable 2", "a durable 3"]
    );
    assert_eq!(writer.call_one(checkpoint("d").remove(0)).unwrap(), 5);
    drop(writer);
    assert_eq!(
        log_of(&log),
        [
            vec!["hold"],
            vec!["g2"],
            vec!["c"],
            vec!["g3"],
            vec!["d"],
            vec!["closed"]
        ]
    );
}

#[test]
fn after_a_failed_group_later_groups_fail_unwritten_until_a_journal_starts() {
    let (writer, log, _holding, _release) = start();
    let (tell, heard) = mpsc::channel();
    let a = notifier("a", &tell);
    writer.send_group(checkpoint("bad"), 1, a.clone()).unwrap();
    assert_eq!(
        notices(&heard, 1),
        ["a failed: the journal's sink failed: bad write"]
    );
    writer.send_group(checkpoint("g2"), 2, a.clone()).unwrap();
    assert_eq!(
        notices(&heard, 1),
        ["a failed: the journal's sink failed: bad write"]
    );
    let start = vec![Op::Checkpoint {
        snapshot: b"s".to_vec(),
        start: true,
    }];
    assert_eq!(writer.call(start).unwrap(), vec![1]);
    writer.send_group(checkpoint("g1"), 1, a).unwrap();
    assert_eq!(notices(&heard, 1), ["a durable 1"]);
    drop(writer);
    assert_eq!(log_of(&log), [vec!["start s"], vec!["g1"], vec!["closed"]]);
}

#[test]
fn a_panicking_backend_fails_the_group_it_wrote_and_everything_after() {
    let (writer, log, _holding, _release) = start();
    let (tell, heard) = mpsc::channel();
    let a = notifier("a", &tell);
    writer
        .send_group(checkpoint("panic"), 1, a.clone())
        .unwrap();
    let panicked = "a failed: the journal's sink failed: the store's writer thread panicked";
    assert_eq!(notices(&heard, 1), [panicked]);
    writer.send_group(checkpoint("g2"), 2, a).unwrap();
    assert_eq!(notices(&heard, 1), [panicked]);
    let error = writer.call(checkpoint("c")).unwrap_err();
    assert_eq!(error.to_string(), "the store's writer thread panicked");
    drop(writer);
    assert_eq!(log_of(&log), [vec!["closed"]]);
}

#[test]
fn a_sink_group_counts_its_groups_and_commits_through_the_writer() {
    let (writer, log, _holding, _release) = start();
    let refused =
        || -> Result<&WriterThread<Logged>, TestError> { Err(TestError("no writer".to_owned())) };
    let mut sink = SinkGroup::default();
    // Nothing recorded, no notifier: durable at once, the writer not looked at.
    assert_eq!(sink.commit(refused()).unwrap(), Commit::Durable);
    // Something recorded and no writer: the writer's refusal, and the group is gone.
    sink.checkpoint(b"x");
    assert_eq!(
        sink.commit(refused()).unwrap_err().to_string(),
        "the journal's sink failed: no writer"
    );
    // Without a notifier a commit waits for the write.
    sink.checkpoint(b"w1");
    sink.checkpoint(b"w2");
    assert_eq!(sink.commit(Ok(&writer)).unwrap(), Commit::Durable);
    assert_eq!(log_of(&log), [vec!["w1", "w2"]]);
    // With one, it is queued; groups count from 1 (the refused one did not count),
    // and from 1 again after a start, which drops what was not committed.
    let (tell, heard) = mpsc::channel();
    sink.notify_with(notifier("n", &tell));
    sink.checkpoint(b"q");
    assert_eq!(sink.commit(Ok(&writer)).unwrap(), Commit::Queued);
    assert_eq!(notices(&heard, 1), ["n durable 2"]);
    sink.checkpoint(b"dropped");
    sink.start();
    assert_eq!(sink.commit(Ok(&writer)).unwrap(), Commit::Queued);
    assert_eq!(notices(&heard, 1), ["n durable 1"]);
    drop(writer);
    let empty: Vec<&str> = Vec::new();
    assert_eq!(
        log_of(&log),
        [vec!["w1", "w2"], vec!["q"], empty, vec!["closed"]]
    );
}
