//! A cluster on one PostgreSQL: durable steps per second of one node and of three
//! nodes sharing the same shards, and the time a dead node's shards take to run again
//! on another.
//!
//! # What it measures
//!
//! **Throughput.** The workload of the `durable` benchmark spread over a cluster of `S`
//! shards ([`spool_cluster::Node`]s on one database made with
//! `spool_postgres::Cluster::init`): `A` agents ([`Agent`]), each making 5 LLM requests
//! one after another (its 5 steps), answered at once by an in-process LLM executor
//! (`from_fn`, one worker thread per shard's runtime), so the runtimes, their writers
//! and PostgreSQL are all there is. Agent `n` is called `agent-n` and goes to shard
//! `shard_for("agent-n", S)`, submitted through the `RuntimeHandle` of that shard's
//! runtime on the node that holds it (`Node::handle`). The submissions come from
//! [`SUBMITTERS`] threads taking the agents in turn, as many clients would: a handle
//! has no `submit_all`, and its `submit` returns once its submission is durable, so
//! the submitters' count is how many submissions can share a commit (the same in every
//! mode). With too few, they are the limit rather than the nodes: 32 give about
//! two thirds of what 128 give on this workload.
//!
//! Modes:
//! - `1 node`: one node holds every shard (the baseline of the ratio);
//! - `3 nodes`: three nodes in this process on the same database, each holding its fair
//!   share (`ceil(S / 3)` at most); the run starts once every shard runs on some node
//!   and the shares stayed the same for two renewal periods.
//!
//! The nodes run every shard's runtime in the same process in both modes (one loop
//! thread, one executor thread, one writer thread and one PostgreSQL connection per
//! shard); what the three nodes add is their leases, renewals and rebalancing (three
//! lease threads, three watchdogs, their rows in the database).
//!
//! Timed: from just before the first submission to the moment every agent is seen
//! completed. The completed agents and the steps are counted from each shard's
//! scheduler (`RuntimeHandle::stats`, read every [`WATCH_EVERY`]: the end is known to
//! within that; a scheduler counts an agent completed when its last poll ends, and the
//! entry saying so is committed with the shard's next group, not waited for): steps are
//! its polls (6 per agent, as the `durable` benchmark counts them), and every run checks that all `A` agents completed, none failed, every
//! submission was taken, and no shard moved during the run. Each run has a database
//! of its own (`Cluster::init`, dropped after it; neither timed). The runs of the modes
//! alternate (1 node, 3 nodes, 1 node, …), so that the machine's load meets both alike.
//!
//! The PostgreSQL cluster (`spool_pgtest::PgCluster`, started once, removed when the
//! benchmark ends) runs with `fsync`, `synchronous_commit` and `full_page_writes` on
//! (PostgreSQL's defaults: a commit is on disk before the runtime hears it is durable),
//! as the `durable` benchmark's `postgres-fsync`; `SPOOL_CLUSTER_FLUSH=fsync,off` adds
//! a cluster with them off (nothing flushed: what PostgreSQL's own work costs).
//!
//! **Failover.** A node in a child process (this benchmark run again with
//! [`CHILD_URL`] in its environment) takes every shard of a fresh database and submits
//! `A` agents whose LLM never answers (each stays live, waiting on its first request);
//! a second node, the survivor, joins in this process and the child hands it its share
//! (the highest `S - ceil(S / 2)` shards). The child is then killed with SIGKILL —
//! run `k` of `n` waits `k / n` of a third of the ttl after the survivor took its
//! share, and the survivor starts as long after the child is ready, so that the kill
//! falls at different moments of the child's renewals and of the survivor's rounds
//! (each every third of the ttl) — and this process times, from the kill:
//! - *lease left*: how long the child's last lease had to run, read from the database
//!   just before the kill (the child renews every third of the ttl, so between two
//!   thirds of the ttl and the ttl);
//! - *detection*: until the database shows the survivor owning every shard the child
//!   held (its lease loop takes shards once a round, every third of the ttl, once the
//!   child's leases and its node row have expired); *after expiry* is detection less
//!   the lease left: the wait for the survivor's next round (up to a third of the ttl);
//! - *recovery*: from then until the survivor runs each of them — its runtime opened as
//!   the shard's writer, recovered from checkpoint and journal, and answering on its
//!   handle — with all `A` agents live across the survivor's shards;
//! - *total*: kill to recovered.
//!
//! It runs at each lease ttl of `SPOOL_CLUSTER_FAILOVER_TTLS_MS` (default 2,000 and
//! the node's default, 10,000), `SPOOL_CLUSTER_RUNS` times each; the table gives the
//! run of the median total, and every run's total.
//!
//! # How to run it
//!
//! `cargo bench --bench cluster`: about 2 to 3 minutes on 2 shared cores, most of it
//! the failover runs at a 10 s ttl. Environment variables:
//! - `SPOOL_CLUSTER_SHARDS=6`: the cluster's shard count;
//! - `SPOOL_CLUSTER_AGENTS=3000`: agents per run (throughput and failover);
//! - `SPOOL_CLUSTER_RUNS=3`: runs per mode and per failover ttl, for the median;
//! - `SPOOL_CLUSTER_NODES=1,3`: the node counts measured (the ratio needs 1);
//! - `SPOOL_CLUSTER_FLUSH=fsync`: the PostgreSQL clusters (`fsync`, `off`);
//! - `SPOOL_CLUSTER_SUBMITTERS=128`: the threads submitting agents;
//! - `SPOOL_CLUSTER_TTL_MS=2000`: the nodes' lease ttl in the throughput runs;
//! - `SPOOL_CLUSTER_FAILOVER_TTLS_MS=2000,10000`: the lease ttls of the failover runs
//!   (`0`: no failover run).
//!
//! Under `cargo test --benches` (no `--bench` argument) it runs one quick pass — 200
//! agents on 3 shards, each mode once without fsync, one failover at a 1 s ttl — to
//! check that it works.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::thread;
use std::time::{Duration, Instant};

