//! Every single-byte change of a demo's store, in process: what a resumed
//! `spool demo --store` does before it runs — open, recover, replay, start a new
//! journal — on a copy with one byte changed, for every byte of the file. Each copy is
//! a typed error or a run whose every finished agent's answer matches its script;
//! `tests/damage.rs` runs a sample of the same through the binary.

use std::path::Path;
use std::time::Instant;

use spool_core::{Scheduler, TaskState};
use spool_store::Store;

use super::DemoOptions;
use super::script::Script;
use crate::agent::registry;

/// Agents of the demo whose store is damaged.
const AGENTS: usize = 3;
/// Threads changing bytes.
const WORKERS: usize = 2;

/// What a resumed run finds in the store at `path`: the finished agents' answers as
/// (agent, answer), or the error it stops with.
fn resume(path: &Path) -> Result<Vec<(String, serde_json::Value)>, String> {
    let store = Store::open(path).map_err(|e| e.to_string())?;
    let journal = store
        .recover()
        .map_err(|e| e.to_string())?
        .ok_or("no run in the store")?;
    let replay = Scheduler::replay(&journal, &registry()).map_err(|e| e.to_string())?;
    let answers = replay
        .scheduler
        .tasks()
        .filter_map(|task| match task.state {
            TaskState::Completed(Ok(value)) => Some((task.agent, value)),
            _ => None,
        })
        .collect();
    // A resumed run starts its journal with a snapshot of where it goes on from.
    let snapshot = replay
        .scheduler
        .snapshot()
        .and_then(|s| s.encode())
        .map_err(|e| e.to_string())?;
    store.start_journal(&snapshot).map_err(|e| e.to_string())?;
    Ok(answers)
}

/// Every byte of the file, each changed by a bit chosen by its position (for an ASCII
/// digit in half the positions, another digit): never a different answer.
#[test]
fn every_byte_of_a_demo_store() {
    // Each resumed copy closes its store with a checkpoint of SQLite's log, an
    // `fsync`: in memory where there is a memory file system, the test is I/O-free.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temp dir");
    let base = dir.path().join("demo.spool");
    let options = DemoOptions {
        agents: AGENTS,
        max_latency_ms: 1,
        quiet: true,
        store: crate::cli::location::StoreLocation {
            store: Some(base.clone()),
            postgres: None,
        },
        ..DemoOptions::default()
    };
    assert_eq!(super::run(&options), std::process::ExitCode::SUCCESS);
    assert!(!dir.path().join("demo.spool-wal").exists());
    let bytes = std::fs::read(&base).expect("the store is read");
    let scripts: Vec<Script> = (0..AGENTS).map(|i| Script::new(options.seed, i)).collect();
    let right = resume(&base).expect("the undamaged store resumes");
    assert_eq!(right.len(), AGENTS);

    let started = Instant::now();
    // Two workers, each on its own copy, taking every other byte.
    let outcomes: Vec<(usize, usize)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|worker| {
                let (bytes, scripts, dir) = (&bytes, &scripts, dir.path());
                scope.spawn(move || {
                    let name = format!("copy-{worker}.spool");
                    let copy = dir.join(&name);
                    let (mut errors, mut answered) = (0, 0);
                    for at in (worker..bytes.len()).step_by(WORKERS) {
                        let mut damaged = bytes.clone();
                        damaged[at] ^= 1 << (at % 8);
                        for side in ["-wal", "-shm"] {
                            let _ = std::fs::remove_file(dir.join(format!("{name}{side}")));
                        }
                        std::fs::write(&copy, &damaged).expect("the copy is written");
                        match resume(&copy) {
                            Err(_) => errors += 1,
                            Ok(answers) => {
                                answered += 1;
                                check(&answers, scripts, at);
                            }
                        }
                    }
                    (errors, answered)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a worker finished"))
            .collect()
    });
    let errors: usize = outcomes.iter().map(|o| o.0).sum();
    let answered: usize = outcomes.iter().map(|o| o.1).sum();
    eprintln!(
        "{} bytes changed one at a time: {errors} errors, {answered} runs with the right \
         answers, in {:.1} s",
        bytes.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(errors + answered, bytes.len());
    assert!(errors > 0 && answered > 0);
}

/// Asserts that every answer of a resumed copy (with byte `at` changed) matches its
/// agent's script.
fn check(answers: &[(String, serde_json::Value)], scripts: &[Script], at: usize) {
    for (agent, value) in answers {
        let script = agent
            .strip_prefix("agent-")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| scripts.get(n));
        let verdict = match script {
            Some(script) => script.verify(agent, value),
            None => Err("not an agent of the run".to_owned()),
        };
        assert_eq!(
            verdict,
            Ok(()),
            "byte {at} ^ {:#04x}: {agent} answered {value}",
            1 << (at % 8)
        );
    }
}
