//! Idempotency keys kept with the fingerprint of their request: a key reused for
//! another request is told apart from a repeat, in the scheduler, after a snapshot
//! (whole or in parts) is restored, and after a journal is replayed. A key whose
//! window has run out is free at once, whether or not the scheduler's clock has moved
//! past its end.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use spool::HEADER_LEN;
use spool::core::{
    Admission, AgentTask, Config, Fingerprint, KeyedSubmission, NewTask, RejectReason, SavedTask,
    Snapshot, StateError, Step, TaskContext, TaskId, TaskRegistry, Time,
};
use spool_test::TestScheduler;

use crate::bad_input::{envelope, written_version};

/// A task that sleeps `ms`, then completes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Nap {
    ms: u64,
    slept: bool,
}

impl AgentTask for Nap {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if !self.slept {
            self.slept = true;
            cx.sleep(Duration::from_millis(self.ms));
            return Step::Wait;
        }
        Step::done("ok")
    }

    fn type_name(&self) -> &'static str {
        "nap"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Nap>("nap")
}

fn nap(ms: u64, key: &str, request: &str) -> NewTask {
    NewTask::new(Nap { ms, slept: false })
        .key(key)
        .fingerprint(Fingerprint::of(request.as_bytes()))
}

/// What a keyed submission of `request` with `key` comes to, as `Existing(task)`,
/// `Reused(task)` or `Submitted(task)`.
fn keyed(t: &mut TestScheduler, key: &str, request: &str) -> String {
    let now = t.now();
    match t
        .core_mut()
        .submit_keyed(now, nap(1, key, request))
        .unwrap()
    {
        KeyedSubmission::Submitted(s) => format!("Submitted({})", s.id),
        KeyedSubmission::Existing { record, .. } => format!("Existing({})", record.task),
        KeyedSubmission::Reused { record, .. } => format!("Reused({})", record.task),
        other => format!("{other:?}"),
    }
}

/// A scheduler holding key `live` (task 1, sleeping an hour) and key `ended` (task 2,
/// ended), each kept with the fingerprint of request `a`.
fn two_keys() -> TestScheduler {
    let mut t = TestScheduler::new();
    t.record_journal().unwrap();
    assert_eq!(t.submit(nap(3_600_000, "live", "a")), TaskId::from_raw(1));
    assert_eq!(t.submit(nap(1, "ended", "a")), TaskId::from_raw(2));
    t.advance(Duration::from_millis(5));
    assert!(t.task_state(TaskId::from_raw(2)).is_ok());
    t
}

fn check_two_keys(t: &mut TestScheduler) {
    let a = Some(Fingerprint::of(b"a"));
    assert_eq!(t.core().key("live").map(|r| r.fingerprint), Some(a));
    assert_eq!(t.core().key("ended").map(|r| r.fingerprint), Some(a));
    assert_eq!(keyed(t, "live", "a"), "Existing(1)");
    assert_eq!(keyed(t, "live", "b"), "Reused(1)");
    assert_eq!(keyed(t, "ended", "a"), "Existing(2)");
    assert_eq!(keyed(t, "ended", "b"), "Reused(2)");
}

#[test]
fn a_key_reused_for_another_request_is_rejected_naming_the_first_task() {
    let mut t = TestScheduler::new();
    assert_eq!(t.admit(nap(1000, "k1", "a")).admission, Admission::Ready);
    // The same request again: a duplicate of the live task.
    let again = t.admit(nap(1000, "k1", "a"));
    assert_eq!(
        again.admission,
        Admission::Rejected {
            reason: RejectReason::Duplicate {
                key: "k1".into(),
                existing: TaskId::from_raw(1)
            }
        }
    );
    let other = t.admit(nap(2000, "k1", "b"));
    let Admission::Rejected { reason } = other.admission else {
        panic!("{other:?}");
    };
    assert_eq!(
        reason,
        RejectReason::KeyReused {
            key: "k1".into(),
            original: TaskId::from_raw(1)
        }
    );
    assert_eq!(
        reason.to_string(),
        "the Idempotency-Key \"k1\" was used for a different request (task 1)"
    );
    // A submission without a fingerprint is a repeat of whatever holds the key.
    let plain = t.admit(NewTask::new(Nap::default()).key("k1"));
    assert!(
        matches!(
            plain.admission,
            Admission::Rejected {
                reason: RejectReason::Duplicate { .. }
            }
        ),
        "{plain:?}"
    );
}

