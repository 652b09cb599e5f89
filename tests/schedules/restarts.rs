//! Downtime, snapshots and replay: a restored scheduler told the wall clock moved on
//! runs the latest missed fire once; whole and incremental snapshots and a replayed
//! journal give the same schedule table.

use serde_json::json;
use spool::core::{CatchUp, CronSpec, ScheduleDef, Spec};
use spool_test::TestScheduler;

use crate::support::{at, minutes, registry};

fn every_five(slug: &str) -> ScheduleDef {
    let spec = Spec::Cron(CronSpec::parse("*/5 * * * *", "UTC").unwrap());
    ScheduleDef::new(slug, spec, "note", json!({"text": slug}))
}

/// An hour of runs, then a snapshot, then down `hours`: restored, told the wall clock.
fn down_for(hours: i64, catch_up: CatchUp) -> TestScheduler {
    let mut t = at("2027-01-01T00:00:00Z");
    t.put_schedule(every_five("tick").catch_up(catch_up))
        .unwrap();
    t.advance(minutes(60));
    assert_eq!(t.schedule("tick").unwrap().status.runs, 12);
    let snapshot = t.snapshot().unwrap();
    let mut t = TestScheduler::restore(&snapshot, &registry()).unwrap();
    let back = t.wall_clock().unwrap() + jiff::SignedDuration::from_hours(hours);
    t.set_wall_clock(back);
    t
}

#[test]
fn after_ten_hours_down_the_latest_missed_fire_runs_once() {
    let mut t = down_for(10, CatchUp::Latest);
    t.advance(minutes(1));
    let s = t.schedule("tick").unwrap().status;
    // Fires 01:05 to 11:00 were due: 120. The latest ran; 119 are counted missed.
    assert_eq!((s.runs, s.missed), (13, 119));
    assert_eq!(s.last_fire.unwrap().to_string(), "2027-01-01T11:00:00Z");
    assert_eq!(s.last_run.unwrap().to_string(), "2027-01-01T11:00:00Z");
    assert_eq!(s.next_run.unwrap().to_string(), "2027-01-01T11:05:00Z");
    // And it goes on on time.
    t.advance(minutes(10));
    let s = t.schedule("tick").unwrap().status;
    assert_eq!((s.runs, s.missed), (15, 119));
}

#[test]
fn catch_up_none_runs_nothing_missed() {
    let mut t = down_for(10, CatchUp::None);
    t.advance(minutes(1));
    let s = t.schedule("tick").unwrap().status;
    assert_eq!((s.runs, s.missed), (12, 120));
    assert_eq!(s.next_run.unwrap().to_string(), "2027-01-01T11:05:00Z");
}

#[test]
fn catch_up_all_runs_the_missed_fires_in_its_window() {
    let window = minutes(30);
    let mut t = down_for(10, CatchUp::All { window });
    t.advance(minutes(1));
    let s = t.schedule("tick").unwrap().status;
    // 10:30 to 11:00 are within 30 minutes: 7 fires; one runs, six wait (skip would
    // drop them: catch-up hands them to the overlap policy, whose default is skip).
    assert_eq!((s.runs, s.missed), (13, 113 + 6));
}

#[test]
fn an_interval_goes_on_from_the_start_up_after_an_outage() {
    let mut t = at("2027-01-01T00:00:00Z");
    let def = ScheduleDef::new(
        "hourly",
        Spec::Every(minutes(60)),
        "note",
        json!({"text": "h"}),
    );
    t.put_schedule(def).unwrap();
    t.advance(minutes(125));
    let snapshot = t.snapshot().unwrap();
    let mut t = TestScheduler::restore(&snapshot, &registry()).unwrap();
    let back = t.wall_clock().unwrap() + jiff::SignedDuration::from_mins(5 * 60 + 7);
    t.set_wall_clock(back);
    t.advance(minutes(1));
    let s = t.schedule("hourly").unwrap().status;
    // Down from 02:05 to 07:12: fires 03:00 to 07:00 were due (5); 07:00 ran at 07:12.
    assert_eq!((s.runs, s.missed), (3, 4));
    assert_eq!(s.last_run.unwrap().to_string(), "2027-01-01T07:12:00Z");
    assert_eq!(s.next_run.unwrap().to_string(), "2027-01-01T08:12:00Z");
}

#[test]
fn whole_and_incremental_snapshots_and_replay_agree() {
    let mut t = at("2027-01-01T00:00:00Z");
    t.record_journal().unwrap();
    t.core_mut().track_changes(true);
    let first = t.core_mut().snapshot_changes().unwrap();
    t.put_schedule(every_five("a")).unwrap();
    t.put_schedule(every_five("b").session(spool::core::SessionMode::Shared("shared".into())))
        .unwrap();
    t.advance(minutes(33));
    t.pause_schedule("a").unwrap();
    t.advance(minutes(7));
    t.trigger_schedule("a").unwrap();
    t.advance(minutes(1));
    let whole = t.snapshot().unwrap();
    let bytes = whole.encode().unwrap();
    // Restored from the whole snapshot: the same bytes again.
    let restored = TestScheduler::restore(&whole, &registry()).unwrap();
    assert_eq!(restored.snapshot().unwrap().encode().unwrap(), bytes);
    assert_eq!(restored.schedules(), t.schedules());
    assert_eq!(restored.sessions(), t.sessions());
    // The parts (first all rows, then the rows that changed, and the header) restore
    // to the same bytes.
    let parts = t.core_mut().snapshot_changes().unwrap();
    let mut rows: std::collections::BTreeMap<_, Vec<u8>> = first.rows.into_iter().collect();
    for id in &parts.removed {
        rows.remove(id);
    }
    rows.extend(parts.rows.iter().cloned());
    let from_parts = spool::core::Snapshot::from_parts(
        &parts.header,
        rows.iter().map(|(id, r)| (*id, r.as_slice())),
    )
    .unwrap();
    assert_eq!(from_parts.encode().unwrap(), bytes);
    // A replay of the journal reaches the same table.
    let journal = t.journal().unwrap();
    let replay = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.scheduler.schedules(), t.schedules());
    assert_eq!(replay.scheduler.sessions(), t.sessions());
}
