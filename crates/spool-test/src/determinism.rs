//! Run a workload twice and compare: the determinism contract, as a test helper.

use spool_core::Config;

use crate::TestScheduler;

/// Runs `workload(seed, scheduler)` twice on fresh [`TestScheduler`]s (FIFO policy,
/// default limits) and compares the trace hashes and the final task states. Returns
/// the hash. [`check_determinism_with`] does the same under another configuration.
///
/// # Panics
/// When the two runs differ, naming the seed to reproduce it and the first event
/// where the traces part.
///
/// # Example
/// ```
/// use spool_core::{task_fn, Step};
/// use spool_test::check_determinism;
///
/// let hash = check_determinism(42, |_seed, s| {
///     s.spawn(task_fn("hi", |_cx| Step::done("hi")));
///     s.step_until_idle();
/// });
/// assert_ne!(hash, 0);
/// ```
pub fn check_determinism<F>(seed: u64, workload: F) -> u64
where
    F: FnMut(u64, &mut TestScheduler),
{
    check_determinism_with(seed, Config::new(), workload)
}

/// Runs `workload(seed, scheduler)` twice, each time on a fresh [`TestScheduler`] made
/// from `config` (any policy, limits, weights; the trace is recorded whatever `config`
/// says), and compares the trace hashes and the final task states. Returns the hash.
///
/// # Panics
/// When the two runs differ, naming the seed to reproduce it and the first event
/// where the traces part.
///
/// # Example
/// ```
/// use spool_core::{task_fn, Config, NewTask, PolicyChoice, Step};
/// use spool_test::check_determinism_with;
///
/// let config = Config::new().policy(PolicyChoice::FairShare);
/// let hash = check_determinism_with(42, config, |seed, s| {
///     for agent in ["alice", "bob"] {
///         let task = task_fn("hi", move |_cx| Step::done(seed));
///         s.submit(NewTask::new(task).agent(agent));
///     }
///     s.step_until_idle();
/// });
/// assert_ne!(hash, 0);
/// ```
pub fn check_determinism_with<F>(seed: u64, config: Config, mut workload: F) -> u64
where
    F: FnMut(u64, &mut TestScheduler),
{
    let mut first = TestScheduler::with_config(config.clone());
    workload(seed, &mut first);
    let mut second = TestScheduler::with_config(config);
    workload(seed, &mut second);
    let (a, b) = (first.trace_hash(), second.trace_hash());
    if a != b {
        let (ea, eb) = (first.trace_events(), second.trace_events());
        let at = ea
            .iter()
            .zip(eb.iter())
            .position(|(x, y)| x != y)
            .unwrap_or(ea.len().min(eb.len()));
        panic!(
            "nondeterministic run with seed {seed}: trace hashes {a:#018x} and {b:#018x} differ; \
             first difference at event {}: {:?} vs {:?}",
            at + 1,
            ea.get(at).map(ToString::to_string),
            eb.get(at).map(ToString::to_string),
        );
    }
    let (sa, sb) = (first.task_states(), second.task_states());
    assert!(
        sa == sb,
        "nondeterministic run with seed {seed}: equal traces, different final states"
    );
    a
}
