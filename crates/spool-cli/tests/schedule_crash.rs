//! `spool run` on a store with schedules due every second or two, SIGKILLed at seeded
//! moments and started again: no nominal fire time runs twice, and every fire is a
//! run or counted missed.
//!
//! How the fires are counted. An interval schedule's fires form a chain: each is the
//! last plus the interval, except after an outage, when the fires due at start-up are
//! handled at once (the latest runs, the others are counted missed) and the chain goes
//! on from start-up plus the interval. Between two statuses read while the process is
//! down (`spool schedule list --json`, which only reads), with next fires `a` and `b`,
//! the fires handled are those of the chain in `[a, b)`. Without a restart between
//! them that is `(b - a) / interval`. With one (the chain handled the fires `a`,
//! `a + i`, ..., `a + m·i` at start-up time `s`, with `a + m·i <= s < a + (m+1)·i`,
//! then went on from `s + i` to `b` in `k` steps), it is `m + 1 + k`, which is again
//! `floor((b - a) / i)`: the part of an interval lost at the restart is less than one.
//! So for each life of the process, per schedule, the runs started, the fires counted
//! missed and the fires still waiting (buffered, or a retry) grow by exactly
//! `floor((b - a) / interval)`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::Value;

/// The kills (each life is up 1.5 to 4 s and down up to 2 s before: the test takes
/// about 50 s).
const LIVES: usize = 12;
/// The scripted model's latency per call: a run (two calls and a tool call) takes about
/// 1.2 s, longer than the 1 s interval of `slow`.
const LLM_LATENCY_MS: &str = "600";

fn spool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(args)
        .output()
        .expect("spool runs")
}

fn ok(args: &[&str]) -> String {
    let out = spool(args);
    assert!(
        out.status.success(),
        "spool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn start(store: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["run", "-q", "--llm-latency-ms", LLM_LATENCY_MS, "--store"])
        .arg(store)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spool run starts")
}

/// A schedule's counts as `list --json` reports them.
#[derive(Clone, Debug)]
struct Counts {
    /// The next fire; `None` once paused.
    next: Option<Timestamp>,
    interval_ms: i128,
    runs: u64,
    missed: u64,
    waiting: u64,
    running: usize,
}

impl Counts {
    fn handled(&self) -> u64 {
        self.runs + self.missed + self.waiting
    }
}

fn list(store: &Path) -> BTreeMap<String, Counts> {
    let text = ok(&[
        "schedule",
        "list",
        "--json",
        "--store",
        store.to_str().unwrap(),
    ]);
    let all: Value = serde_json::from_str(&text).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let st = &s["status"];
            let counts = Counts {
                next: st["next_run"].as_str().map(|t| t.parse().unwrap()),
                interval_ms: i128::from(s["spec"]["every_ms"].as_u64().unwrap()),
                runs: st["runs"].as_u64().unwrap(),
                missed: st["missed"].as_u64().unwrap(),
                waiting: st["buffered"].as_array().unwrap().len() as u64
                    + u64::from(!st["retry"].is_null()),
                running: st["running"].as_array().unwrap().len(),
            };
            (s["slug"].as_str().unwrap().to_owned(), counts)
        })
        .collect()
}

