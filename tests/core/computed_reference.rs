//! The computed-priority policy against a naive reference: at every slot grant,
//! recompute every waiting task's score from scratch, list the tasks in submission
//! order, stable-sort by score (highest first) and take the top. The policy under test
//! is O(log n) and never re-sorts as time passes; the reference is the documented
//! selection, written out independently of the implementation (it does not call
//! `ComputedConfig::score`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::json;
use spool::{
    AgentTask, ComputedConfig, Config, NewTask, Phase, PolicyChoice, Scheduler, SeededRng, Step,
    TaskId, TaskLimits, TaskState, TestScheduler, Time, WaitReason, task_fn,
};

/// The task types with a default base score, and those scores (`other` stands for any
/// type without a base of its own).
const TYPES: [(&str, i64); 5] = [
    ("ralph", 100),
    ("phase", 80),
    ("spec", 60),
    ("plan", 40),
    ("other", 0),
];

const MINUTE_NANOS: u64 = 60_000_000_000;

/// What the test itself knows about a submitted task, from how it built it.
#[derive(Clone, Debug)]
struct Model {
    id: TaskId,
    type_name: &'static str,
    base: i64,
    submitted: Time,
    depth: u32,
    iteration: u32,
    parent: Option<TaskId>,
    /// The depth `queue_details` showed right after submission (for messages only;
    /// `None` if the task had already ended).
    scheduler_depth: Option<u32>,
}

impl Model {
    /// The documented score, written out: base + min(50, whole minutes since
    /// submission) + 10 × depth − min(30, 5 × (iteration − 1)).
    fn score(&self, now: Time) -> i64 {
        let waited = now
            .as_nanos()
            .checked_sub(self.submitted.as_nanos())
            .unwrap();
        let minutes = i64::try_from(waited / MINUTE_NANOS).unwrap();
        let age = minutes.min(50);
        let depth = 10 * i64::from(self.depth);
        let retries = 5 * (i64::from(self.iteration) - 1);
        self.base + age + depth - retries.min(30)
    }
}

/// The reference pick among `candidates` at `now`: submission order (time, then id),
/// then a stable sort by score, highest first; the top. Also returns the sorted list
/// with the scores, for messages.
fn reference_pick(candidates: &[&Model], now: Time) -> (TaskId, Vec<(i64, Model)>) {
    let mut list: Vec<(i64, Model)> = candidates
        .iter()
        .map(|m| (m.score(now), (*m).clone()))
        .collect();
    list.sort_by_key(|(_, m)| (m.submitted, m.id));
    list.sort_by_key(|(score, _)| Reverse(*score));
    (list[0].1.id, list)
}

/// A task of type `name` that holds its slot for `hold` of virtual time (sleeping),
/// then completes; with a zero `hold` it completes at its first poll.
fn holder(name: &'static str, hold: Duration) -> impl AgentTask {
    let mut slept = false;
    task_fn(name, move |cx| {
        if hold.is_zero() || slept {
            return Step::done(json!(name));
        }
        slept = true;
        cx.sleep(hold);
        Step::Wait
    })
}

fn computed_one_slot() -> TestScheduler {
    TestScheduler::with_scheduler(Scheduler::new(
        Config::new()
            .record_trace(true)
            .policy(PolicyChoice::Computed(ComputedConfig::default()))
            .limits(TaskLimits::new().max_running(1)),
    ))
}

/// `lo..=hi` milliseconds; half the time rounded down to a whole second, a fifth of
/// the time to a whole minute (so grants land exactly on minute boundaries of ages).
fn random_ms(rng: &mut SeededRng, lo: u64, hi: u64) -> Duration {
    let ms = lo + rng.below(hi - lo + 1);
    let ms = match rng.below(10) {
        0..=4 => ms / 1000 * 1000,
        5..=6 => (ms / 60_000 * 60_000).max(lo),
        _ => ms,
    };
    Duration::from_millis(ms)
}

