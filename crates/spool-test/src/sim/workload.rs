//! What a simulation runs: agents' scripts, the scheduling rules, and the faults at
//! their moments — made from a seed, printed and read back as one line of JSON, and
//! made smaller by the shrinker.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use spool_core::{
    AgentKindLimits, Kind, PolicyChoice, Priority, RequestLimits, SeededRng, TaskLimits,
};

/// One thing an agent's script does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Asks the LLM a question of this many estimated tokens, and waits for the answer.
    Llm(u32),
    /// Calls the `search` tool and waits for the answer.
    Tool,
    /// Asks the LLM and calls the tool at once, and waits for both.
    Both(u32),
    /// Sleeps this many milliseconds.
    Sleep(u64),
    /// Spawns a child running this script and joins it.
    Spawn(Vec<Op>),
    /// Gives way to other ready tasks.
    Yield,
    /// Fails.
    Fail,
}

/// A task submitted from outside at a moment of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimTask {
    /// When it is submitted, in milliseconds of virtual time.
    pub at: u64,
    /// Its agent, `a0` to `a3`.
    pub agent: u8,
    /// Its priority level, 0 (low) to 3 (critical).
    pub priority: u8,
    /// A deadline, in milliseconds after its submission.
    pub deadline: Option<u64>,
    /// What it does.
    pub script: Vec<Op>,
}

/// The run-queue policy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SimPolicy {
    /// First in, first out.
    Fifo,
    /// Priority levels.
    Priority,
    /// Weighted fair share across agents.
    FairShare,
}

/// The limits a run is held to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimLimits {
    /// `max_running`.
    pub max_running: Option<usize>,
    /// `max_running_per_agent`.
    pub max_running_per_agent: Option<usize>,
    /// The LLM gate's cap of requests in flight.
    pub llm_in_flight: Option<u32>,
    /// The LLM gate's window: at most `.0` requests in `.1` milliseconds.
    pub llm_window: Option<(u32, u64)>,
    /// The LLM gate's token window: at most `.0` tokens in `.1` milliseconds.
    pub llm_tokens: Option<(u64, u64)>,
    /// The tool gate's cap of requests in flight.
    pub tool_in_flight: Option<u32>,
    /// Each agent's cap of requests in flight, across kinds.
    pub per_agent_in_flight: Option<u32>,
    /// Each agent's share of the LLM: a cap of its LLM requests in flight (absent from
    /// the one-line form when unset, as in workloads written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_agent_in_flight: Option<u32>,
    /// Each agent's share of the LLM: at most `.0` of its LLM requests in `.1`
    /// milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_agent_window: Option<(u32, u64)>,
}

impl SimLimits {
    /// The task limits.
    pub fn task_limits(&self) -> TaskLimits {
        let mut limits = TaskLimits::new();
        if let Some(max) = self.max_running {
            limits = limits.max_running(max);
        }
        if let Some(max) = self.max_running_per_agent {
            limits = limits.max_running_per_agent(max);
        }
        limits
    }

    /// The request limits.
    pub fn request_limits(&self) -> RequestLimits {
        let mut limits = RequestLimits::new();
        if let Some(max) = self.llm_in_flight {
            limits = limits.max_in_flight(Kind::Llm, max);
        }
        if let Some((max, per)) = self.llm_window {
            limits = limits.window(Kind::Llm, max, Duration::from_millis(per));
        }
        if let Some((max, per)) = self.llm_tokens {
            limits = limits.tokens(Kind::Llm, max, Duration::from_millis(per));
        }
        if let Some(max) = self.tool_in_flight {
            limits = limits.max_in_flight(Kind::tool("search"), max);
        }
        if let Some(max) = self.per_agent_in_flight {
            limits = limits.per_agent_in_flight(max);
        }
        if self.llm_agent_in_flight.is_some() || self.llm_agent_window.is_some() {
            let mut share = AgentKindLimits::new();
            if let Some(max) = self.llm_agent_in_flight {
                share = share.max_in_flight(max);
            }
            if let Some((max, per)) = self.llm_agent_window {
                share = share.window(max, Duration::from_millis(per));
            }
            limits = limits.agent_limit(Kind::Llm, share);
        }
        limits
    }
}

