//! Each overlap policy with a run that outlasts its interval: a schedule every 5
//! minutes whose runs take 12.

use insta::assert_snapshot;
use serde_json::json;
use spool::core::{CronSpec, Overlap, ScheduleDef, SessionMode, Spec};

use crate::support::{at, log_minutes};

fn slow(overlap: Overlap) -> String {
    let mut t = at("2027-01-01T00:00:00Z");
    let spec = Spec::Cron(CronSpec::parse("*/5 * * * *", "UTC").unwrap());
    let def = ScheduleDef::new(
        "slow",
        spec,
        "note",
        json!({"text": "slow", "run_ms": 720_000}),
    )
    .overlap(overlap)
    .session(SessionMode::Fresh);
    t.put_schedule(def).unwrap();
    log_minutes(&mut t, "slow", 40)
}

#[test]
fn skip_counts_the_fires_that_come_while_a_run_goes() {
    assert_snapshot!(slow(Overlap::Skip), @r#"
00:01 runs=0 missed=0 running=[] buffered=[] retry=None result=None error=None
00:05 runs=1 missed=0 running=["1"] buffered=[] retry=None result=None error=None
00:10 runs=1 missed=1 running=["1"] buffered=[] retry=None result=None error=None
00:15 runs=1 missed=2 running=["1"] buffered=[] retry=None result=None error=None
00:17 runs=1 missed=2 running=[] buffered=[] retry=None result=Some(Success) error=None
00:20 runs=2 missed=2 running=["2"] buffered=[] retry=None result=Some(Success) error=None
00:25 runs=2 missed=3 running=["2"] buffered=[] retry=None result=Some(Success) error=None
00:30 runs=2 missed=4 running=["2"] buffered=[] retry=None result=Some(Success) error=None
00:32 runs=2 missed=4 running=[] buffered=[] retry=None result=Some(Success) error=None
00:35 runs=3 missed=4 running=["3"] buffered=[] retry=None result=Some(Success) error=None
00:40 runs=3 missed=5 running=["3"] buffered=[] retry=None result=Some(Success) error=None
"#);
}

#[test]
fn buffer_one_keeps_one_fire_for_when_the_run_ends() {
    assert_snapshot!(slow(Overlap::BufferOne), @r#"
00:01 runs=0 missed=0 running=[] buffered=[] retry=None result=None error=None
00:05 runs=1 missed=0 running=["1"] buffered=[] retry=None result=None error=None
00:10 runs=1 missed=0 running=["1"] buffered=["00:10"] retry=None result=None error=None
00:15 runs=1 missed=1 running=["1"] buffered=["00:10"] retry=None result=None error=None
00:17 runs=2 missed=1 running=["2"] buffered=[] retry=None result=Some(Success) error=None
00:20 runs=2 missed=1 running=["2"] buffered=["00:20"] retry=None result=Some(Success) error=None
00:25 runs=2 missed=2 running=["2"] buffered=["00:20"] retry=None result=Some(Success) error=None
00:29 runs=3 missed=2 running=["3"] buffered=[] retry=None result=Some(Success) error=None
00:30 runs=3 missed=2 running=["3"] buffered=["00:30"] retry=None result=Some(Success) error=None
00:35 runs=3 missed=3 running=["3"] buffered=["00:30"] retry=None result=Some(Success) error=None
00:40 runs=3 missed=4 running=["3"] buffered=["00:30"] retry=None result=Some(Success) error=None
"#);
}

#[test]
fn buffer_all_runs_every_fire_one_after_another() {
    assert_snapshot!(slow(Overlap::BufferAll), @r#"
00:01 runs=0 missed=0 running=[] buffered=[] retry=None result=None error=None
00:05 runs=1 missed=0 running=["1"] buffered=[] retry=None result=None error=None
00:10 runs=1 missed=0 running=["1"] buffered=["00:10"] retry=None result=None error=None
00:15 runs=1 missed=0 running=["1"] buffered=["00:10", "00:15"] retry=None result=None error=None
00:17 runs=2 missed=0 running=["2"] buffered=["00:15"] retry=None result=Some(Success) error=None
00:20 runs=2 missed=0 running=["2"] buffered=["00:15", "00:20"] retry=None result=Some(Success) error=None
00:25 runs=2 missed=0 running=["2"] buffered=["00:15", "00:20", "00:25"] retry=None result=Some(Success) error=None
00:29 runs=3 missed=0 running=["3"] buffered=["00:20", "00:25"] retry=None result=Some(Success) error=None
00:30 runs=3 missed=0 running=["3"] buffered=["00:20", "00:25", "00:30"] retry=None result=Some(Success) error=None
00:35 runs=3 missed=0 running=["3"] buffered=["00:20", "00:25", "00:30", "00:35"] retry=None result=Some(Success) error=None
00:40 runs=3 missed=0 running=["3"] buffered=["00:20", "00:25", "00:30", "00:35", "00:40"] retry=None result=Some(Success) error=None
"#);
}

#[test]
fn cancel_other_cancels_the_run_going() {
    assert_snapshot!(slow(Overlap::CancelOther), @r#"
00:01 runs=0 missed=0 running=[] buffered=[] retry=None result=None error=None
00:05 runs=1 missed=0 running=["1"] buffered=[] retry=None result=None error=None
00:10 runs=2 missed=0 running=["2"] buffered=[] retry=None result=None error=None
00:15 runs=3 missed=0 running=["3"] buffered=[] retry=None result=None error=None
00:20 runs=4 missed=0 running=["4"] buffered=[] retry=None result=None error=None
00:25 runs=5 missed=0 running=["5"] buffered=[] retry=None result=None error=None
00:30 runs=6 missed=0 running=["6"] buffered=[] retry=None result=None error=None
00:35 runs=7 missed=0 running=["7"] buffered=[] retry=None result=None error=None
00:40 runs=8 missed=0 running=["8"] buffered=[] retry=None result=None error=None
"#);
}

#[test]
fn allow_all_runs_beside_the_run_going() {
    assert_snapshot!(slow(Overlap::AllowAll), @r#"
00:01 runs=0 missed=0 running=[] buffered=[] retry=None result=None error=None
00:05 runs=1 missed=0 running=["1"] buffered=[] retry=None result=None error=None
00:10 runs=2 missed=0 running=["1", "2"] buffered=[] retry=None result=None error=None
00:15 runs=3 missed=0 running=["1", "2", "3"] buffered=[] retry=None result=None error=None
00:17 runs=3 missed=0 running=["2", "3"] buffered=[] retry=None result=Some(Success) error=None
00:20 runs=4 missed=0 running=["2", "3", "4"] buffered=[] retry=None result=Some(Success) error=None
00:22 runs=4 missed=0 running=["3", "4"] buffered=[] retry=None result=Some(Success) error=None
00:25 runs=5 missed=0 running=["3", "4", "5"] buffered=[] retry=None result=Some(Success) error=None
00:27 runs=5 missed=0 running=["4", "5"] buffered=[] retry=None result=Some(Success) error=None
00:30 runs=6 missed=0 running=["4", "5", "6"] buffered=[] retry=None result=Some(Success) error=None
00:32 runs=6 missed=0 running=["5", "6"] buffered=[] retry=None result=Some(Success) error=None
00:35 runs=7 missed=0 running=["5", "6", "7"] buffered=[] retry=None result=Some(Success) error=None
00:37 runs=7 missed=0 running=["6", "7"] buffered=[] retry=None result=Some(Success) error=None
00:40 runs=8 missed=0 running=["6", "7", "8"] buffered=[] retry=None result=Some(Success) error=None
"#);
}