/// The time between two submissions: the same instant, seconds, minutes, or over an
/// hour.
fn random_gap(rng: &mut SeededRng) -> Duration {
    match rng.below(100) {
        0..=24 => Duration::ZERO,
        25..=49 => random_ms(rng, 1, 59_999),
        50..=79 => random_ms(rng, 60_000, 600_000),
        80..=94 => random_ms(rng, 600_000, 3_600_000),
        _ => random_ms(rng, 3_600_000, 4_800_000),
    }
}

/// How long a task holds its slot.
fn random_hold(rng: &mut SeededRng) -> Duration {
    match rng.below(100) {
        0..=4 => Duration::ZERO,
        5..=59 => random_ms(rng, 1, 120_000),
        60..=89 => random_ms(rng, 120_000, 900_000),
        _ => random_ms(rng, 900_000, 4_200_000),
    }
}

/// How much of the ground the workloads covered (so the test cannot pass vacuously).
#[derive(Debug, Default)]
struct Coverage {
    grants: u64,
    contested: u64,
    max_candidates: usize,
    /// Grants where some candidate had waited 51 minutes or more (the +50 cap binds).
    age_capped: u64,
    /// Grants where some candidate's age was a whole number of minutes exactly.
    minute_boundary: u64,
    /// Grants where the top two scores were equal...
    decided_by_tie: u64,
    /// ...and so were their submission times (decided by id).
    tie_on_time: u64,
    /// Grants the top would have lost without its depth bonus.
    depth_won: u64,
    /// Grants with a candidate released by its parent's completion in the same event.
    parent_just_completed: u64,
    detail_checks: u64,
    detail_rows: u64,
    boundary_checks: u64,
}

/// Checks every live task's `queue_details` row against the model at `ts.now()`;
/// returns a description of each row that disagrees.
fn check_details(
    ts: &TestScheduler,
    model: &BTreeMap<TaskId, Model>,
    seed: u64,
    coverage: &mut Coverage,
) -> Vec<String> {
    let now = ts.now();
    coverage.detail_checks += 1;
    let mut wrong = Vec::new();
    for row in ts.queue_details() {
        let m = &model[&row.id];
        let got = (row.type_name, row.depth, row.iteration, row.age, row.score);
        let expected = (
            m.type_name,
            m.depth,
            m.iteration,
            now - m.submitted,
            Some(m.score(now)),
        );
        if got != expected {
            wrong.push(format!(
                "seed {seed}, at {now}: queue_details row of task {} ({:?}) is \
                 (type, depth, iteration, age, score) = {got:?}, the model says {expected:?} \
                 ({m:?})",
                row.id, row.state,
            ));
        }
        coverage.detail_rows += 1;
    }
    wrong
}

