//! Schedules on the threaded runtime: fires by the real clock, with an in-memory
//! journal and with a store; operations from a handle on another thread; a runtime
//! recovered after an outage runs the latest missed fire once and counts the others.

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::core::{
    AgentTask, FireOutcome, Overlap, SavedTask, ScheduleDef, ScheduleError, SchedulePatch, Spec,
    StateError, Step, TaskContext, TaskRegistry, TaskState, Value,
};
use spool::{MemoryJournal, Runtime, RuntimeError};
use spool_store::Store;

use crate::support::{ShutdownOnDrop, wait_until, within};

/// A run: completes at once with one message naming its nominal fire time, and the
/// fire itself (so a test can read which fires ran).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Ping {
    #[serde(default)]
    schedule: Option<Value>,
}

impl AgentTask for Ping {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        let fire = self
            .schedule
            .as_ref()
            .and_then(|s| s.get("fire").cloned())
            .unwrap_or(Value::Null);
        Step::done(json!({"fire": fire, "messages": [{"role": "assistant", "content": fire}]}))
    }

    fn type_name(&self) -> &'static str {
        "ping"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Ping>("ping")
}

fn every(interval: Duration, slug: &str) -> ScheduleDef {
    ScheduleDef::new(slug, Spec::Every(interval), "ping", json!({}))
}

