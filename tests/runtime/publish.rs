//! Publication: the loop hands its publisher the runtime and every trace event once,
//! at most once per interval, and wakes to publish a change made within it.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spool::{Kind, NewTask, Runtime, Step, from_fn, task_fn};

use crate::support::{LIMIT, ShutdownOnDrop, wait_until, within};

/// One publication as the test saw it: when, the live tasks then, and the events'
/// sequence numbers.
#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    live: usize,
    seqs: Vec<u64>,
}

fn recorder() -> (
    Arc<Mutex<Vec<Seen>>>,
    impl FnMut(&mut spool::Publication<'_>) + Send,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let f = move |publication: &mut spool::Publication<'_>| {
        let seqs = publication.take_events().iter().map(|e| e.seq).collect();
        let live = publication.runtime().scheduler().live_len();
        sink.lock().unwrap().push(Seen {
            at: Instant::now(),
            live,
            seqs,
        });
    };
    (seen, f)
}

/// A task that asks the LLM once and finishes with its answer.
fn ask() -> NewTask {
    let mut asked = false;
    NewTask::new(task_fn("ask", move |cx| {
        if !asked {
            asked = true;
            cx.llm(json!("hi"));
            return Step::Wait;
        }
        Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
    }))
}

#[test]
fn every_trace_event_is_published_once_and_in_order() {
    let (seen, publish) = recorder();
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, from_fn(|_| Ok(json!("ok"))))
        .publish(Duration::from_millis(5), publish)
        .build();
    for _ in 0..50 {
        runtime.submit(ask()).unwrap();
    }
    runtime.run_until_idle();
    let seqs: Vec<u64> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|s| s.seqs.clone())
        .collect();
    // Per task: submitted, scheduled, waiting, answered, scheduled, completed.
    assert_eq!(seqs, (1..=300).collect::<Vec<u64>>());
    // The last publication saw the runtime at its end.
    assert_eq!(seen.lock().unwrap().last().map(|s| s.live), Some(0));
}

#[test]
fn publications_are_spaced_and_a_late_change_is_published_without_more_input() {
    let every = Duration::from_millis(40);
    let (seen, publish) = recorder();
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, from_fn(|_| Ok(json!("ok"))))
        .publish(every, publish)
        .build();
    let handle = runtime.handle();
    let watched = seen.clone();
    let client = thread::spawn(move || {
        let _guard = ShutdownOnDrop(handle.clone());
        for _ in 0..20 {
            handle.submit(ask()).unwrap();
            thread::sleep(Duration::from_millis(3));
        }
        // The last task ends within `every` of a publication; its events are
        // published all the same, though nothing else happens.
        wait_until("every event published", || {
            let events: usize = watched.lock().unwrap().iter().map(|s| s.seqs.len()).sum();
            (events == 120).then_some(())
        });
        // Idle: nothing changes, so nothing more is published.
        let before = watched.lock().unwrap().len();
        thread::sleep(every * 4);
        assert_eq!(watched.lock().unwrap().len(), before);
    });
    within(LIMIT, "the loop", move || {
        runtime.run();
    });
    client.join().unwrap();
    let seen = seen.lock().unwrap();
    for pair in seen.windows(2) {
        // The last one, at shutdown, may come sooner.
        if pair[1].seqs.is_empty() {
            continue;
        }
        assert!(
            pair[1].at - pair[0].at >= every,
            "two publications {:?} apart",
            pair[1].at - pair[0].at
        );
    }
}