/// One seeded workload: returns the model of every task, in submission order.
/// `queue_details` rows that disagree with the model go to `wrong_details`.
fn run_workload(
    seed: u64,
    coverage: &mut Coverage,
    wrong_details: &mut Vec<String>,
) -> (TestScheduler, BTreeMap<TaskId, Model>) {
    let mut rng = SeededRng::new(seed);
    let mut ts = computed_one_slot();
    let mut model: BTreeMap<TaskId, Model> = BTreeMap::new();
    let mut order: Vec<TaskId> = Vec::new();
    let n = 200 + rng.below(201);
    for _ in 0..n {
        let gap = random_gap(&mut rng);
        if !gap.is_zero() {
            ts.advance(gap);
        }
        // Now and then: the queue's scores just before and exactly at the next minute
        // boundary of a waiting task's age.
        if rng.chance(3) {
            let waiting: Vec<TaskId> = ts
                .queue_details()
                .into_iter()
                .filter(|r| r.state == TaskState::Waiting(WaitReason::Slot))
                .map(|r| r.id)
                .collect();
            if !waiting.is_empty() {
                let pick = waiting[rng.below(waiting.len() as u64) as usize];
                let submitted = model[&pick].submitted;
                let minutes = (ts.now() - submitted).as_nanos() / u128::from(MINUTE_NANOS);
                let minutes = u64::try_from(minutes).unwrap();
                let boundary = submitted + Duration::from_secs(60 * (minutes + 1));
                ts.advance(boundary - ts.now() - Duration::from_nanos(1));
                wrong_details.extend(check_details(&ts, &model, seed, coverage));
                ts.advance(Duration::from_nanos(1));
                assert_eq!(ts.now(), boundary);
                wrong_details.extend(check_details(&ts, &model, seed, coverage));
                coverage.boundary_checks += 1;
            }
        }
        let (type_name, base) = TYPES[rng.below(TYPES.len() as u64) as usize];
        let iteration = 1 + rng.below(9) as u32;
        let hold = random_hold(&mut rng);
        // A parent among the last few submitted, if that keeps the chain short.
        let parent = if rng.chance(40) && !order.is_empty() {
            let recent = &order[order.len().saturating_sub(10)..];
            let p = recent[rng.below(recent.len() as u64) as usize];
            (model[&p].depth < 5).then_some(p)
        } else {
            None
        };
        let mut task = NewTask::new(holder(type_name, hold)).iteration(iteration);
        if let Some(p) = parent {
            task = task.parent(p);
        }
        let id = ts.submit(task);
        order.push(id);
        // For messages only: the depth the scheduler gave the task.
        let scheduler_depth = ts
            .queue_details()
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.depth);
        model.insert(
            id,
            Model {
                id,
                type_name,
                base,
                submitted: ts.now(),
                depth: parent.map_or(0, |p| model[&p].depth + 1),
                scheduler_depth,
                iteration,
                parent,
            },
        );
        if rng.chance(8) {
            wrong_details.extend(check_details(&ts, &model, seed, coverage));
        }
    }
    ts.run_until_quiet();
    (ts, model)
}

/// How a grant differed from the reference.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Divergence {
    /// The reference's pick was waiting (its parent had completed) but had not been put
    /// in the slot queue yet when the slot was given away.
    NotYetQueued,
    /// Same score and submission time: the tie went to the later task id.
    TieOrder,
    /// The scheduler's depth of the granted task or of the reference's pick differs from
    /// the model's (see the `queue_details` failures).
    WrongDepth,
    /// Anything else.
    Other,
}