/// Where a crashed run is restored from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CrashFrom {
    /// A whole snapshot taken at the crash.
    Snapshot,
    /// The snapshot parts of the last checkpoint, and the journal since.
    Parts,
    /// The journal from the run's start.
    Journal,
}

/// A fault, injected at its moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
    /// The next `count` LLM answers are 429s asking to retry after `retry_after` ms.
    Storm {
        /// How many answers.
        count: u32,
        /// The `Retry-After`, in milliseconds.
        retry_after: u64,
    },
    /// The oldest request with an executor times out.
    Timeout,
    /// The LLM executor dies: every LLM request with it fails.
    ExecutorDeath,
    /// The next answer is malformed, and is then delivered a second time.
    Malformed,
    /// The `n`th task made so far (modulo their number) is canceled.
    Cancel(u32),
    /// The clock jumps this many milliseconds ahead.
    ClockJump(u64),
    /// The parts of a checkpoint are written (what a crash from parts restores from).
    Checkpoint,
    /// The process crashes and the run is restored.
    Crash(CrashFrom),
}

impl FaultKind {
    /// The fault's class, as the counts name it.
    pub fn class(&self) -> &'static str {
        match self {
            FaultKind::Storm { .. } => "429 storm",
            FaultKind::Timeout => "timeout",
            FaultKind::ExecutorDeath => "executor death",
            FaultKind::Malformed => "malformed answer",
            FaultKind::Cancel(_) => "cancellation",
            FaultKind::ClockJump(_) => "clock jump",
            FaultKind::Checkpoint => "checkpoint",
            FaultKind::Crash(CrashFrom::Snapshot) => "crash-restore from a snapshot",
            FaultKind::Crash(CrashFrom::Parts) => "crash-restore from parts",
            FaultKind::Crash(CrashFrom::Journal) => "crash-restore from the journal",
        }
    }
}

/// Every fault class a simulation counts (checkpoints are not faults).
pub const FAULT_CLASSES: [&str; 9] = [
    "429 storm",
    "timeout",
    "executor death",
    "malformed answer",
    "cancellation",
    "clock jump",
    "crash-restore from a snapshot",
    "crash-restore from parts",
    "crash-restore from the journal",
];

/// A fault and its moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// When, in milliseconds of virtual time.
    pub at: u64,
    /// What.
    pub kind: FaultKind,
}

/// A simulated workload: the rules, the tasks and the faults.
///
/// # Example
/// ```
/// use spool_test::sim::Workload;
///
/// let workload = Workload::generate(7);
/// let line = workload.to_string();
/// assert_eq!(Workload::parse(&line).unwrap(), workload);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The run-queue policy.
    pub policy: SimPolicy,
    /// The limits.
    pub limits: SimLimits,
    /// The tasks submitted from outside.
    pub tasks: Vec<SimTask>,
    /// The faults, by time.
    pub faults: Vec<Fault>,
}

impl Workload {
    /// A workload made from `seed`: 1 to 12 tasks of up to 4 agents, scripts of up to
    /// 6 steps (children's of up to 3), one of the three policies, some of the limits,
    /// and 0 to 9 faults of any class at moments within the first 3 seconds.
    pub fn generate(seed: u64) -> Workload {
        let mut rng = SeededRng::new(seed ^ 0x5157_0b1d_f00d_cafe);
        let policy = match rng.below(3) {
            0 => SimPolicy::Fifo,
            1 => SimPolicy::Priority,
            _ => SimPolicy::FairShare,
        };
        let maybe = |rng: &mut SeededRng, percent| rng.chance(percent);
        let limits = SimLimits {
            max_running: maybe(&mut rng, 40).then(|| 1 + rng.below(4) as usize),
            max_running_per_agent: maybe(&mut rng, 25).then(|| 1 + rng.below(2) as usize),
            llm_in_flight: maybe(&mut rng, 60).then(|| 1 + rng.below(3) as u32),
            llm_window: maybe(&mut rng, 30)
                .then(|| (1 + rng.below(4) as u32, 100 + 100 * rng.below(10))),
            llm_tokens: maybe(&mut rng, 25).then(|| (200 + 100 * rng.below(8), 500)),
            tool_in_flight: maybe(&mut rng, 40).then(|| 1 + rng.below(2) as u32),
            per_agent_in_flight: maybe(&mut rng, 25).then(|| 1 + rng.below(3) as u32),
            llm_agent_in_flight: None,
            llm_agent_window: None,
        };
        let tasks = (0..1 + rng.below(12))
            .map(|_| SimTask {
                at: rng.below(1500),
                agent: rng.below(4) as u8,
                priority: rng.below(4) as u8,
                deadline: maybe(&mut rng, 15).then(|| 500 + rng.below(3000)),
                script: script(&mut rng, 6, true),
            })
            .collect();
        let mut faults: Vec<Fault> = (0..rng.below(10))
            .map(|_| Fault {
                at: rng.below(3000),
                kind: fault(&mut rng),
            })
            .collect();
        faults.sort_by_key(|f| f.at);
        // Drawn last, so the rest of a seed's workload is what it was before agents'
        // shares were drawn.
        let mut limits = limits;
        limits.llm_agent_in_flight = maybe(&mut rng, 25).then(|| 1 + rng.below(2) as u32);
        limits.llm_agent_window =
            maybe(&mut rng, 20).then(|| (1 + rng.below(3) as u32, 200 + 100 * rng.below(8)));
        Workload {
            policy,
            limits,
            tasks,
            faults,
        }
    }

