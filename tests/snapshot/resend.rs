//! Going on from a journal: a request that was answered 429 and sent again before the
//! process died is sent once by the next process, not once for each time its gate let
//! it go in the replay.

use std::time::Duration;

use spool::{
    Config, Journal, Kind, NewTask, RequestError, RequestKey, RequestLimits, Response, Scheduler,
    Time,
};

use crate::tasks::{Asker, registry};

/// Every request the driver takes now, by key.
fn take_all(scheduler: &mut Scheduler) -> Vec<RequestKey> {
    std::iter::from_fn(|| scheduler.poll_request())
        .map(|out| out.key)
        .collect()
}

/// A scheduler whose LLM gate lets one request out at a time, recording its journal
/// from the start: an asker's request is sent, answered 429 (`Retry-After: 1s`), sent
/// again when the back-off ends, and is still out when the process dies. Gives the
/// journal and the request's key.
fn refused_then_resent() -> (Journal, RequestKey) {
    let mut scheduler =
        Scheduler::new(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 1)));
    let mut journal = Journal::starting_from(&scheduler).unwrap();
    scheduler.record_journal(true);
    scheduler
        .submit(Time::ZERO, NewTask::new(Asker::new(1)))
        .unwrap();
    while scheduler.step(Time::ZERO).is_some() {}
    let sent = take_all(&mut scheduler);
    assert_eq!(sent.len(), 1);
    let key = sent[0];
    let refused = Response::new(
        key,
        Err(RequestError::RateLimited {
            retry_after: Some(Duration::from_secs(1)),
        }),
    );
    let _ = scheduler.handle_response(Time::from_duration(Duration::from_millis(10)), refused);
    assert_eq!(take_all(&mut scheduler), []);
    let backoff_end = scheduler.poll_timeout().unwrap();
    scheduler.handle_timeout(backoff_end);
    // The same request goes again, once; it is out when the process dies.
    assert_eq!(take_all(&mut scheduler), [key]);
    while let Some(entry) = scheduler.poll_journal() {
        journal.entries.push(entry);
    }
    (journal, key)
}

/// The replay lets the request through its gate twice (before the 429 and after the
/// back-off) without a driver taking it either time; the recovered scheduler sends it
/// once, so the executor holds no more requests than the gate's limit of one.
#[test]
fn a_request_sent_again_after_a_429_goes_once_from_the_replayed_journal() {
    let (journal, key) = refused_then_resent();
    let mut recovered = Scheduler::replay(&journal, &registry()).unwrap().scheduler;
    recovered.resend_in_flight();
    assert_eq!(take_all(&mut recovered), [key]);
}

/// The same through a snapshot of the replayed scheduler (a checkpoint written before
/// the driver took anything): its queue of requests out is restored as it was.
#[test]
fn a_request_sent_again_after_a_429_goes_once_from_a_snapshot_of_the_replay() {
    let (journal, key) = refused_then_resent();
    let replayed = Scheduler::replay(&journal, &registry()).unwrap().scheduler;
    let snapshot = replayed.snapshot().unwrap();
    let mut restored = Scheduler::restore(&snapshot, &registry()).unwrap();
    restored.resend_in_flight();
    assert_eq!(take_all(&mut restored), [key]);
}

/// Three askers through a gate of two: A's request is refused and backs off, C's goes
/// when the back-off ends, A's goes again when B's answer makes room, and the process
/// dies with C's and A's requests out. The recovered scheduler sends them once each,
/// in the order the run did: A's key, queued in the replay before its 429, is not
/// where it goes from.
#[test]
fn requests_out_after_a_429_go_again_in_the_order_the_run_sent_them() {
    let ms = |n: u64| Time::from_duration(Duration::from_millis(n));
    let mut scheduler =
        Scheduler::new(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 2)));
    let mut journal = Journal::starting_from(&scheduler).unwrap();
    scheduler.record_journal(true);
    for _ in 0..3 {
        scheduler
            .submit(Time::ZERO, NewTask::new(Asker::new(1)))
            .unwrap();
    }
    while scheduler.step(Time::ZERO).is_some() {}
    let first = take_all(&mut scheduler);
    assert_eq!(first.len(), 2);
    let (a, b) = (first[0], first[1]);
    let refused = Response::new(
        a,
        Err(RequestError::RateLimited {
            retry_after: Some(Duration::from_secs(1)),
        }),
    );
    let _ = scheduler.handle_response(ms(10), refused);
    let backoff_end = scheduler.poll_timeout().unwrap();
    scheduler.handle_timeout(backoff_end);
    let second = take_all(&mut scheduler);
    assert_eq!(second.len(), 1);
    let c = second[0];
    assert!(c != a && c != b);
    let _ = scheduler.handle_response(ms(1500), Response::new(b, Ok(serde_json::json!(1))));
    while scheduler.step(ms(1500)).is_some() {}
    assert_eq!(take_all(&mut scheduler), [a]);
    while let Some(entry) = scheduler.poll_journal() {
        journal.entries.push(entry);
    }

    let mut recovered = Scheduler::replay(&journal, &registry()).unwrap().scheduler;
    recovered.resend_in_flight();
    assert_eq!(take_all(&mut recovered), [c, a]);
}

/// What the crash test's lives did: a life replays the journal, writes where it starts
/// as its first checkpoint, and dies; the next life restores that checkpoint. The
/// journal ends while the asker's request, answered 429, waits for the back-off to end
/// behind a gate of one, with another asker's request held behind it. The restored
/// scheduler sends nothing until the back-off ends, then one request at a time: the
/// refused request does not go at once, past its back-off and uncounted by its gate.
#[test]
fn a_request_backing_off_at_the_end_of_the_journal_waits_in_a_snapshot_of_the_replay() {
    let mut scheduler =
        Scheduler::new(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 1)));
    let mut journal = Journal::starting_from(&scheduler).unwrap();
    scheduler.record_journal(true);
    for _ in 0..2 {
        scheduler
            .submit(Time::ZERO, NewTask::new(Asker::new(1)))
            .unwrap();
    }
    while scheduler.step(Time::ZERO).is_some() {}
    let sent = take_all(&mut scheduler);
    assert_eq!(sent.len(), 1);
    let refused = Response::new(
        sent[0],
        Err(RequestError::RateLimited {
            retry_after: Some(Duration::from_secs(1)),
        }),
    );
    let _ = scheduler.handle_response(Time::from_duration(Duration::from_millis(10)), refused);
    assert_eq!(take_all(&mut scheduler), []);
    let backoff_end = scheduler.poll_timeout().unwrap();
    while let Some(entry) = scheduler.poll_journal() {
        journal.entries.push(entry);
    }

    let mut replayed = Scheduler::replay(&journal, &registry()).unwrap().scheduler;
    replayed.resend_in_flight();
    let checkpoint = replayed.snapshot().unwrap();
    let mut restored = Scheduler::restore(&checkpoint, &registry()).unwrap();
    restored.resend_in_flight();
    assert_eq!(take_all(&mut restored), []);
    restored.handle_timeout(backoff_end);
    let first = take_all(&mut restored);
    assert_eq!(first.len(), 1);
    let _ = restored.handle_response(
        backoff_end,
        Response::new(first[0], Ok(serde_json::json!(1))),
    );
    while restored.step(backoff_end).is_some() {}
    let second = take_all(&mut restored);
    assert_eq!(second.len(), 1);
    assert_ne!(first, second);
}