/// Replays the trace: at each slot grant, the naive reference over every task that
/// was submitted, whose parent (if any) had completed, and that had no slot yet. Returns
/// a description of each grant the policy made differently.
fn check_grants(
    seed: u64,
    ts: &TestScheduler,
    model: &BTreeMap<TaskId, Model>,
    coverage: &mut Coverage,
) -> Vec<(Divergence, String)> {
    let mut children: BTreeMap<TaskId, Vec<TaskId>> = BTreeMap::new();
    for m in model.values() {
        if let Some(p) = m.parent {
            children.entry(p).or_default().push(m.id);
        }
    }
    let mut known: BTreeSet<TaskId> = BTreeSet::new();
    let mut completed: BTreeSet<TaskId> = BTreeSet::new();
    let mut granted: BTreeSet<TaskId> = BTreeSet::new();
    let mut in_slot_queue: BTreeSet<TaskId> = BTreeSet::new();
    let mut candidates: BTreeSet<TaskId> = BTreeSet::new();
    let mut mismatches = Vec::new();
    for event in ts.trace_events() {
        let id = event.task;
        let m = &model[&id];
        if event.from == Phase::New {
            known.insert(id);
            if m.parent.is_none_or(|p| completed.contains(&p)) {
                candidates.insert(id);
            }
        }
        if event.to == Phase::Waiting(WaitReason::Slot) {
            in_slot_queue.insert(id);
        }
        if event.to == Phase::Completed {
            completed.insert(id);
            for child in children.get(&id).into_iter().flatten() {
                if known.contains(child) {
                    candidates.insert(*child);
                }
            }
        }
        let grant = event.to == Phase::Ready
            && matches!(
                event.from,
                Phase::New | Phase::Waiting(WaitReason::Slot | WaitReason::Dependencies(_))
            );
        if !grant {
            continue;
        }
        let now = event.time;
        let holding = granted.difference(&completed).count();
        assert_eq!(
            holding, 0,
            "seed {seed}, at {now}: task {id} got a slot while another held the only one"
        );
        let list: Vec<&Model> = candidates.iter().map(|c| &model[c]).collect();
        assert!(
            candidates.contains(&id),
            "seed {seed}, at {now}: task {id} got a slot but was not waiting for one \
             (event `{event}`)"
        );
        let (expected, sorted) = reference_pick(&list, now);
        coverage.grants += 1;
        if list.len() > 1 {
            coverage.contested += 1;
            coverage.max_candidates = coverage.max_candidates.max(list.len());
            let (top, second) = (&sorted[0], &sorted[1]);
            if top.0 == second.0 {
                coverage.decided_by_tie += 1;
                if top.1.submitted == second.1.submitted {
                    coverage.tie_on_time += 1;
                }
            }
            if top.1.depth > 0 && top.0 - 10 * i64::from(top.1.depth) < second.0 {
                coverage.depth_won += 1;
            }
        }
        if list
            .iter()
            .any(|c| now - c.submitted >= Duration::from_secs(51 * 60))
        {
            coverage.age_capped += 1;
        }
        if list
            .iter()
            .any(|c| now > c.submitted && (now - c.submitted).as_nanos() % 60_000_000_000 == 0)
        {
            coverage.minute_boundary += 1;
        }
        if list
            .iter()
            .any(|c| c.parent.is_some() && !in_slot_queue.contains(&c.id))
        {
            coverage.parent_just_completed += 1;
        }
        if expected != id {
            let mut msg = String::new();
            let _ = writeln!(
                msg,
                "seed {seed}, at {now} ({event}): the policy granted task {id}, the \
                 reference picks task {expected}. Candidates, reference order:"
            );
            for (score, c) in &sorted {
                let _ = writeln!(
                    msg,
                    "  task {:>4} {:<6} score {:>4} submitted {} (age {:?}) depth {}{} iter {} \
                     parent {:?}{}{}",
                    c.id,
                    c.type_name,
                    score,
                    c.submitted,
                    now - c.submitted,
                    c.depth,
                    match c.scheduler_depth {
                        Some(d) if d != c.depth => format!(" (scheduler: {d})"),
                        _ => String::new(),
                    },
                    c.iteration,
                    c.parent.map(TaskId::get),
                    if in_slot_queue.contains(&c.id) {
                        ""
                    } else {
                        " [not yet in the slot queue: parent just completed]"
                    },
                    if c.id == id { "  <- granted" } else { "" },
                );
            }
            let granted_score = sorted.iter().find(|(_, c)| c.id == id).unwrap();
            let wrong_depth = |m: &Model| m.scheduler_depth.is_some_and(|d| d != m.depth);
            let kind = if wrong_depth(&model[&id]) || wrong_depth(&model[&expected]) {
                Divergence::WrongDepth
            } else if !in_slot_queue.contains(&expected) {
                Divergence::NotYetQueued
            } else if granted_score.0 == sorted[0].0
                && granted_score.1.submitted == sorted[0].1.submitted
            {
                Divergence::TieOrder
            } else {
                Divergence::Other
            };
            mismatches.push((kind, msg));
        }
        candidates.remove(&id);
        granted.insert(id);
    }
    assert_eq!(
        granted.len(),
        model.len(),
        "seed {seed}: every task gets a slot once"
    );
    mismatches
}