use spool::{Executor, Kind, NewTask, OutboundRequest, Replies, Runtime, from_fn};
use spool_cluster::{Node, NodeOptions, ShardId};
use spool_pgtest::PgCluster;
use spool_postgres::Cluster;
use spool_postgres::cluster::shard_for;
use spool_runtime::{RuntimeBuilder, RuntimeHandle};

mod common;

use common::agent::{Agent, STEPS, answer, registry};
use common::database::{Database, Flush};
use common::{env_list, median_by};

/// The cluster's shard count, by default.
const SHARDS: u32 = 6;
/// Agents per run, by default.
const AGENTS: usize = 3_000;
/// Runs per mode and per failover ttl, by default.
const RUNS: usize = 3;
/// The node counts measured, by default.
const NODES: [usize; 2] = [1, 3];
/// Threads submitting the agents, by default.
const SUBMITTERS: usize = 128;
/// The nodes' lease ttl in the throughput runs, by default (ms).
const TTL_MS: u64 = 2_000;
/// The lease ttls of the failover runs, by default (ms): 2 s and the node's default.
const FAILOVER_TTLS_MS: [u64; 2] = [2_000, 10_000];
/// How often the schedulers are read for completed agents while a run goes on.
const WATCH_EVERY: Duration = Duration::from_millis(2);
/// How long anything waited for may take before the benchmark gives up.
const PATIENCE: Duration = Duration::from_secs(300);

/// The database's URL, in the failover child's environment: its presence makes this
/// process the child.
const CHILD_URL: &str = "SPOOL_CLUSTER_CHILD_URL";
/// The child's lease ttl (ms).
const CHILD_TTL_MS: &str = "SPOOL_CLUSTER_CHILD_TTL_MS";
/// The agents the child submits.
const CHILD_AGENTS: &str = "SPOOL_CLUSTER_CHILD_AGENTS";
/// The threads the child submits them from.
const CHILD_SUBMITTERS: &str = "SPOOL_CLUSTER_CHILD_SUBMITTERS";
/// The child's node name.
const CHILD_NODE: &str = "child";
/// The surviving node's name.
const SURVIVOR_NODE: &str = "survivor";

// ---------------------------------------------------------------------------------
// the agent and its executors
// ---------------------------------------------------------------------------------

/// An LLM that never answers: it drops what it is handed.
struct Silent;

