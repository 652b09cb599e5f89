//! Exactly once across retention and restarts: a keyed task's result is evicted, the
//! process goes away, and a resubmission with its key to the recovered runtime is
//! refused, naming the original task.

use std::time::Duration;

use spool_core::{Admission, Config, NewTask, RejectReason};
use spool_store::Store;

use crate::tasks::{Stopper, Worker, builder, registry};

#[test]
fn a_key_whose_result_was_evicted_is_refused_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.spool");
    let config = || Config::new().retention(Duration::from_millis(1));

    // The first life: `bob` runs with its key, ends, and its result is evicted.
    let store = Store::open(&path).unwrap();
    let mut runtime = builder(&Stopper::default(), 50, false)
        .config(config())
        .journal(store)
        .build();
    let bob = runtime
        .submit(NewTask::new(Worker::new("bob", 4, None)).key("bob-1"))
        .unwrap();
    assert_eq!(bob.admission, Admission::Ready);
    runtime.run_until_idle();
    assert!(runtime.task_state(bob.id).is_some_and(|s| s.is_ok()));
    std::thread::sleep(Duration::from_millis(5));
    // A later submission moves the clock past the retention.
    runtime
        .submit(NewTask::new(Worker::new("eve", 1, None)))
        .unwrap();
    runtime.run_until_idle();
    assert_eq!(runtime.task_state(bob.id), None, "evicted");
    let ended_at = runtime
        .scheduler()
        .key("bob-1")
        .and_then(|k| k.ended_at)
        .expect("the key is remembered");
    assert_eq!(runtime.journal_error(), None);
    drop(runtime);

    // The second life, from the store.
    let store = Store::open(&path).unwrap();
    let journal = store.recover().unwrap().expect("a journal");
    let mut runtime = builder(&Stopper::default(), 50, false)
        .config(config())
        .recover(&journal, &registry())
        .unwrap()
        .journal(store)
        .build();
    let again = runtime
        .submit(NewTask::new(Worker::new("bob", 4, None)).key("bob-1"))
        .unwrap();
    assert_eq!(
        again.admission,
        Admission::Rejected {
            reason: RejectReason::AlreadyEnded {
                key: "bob-1".into(),
                original: bob.id,
                ended_at,
            }
        }
    );
    // Nothing runs in the second life: the refused task is a result, never polled.
    let requests_before = runtime.scheduler().stats().requests;
    let report = runtime.run_until_idle();
    assert_eq!((report.steps, report.stats.requests), (0, requests_before));
}