/// The nominal fire times of the completed runs the runtime holds.
fn fires_run(runtime: &Runtime) -> Vec<String> {
    runtime
        .scheduler()
        .tasks()
        .filter_map(|t| match t.state {
            TaskState::Completed(Ok(value)) => value["fire"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// Runs `runtime` on this thread until `runs` runs of `slug` completed (asked from
/// another thread through a handle), then shuts it down.
fn run_until_runs(runtime: &mut Runtime, slug: &'static str, runs: u64) {
    let handle = runtime.handle();
    let watcher = thread::spawn(move || {
        let guard = ShutdownOnDrop(handle.clone());
        wait_until("the runs", || {
            let status = handle.schedule(slug).ok()??.status;
            (status.runs >= runs && status.running.is_empty()).then_some(())
        });
        drop(guard);
    });
    runtime.run();
    watcher.join().unwrap();
}

#[test]
fn a_schedule_every_second_runs_on_a_runtime_with_a_memory_journal() {
    within(crate::support::LIMIT, "the schedule", || {
        let journal = MemoryJournal::new();
        let mut runtime = Runtime::builder()
            .registry(registry())
            .journal(journal.clone())
            .build();
        let started = Instant::now();
        assert_eq!(
            runtime.put_schedule(every(Duration::from_secs(1), "tick")),
            Ok(true)
        );
        run_until_runs(&mut runtime, "tick", 2);
        // Two fires a second apart, the first a second after the schedule was made.
        assert!(started.elapsed() >= Duration::from_secs(2));
        let status = runtime.schedule("tick").unwrap().status;
        assert_eq!((status.runs, status.missed), (2, 0));
        let fires = fires_run(&runtime);
        assert_eq!(fires.len(), 2);
        let first: jiff::Timestamp = fires[0].parse().unwrap();
        let second: jiff::Timestamp = fires[1].parse().unwrap();
        assert_eq!(
            second.duration_since(first),
            jiff::SignedDuration::from_secs(1)
        );
        // The session holds each run's message, in order.
        let session = runtime.session(status.session.as_deref().unwrap()).unwrap();
        assert_eq!(session.messages.len(), 2);
        assert_eq!(session.messages[1]["content"], fires[1].as_str());
        // Every operation and fire went through the journal: it replays to the same
        // schedule table.
        drop(runtime);
        let replay = spool::core::Scheduler::replay(&journal.journal().unwrap(), &registry())
            .unwrap()
            .scheduler;
        assert_eq!(replay.schedule("tick").unwrap().status.runs, 2);
    });
}

#[test]
fn a_schedule_every_second_runs_on_a_store_and_goes_on_after_a_restart() {
    within(crate::support::LIMIT, "the schedule", || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.spool");
        {
            let store = Store::open(&path).unwrap();
            let mut runtime = Runtime::builder()
                .registry(registry())
                .journal(store)
                .build();
            runtime
                .put_schedule(every(Duration::from_secs(1), "tick"))
                .unwrap();
            run_until_runs(&mut runtime, "tick", 1);
        }
        let store = Store::open(&path).unwrap();
        let journal = store.recover().unwrap().unwrap();
        let mut runtime = Runtime::builder()
            .recover(&journal, &registry())
            .unwrap()
            .journal(store)
            .build();
        assert_eq!(runtime.schedule("tick").unwrap().status.runs, 1);
        run_until_runs(&mut runtime, "tick", 2);
        let fires: BTreeSet<String> = fires_run(&runtime).into_iter().collect();
        assert_eq!(fires.len(), 2, "{fires:?}");
    });
}

#[test]
fn schedule_operations_from_a_handle_on_another_thread_are_durable_when_they_return() {
    within(crate::support::LIMIT, "the operations", || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.spool");
        let store = Store::open(&path).unwrap();
        let mut runtime = Runtime::builder()
            .registry(registry())
            .journal(store.clone())
            .build();
        let handle = runtime.handle();
        let ops = thread::spawn(move || {
            let _guard = ShutdownOnDrop(handle.clone());
            let hour = Duration::from_secs(3600);
            assert_eq!(handle.put_schedule(every(hour, "hourly")), Ok(true));
            assert_eq!(handle.put_schedule(every(hour, "hourly")), Ok(false));
            assert_eq!(
                handle.put_schedule(every(hour, "../etc")),
                Err(RuntimeError::Schedule(ScheduleError::BadSlug {
                    slug: "../etc".to_owned(),
                    reason: "only lower-case letters, digits and '-' are allowed".to_owned(),
                }))
            );
            let mut patch = SchedulePatch::new();
            patch.overlap = Some(Overlap::AllowAll);
            let info = handle.patch_schedule("hourly", patch).unwrap();
            assert_eq!(info.def.overlap, Overlap::AllowAll);
            handle.pause_schedule("hourly").unwrap();
            assert!(!handle.schedule("hourly").unwrap().unwrap().def.enabled);
            handle.resume_schedule("hourly").unwrap();
            let outcome = handle.trigger_schedule("hourly").unwrap();
            assert!(matches!(outcome, FireOutcome::Started(_)), "{outcome:?}");
            wait_until("the triggered run", || {
                let status = handle.schedule("hourly").ok()??.status;
                (status.runs == 1 && status.running.is_empty()).then_some(())
            });
            assert_eq!(
                handle.delete_schedule("nope"),
                Err(RuntimeError::Schedule(ScheduleError::NotFound(
                    "nope".to_owned()
                )))
            );
            handle.delete_schedule("hourly").unwrap();
            assert_eq!(handle.schedules().unwrap(), Vec::new());
            // The session stays; deleting it is an operation too.
            let sessions = handle.sessions().unwrap();
            assert_eq!(sessions.len(), 1);
            let id = sessions[0].id.clone();
            assert_eq!(handle.session(&id).unwrap().unwrap().messages.len(), 1);
            handle.delete_session(&id).unwrap();
            assert_eq!(handle.sessions().unwrap(), Vec::new());
        });
        runtime.run();
        ops.join().unwrap();
        // What the handle was told is in the store: a new process sees it.
        drop(runtime);
        let journal = store.recover().unwrap().unwrap();
        let replay = spool::core::Scheduler::replay(&journal, &registry())
            .unwrap()
            .scheduler;
        assert_eq!(replay.schedules(), Vec::new());
        assert_eq!(replay.sessions(), Vec::new());
        assert_eq!(replay.stats().submitted, 1);
    });
}

#[test]
fn after_an_outage_of_several_intervals_the_latest_missed_fire_runs_once() {
    within(crate::support::LIMIT, "the outage", || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.spool");
        let interval = Duration::from_millis(200);
        {
            let mut runtime = Runtime::builder()
                .registry(registry())
                .journal(Store::open(&path).unwrap())
                .build();
            runtime.put_schedule(every(interval, "tick")).unwrap();
            run_until_runs(&mut runtime, "tick", 1);
        }
        let down = Instant::now();
        // Down for six intervals and a half.
        thread::sleep(interval * 13 / 2);
        let store = Store::open(&path).unwrap();
        let journal = store.recover().unwrap().unwrap();
        let mut runtime = Runtime::builder()
            .recover(&journal, &registry())
            .unwrap()
            .journal(store)
            .build();
        let before = runtime.schedule("tick").unwrap().status;
        assert_eq!((before.runs, before.missed), (1, 0));
        let next = before.next_run.unwrap();
        run_until_runs(&mut runtime, "tick", 2);
        let after = runtime.schedule("tick").unwrap().status;
        let latest = after.last_fire.unwrap();
        // The run at start-up was for the latest fire due, not the first.
        let outage = jiff::SignedDuration::try_from(down.elapsed()).unwrap();
        assert!(latest > next, "{latest} after {next}");
        // Every fire from the first due to the latest is run once or counted missed.
        let span = latest.duration_since(next).as_millis() / interval.as_millis() as i128;
        assert_eq!(after.missed as i128, span, "outage {outage:?}");
        assert!(after.missed >= 5, "{after:?}");
        assert_eq!(after.runs, 2);
        let fires: BTreeSet<String> = fires_run(&runtime).into_iter().collect();
        assert_eq!(fires.len(), 2);
        assert!(fires.contains(&latest.to_string()));
    });
}

/// A wall clock a test moves: the system's, plus an offset.
#[derive(Clone, Default)]
struct MovedClock(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl MovedClock {
    fn now(&self) -> jiff::Timestamp {
        let offset = self.0.load(std::sync::atomic::Ordering::Relaxed);
        jiff::Timestamp::now() + jiff::SignedDuration::from_millis(offset)
    }

    fn jump(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap();
        self.0.fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The wall-clock anchors a journal holds.
fn anchors(journal: &MemoryJournal) -> usize {
    journal
        .journal()
        .unwrap()
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e,
                spool::core::JournalEntry::Schedule {
                    op: spool::core::ScheduleOp::WallClock(_),
                    ..
                }
            )
        })
        .count()
}

#[test]
fn the_runtime_follows_a_wall_clock_that_jumps_and_journals_nothing_while_it_does_not() {
    within(crate::support::LIMIT, "the clock", || {
        let clock = MovedClock::default();
        let journal = MemoryJournal::new();
        let wall = clock.clone();
        let mut runtime = Runtime::builder()
            .registry(registry())
            .wall_clock(move || wall.now())
            .journal(journal.clone())
            .build();
        runtime
            .put_schedule(every(Duration::from_secs(3600), "hourly"))
            .unwrap();
        assert_eq!(anchors(&journal), 1, "told once, at start");
        let handle = runtime.handle();
        let mover = clock.clone();
        let recorded = journal.clone();
        let entries = move || recorded.journal().unwrap().entries.len();
        let watcher = thread::spawn(move || {
            let _guard = ShutdownOnDrop(handle.clone());
            // Idle through more than one comparison of the clocks: nothing drifted,
            // and the wake-ups to compare them journal nothing.
            thread::sleep(Duration::from_millis(300));
            let before = entries();
            thread::sleep(spool::runtime::WALL_CLOCK_CHECK + Duration::from_millis(500));
            assert_eq!(entries(), before, "an idle loop journaled something");
            let idle = handle.stats().unwrap();
            // Two and a half hours pass on the wall clock in an instant (a suspend).
            mover.jump(Duration::from_secs(9000));
            wait_until("the fire after the jump", || {
                let status = handle.schedule("hourly").ok()??.status;
                (status.runs == 1 && status.running.is_empty()).then_some(status)
            });
            idle
        });
        runtime.run();
        let idle = watcher.join().unwrap();
        // While idle the loop woke to compare the clocks but took no input.
        assert_eq!(idle.submitted, 0);
        let status = runtime.schedule("hourly").unwrap().status;
        // The fires at +1 h and +2 h were due at once: the latest ran, one missed.
        assert_eq!((status.runs, status.missed), (1, 1), "{status:?}");
        assert_eq!(anchors(&journal), 2, "told again once, after the jump");
    });
}

#[test]
fn create_schedule_makes_only_a_new_one_and_replace_schedule_keeps_the_slug() {
    within(crate::support::LIMIT, "the operations", || {
        let mut runtime = Runtime::builder().registry(registry()).build();
        let handle = runtime.handle();
        let ops = thread::spawn(move || {
            let _guard = ShutdownOnDrop(handle.clone());
            let hour = Duration::from_secs(3600);
            assert_eq!(handle.create_schedule(every(hour, "hourly")), Ok(true));
            // A second one of the slug is not made, and the first is left as it was.
            let other = every(hour * 2, "hourly").agent("night-shift");
            assert_eq!(handle.create_schedule(other), Ok(false));
            let kept = handle.schedule("hourly").unwrap().unwrap().def;
            assert_eq!(kept, every(hour, "hourly"));
            // A replacement reads and changes the definition in one call; a new slug
            // from the change is not taken.
            let info = handle
                .replace_schedule("hourly", |def| {
                    let mut def = def.agent("night-shift");
                    def.slug = "renamed".to_owned();
                    def
                })
                .unwrap();
            assert_eq!(
                (info.def.slug.as_str(), info.def.agent.as_deref()),
                ("hourly", Some("night-shift"))
            );
            assert_eq!(
                handle.replace_schedule("nope", |def| def),
                Err(RuntimeError::Schedule(ScheduleError::NotFound(
                    "nope".to_owned()
                )))
            );
            let slugs: Vec<String> = handle
                .schedules()
                .unwrap()
                .into_iter()
                .map(|info| info.def.slug)
                .collect();
            assert_eq!(slugs, ["hourly"]);
        });
        runtime.run();
        ops.join().unwrap();
    });
}