/// Over 200 seeded random workloads (200 to 400 tasks each, of random types, iterations
/// 1 to 9, parent chains up to depth 5, submitted seconds to over an hour apart, several
/// in the same minute and at the same instant, each holding the one slot for a random
/// time), every slot the computed-priority policy grants goes to exactly the task the
/// naive reference picks at that instant: every waiting task's score recomputed (base +
/// min(50, whole minutes waited) + 10·depth − min(30, 5·(iteration − 1))), submission
/// order, stable sort by score, top. A task whose parent has completed is waiting,
/// whether or not the scheduler has moved it to its slot queue yet. At random instants
/// (and just before and exactly at minute boundaries of a waiting task's age) every
/// `queue_details` row carries the reference score, depth, iteration and age.
#[test]
fn computed_policy_grants_slots_in_the_naive_reference_order() {
    let started = Instant::now();
    let mut coverage = Coverage::default();
    let mut wrong_details: Vec<String> = Vec::new();
    let mut wrong_grants: Vec<(Divergence, String)> = Vec::new();
    let mut failed_seeds: BTreeSet<u64> = BTreeSet::new();
    for seed in 0..200u64 {
        let seed = 0x5eed_0001_0000_0000 | seed;
        let details_before = wrong_details.len();
        let (ts, model) = run_workload(seed, &mut coverage, &mut wrong_details);
        for (id, m) in &model {
            assert_eq!(
                ts.task_state(*id),
                TaskState::Completed(Ok(json!(m.type_name))),
                "seed {seed}: task {id}"
            );
        }
        let mismatches = check_grants(seed, &ts, &model, &mut coverage);
        if !mismatches.is_empty() || wrong_details.len() > details_before {
            failed_seeds.insert(seed);
        }
        wrong_grants.extend(mismatches);
    }
    println!("{coverage:#?}\nin {:?}", started.elapsed());
    // The workloads reached what the property is about.
    assert!(coverage.contested > 10_000, "{coverage:?}");
    assert!(coverage.max_candidates >= 20, "{coverage:?}");
    assert!(coverage.age_capped > 100, "{coverage:?}");
    assert!(coverage.minute_boundary > 10, "{coverage:?}");
    assert!(coverage.decided_by_tie > 100, "{coverage:?}");
    assert!(coverage.tie_on_time > 10, "{coverage:?}");
    assert!(coverage.depth_won > 100, "{coverage:?}");
    assert!(coverage.parent_just_completed > 100, "{coverage:?}");
    assert!(coverage.detail_checks > 1_000, "{coverage:?}");
    assert!(coverage.boundary_checks > 100, "{coverage:?}");
    let mut kinds: BTreeMap<Divergence, usize> = BTreeMap::new();
    let mut examples: Vec<String> = Vec::new();
    for (kind, msg) in &wrong_grants {
        let n = kinds.entry(*kind).or_default();
        if *n < 2 {
            examples.push(msg.clone());
        }
        *n += 1;
    }
    let first = |list: &[String]| list.iter().take(3).cloned().collect::<Vec<_>>().join("\n");
    assert!(
        wrong_grants.is_empty() && wrong_details.is_empty(),
        "{} of 200 seeds fail (seeds {:x?}).\n\n{} slot grants differ from the naive \
         reference ({kinds:?}); the first two of each kind:\n{}\n\n{} queue_details rows \
         differ from the model; the first ones:\n{}",
        failed_seeds.len(),
        failed_seeds,
        wrong_grants.len(),
        examples.join("\n"),
        wrong_details.len(),
        first(&wrong_details),
    );
}

/// The slots given out by `ts` so far, with their times: every task of its own that
/// became ready from `New`, `Waiting(slot)` or `Waiting(dependencies)`.
fn grants(ts: &TestScheduler) -> Vec<(String, TaskId)> {
    ts.trace_events()
        .iter()
        .filter(|e| {
            e.to == Phase::Ready
                && matches!(
                    e.from,
                    Phase::New | Phase::Waiting(WaitReason::Slot | WaitReason::Dependencies(_))
                )
        })
        .map(|e| (e.time.to_string(), e.task))
        .collect()
}