impl Executor for Silent {
    fn execute(&mut self, request: OutboundRequest, _replies: &mut Replies<'_>) {
        drop(request);
    }
}

/// Agent `n`'s name, which picks its shard.
fn agent_name(n: usize) -> String {
    format!("agent-{n}")
}

// ---------------------------------------------------------------------------------
// the database
// ---------------------------------------------------------------------------------

/// A database of one run, made a cluster of `shards` shards, and dropped with it.
fn cluster_database<'a>(server: &'a PgCluster, name: String, shards: u32) -> Database<'a> {
    let database = Database::create(server, name);
    Cluster::init(&database.url, shards)
        .unwrap_or_else(|e| panic!("cluster {}: {e}", database.name()));
    database
}

/// Names the databases of a benchmark run, each new.
#[derive(Default)]
struct Names(std::cell::Cell<u32>);

impl Names {
    fn next(&self, prefix: &str) -> String {
        let n = self.0.get() + 1;
        self.0.set(n);
        format!("{prefix}_{n}")
    }
}

// ---------------------------------------------------------------------------------
// nodes
// ---------------------------------------------------------------------------------

/// A node called `name` with leases of `ttl` and the agents' task type.
fn node_options(name: &str, ttl: Duration) -> NodeOptions {
    NodeOptions::new(name, format!("{name}.invalid:80"))
        .lease_ttl(ttl)
        .registry(registry())
}

/// A shard's runtime whose LLM answers at once.
fn answering(_shard: ShardId) -> RuntimeBuilder {
    Runtime::builder().executor(
        Kind::Llm,
        from_fn(|request| Ok(answer(&request.request.payload))),
    )
}

/// A shard's runtime whose LLM never answers.
fn silent(_shard: ShardId) -> RuntimeBuilder {
    Runtime::builder().executor(Kind::Llm, Silent)
}

fn start_node(url: &str, name: &str, ttl: Duration, make: fn(ShardId) -> RuntimeBuilder) -> Node {
    Node::start(url, node_options(name, ttl), make)
        .unwrap_or_else(|e| panic!("node {name} starts: {e}"))
}

/// Waits until `done` gives a value, for at most [`PATIENCE`]; panics saying `what`
/// otherwise.
fn wait_for<T>(what: &str, every: Duration, mut done: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        thread::sleep(every);
    }
}

/// Where each shard runs: `(shard, node index, epoch)`, in shard order.
type Assignment = Vec<(ShardId, usize, u64)>;

/// Which node runs each shard under which epoch.
fn assignment(nodes: &[Node]) -> Assignment {
    let mut all: Assignment = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, node)| {
            node.shards()
                .into_iter()
                .map(move |(shard, epoch, _)| (shard, i, epoch))
        })
        .collect();
    all.sort_unstable();
    all
}

/// Waits until every one of the `shards` shards runs on exactly one of `nodes`, no node
/// above its fair share, and the assignment stays the same for two renewal periods;
/// gives it and each shard's handle, in shard order.
fn settle(nodes: &[Node], shards: u32, ttl: Duration) -> (Assignment, Vec<RuntimeHandle>) {
    let share = shards.div_ceil(nodes.len() as u32) as usize;
    let settled = |a: &[(ShardId, usize, u64)]| {
        a.iter().map(|(s, _, _)| *s).eq(0..shards)
            && (0..nodes.len()).all(|i| a.iter().filter(|(_, n, _)| *n == i).count() <= share)
    };
    let calm = ttl / 3 * 2;
    let mut seen: Option<(Assignment, Instant)> = None;
    let settled = wait_for("the shares settle", Duration::from_millis(20), || {
        let now = assignment(nodes);
        if !settled(&now) {
            seen = None;
            return None;
        }
        match &seen {
            Some((before, since)) if *before == now => (since.elapsed() >= calm).then_some(now),
            _ => {
                seen = Some((now, Instant::now()));
                None
            }
        }
    });
    let handles = settled
        .iter()
        .map(|(shard, i, _)| {
            nodes[*i]
                .handle(*shard)
                .unwrap_or_else(|| panic!("shard {shard} runs on node {i}"))
        })
        .collect();
    (settled, handles)
}