#[test]
fn a_keyed_submission_checks_and_submits_in_one_step_and_leaves_no_rejected_task() {
    let mut t = TestScheduler::new();
    assert_eq!(keyed(&mut t, "k1", "a"), "Submitted(1)");
    assert_eq!(keyed(&mut t, "k1", "a"), "Existing(1)");
    assert_eq!(keyed(&mut t, "k1", "b"), "Reused(1)");
    assert_eq!(keyed(&mut t, "k2", "b"), "Submitted(2)");
    // Only the two submitted tasks are in the table.
    assert_eq!(t.task_states().len(), 2);
    assert_eq!(
        t.core()
            .key("k1")
            .map(|r| (r.task, r.ended_at, r.fingerprint)),
        Some((TaskId::from_raw(1), None, Some(Fingerprint::of(b"a"))))
    );
}

#[test]
fn a_snapshot_keeps_each_keys_fingerprint_whole_and_in_parts() {
    let t = two_keys();
    let snapshot = t.snapshot().unwrap();
    let bytes = snapshot.encode().unwrap();
    let mut restored =
        TestScheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    check_two_keys(&mut restored);
    let parts = snapshot.to_parts().unwrap();
    let from_parts = Snapshot::from_parts(
        &parts.header,
        parts.rows.iter().map(|(id, r)| (*id, r.as_slice())),
    )
    .unwrap();
    assert_eq!(from_parts.encode().unwrap(), bytes);
    let mut restored = TestScheduler::restore(&from_parts, &registry()).unwrap();
    check_two_keys(&mut restored);
}

#[test]
fn a_replayed_journal_keeps_each_keys_fingerprint() {
    let mut t = two_keys();
    // A batch: one task with a key and fingerprint, one without either.
    let now = t.now();
    t.core_mut()
        .submit_all(
            now,
            vec![nap(1, "batch", "c"), NewTask::new(Nap::default())],
        )
        .unwrap();
    // A refused reuse is journaled too, and replays as refused.
    let refused = t.admit(nap(1, "live", "b"));
    assert!(matches!(
        refused.admission,
        Admission::Rejected {
            reason: RejectReason::KeyReused { .. }
        }
    ));
    let journal = t.journal().unwrap();
    let replay = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    let mut replayed = TestScheduler::with_scheduler(replay.scheduler);
    assert_eq!(
        replayed.core().key("batch").and_then(|r| r.fingerprint),
        Some(Fingerprint::of(b"c"))
    );
    assert_eq!(replayed.task_state(refused.id), t.task_state(refused.id));
    check_two_keys(&mut replayed);
}

/// A scheduler whose key `k` (task 1, kept with request `a`'s fingerprint) ended at
/// 1 ms, with a ten-second window: it is let go at 10.001 s. The scheduler's clock
/// stays at 5 ms.
fn ended_key() -> TestScheduler {
    let config = Config::new().idempotency_window(Some(Duration::from_secs(10)));
    let mut t = TestScheduler::with_config(config);
    assert_eq!(t.submit(nap(1, "k", "a")), TaskId::from_raw(1));
    t.advance(Duration::from_millis(5));
    assert_eq!(
        t.core().key("k").map(|r| r.ended_at),
        Some(Some(Time::ZERO + Duration::from_millis(1)))
    );
    t
}

/// What a plain submission of request `request` with key `k` at `now` comes to.
fn plain(t: &mut TestScheduler, now: Time, request: &str) -> Admission {
    t.core_mut()
        .submit(now, nap(1, "k", request))
        .unwrap()
        .admission
}

