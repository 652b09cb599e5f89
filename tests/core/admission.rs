//! Admission and what follows it: queue caps (global and per agent) and duplicate keys
//! that reject a submission, which stays visible as a result; the per-type running cap
//! (`plan: 2`); dependencies (cascading cancels, several dependencies,
//! cycles and unknown tasks); deadlines that pass while a task waits for a slot or
//! while its request is in flight; and retention of ended results for a TTL,
//! down to a million short tasks in a table that does not grow.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::json;
use spool::{
    Admission, AgentTask, AgentTaskLimits, CancelReason, CancelSignal, Config, Delivery, Dep,
    DropReason, Kind, NewTask, PolicyChoice, RejectReason, Request, RequestError, RequestKey,
    Response, Scheduler, Step, SubmitError, TaskError, TaskId, TaskLimits, TaskState,
    TestScheduler, Time, WaitReason, task_fn,
};

use crate::support::{ask_once, assert_trace_continuous};

fn t(n: u64) -> TaskId {
    TaskId::from_raw(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at(d: Duration) -> Time {
    Time::ZERO + d
}

/// A task of type `name` that makes one held LLM request and finishes with its answer:
/// it holds its slot until the test answers.
fn holder(name: &'static str) -> impl AgentTask {
    ask_once(name, Request::llm(json!(name)))
}

/// A task of type `name` that makes one LLM request and fails with the request's error
/// if it fails, or finishes with its answer.
fn fetcher(name: &'static str) -> impl AgentTask {
    let mut asked = false;
    task_fn(name, move |cx| {
        if !asked {
            asked = true;
            cx.llm(json!(name));
            return Step::Wait;
        }
        match cx.take_answer() {
            Some(answer) => Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number))),
            None => Step::fail("resumed without an answer"),
        }
    })
}

/// A task of type `name` that finishes on its first poll.
fn quick(name: &'static str) -> impl AgentTask {
    task_fn(name, move |_cx| Step::done(json!(name)))
}

/// A test scheduler with `config` (trace recorded), LLM requests held for the test.
fn with_config(config: Config) -> TestScheduler {
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config.record_trace(true)));
    ts.hold(Kind::Llm);
    ts
}

/// The key of task `id`'s held request.
fn held_key(ts: &TestScheduler, id: TaskId) -> RequestKey {
    ts.held_requests()
        .iter()
        .map(|h| h.request.key)
        .find(|k| k.task() == id)
        .unwrap_or_else(|| panic!("task {id} has no held request"))
}

/// Ends task `id` well: answers its held request and runs what that frees.
fn complete(ts: &mut TestScheduler, id: TaskId) {
    let key = held_key(ts, id);
    assert_eq!(ts.answer(key, json!("done")), Delivery::Delivered);
    ts.step_until_idle();
    assert!(ts.task_state(id).is_ok(), "task {id} completed");
}

/// Task `id`'s trace events, as `time from -> to (cause)`.
fn trace_of(ts: &TestScheduler, id: TaskId) -> Vec<String> {
    ts.trace_events()
        .iter()
        .filter(|e| e.task == id)
        .map(|e| format!("{} {} -> {} ({})", e.time, e.from, e.to, e.cause))
        .collect()
}

fn rejected(id: TaskId, reason: RejectReason) -> TaskState {
    TaskState::Completed(Err(TaskError::Rejected { task: id, reason }))
}

// ---------------------------------------------------------------------------------
// Queue caps and duplicate keys.
// ---------------------------------------------------------------------------------