/// Submits agents `0..agents` from `threads` threads, each to the runtime of its
/// shard (`handles`, in shard order); panics if one is refused.
fn submit_agents(handles: &[RuntimeHandle], agents: usize, threads: usize) {
    let next = AtomicUsize::new(0);
    let shards = handles.len() as u32;
    thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= agents {
                        return;
                    }
                    let shard = shard_for(&agent_name(n), shards);
                    let agent = Agent::new(n as u64);
                    if let Err(e) = handles[shard as usize].submit(NewTask::new(agent)) {
                        panic!("agent {n} (shard {shard}) is refused: {e}");
                    }
                }
            });
        }
    });
}

/// The sum of the shards' counters: `(completed, failed, polls, answers)`.
fn counters(handles: &[RuntimeHandle]) -> (u64, u64, u64, u64) {
    handles
        .iter()
        .enumerate()
        .fold((0, 0, 0, 0), |sum, (shard, handle)| {
            let stats = handle
                .stats()
                .unwrap_or_else(|e| panic!("shard {shard}'s runtime answers: {e}"));
            (
                sum.0 + stats.completed,
                sum.1 + stats.failed,
                sum.2 + stats.polls,
                sum.3 + stats.answers,
            )
        })
}

// ---------------------------------------------------------------------------------
// throughput
// ---------------------------------------------------------------------------------

/// What a throughput run is given.
#[derive(Copy, Clone, Debug)]
struct Workload {
    shards: u32,
    agents: usize,
    submitters: usize,
    ttl: Duration,
}

/// One timed run.
#[derive(Clone, Debug)]
struct Run {
    elapsed: Duration,
    polls: u64,
    answers: u64,
    /// Shards each node ran, in node order.
    shares: Vec<usize>,
    /// From the first node's start to the settled shares (not timed).
    settle: Duration,
}

impl Run {
    fn steps_per_second(&self) -> f64 {
        self.polls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs the workload on `nodes` nodes on a new database of `server`.
fn run_once(server: &PgCluster, names: &Names, nodes: usize, work: Workload) -> Run {
    let database = cluster_database(server, names.next("cluster"), work.shards);
    let starting = Instant::now();
    let started: Vec<Node> = (0..nodes)
        .map(|i| start_node(&database.url, &format!("node-{i}"), work.ttl, answering))
        .collect();
    let (before, handles) = settle(&started, work.shards, work.ttl);
    let settle = starting.elapsed();
    let (done0, failed0, polls0, answers0) = counters(&handles);
    assert_eq!((done0, failed0), (0, 0), "the shards start empty");

    let began = Instant::now();
    let elapsed = thread::scope(|scope| {
        scope.spawn(|| submit_agents(&handles, work.agents, work.submitters));
        wait_for("every agent completes", WATCH_EVERY, || {
            let (done, failed, _, _) = counters(&handles);
            (done + failed >= work.agents as u64).then(|| began.elapsed())
        })
    });

    let (done, failed, polls, answers) = counters(&handles);
    assert_eq!(
        (done, failed),
        (work.agents as u64, 0),
        "{nodes} nodes: every agent completes"
    );
    assert_eq!(
        assignment(&started),
        before,
        "{nodes} nodes: a shard moved during the run"
    );
    let shares = (0..nodes)
        .map(|i| before.iter().filter(|(_, n, _)| *n == i).count())
        .collect();
    for node in started {
        node.stop().expect("the node stops");
    }
    drop(database);
    Run {
        elapsed,
        polls: polls - polls0,
        answers: answers - answers0,
        shares,
        settle,
    }
}

/// The runs of one node count on one PostgreSQL cluster.
struct Cell {
    flush: Flush,
    nodes: usize,
    runs: Vec<Run>,
}

impl Cell {
    /// `1 node`, `3 nodes`.
    fn mode(&self) -> String {
        let plural = if self.nodes == 1 { "" } else { "s" };
        format!("{} node{plural}", self.nodes)
    }

    /// The run with the median steps/s.
    fn median_run(&self) -> &Run {
        median_by(&self.runs, Run::steps_per_second)
    }
}

// ---------------------------------------------------------------------------------
// failover
// ---------------------------------------------------------------------------------

/// The child's side of a failover run: a node that takes every shard, submits the
/// agents (whose LLM never answers), prints `ready`, and runs until killed (at most
/// [`PATIENCE`], should its parent be gone).
fn failover_child(url: &str) {
    let number = |name: &str| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} is a number"))
    };
    let ttl = Duration::from_millis(number(CHILD_TTL_MS));
    let agents = number(CHILD_AGENTS) as usize;
    let submitters = number(CHILD_SUBMITTERS) as usize;
    let node = start_node(url, CHILD_NODE, ttl, silent);
    let shards = Cluster::connect(url)
        .expect("the cluster's database answers")
        .shards();
    let (_, handles) = settle(std::slice::from_ref(&node), shards, ttl);
    submit_agents(&handles, agents, submitters);
    println!("ready");
    std::io::stdout().flush().expect("the parent reads");
    thread::sleep(PATIENCE);
    drop(node);
}