/// A small seeded generator (xorshift64*), so the kill moments are the same each run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[test]
fn killed_and_restarted_every_fire_runs_at_most_once_and_is_counted() {
    let began = Instant::now();
    let seed: u64 = std::env::var("SPOOL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0004);
    eprintln!("seed {seed} (SPOOL_CRASH_SEED to repeat)");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("sched.spool");
    let path = store.to_str().unwrap();
    for args in [
        &[
            "tick",
            "--every",
            "1s",
            "--fresh-session",
            "--overlap",
            "allow-all",
        ][..],
        &["pair", "--every", "2s"],
        &["slow", "--every", "1s", "--overlap", "skip"],
    ] {
        let slug = args[0];
        let prompt = format!("status of {slug}");
        let out = ok(&[
            &["schedule", "add"],
            args,
            &["--prompt", &prompt, "--store", path],
        ]
        .concat());
        assert!(out.starts_with(&format!("added {slug} (every ")), "{out}");
    }
    let mut before = list(&store);
    let first = before.clone();
    let mut fires_handled: BTreeMap<String, u64> = BTreeMap::new();
    let mut run_time = Duration::ZERO;
    for life in 0..LIVES {
        // Down for up to two seconds (several fires of the 1 s schedules due at once
        // at the next start), then up for 1.5 to 4 s.
        thread::sleep(Duration::from_millis(rng.below(2000)));
        let up = Duration::from_millis(1500 + rng.below(2500));
        let mut child = start(&store);
        thread::sleep(up);
        child.kill().unwrap();
        child.wait().unwrap();
        run_time += up;
        let after = list(&store);
        for (slug, b) in &after {
            let a = &before[slug];
            let (a_next, b_next) = (a.next.unwrap(), b.next.unwrap());
            let span = b_next.duration_since(a_next).as_millis();
            let chain = u64::try_from(span / b.interval_ms).unwrap();
            assert_eq!(
                b.handled() - a.handled(),
                chain,
                "life {life} ({up:?}), {slug}: from {a:?} to {b:?}"
            );
            *fires_handled.entry(slug.clone()).or_default() += chain;
        }
        before = after;
    }
    // The last status, once every run going has ended: pause the schedules, then let
    // `spool run` finish the runs (stopped cleanly with SIGTERM each time).
    let last = before.clone();
    for slug in last.keys() {
        ok(&["schedule", "pause", slug, "--store", path]);
    }
    for _ in 0..5 {
        if list(&store).values().all(|c| c.running == 0) {
            break;
        }
        let child = start(&store);
        thread::sleep(Duration::from_millis(2500));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = child.wait_with_output().unwrap().status;
        assert!(status.success(), "spool run after SIGTERM: {status}");
    }
    let end = list(&store);
    let mut report = Vec::new();
    for (slug, counts) in &end {
        assert_eq!(counts.running, 0, "{slug}: runs still going");
        // Pausing and draining changed no count.
        assert_eq!(counts.runs, last[slug].runs, "{slug}");
        assert_eq!(counts.missed, last[slug].missed, "{slug}");
        // Every fire of the chain from the schedule's creation to its last status (the
        // lives' counts added up: a restart's lost part of an interval does not add up
        // across restarts, so it is not the whole span over the interval) is a run
        // started, a fire counted missed, or one still waiting.
        let chain = fires_handled[slug];
        assert_eq!(first[slug].handled(), 0, "{slug}");
        assert_eq!(last[slug].handled(), chain, "{slug}");
        // Every run is in the store, with the fire it ran for: none twice.
        let text = ok(&["schedule", "runs", slug, "--json", "--store", path]);
        let runs: Vec<Value> = serde_json::from_str(&text).unwrap();
        let fires: Vec<&str> = runs.iter().map(|r| r["fire"].as_str().unwrap()).collect();
        let distinct: BTreeSet<&str> = fires.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            fires.len(),
            "{slug}: a fire ran twice: {fires:?}"
        );
        assert_eq!(fires.len() as u64, counts.runs, "{slug}: {runs:?}");
        assert!(runs.iter().all(|r| r["state"] == "ok"), "{slug}: {runs:?}");
        report.push(format!(
            "{slug}: {chain} fires = {} runs + {} missed + {} waiting",
            counts.runs, counts.missed, counts.waiting
        ));
    }
    // The overlap policies did what they say: `slow` (skip, runs longer than its
    // interval) missed fires; `tick` (allow-all) ran runs side by side.
    assert!(end["slow"].missed > 0, "{report:?}");
    assert!(end["tick"].runs > end["slow"].runs, "{report:?}");
    eprintln!(
        "{LIVES} kills, {:.1} s up in all, test {:.1} s: {}",
        run_time.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        report.join("; ")
    );
}