    /// Reads a workload from its one-line form (as [`Display`](fmt::Display) prints
    /// it: JSON).
    ///
    /// # Errors
    /// The JSON error, for text that is not a workload.
    pub fn parse(text: &str) -> Result<Workload, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The run-queue policy to build the scheduler with.
    pub fn policy_choice(&self) -> PolicyChoice {
        match self.policy {
            SimPolicy::Fifo => PolicyChoice::Fifo,
            SimPolicy::Priority => PolicyChoice::Priority,
            SimPolicy::FairShare => PolicyChoice::FairShare,
        }
    }

    /// How big it is, for the shrinker: tasks, script steps and faults.
    pub fn size(&self) -> usize {
        self.tasks.len()
            + self.faults.len()
            + self
                .tasks
                .iter()
                .map(|t| ops_size(&t.script))
                .sum::<usize>()
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&line)
    }
}

/// A priority from its level number.
pub(crate) fn priority(level: u8) -> Priority {
    match level {
        0 => Priority::Low,
        1 => Priority::Normal,
        2 => Priority::High,
        _ => Priority::Critical,
    }
}

/// The steps of a script, its children's included.
pub(crate) fn ops_size(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| match op {
            Op::Spawn(child) => 1 + ops_size(child),
            _ => 1,
        })
        .sum()
}

/// A script of up to `max` steps; children (of up to 3 steps, none of their own)
/// only when `spawn`.
fn script(rng: &mut SeededRng, max: u64, spawn: bool) -> Vec<Op> {
    (0..rng.below(max + 1))
        .map(|_| match rng.below(20) {
            0..=6 => Op::Llm(20 + 20 * rng.below(10) as u32),
            7..=9 => Op::Tool,
            10..=11 => Op::Both(20 + 20 * rng.below(5) as u32),
            12..=13 => Op::Sleep(10 + rng.below(400)),
            14..=15 if spawn => Op::Spawn(script(rng, 3, false)),
            16..=17 => Op::Yield,
            18 => Op::Fail,
            _ => Op::Llm(50),
        })
        .collect()
}

/// A fault of any class, checkpoints among them.
fn fault(rng: &mut SeededRng) -> FaultKind {
    match rng.below(11) {
        0 => FaultKind::Storm {
            count: 1 + rng.below(4) as u32,
            retry_after: 50 + rng.below(500),
        },
        1 => FaultKind::Timeout,
        2 => FaultKind::ExecutorDeath,
        3 => FaultKind::Malformed,
        4 => FaultKind::Cancel(rng.below(16) as u32),
        5 => FaultKind::ClockJump(500 + rng.below(5000)),
        6 => FaultKind::Checkpoint,
        7 => FaultKind::Crash(CrashFrom::Snapshot),
        8 => FaultKind::Crash(CrashFrom::Parts),
        9 => FaultKind::Crash(CrashFrom::Journal),
        _ => FaultKind::Storm {
            count: 2,
            retry_after: 100,
        },
    }
}