/// The child process, killed when dropped.
struct ChildNode(Child);

impl Drop for ChildNode {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the child node on `url`; returns it once it said `ready`.
fn spawn_child(url: &str, ttl: Duration, agents: usize, submitters: usize) -> ChildNode {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let mut child = ChildNode(
        Command::new(exe)
            .env(CHILD_URL, url)
            .env(CHILD_TTL_MS, ttl.as_millis().to_string())
            .env(CHILD_AGENTS, agents.to_string())
            .env(CHILD_SUBMITTERS, submitters.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the child starts"),
    );
    let stdout = child.0.stdout.take().expect("the child's stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    wait_ready(&rx);
    child
}

fn wait_ready(lines: &Receiver<String>) {
    loop {
        match lines.recv_timeout(PATIENCE) {
            Ok(line) if line == "ready" => return,
            Ok(_) => {}
            Err(e) => panic!("the child node is not ready: {e}"),
        }
    }
}

/// One failover, timed from the kill.
#[derive(Clone, Debug, PartialEq, PartialOrd)]
struct Failover {
    /// How long the child's last lease to expire had left at the kill.
    lease_left: Duration,
    /// Kill → the survivor owns every shard the child held.
    detection: Duration,
    /// Owned → run and answering, every agent live.
    recovery: Duration,
}

impl Failover {
    fn total(&self) -> Duration {
        self.detection + self.recovery
    }

    /// Detection less the lease left: the wait for the survivor's round.
    fn after_expiry(&self) -> Duration {
        self.detection.saturating_sub(self.lease_left)
    }
}

/// Kills a node holding shards of agents and times until the survivor runs them. The
/// survivor starts `delay` after the child is ready, and the kill comes `delay` after
/// it took its share.
fn failover_once(
    server: &PgCluster,
    names: &Names,
    ttl: Duration,
    delay: Duration,
    work: Workload,
) -> Failover {
    let database = cluster_database(server, names.next("failover"), work.shards);
    let mut child = spawn_child(&database.url, ttl, work.agents, work.submitters);
    // The rounds of both nodes' lease loops come every third of the ttl: when the
    // survivor starts sets how long after the child's last renewal its next round
    // comes, and when the kill comes sets how long the child's leases have left.
    thread::sleep(delay);
    let survivor = start_node(&database.url, SURVIVOR_NODE, ttl, silent);
    let cluster = Cluster::connect(&database.url).expect("the cluster's database answers");
    let keeps = work.shards.div_ceil(2) as usize;
    let owners = |cluster: &Cluster| -> Vec<(u32, Option<String>, Option<Duration>)> {
        cluster
            .status()
            .expect("the cluster's status")
            .shards
            .into_iter()
            .map(|s| (s.shard, s.owner, s.expires_in))
            .collect()
    };
    let owned_by = |status: &[(u32, Option<String>, Option<Duration>)], node: &str| {
        status
            .iter()
            .filter(|(_, owner, _)| owner.as_deref() == Some(node))
            .map(|(shard, _, _)| *shard)
            .collect::<Vec<u32>>()
    };
    // The child keeps its share; the survivor takes and runs the rest.
    let held = wait_for(
        "the child hands its extras over",
        Duration::from_millis(20),
        || {
            let status = owners(&cluster);
            let child_held = owned_by(&status, CHILD_NODE);
            let survivor_held = owned_by(&status, SURVIVOR_NODE);
            (child_held.len() == keeps
                && survivor_held.len() == work.shards as usize - keeps
                && survivor.shard_ids() == survivor_held)
                .then_some(child_held)
        },
    );
    thread::sleep(delay);
    let status = owners(&cluster);
    let lease_left = status
        .iter()
        .filter(|(shard, _, _)| held.contains(shard))
        .filter_map(|(_, _, left)| *left)
        .max()
        .unwrap_or_default();

    let killed = Instant::now();
    child.0.kill().expect("the child is killed");
    child.0.wait().expect("the child ends");
    let detection = wait_for(
        "the survivor owns the child's shards",
        Duration::from_millis(5),
        || {
            let status = owners(&cluster);
            let mine = owned_by(&status, SURVIVOR_NODE);
            held.iter()
                .all(|shard| mine.contains(shard))
                .then(|| killed.elapsed())
        },
    );
    let total = wait_for(
        "the survivor runs every shard",
        Duration::from_millis(2),
        || {
            let shards = survivor.shards();
            if shards.len() != work.shards as usize {
                return None;
            }
            let mut live = 0;
            for (_, _, handle) in &shards {
                live += handle.query(|r| r.scheduler().live_len()).ok()?;
            }
            (live == work.agents).then(|| killed.elapsed())
        },
    );
    survivor.stop().expect("the survivor stops");
    drop(cluster);
    drop(database);
    Failover {
        lease_left,
        detection,
        recovery: total - detection,
    }
}

// ---------------------------------------------------------------------------------
// the run and its tables
// ---------------------------------------------------------------------------------

/// `name` from the environment as one value, or `default`.
fn env_one<T>(name: &str, default: T) -> T
where
    T: FromStr + Clone,
    T::Err: std::fmt::Debug,
{
    env_list(name, &[default])[0].clone()
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn main() {
    if let Ok(url) = std::env::var(CHILD_URL) {
        failover_child(&url);
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: a quick pass then.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let (work, runs, node_counts, flushes, failover_ttls) = if full {
        let work = Workload {
            shards: env_one("SPOOL_CLUSTER_SHARDS", SHARDS).max(1),
            agents: env_one("SPOOL_CLUSTER_AGENTS", AGENTS).max(1),
            submitters: env_one("SPOOL_CLUSTER_SUBMITTERS", SUBMITTERS).max(1),
            ttl: Duration::from_millis(env_one("SPOOL_CLUSTER_TTL_MS", TTL_MS)),
        };
        (
            work,
            env_one("SPOOL_CLUSTER_RUNS", RUNS).max(1),
            env_list("SPOOL_CLUSTER_NODES", &NODES),
            env_list("SPOOL_CLUSTER_FLUSH", &[Flush::Fsync]),
            env_list("SPOOL_CLUSTER_FAILOVER_TTLS_MS", &FAILOVER_TTLS_MS),
        )
    } else {
        println!("quick check; `cargo bench --bench cluster` measures the tables");
        let work = Workload {
            shards: 3,
            agents: 200,
            submitters: 8,
            ttl: Duration::from_secs(1),
        };
        (work, 1, NODES.to_vec(), vec![Flush::Off], vec![1_000])
    };
    let whole = Instant::now();
    let names = Names::default();

    let mut cells: Vec<Cell> = Vec::new();
    let mut servers: Vec<(Flush, PgCluster)> = Vec::new();
    for &flush in &flushes {
        let server = flush.start();
        let first = cells.len();
        for &nodes in &node_counts {
            cells.push(Cell {
                flush,
                nodes,
                runs: Vec::new(),
            });
        }
        // The modes' runs alternate, so that the machine's load meets each alike.
        for _ in 0..runs {
            for cell in &mut cells[first..] {
                let run = run_once(&server, &names, cell.nodes, work);
                eprintln!(
                    "  {}, {}: {:.3} s, {} polls, {:.0} steps/s (shards per node {:?}, \
                     settled in {:.1} s)",
                    cell.mode(),
                    flush.name(),
                    run.elapsed.as_secs_f64(),
                    run.polls,
                    run.steps_per_second(),
                    run.shares,
                    run.settle.as_secs_f64()
                );
                cell.runs.push(run);
            }
        }
        servers.push((flush, server));
    }

    // The failover runs on the first cluster measured (one with fsync if none was).
    if servers.is_empty() && failover_ttls.iter().any(|&t| t > 0) {
        servers.push((Flush::Fsync, Flush::Fsync.start()));
    }
    let mut failovers: Vec<(Duration, Vec<Failover>)> = Vec::new();
    for &ttl_ms in failover_ttls.iter().filter(|&&t| t > 0) {
        let failover_server = &servers[0].1;
        let ttl = Duration::from_millis(ttl_ms);
        let times = (0..runs)
            .map(|k| {
                // The kills spread over a third of the ttl, the survivor's round.
                let delay = ttl / 3 * k as u32 / runs as u32;
                let f = failover_once(failover_server, &names, ttl, delay, work);
                eprintln!(
                    "  failover at ttl {} (delay {}): lease left {}, \
                     detection {}, recovery {}, total {}",
                    seconds(ttl),
                    seconds(delay),
                    seconds(f.lease_left),
                    seconds(f.detection),
                    seconds(f.recovery),
                    seconds(f.total())
                );
                f
            })
            .collect();
        failovers.push((ttl, times));
    }

    println!();
    println!(
        "cluster workload: {} agents of {STEPS} LLM steps (6 polls each) over {} shards \
         (agent-n to shard_for(\"agent-n\", {})), an executor answering at once, {} \
         submitting threads, lease ttl {}; steps = polls counted by the shards' schedulers",
        work.agents,
        work.shards,
        work.shards,
        work.submitters,
        seconds(work.ttl)
    );
    println!(
        "{:>5} | {:<7} | {:>16} | {:>12} | {:>4} | {:>7} | {:>7} | {:>15} | {:>14}",
        "flush",
        "mode",
        "steps/s (median)",
        "vs 1 node",
        "runs",
        "polls",
        "answers",
        "shards per node",
        "all runs"
    );
    for cell in &cells {
        let run = cell.median_run();
        let rate = run.steps_per_second();
        let baseline = cells
            .iter()
            .find(|c| c.flush == cell.flush && c.nodes == 1)
            .map(|c| c.median_run().steps_per_second());
        let ratio = match (cell.nodes, baseline) {
            (1, _) => "1 (baseline)".to_owned(),
            (_, Some(base)) => format!("{:.2}×", rate / base),
            (_, None) => "—".to_owned(),
        };
        let all: Vec<String> = cell
            .runs
            .iter()
            .map(|r| format!("{:.1}k", r.steps_per_second() / 1e3))
            .collect();
        println!(
            "{:>5} | {:<7} | {:>16.0} | {:>12} | {:>4} | {:>7} | {:>7} | {:>15} | {}",
            cell.flush.name(),
            cell.mode(),
            rate,
            ratio,
            cell.runs.len(),
            run.polls,
            run.answers,
            format!("{:?}", run.shares),
            all.join(" / ")
        );
    }
    if !failovers.is_empty() {
        println!();
        println!(
            "failover: a node in a child process holding {} of {} shards ({} agents live \
             across them all) killed with SIGKILL; the run of the median total",
            work.shards.div_ceil(2),
            work.shards,
            work.agents
        );
        println!(
            "{:>7} | {:>4} | {:>10} | {:>9} | {:>12} | {:>8} | {:>8} | all totals",
            "ttl", "runs", "lease left", "detection", "after expiry", "recovery", "total"
        );
        for (ttl, times) in &failovers {
            let run = median_by(times, Failover::total);
            let total = run.total();
            let totals: Vec<String> = times.iter().map(|f| seconds(f.total())).collect();
            println!(
                "{:>7} | {:>4} | {:>10} | {:>9} | {:>12} | {:>8} | {:>8} | {}",
                seconds(*ttl),
                times.len(),
                seconds(run.lease_left),
                seconds(run.detection),
                seconds(run.after_expiry()),
                seconds(run.recovery),
                seconds(total),
                totals.join(" / ")
            );
        }
    }
    println!("whole run: {:.1} s", whole.elapsed().as_secs_f64());
}
