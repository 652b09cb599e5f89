//! `forget`: ended tasks leave the table, their indexes are reused, their ids never are.

use serde_json::{Value, json};
use spool::{
    CancelError, CancelReason, Delivery, DropReason, Kind, Request, Step, TaskId, TaskState,
    TestScheduler, task_fn,
};

use crate::support::{ask_once, held_keys};

/// A task that makes one held `tool:x` request and finishes with its answer.
fn one_request(scheduler: &mut TestScheduler, name: &'static str) -> TaskId {
    scheduler.spawn(ask_once(name, Request::tool("x", json!(name))))
}

#[test]
fn forget_removes_only_ended_tasks() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let done = scheduler.spawn(task_fn("done", |_cx| Step::done("v")));
    let live = one_request(&mut scheduler, "live");
    scheduler.step_until_idle();
    assert_eq!(scheduler.core().len(), 2);

    assert_eq!(scheduler.core_mut().forget(live), None, "a live task stays");
    assert_eq!(
        scheduler.core().task_state(live),
        Some(TaskState::Waiting(spool::WaitReason::Request(Kind::tool(
            "x"
        ))))
    );

    assert_eq!(
        scheduler.core_mut().forget(done),
        Some(TaskState::Completed(Ok(json!("v"))))
    );
    assert_eq!(scheduler.core().task_state(done), None);
    assert_eq!(scheduler.core_mut().forget(done), None, "forgetting twice");
    assert_eq!(scheduler.core().len(), 1);
    assert_eq!(
        scheduler.core().tasks().map(|t| t.id).collect::<Vec<_>>(),
        [live]
    );
    assert_eq!(scheduler.cancel(done), Err(CancelError::UnknownTask(done)));
}

#[test]
fn stale_key_after_index_reuse_is_dropped_as_unknown_task() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let old = one_request(&mut scheduler, "old");
    scheduler.step_until_idle();
    let old_key = held_keys(&scheduler)[0];
    scheduler.cancel(old).unwrap();
    assert_eq!(
        scheduler.core_mut().forget(old),
        Some(TaskState::Canceled(CancelReason::Requested))
    );

    let new = one_request(&mut scheduler, "new");
    scheduler.step_until_idle();
    let new_key = held_keys(&scheduler)[0];
    assert_eq!(new, TaskId::from_raw(2), "ids are never reused");
    assert_eq!((new_key.task(), new_key.number()), (new, old_key.number()));
    let index = |key| serde_json::to_value(key).unwrap()["slot"].clone();
    assert_eq!(
        index(new_key),
        index(old_key),
        "the new task reuses the old one's index"
    );
    assert_ne!(index(new_key), Value::Null);

    // The old task's late answer must not reach the new task at its index.
    assert_eq!(
        scheduler.answer(old_key, "stale"),
        Delivery::Dropped(DropReason::UnknownTask)
    );
    assert_eq!(
        scheduler.task_state(new),
        TaskState::Waiting(spool::WaitReason::Request(Kind::tool("x")))
    );
    assert_eq!(
        held_keys(&scheduler),
        [new_key],
        "a stale answer does not unhold the new request"
    );
    assert_eq!(scheduler.cancel(old), Err(CancelError::UnknownTask(old)));

    assert_eq!(scheduler.answer(new_key, "fresh"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(new),
        TaskState::Completed(Ok(json!("fresh")))
    );
    assert_eq!(scheduler.core().task_state(old), None);
    let stats = scheduler.stats();
    assert_eq!((stats.answers, stats.dropped_answers), (1, 1));
}

/// A task canceled and forgotten while its request still waits in the outbox leaves a
/// stale outbox entry behind; a new task that reuses the index must not have its own
/// request sent twice because of it.
#[test]
fn a_stale_outbox_entry_never_sends_the_next_tenant_of_its_index() {
    use spool::{Config, NewTask, Scheduler, Time};

    let now = Time::ZERO;
    let mut core = Scheduler::new(Config::new());
    let asker = || {
        let mut asked = false;
        task_fn("asker", move |cx| {
            if !asked {
                asked = true;
                cx.tool("x", json!("once"));
                return Step::Wait;
            }
            Step::done(
                cx.take_answer()
                    .map_or(Value::Null, |a| a.result.unwrap_or_default()),
            )
        })
    };
    let first = core.submit(now, NewTask::new(asker())).unwrap().id;
    assert_eq!(core.step(now), Some(first));
    // Canceled and forgotten before the driver took its request from the outbox.
    core.cancel(now, first, CancelReason::Requested).unwrap();
    assert!(core.forget(first).is_some());
    assert_eq!(
        core.poll_cancel(),
        None,
        "a request that never left gets no cancel signal"
    );

    let second = core.submit(now, NewTask::new(asker())).unwrap().id;
    assert_eq!(core.step(now), Some(second));
    let sent: Vec<_> = std::iter::from_fn(|| core.poll_request())
        .map(|out| out.key)
        .collect();
    assert_eq!(sent.len(), 1, "sent {sent:?}");
    assert_eq!(sent[0].task(), second);
    assert_eq!(sent[0].number(), 1);
}