/// What a keyed submission of request `request` with key `k` at `now` comes to, as
/// [`keyed`] says it.
fn keyed_at(t: &mut TestScheduler, now: Time, request: &str) -> String {
    match t
        .core_mut()
        .submit_keyed(now, nap(1, "k", request))
        .unwrap()
    {
        KeyedSubmission::Submitted(s) => format!("Submitted({}, {:?})", s.id, s.admission),
        KeyedSubmission::Existing { record, .. } => format!("Existing({})", record.task),
        KeyedSubmission::Reused { record, .. } => format!("Reused({})", record.task),
        other => format!("{other:?}"),
    }
}

#[test]
fn a_keyed_submission_at_a_windows_end_finds_the_key_free_as_a_plain_one_does() {
    let end = Time::from_nanos(10_001_000_000);
    // Just before the window ends the key is held, both ways.
    let before = Time::from_nanos(10_000_999_999);
    let mut t = ended_key();
    assert_eq!(keyed_at(&mut t, before, "a"), "Existing(1)");
    assert_eq!(keyed_at(&mut t, before, "b"), "Reused(1)");
    let mut t = ended_key();
    assert_eq!(
        plain(&mut t, before, "a"),
        Admission::Rejected {
            reason: RejectReason::AlreadyEnded {
                key: "k".into(),
                original: TaskId::from_raw(1),
                ended_at: Time::ZERO + Duration::from_millis(1),
            }
        }
    );
    // At its end (the clock not yet moved there) it is free, both ways: the
    // submission makes task 2 and takes the key.
    for request in ["a", "b"] {
        let mut t = ended_key();
        assert_eq!(keyed_at(&mut t, end, request), "Submitted(2, Ready)");
        assert_eq!(
            t.core().key("k").map(|r| (r.task, r.fingerprint)),
            Some((
                TaskId::from_raw(2),
                Some(Fingerprint::of(request.as_bytes()))
            ))
        );
        let mut t = ended_key();
        assert_eq!(plain(&mut t, end, request), Admission::Ready);
        assert_eq!(t.core().key("k").map(|r| r.task), Some(TaskId::from_raw(2)));
    }
}

/// `n` as postcard writes a `u64`: LEB128, seven bits a byte, low first.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out
}

#[test]
fn a_snapshot_whose_ended_key_ran_out_by_its_time_restores_without_the_key() {
    // Taken at 9.876543210 s: key `k` (ended at 1 ms, let go at 10.001 s) is held,
    // with its fingerprint; key `live` (task 2, asleep) too.
    let mut t = ended_key();
    assert_eq!(t.submit(nap(3_600_000, "live", "a")), TaskId::from_raw(2));
    let taken = Time::from_nanos(9_876_543_210);
    t.advance(taken - t.now());
    assert_eq!(t.now(), taken);
    assert_eq!(
        t.core().key("k").map(|r| r.fingerprint),
        Some(Some(Fingerprint::of(b"a")))
    );
    let bytes = t.snapshot().unwrap().encode().unwrap();
    // The same snapshot, its time moved to 19.876543210 s (past the key's window):
    // the time is the one place the payload holds that number.
    let mut payload = bytes[HEADER_LEN..].to_vec();
    let (old, new) = (varint(taken.as_nanos()), varint(19_876_543_210));
    assert_eq!(old.len(), new.len());
    let found: Vec<usize> = payload
        .windows(old.len())
        .enumerate()
        .filter(|(_, w)| *w == old.as_slice())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    payload[found[0]..found[0] + new.len()].copy_from_slice(&new);
    let late = Snapshot::decode(&envelope(written_version(&bytes), &payload)).unwrap();
    assert_eq!(late.now(), Time::from_nanos(19_876_543_210));

    // It restores; the run-out key and its fingerprint are gone, the live key keeps
    // its own.
    let mut restored = TestScheduler::restore(&late, &registry()).unwrap();
    assert_eq!(restored.core().key("k"), None);
    assert_eq!(
        restored.core().key("live").map(|r| (r.task, r.fingerprint)),
        Some((TaskId::from_raw(2), Some(Fingerprint::of(b"a"))))
    );
    assert_eq!(keyed(&mut restored, "k", "b"), "Submitted(3)");
    assert_eq!(keyed(&mut restored, "live", "b"), "Reused(2)");
}