/// With at most 2 tasks queued (waiting for a slot or for dependencies), a third is
/// rejected with `QueueFull { limit: 2 }`; it never runs, stays visible as
/// `Completed(Err(Rejected))`, and the queue takes tasks again once it has room.
#[test]
fn a_full_queue_rejects_with_its_limit_and_the_rejected_task_stays_a_result() {
    let mut ts = with_config(Config::new().limits(TaskLimits::new().max_running(1).max_queued(2)));
    let running = ts.admit(NewTask::new(holder("running")));
    assert_eq!(running.admission, Admission::Ready);
    ts.step_until_idle();
    let waits = ts.admit(NewTask::new(holder("waits")));
    assert_eq!(
        waits.admission,
        Admission::Queued {
            position: 1,
            estimated_wait: secs(30)
        }
    );
    let blocked = ts.admit(NewTask::new(holder("blocked")).after(waits.id));
    assert_eq!(blocked.admission, Admission::Blocked { dependencies: 1 });

    let third = ts.admit(NewTask::new(holder("third")));
    let reason = RejectReason::QueueFull { limit: 2 };
    assert_eq!(
        third.admission,
        Admission::Rejected {
            reason: reason.clone()
        }
    );
    assert_eq!(third.id, t(4));
    assert_eq!(ts.task_state(third.id), rejected(t(4), reason.clone()));
    assert_eq!(
        TaskError::Rejected { task: t(4), reason }.to_string(),
        "task 4 was rejected: the queue is full (2 tasks)"
    );
    assert_eq!(
        trace_of(&ts, third.id),
        ["0.000s New -> Completed(error) (rejected)"]
    );
    ts.step_until_idle();
    assert!(
        ts.queue_details().iter().all(|d| d.id != third.id),
        "a rejected task is not live"
    );
    let stats = ts.stats();
    assert_eq!(
        (
            stats.submitted,
            stats.rejected,
            stats.polls,
            stats.peak_queued
        ),
        (4, 1, 1, 2)
    );

    // `running` ends: `waits` gets the slot, and the queue has room again.
    complete(&mut ts, running.id);
    assert_eq!(
        ts.task_state(waits.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    let fourth = ts.admit(NewTask::new(holder("fourth")));
    assert_eq!(
        fourth.admission,
        Admission::Queued {
            position: 1,
            estimated_wait: Duration::ZERO
        }
    );
    assert_eq!(
        ts.task_state(third.id),
        rejected(t(4), RejectReason::QueueFull { limit: 2 }),
        "the rejected result is still there"
    );
}

/// With at most 1 task queued per agent, alice's second queued task is rejected with
/// `AgentQueueFull { agent: "alice", limit: 1 }` while bob still queues; once alice's
/// queued task starts, alice may queue again.
#[test]
fn an_agent_with_a_full_queue_is_rejected_and_other_agents_still_queue() {
    let mut ts =
        with_config(Config::new().limits(TaskLimits::new().max_running(1).max_queued_per_agent(1)));
    let ops = ts.admit(NewTask::new(holder("ops")).agent("ops"));
    assert_eq!(ops.admission, Admission::Ready);
    ts.step_until_idle();

    let alice1 = ts.admit(NewTask::new(holder("alice-1")).agent("alice"));
    assert_eq!(
        alice1.admission,
        Admission::Queued {
            position: 1,
            estimated_wait: secs(30)
        }
    );
    let alice2 = ts.admit(NewTask::new(holder("alice-2")).agent("alice"));
    let reason = RejectReason::AgentQueueFull {
        agent: "alice".into(),
        limit: 1,
    };
    assert_eq!(
        alice2.admission,
        Admission::Rejected {
            reason: reason.clone()
        }
    );
    assert_eq!(
        ts.task_state(alice2.id),
        rejected(alice2.id, reason.clone())
    );
    assert_eq!(
        reason.to_string(),
        "agent `alice` has 1 tasks queued already"
    );
    let bob = ts.admit(NewTask::new(holder("bob")).agent("bob"));
    assert_eq!(
        bob.admission,
        Admission::Queued {
            position: 2,
            estimated_wait: secs(60)
        }
    );

    complete(&mut ts, ops.id);
    assert_eq!(
        ts.task_state(alice1.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    let alice3 = ts.admit(NewTask::new(holder("alice-3")).agent("alice"));
    assert!(
        matches!(alice3.admission, Admission::Queued { position: 2, .. }),
        "{:?}",
        alice3.admission
    );
    assert_eq!(ts.stats().rejected, 1);
}

/// Limits of one agent's own replace the per-agent ones for it alone: "batch" may run
/// one task and queue one, every other agent two and five. Its second task queues
/// while "chat" starts two; its third is rejected with its own limit.
#[test]
fn an_agent_with_limits_of_its_own_is_held_to_them_and_the_others_to_the_common_ones() {
    let limits = TaskLimits::new()
        .max_running_per_agent(2)
        .max_queued_per_agent(5)
        .agent("batch", AgentTaskLimits::new().max_running(1).max_queued(1));
    let mut ts = with_config(Config::new().limits(limits));
    let batch1 = ts.admit(NewTask::new(holder("batch-1")).agent("batch"));
    let batch2 = ts.admit(NewTask::new(holder("batch-2")).agent("batch"));
    let chat1 = ts.admit(NewTask::new(holder("chat-1")).agent("chat"));
    let chat2 = ts.admit(NewTask::new(holder("chat-2")).agent("chat"));
    let batch3 = ts.admit(NewTask::new(holder("batch-3")).agent("batch"));
    ts.step_until_idle();
    assert_eq!(batch1.admission, Admission::Ready);
    assert!(
        matches!(batch2.admission, Admission::Queued { .. }),
        "{:?}",
        batch2.admission
    );
    assert_eq!(
        (chat1.admission, chat2.admission),
        (Admission::Ready, Admission::Ready)
    );
    let reason = RejectReason::AgentQueueFull {
        agent: "batch".into(),
        limit: 1,
    };
    assert_eq!(batch3.admission, Admission::Rejected { reason });
    assert_eq!(
        ts.task_state(batch2.id),
        TaskState::Waiting(WaitReason::Slot)
    );
    complete(&mut ts, batch1.id);
    assert_eq!(
        ts.task_state(batch2.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
}

/// A key is taken while its task is live, running or queued: a second submission with
/// it is rejected as `Duplicate` naming the live task. The rejected duplicate does not
/// take the key; when the first task ends (completed or canceled) the key stays taken
/// for the idempotency window, and a submission is rejected as `AlreadyEnded`.
#[test]
fn a_duplicate_key_is_rejected_while_the_first_is_live_and_after_it_ended() {
    let mut ts = with_config(Config::new().limits(TaskLimits::new().max_running(1)));
    let first = ts.admit(NewTask::new(holder("report")).key("report"));
    assert_eq!(first.admission, Admission::Ready);
    ts.step_until_idle();
    let queued = ts.admit(NewTask::new(holder("digest")).key("digest"));
    assert!(matches!(queued.admission, Admission::Queued { .. }));

    let dup_running = ts.admit(NewTask::new(holder("report")).key("report"));
    let dup_queued = ts.admit(NewTask::new(holder("digest")).key("digest"));
    let report = RejectReason::Duplicate {
        key: "report".into(),
        existing: first.id,
    };
    let digest = RejectReason::Duplicate {
        key: "digest".into(),
        existing: queued.id,
    };
    assert_eq!(
        dup_running.admission,
        Admission::Rejected {
            reason: report.clone()
        }
    );
    assert_eq!(
        dup_queued.admission,
        Admission::Rejected {
            reason: digest.clone()
        }
    );
    assert_eq!(
        ts.task_state(dup_running.id),
        rejected(dup_running.id, report)
    );
    assert_eq!(
        ts.task_state(dup_queued.id),
        rejected(dup_queued.id, digest)
    );
    assert_eq!(
        TaskError::Rejected {
            task: dup_running.id,
            reason: RejectReason::Duplicate {
                key: "report".into(),
                existing: first.id
            }
        }
        .to_string(),
        "task 3 was rejected: task 1 with key `report` is still live"
    );

    // The first ends well, the queued one is canceled: both keys stay taken.
    complete(&mut ts, first.id);
    ts.advance(secs(5));
    ts.cancel(queued.id).unwrap();
    ts.step_until_idle();
    let again = ts.admit(NewTask::new(holder("report")).key("report"));
    let report_ended = RejectReason::AlreadyEnded {
        key: "report".into(),
        original: first.id,
        ended_at: Time::ZERO,
    };
    assert_eq!(
        again.admission,
        Admission::Rejected {
            reason: report_ended.clone()
        }
    );
    assert_eq!(
        report_ended.to_string(),
        "task 1 with key `report` already ran (it ended at 0.000s); \
         a key runs once within the idempotency window"
    );
    let digest_again = ts.admit(NewTask::new(holder("digest")).key("digest"));
    assert_eq!(
        digest_again.admission,
        Admission::Rejected {
            reason: RejectReason::AlreadyEnded {
                key: "digest".into(),
                original: queued.id,
                ended_at: at(secs(5)),
            }
        }
    );
    assert_eq!(ts.stats().rejected, 4);
}

/// A zero idempotency window gives a key back as its task ends: the next submission
/// with it is accepted.
#[test]
fn a_zero_idempotency_window_frees_a_key_when_its_task_ends() {
    let mut ts = with_config(Config::new().idempotency_window(Some(Duration::ZERO)));
    let first = ts.admit(NewTask::new(holder("report")).key("report"));
    ts.step_until_idle();
    complete(&mut ts, first.id);
    assert_eq!(ts.core().key("report"), None);
    let again = ts.admit(NewTask::new(holder("report")).key("report"));
    assert_eq!(again.admission, Admission::Ready);
}

/// Exactly once does not hang on retention: a keyed task's result is evicted after the
/// 600 s retention, the scheduler is snapshotted and restored (a restart), and a
/// submission with the key is still refused, naming the original task, until the
/// one-hour idempotency window has run out; then the key is free.
#[test]
fn an_ended_key_outlives_retention_and_a_restart_until_its_window_runs_out() {
    let config = Config::new()
        .retention(secs(600))
        .idempotency_window(Some(secs(3600)));
    let mut ts = with_config(config);
    let first = ts.admit(NewTask::new(holder("report")).key("report-7"));
    ts.step_until_idle();
    ts.advance(secs(10));
    complete(&mut ts, first.id);
    ts.advance(secs(700));
    assert_eq!(ts.core().task_state(first.id), None, "evicted");
    assert_eq!(ts.stats().evicted, 1);
    let held = ts.core().key("report-7").expect("the key is remembered");
    assert_eq!((held.task, held.ended_at), (first.id, Some(at(secs(10)))));

    // A restart: the snapshot carries the record.
    let snapshot = ts.snapshot().unwrap();
    let bytes = snapshot.encode().unwrap();
    let mut ts = TestScheduler::restore(
        &spool::Snapshot::decode(&bytes).unwrap(),
        &spool::TaskRegistry::new(),
    )
    .unwrap();
    ts.hold(Kind::Llm);
    let refused = ts.admit(NewTask::new(holder("report")).key("report-7"));
    assert_eq!(
        refused.admission,
        Admission::Rejected {
            reason: RejectReason::AlreadyEnded {
                key: "report-7".into(),
                original: first.id,
                ended_at: at(secs(10)),
            }
        }
    );
    // The window ends an hour after the task did: at 3,610 s.
    let to_end = at(secs(3610)) - ts.now();
    ts.advance(to_end - ms(1));
    assert!(ts.core().key("report-7").is_some());
    ts.advance(ms(1));
    assert_eq!(ts.core().key("report-7"), None);
    let again = ts.admit(NewTask::new(holder("report")).key("report-7"));
    assert_eq!(again.admission, Admission::Ready);
}

/// A per-type limit `plan: 2`: with ten slots, a third plan waits while two plans run,
/// and a spec submitted after it starts at once (a type at its cap holds no other type
/// back). Plans start as running plans end, in submission order, and never more than
/// two run at once.
#[test]
fn at_most_two_plans_run_at_once_and_other_types_are_not_held_back() {
    let mut ts = with_config(
        Config::new().policy(PolicyChoice::Fifo).limits(
            TaskLimits::new()
                .max_running(10)
                .max_running_per_type("plan", 2),
        ),
    );
    let running_plans = |ts: &TestScheduler| {
        ts.queue_details()
            .iter()
            .filter(|d| d.type_name == "plan" && d.state != TaskState::Waiting(WaitReason::Slot))
            .count()
    };

    let plan1 = ts.admit(NewTask::new(holder("plan")));
    let plan2 = ts.admit(NewTask::new(holder("plan")));
    let plan3 = ts.admit(NewTask::new(holder("plan")));
    let spec = ts.admit(NewTask::new(holder("spec")));
    let plan4 = ts.admit(NewTask::new(holder("plan")));
    assert_eq!(
        [&plan1, &plan2, &plan3, &spec, &plan4].map(|s| s.admission.clone()),
        [
            Admission::Ready,
            Admission::Ready,
            Admission::Queued {
                position: 1,
                estimated_wait: secs(3)
            },
            Admission::Ready,
            Admission::Queued {
                position: 2,
                estimated_wait: secs(6)
            },
        ]
    );
    ts.step_until_idle();
    assert_eq!(running_plans(&ts), 2);
    assert_eq!(
        ts.task_state(spec.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert_eq!(
        (ts.task_state(plan3.id), ts.task_state(plan4.id)),
        (
            TaskState::Waiting(WaitReason::Slot),
            TaskState::Waiting(WaitReason::Slot)
        )
    );

    // The spec ending frees a slot but no plan slot.
    complete(&mut ts, spec.id);
    assert_eq!(running_plans(&ts), 2);
    assert_eq!(
        ts.task_state(plan3.id),
        TaskState::Waiting(WaitReason::Slot)
    );

    complete(&mut ts, plan2.id);
    assert_eq!(running_plans(&ts), 2);
    assert_eq!(
        ts.task_state(plan3.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert_eq!(
        ts.task_state(plan4.id),
        TaskState::Waiting(WaitReason::Slot)
    );

    complete(&mut ts, plan1.id);
    assert_eq!(running_plans(&ts), 2);
    complete(&mut ts, plan3.id);
    complete(&mut ts, plan4.id);
    let admitted: Vec<TaskId> = ts
        .trace_events()
        .iter()
        .filter(|e| e.cause == spool::Cause::Admitted)
        .map(|e| e.task)
        .collect();
    // The spec went through the slot queue at once (tasks were queued, so a newcomer
    // goes through the policy), then plan 3 and plan 4 as plan slots freed.
    assert_eq!(admitted, [spec.id, plan3.id, plan4.id]);
    assert_eq!(
        trace_of(&ts, spec.id)[..2],
        [
            "0.000s New -> Waiting(slot) (submitted)",
            "0.000s Waiting(slot) -> Ready (admitted)",
        ]
    );
    assert_eq!(ts.stats().peak_running, 3);
}

// ---------------------------------------------------------------------------------
// Dependencies.
// ---------------------------------------------------------------------------------

/// A chain fetch ← parse ← summarize ← publish (each after the one before): when the
/// fetch fails, the three levels below it are canceled in cascade, each naming the
/// dependency that did not complete; none of them ever runs. A later submission
/// after a failed or canceled task is rejected with `DependencyFailed`.
#[test]
fn a_failed_task_cancels_its_three_level_dependency_chain() {
    let mut ts = with_config(Config::new());
    let submissions = ts
        .submit_all(vec![
            NewTask::new(fetcher("fetch")),
            NewTask::new(quick("parse")).after(Dep::Batch(0)),
            NewTask::new(quick("summarize")).after(Dep::Batch(1)),
            NewTask::new(quick("publish")).after(Dep::Batch(2)),
        ])
        .unwrap();
    let admissions: Vec<(TaskId, Admission)> = submissions
        .iter()
        .map(|s| (s.id, s.admission.clone()))
        .collect();
    assert_eq!(
        admissions,
        [
            (t(1), Admission::Ready),
            (t(2), Admission::Blocked { dependencies: 1 }),
            (t(3), Admission::Blocked { dependencies: 1 }),
            (t(4), Admission::Blocked { dependencies: 1 }),
        ]
    );
    ts.step_until_idle();
    let key = held_key(&ts, t(1));
    let error = RequestError::failed("503 from upstream");
    assert_eq!(ts.respond(key, Err(error.clone())), Delivery::Delivered);
    ts.step_until_idle();

    assert_eq!(
        ts.task_states(),
        [
            (
                t(1),
                TaskState::Completed(Err(TaskError::Request { number: 1, error }))
            ),
            (
                t(2),
                TaskState::Canceled(CancelReason::DependencyFailed(t(1)))
            ),
            (
                t(3),
                TaskState::Canceled(CancelReason::DependencyFailed(t(2)))
            ),
            (
                t(4),
                TaskState::Canceled(CancelReason::DependencyFailed(t(3)))
            ),
        ]
    );
    let stats = ts.stats();
    assert_eq!(
        (stats.polls, stats.failed, stats.canceled, stats.completed),
        (2, 1, 3, 0)
    );
    assert_eq!(ts.queue_state().blocked, 0);
    assert_trace_continuous(&ts);
    insta::assert_snapshot!(ts.trace());

    let late = ts.admit(NewTask::new(quick("archive")).after(t(1)));
    assert_eq!(
        late.admission,
        Admission::Rejected {
            reason: RejectReason::DependencyFailed { dependency: t(1) }
        }
    );
    let after_canceled = ts.admit(NewTask::new(quick("archive")).after(t(4)));
    assert_eq!(
        after_canceled.admission,
        Admission::Rejected {
            reason: RejectReason::DependencyFailed { dependency: t(4) }
        }
    );
    assert_eq!(
        ts.task_state(after_canceled.id),
        rejected(
            after_canceled.id,
            RejectReason::DependencyFailed { dependency: t(4) }
        )
    );
}

/// A task after two others waits for both: the first to complete takes its count from
/// 2 to 1 and it keeps waiting; it becomes ready only when the second completes.
#[test]
fn a_task_on_two_dependencies_is_ready_only_after_both_completed() {
    let mut ts = with_config(Config::new());
    let a = ts.submit(NewTask::new(holder("a")));
    let b = ts.submit(NewTask::new(holder("b")));
    let c = ts.admit(NewTask::new(quick("c")).after(a).after(b));
    assert_eq!(c.admission, Admission::Blocked { dependencies: 2 });
    ts.step_until_idle();

    ts.advance(secs(1));
    complete(&mut ts, b);
    assert_eq!(
        ts.task_state(c.id),
        TaskState::Waiting(WaitReason::Dependencies(1))
    );
    assert_eq!(ts.queue_state().waiting.dependencies, 1);

    ts.advance(secs(1));
    complete(&mut ts, a);
    assert_eq!(ts.task_state(c.id), TaskState::Completed(Ok(json!("c"))));
    assert_eq!(
        trace_of(&ts, c.id),
        [
            "0.000s New -> Waiting(2 dependencies) (submitted)",
            "1.000s Waiting(2 dependencies) -> Waiting(1 dependency) (dependency task 2 completed)",
            "2.000s Waiting(1 dependency) -> Ready (dependency task 1 completed)",
            "2.000s Ready -> Running (scheduled)",
            "2.000s Running -> Completed(ok) (returned)",
        ]
    );
}

/// A batch whose entries 1 → 2 → 3 → 1 depend on each other in a circle is refused
/// whole with `Cycle { cycle: [1, 2, 3] }`: not even its free entry 0 is submitted,
/// and no id is used up. A task that depends on itself is a cycle of one.
#[test]
fn a_dependency_cycle_in_submit_all_is_rejected_and_nothing_is_submitted() {
    let mut ts = with_config(Config::new());
    let result = ts.submit_all(vec![
        NewTask::new(quick("free")),
        NewTask::new(quick("x")).after(Dep::Batch(2)),
        NewTask::new(quick("y")).after(Dep::Batch(3)),
        NewTask::new(quick("z")).after(Dep::Batch(1)),
    ]);
    let error = result.unwrap_err();
    assert_eq!(
        error,
        SubmitError::Cycle {
            cycle: vec![1, 2, 3]
        }
    );
    assert_eq!(
        error.to_string(),
        "the dependencies form a cycle: #1 -> #2 -> #3 -> #1"
    );
    assert_eq!((ts.core().len(), ts.stats().submitted), (0, 0));
    assert!(ts.trace_events().is_empty());

    let alone = ts
        .core_mut()
        .submit(Time::ZERO, NewTask::new(quick("me")).after(Dep::Batch(0)));
    assert_eq!(alone, Err(SubmitError::Cycle { cycle: vec![0] }));
    assert_eq!(ts.core().len(), 0);

    assert_eq!(
        ts.submit(NewTask::new(quick("next"))),
        t(1),
        "no id used up"
    );
}

/// A dependency on a task that is not in the table is refused with
/// `UnknownDependency`, naming the entry and the task; a batch index out of range
/// with `BadBatchIndex`. Nothing of the submission is added.
#[test]
fn an_unknown_dependency_is_refused_with_its_index_and_nothing_is_submitted() {
    let mut ts = with_config(Config::new());
    let result = ts.submit_all(vec![
        NewTask::new(quick("ok")),
        NewTask::new(quick("orphan")).after(t(42)),
    ]);
    let error = result.unwrap_err();
    assert_eq!(
        error,
        SubmitError::UnknownDependency {
            index: 1,
            dependency: t(42)
        }
    );
    assert_eq!(
        error.to_string(),
        "task 1 of the submission depends on task 42, which is not in the table"
    );
    assert_eq!(
        ts.core_mut()
            .submit(Time::ZERO, NewTask::new(quick("orphan")).after(t(42))),
        Err(SubmitError::UnknownDependency {
            index: 0,
            dependency: t(42)
        })
    );
    assert_eq!(
        ts.submit_all(vec![
            NewTask::new(quick("a")).after(Dep::Batch(5)),
            NewTask::new(quick("b")),
        ]),
        Err(SubmitError::BadBatchIndex {
            index: 0,
            dependency: 5,
            len: 2
        })
    );
    assert_eq!((ts.core().len(), ts.stats().submitted), (0, 0));
}

// ---------------------------------------------------------------------------------
// Deadlines.
// ---------------------------------------------------------------------------------

/// A task whose 5 s deadline passes while it waits for a slot fails at 5 s with
/// `DeadlineExceeded { while_queued: true }` without ever running; so does one waiting
/// for a dependency. The running task is not touched, and when it ends nothing is
/// left to admit.
#[test]
fn a_deadline_that_passes_while_queued_fails_the_task_without_running_it() {
    let mut ts = with_config(Config::new().limits(TaskLimits::new().max_running(1)));
    let running = ts.admit(NewTask::new(holder("running")));
    assert_eq!(running.admission, Admission::Ready);
    let queued = ts.admit(NewTask::new(holder("queued")).deadline(secs(5)));
    assert!(matches!(queued.admission, Admission::Queued { .. }));
    let blocked = ts.admit(
        NewTask::new(holder("blocked"))
            .after(running.id)
            .deadline_at(at(secs(5))),
    );
    assert_eq!(blocked.admission, Admission::Blocked { dependencies: 1 });
    ts.step_until_idle();

    ts.advance(secs(5) - ms(1));
    assert_eq!(
        ts.task_state(queued.id),
        TaskState::Waiting(WaitReason::Slot)
    );
    ts.advance(ms(1));

    let missed = |task| {
        TaskState::Completed(Err(TaskError::DeadlineExceeded {
            task,
            deadline: at(secs(5)),
            while_queued: true,
        }))
    };
    assert_eq!(ts.task_state(queued.id), missed(queued.id));
    assert_eq!(ts.task_state(blocked.id), missed(blocked.id));
    assert_eq!(
        ts.task_state(queued.id).to_string(),
        "Completed(error: task 2 missed its deadline while queued)"
    );
    assert_eq!(
        trace_of(&ts, queued.id),
        [
            "0.000s New -> Waiting(slot) (submitted)",
            "5.000s Waiting(slot) -> Completed(error) (deadline exceeded)",
        ]
    );
    assert_eq!(
        trace_of(&ts, blocked.id),
        [
            "0.000s New -> Waiting(1 dependency) (submitted)",
            "5.000s Waiting(1 dependency) -> Completed(error) (deadline exceeded)",
        ]
    );
    assert_eq!(
        ts.task_state(running.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert!(ts.cancel_signals().is_empty());
    let state = ts.queue_state();
    assert_eq!(
        (state.queued, state.blocked, state.stats.deadlines_exceeded),
        (0, 0, 2)
    );

    complete(&mut ts, running.id);
    assert_eq!(ts.stats().polls, 2, "only `running` was ever polled");
    assert_eq!(ts.sent_requests().len(), 1);
    assert_eq!(ts.queue_state().running, 0);
}

/// A task whose 5 s deadline passes while its request is in flight fails at 5 s with
/// `DeadlineExceeded { while_queued: false }`; its request gets a cancel signal, its
/// late answer is dropped, and its slot goes at once to the next queued task.
#[test]
fn a_deadline_that_passes_while_its_request_is_in_flight_cancels_it_and_frees_the_slot() {
    let mut ts = with_config(Config::new().limits(TaskLimits::new().max_running(1)));
    let slow = ts.admit(NewTask::new(holder("slow")).deadline(secs(5)));
    assert_eq!(slow.admission, Admission::Ready);
    let next = ts.admit(NewTask::new(holder("next")));
    assert!(matches!(next.admission, Admission::Queued { .. }));
    ts.step_until_idle();
    let slow_key = held_key(&ts, slow.id);

    ts.advance(secs(5));

    assert_eq!(
        ts.task_state(slow.id),
        TaskState::Completed(Err(TaskError::DeadlineExceeded {
            task: slow.id,
            deadline: at(secs(5)),
            while_queued: false,
        }))
    );
    assert_eq!(
        ts.task_state(slow.id).to_string(),
        "Completed(error: task 1 missed its deadline while running)"
    );
    assert_eq!(
        ts.cancel_signals(),
        [CancelSignal {
            key: slow_key,
            kind: Kind::Llm
        }]
    );
    assert_eq!(
        ts.task_state(next.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    let sent: Vec<(Time, TaskId)> = ts
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect();
    assert_eq!(sent, [(Time::ZERO, slow.id), (at(secs(5)), next.id)]);
    assert_eq!(
        ts.answer(slow_key, json!("too late")),
        Delivery::Dropped(DropReason::TaskFinished)
    );
    let stats = ts.stats();
    assert_eq!(
        (
            stats.deadlines_exceeded,
            stats.dropped_answers,
            stats.scheduled
        ),
        (1, 1, 2)
    );
    assert_trace_continuous(&ts);
    insta::assert_snapshot!(ts.trace());
}

// ---------------------------------------------------------------------------------
// Retention.
// ---------------------------------------------------------------------------------

/// With a 60 s TTL, an ended result (completed, or rejected) is kept for 60 s after
/// it ended and then evicted: the task leaves the table (`task_state` is `None`,
/// `len` drops) and can no longer be named as a dependency. A live task is kept
/// however long it runs, and evicted 60 s after it ends.
#[test]
fn retention_evicts_an_ended_result_after_the_ttl() {
    let mut ts = with_config(Config::new().retention(secs(60)));
    let done = ts.submit(NewTask::new(quick("done")));
    let live = ts.submit(NewTask::new(holder("live")).key("k"));
    let dup = ts.admit(NewTask::new(quick("dup")).key("k"));
    assert!(
        matches!(dup.admission, Admission::Rejected { .. }),
        "{:?}",
        dup.admission
    );
    let later = ts.submit(NewTask::new(holder("later")));
    ts.step_until_idle();
    assert_eq!(ts.core().len(), 4);

    ts.advance(secs(30));
    complete(&mut ts, later);
    ts.advance(secs(30) - ms(1));
    assert_eq!(
        ts.core().task_state(done),
        Some(TaskState::Completed(Ok(json!("done"))))
    );
    assert_eq!((ts.core().len(), ts.stats().evicted), (4, 0));

    ts.advance(ms(1));
    assert_eq!(ts.core().task_state(done), None);
    assert_eq!(ts.core().task_state(dup.id), None);
    assert_eq!(
        ts.core().task_state(live),
        Some(TaskState::Waiting(WaitReason::Request(Kind::Llm)))
    );
    assert_eq!(
        ts.core().task_state(later),
        Some(TaskState::Completed(Ok(json!("done"))))
    );
    assert_eq!((ts.core().len(), ts.stats().evicted), (2, 2));
    let now = ts.now();
    assert_eq!(
        ts.core_mut()
            .submit(now, NewTask::new(quick("after")).after(done)),
        Err(SubmitError::UnknownDependency {
            index: 0,
            dependency: done
        })
    );

    ts.advance(secs(30));
    assert_eq!(ts.core().task_state(later), None);
    assert_eq!((ts.core().len(), ts.stats().evicted), (1, 3));

    complete(&mut ts, live);
    ts.advance(secs(60) - ms(1));
    assert_eq!(ts.core().len(), 1);
    ts.advance(ms(1));
    assert_eq!(ts.core().task_state(live), None);
    assert_eq!((ts.core().len(), ts.stats().evicted), (0, 4));
}

/// A million short tasks — one submitted per millisecond, each making one LLM request
/// answered 4 ms later, at most 4 running at once (so each new task queues until the
/// oldest running one ends in the same millisecond) — with a 1 s TTL keep the task
/// table at a steady size: the results of the last second (1,000) plus the 4 live
/// tasks, 1,004 entries at most, and the slab slots in use never go past that (ids
/// keep growing, slots are reused). When the run ends and a TTL passes, the table is
/// empty. Driven on the raw `Scheduler` (about 6 s in a debug build).
#[test]
fn a_million_short_tasks_with_retention_keep_the_task_table_bounded() {
    const TASKS: u64 = 1_000_000;
    let started = Instant::now();
    let mut s = Scheduler::new(
        Config::new()
            .limits(TaskLimits::new().max_running(4))
            .retention(secs(1)),
    );
    let mut answers: VecDeque<(Time, RequestKey)> = VecDeque::new();
    let mut now = Time::ZERO;
    let mut peak_len = 0;
    let mut peak_index = 0;
    let mut submitted = 0;
    let mut admissions = [0u64; 2];
    while submitted < TASKS || !answers.is_empty() || s.live_len() > 0 {
        now = now + ms(1);
        s.handle_timeout(now);
        if submitted < TASKS {
            let task = NewTask::new(ask_once("short", Request::llm(json!(submitted))));
            let submission = s.submit(now, task).unwrap();
            submitted += 1;
            assert_eq!(submission.id, t(submitted));
            match submission.admission {
                Admission::Ready => admissions[0] += 1,
                Admission::Queued { .. } => admissions[1] += 1,
                other => panic!("task {submitted}: {other:?}"),
            }
        }
        while let Some((due, key)) = answers.front().copied() {
            if due > now {
                break;
            }
            answers.pop_front();
            let _ = s.handle_response(now, Response::ok(key, json!("ok")));
        }
        while s.step(now).is_some() {}
        while let Some(out) = s.poll_request() {
            let index = serde_json::to_value(out.key).unwrap()["slot"]
                .as_u64()
                .unwrap();
            peak_index = peak_index.max(index);
            answers.push_back((now + ms(4), out.key));
        }
        assert!(s.poll_cancel().is_none());
        peak_len = peak_len.max(s.len());
    }
    let stats = s.stats().clone();
    assert_eq!(
        (
            stats.submitted,
            stats.completed,
            stats.failed,
            stats.answers
        ),
        (TASKS, TASKS, 0, TASKS)
    );
    assert_eq!(peak_len, 1_004, "the table's peak");
    assert!(peak_index < 1_004, "table index {peak_index} in use");
    assert_eq!((stats.peak_running, stats.peak_queued), (4, 1));
    assert_eq!(admissions, [4, TASKS - 4]);

    s.handle_timeout(now + secs(1));
    assert_eq!((s.len(), s.live_len()), (0, 0));
    assert_eq!(s.stats().evicted, TASKS);
    println!(
        "a million short tasks: peak table {peak_len}, highest index {peak_index}, \
         admissions ready/queued {admissions:?}, {:?}",
        started.elapsed()
    );
}

/// A batch enters admission as a whole before any slot is given: under the computed
/// policy with one free slot, `submit_all([other, ralph])` gives it to the ralph (100
/// points against 0), not to the first entry, and tells each entry where it stands.
#[test]
fn a_batch_gives_its_free_slot_to_its_best_entry_not_its_first() {
    let mut ts = with_config(
        Config::new()
            .policy(PolicyChoice::Computed(spool::ComputedConfig::default()))
            .limits(TaskLimits::new().max_running(1)),
    );
    let submissions = ts
        .submit_all(vec![
            NewTask::new(holder("other")),
            NewTask::new(holder("ralph")),
        ])
        .unwrap();
    let admissions: Vec<(TaskId, Admission)> = submissions
        .into_iter()
        .map(|s| (s.id, s.admission))
        .collect();
    assert_eq!(
        admissions,
        vec![
            (
                t(1),
                Admission::Queued {
                    position: 1,
                    estimated_wait: secs(30)
                }
            ),
            (t(2), Admission::Ready),
        ]
    );
    assert_eq!(
        trace_of(&ts, t(2)),
        [
            "0.000s New -> Waiting(slot) (submitted)",
            "0.000s Waiting(slot) -> Ready (admitted)"
        ]
    );
}