/// The order changes as time passes, with nothing re-sorted: a plan (base 40) queued at
/// 0 s overtakes two fresh phases (base 80) at the exact minute its age boost reaches
/// +40. One slot, held by a blocker until 2399.999 s; the plan waits from 0 s, two
/// phases from 2399 s. At 2399.999 s the plan scores 40 + 39 = 79 and the first phase
/// (80) gets the slot. The phase holds it for `hold`: if the next grant comes at
/// 2399.9995 s the plan still scores 79 and the second phase goes first; if it comes at
/// exactly 2400 s the plan scores 40 + 40 = 80, ties with the phase, and wins the tie as
/// the older task. The plan's queue entry was pushed once, at 0 s.
#[test]
fn an_old_plan_overtakes_fresh_phases_at_the_exact_minute_its_age_boost_catches_up() {
    let run = |hold: Duration| {
        let mut ts = computed_one_slot();
        let blocker = ts.submit(NewTask::new(holder(
            "other",
            Duration::from_millis(2_399_999),
        )));
        let plan = ts.submit(NewTask::new(holder("plan", Duration::from_millis(1))));
        ts.advance(Duration::from_secs(2399));
        let first = ts.submit(NewTask::new(holder("phase", hold)));
        let second = ts.submit(NewTask::new(holder("phase", Duration::from_millis(1))));
        ts.advance(Duration::from_millis(999));
        // 2399.999 s: the blocker ended, the first phase got the slot.
        let scores: Vec<(TaskId, TaskState, Option<i64>)> = ts
            .queue_details()
            .into_iter()
            .map(|r| (r.id, r.state, r.score))
            .collect();
        assert_eq!(
            scores,
            // In the policy's order: by score, then in submission order.
            vec![
                (first, TaskState::Waiting(WaitReason::Timer), Some(80)),
                (second, TaskState::Waiting(WaitReason::Slot), Some(80)),
                (plan, TaskState::Waiting(WaitReason::Slot), Some(79)),
            ]
        );
        assert_eq!(
            ts.task_state(blocker),
            TaskState::Completed(Ok(json!("other")))
        );
        assert_eq!(
            ts.debug_table(),
            "\
ID       TYPE         PRIORITY  AGE    DEPTH  ITER  RUNNABLE
3        phase        80        0s     0      1     no (waiting: timer)
4        phase        80        0s     0      1     no (waiting for a slot)
2        plan         79        39m    0      1     no (waiting for a slot)
"
        );
        ts.run_until_quiet();
        (ts, [plan, first, second])
    };

    let (ts, [plan, first, second]) = run(Duration::from_micros(500));
    assert_eq!(
        grants(&ts),
        vec![
            ("0.000s".to_owned(), TaskId::from_raw(1)),
            ("2399.999s".to_owned(), first),
            ("2399.999500000s".to_owned(), second),
            ("2400.000500000s".to_owned(), plan),
        ]
    );

    let (ts, [plan, first, second]) = run(Duration::from_millis(1));
    assert_eq!(
        grants(&ts),
        vec![
            ("0.000s".to_owned(), TaskId::from_raw(1)),
            ("2399.999s".to_owned(), first),
            ("2400.000s".to_owned(), plan),
            ("2400.001s".to_owned(), second),
        ]
    );
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A task submitted under a parent is one level deeper than the parent, whether the
/// parent is still running or has already completed (depth counts every ancestor on
/// the `parent` chain; a completed parent is still in it). A plan, its spec (depth 1),
/// and two phases under the spec: one submitted while the spec runs, one after it
/// completed. Both are at depth 2 and score 80 + 2 × 10 = 100.
#[test]
fn a_task_submitted_under_a_completed_parent_is_one_level_deeper_than_it() {
    let mut ts = computed_one_slot();
    let plan = ts.submit(NewTask::new(holder("plan", secs(1))));
    let spec = ts.submit(NewTask::new(holder("spec", secs(1))).parent(plan));
    ts.advance(Duration::from_millis(1500));
    // 1.5 s: the spec runs.
    let while_running = ts.submit(NewTask::new(holder("phase", secs(10))).parent(spec));
    ts.advance(Duration::from_millis(1500));
    // 3 s: the spec completed at 2 s; the first phase holds the slot.
    assert_eq!(ts.task_state(spec), TaskState::Completed(Ok(json!("spec"))));
    let after_completed = ts.submit(NewTask::new(holder("phase", secs(1))).parent(spec));
    let rows: Vec<(TaskId, u32, Option<i64>)> = ts
        .queue_details()
        .into_iter()
        .map(|r| (r.id, r.depth, r.score))
        .collect();
    assert_eq!(
        rows,
        vec![
            (while_running, 2, Some(100)),
            (after_completed, 2, Some(100)),
        ]
    );
}

/// When a parent completes, all the tasks waiting on it become runnable at that instant,
/// so its freed slot goes to the best of them and of the tasks already queued (the
/// selection looks at every runnable task). A plan holds the one slot
/// until 10 s; two children wait on it, an `other` (0 + 10 = 10) submitted first and a
/// ralph (100 + 10 = 110); in the second run a spec (60) also waits in the slot queue.
/// The ralph goes first both times.
#[test]
fn the_slot_a_parent_frees_goes_to_the_best_of_all_the_tasks_it_releases() {
    let run = |with_spec: bool| {
        let mut ts = computed_one_slot();
        let plan = ts.submit(NewTask::new(holder("plan", secs(10))));
        ts.submit(NewTask::new(holder("other", secs(1))).parent(plan));
        ts.submit(NewTask::new(holder("ralph", secs(1))).parent(plan));
        if with_spec {
            ts.submit(NewTask::new(holder("spec", secs(1))));
        }
        ts.run_until_quiet();
        grants(&ts)
    };
    let (plan, other, ralph, spec) = (1, 2, 3, 4);
    let expected = |order: &[(u64, u64)]| -> Vec<(String, TaskId)> {
        order
            .iter()
            .map(|(at, id)| (format!("{at}.000s"), TaskId::from_raw(*id)))
            .collect()
    };
    assert_eq!(
        (run(false), run(true)),
        (
            expected(&[(0, plan), (10, ralph), (11, other)]),
            expected(&[(0, plan), (10, ralph), (11, spec), (12, other)]),
        )
    );
}

/// Equal scores and equal submission times go in submission order (submission time,
/// then task id), also when the earlier task reached the slot queue later because it
/// waited for its parent. At 5 s a spec is submitted under a running task
/// (60 + 10 = 70) and, at the same instant, a phase on its third iteration
/// (80 − 10 = 70). The parent completes at 10 s: the spec, submitted first, goes first.
#[test]
fn equal_scores_submitted_at_the_same_instant_go_in_submission_order() {
    let mut ts = computed_one_slot();
    let parent = ts.submit(NewTask::new(holder("other", secs(10))));
    ts.advance(secs(5));
    let spec = ts.submit(NewTask::new(holder("spec", secs(1))).parent(parent));
    let phase = ts.submit(NewTask::new(holder("phase", secs(1))).iteration(3));
    let scores: Vec<(TaskId, Option<i64>)> = ts
        .queue_details()
        .into_iter()
        .map(|r| (r.id, r.score))
        .collect();
    // In the policy's order: by score, then in submission order.
    assert_eq!(
        scores,
        vec![(spec, Some(70)), (phase, Some(70)), (parent, Some(0))]
    );
    ts.run_until_quiet();
    assert_eq!(
        grants(&ts),
        vec![
            ("0.000s".to_owned(), parent),
            ("10.000s".to_owned(), spec),
            ("11.000s".to_owned(), phase),
        ]
    );
}
