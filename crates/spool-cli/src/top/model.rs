//! What the dashboard shows: the server's answers as they were last read (queue, gates,
//! schedules, recent tasks, one task's detail and trace) and the state of the
//! connection. Pure: updated by [`Model::apply`] from the client's [`Update`]s, read by
//! the drawing code; no clock, no I/O.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::live::{LiveAnswer, LiveDelta};

/// `GET /v1/queue`: queue state and details, the gates and the policy.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Queue {
    pub(crate) running: u64,
    pub(crate) max_running: Option<u64>,
    pub(crate) queued: u64,
    pub(crate) blocked: u64,
    pub(crate) ready: u64,
    pub(crate) in_flight: u64,
    pub(crate) held_requests: u64,
    pub(crate) rate_limited: bool,
    pub(crate) backoffs: Vec<Backoff>,
    pub(crate) stats: Stats,
    /// The server's wait statistics, all over the latest tasks that ended.
    pub(crate) waits: Waits,
    pub(crate) policy: String,
    pub(crate) gates: Vec<Gate>,
    pub(crate) details: Vec<Detail>,
}

/// `waits` of `GET /v1/queue`: waits for a slot or a rate limit over the last `tasks`
/// tasks that ended (the web page shows the same figures).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Waits {
    pub(crate) tasks: u64,
    pub(crate) avg_ms: Option<u64>,
    pub(crate) p95_ms: Option<u64>,
}

/// A kind backing off after a 429.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Backoff {
    pub(crate) kind: String,
    pub(crate) remaining_ms: u64,
}

/// The scheduler's counters (the ones the dashboard shows).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Stats {
    pub(crate) submitted: u64,
    pub(crate) scheduled: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) canceled: u64,
    pub(crate) rejected: u64,
    pub(crate) rate_limited: u64,
    pub(crate) peak_queued: u64,
    pub(crate) peak_running: u64,
    pub(crate) peak_in_flight: u64,
}

/// A window's use.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct WindowUse {
    pub(crate) used: u64,
    pub(crate) max: u64,
    pub(crate) per_ms: u64,
}

/// One request kind's gate.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Gate {
    pub(crate) kind: String,
    pub(crate) in_flight: u32,
    pub(crate) max_in_flight: Option<u32>,
    pub(crate) held: u64,
    pub(crate) window: Option<WindowUse>,
    pub(crate) tokens: Option<WindowUse>,
    pub(crate) backoff_ms: Option<u64>,
    pub(crate) backoff_hits: u32,
}

/// One live task in the queue. The server sends them in the policy's order, each with
/// its `position` in it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Detail {
    pub(crate) position: u64,
    pub(crate) id: u64,
    pub(crate) agent: String,
    #[serde(rename = "type")]
    pub(crate) task_type: String,
    pub(crate) priority: String,
    pub(crate) state: String,
    pub(crate) age_ms: u64,
    pub(crate) score: Option<i64>,
    pub(crate) waits_on: Option<String>,
    pub(crate) since_ms: u64,
}

impl Detail {
    /// Whether it has a slot (ready, running or waiting on requests, timers, children).
    pub(crate) fn started(&self) -> bool {
        matches!(self.state.as_str(), "ready" | "running" | "waiting")
    }
}

/// One schedule (`GET /v1/schedules`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Schedule {
    pub(crate) slug: String,
    pub(crate) enabled: bool,
    pub(crate) schedule: Value,
    pub(crate) status: ScheduleStatus,
}

/// A schedule's status.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct ScheduleStatus {
    pub(crate) next_run: Option<String>,
    pub(crate) last_run: Option<String>,
    pub(crate) last_result: Option<String>,
    pub(crate) runs: u64,
    pub(crate) missed: u64,
    pub(crate) paused_reason: Option<String>,
}

/// Where a task's time went (`timing` in `GET /v1/tasks/{id}`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Timing {
    pub(crate) queued_ms: u64,
    pub(crate) blocked_ms: u64,
    pub(crate) rate_limited_ms: u64,
    pub(crate) waiting_ms: BTreeMap<String, u64>,
    pub(crate) running_ms: u64,
}

/// One stretch of a task's timeline: what it waited on (or `running`), from when to
/// when, in milliseconds since its submission.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Segment {
    pub(crate) wait: String,
    pub(crate) kind: Option<String>,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
    pub(crate) open: bool,
}

/// A task (`GET /v1/tasks/{id}` and the rows of `GET /v1/tasks`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Task {
    pub(crate) id: u64,
    #[serde(rename = "type")]
    pub(crate) task_type: String,
    pub(crate) agent: String,
    pub(crate) priority: String,
    pub(crate) state: String,
    pub(crate) state_detail: String,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<String>,
    pub(crate) in_flight: u32,
    pub(crate) age_ms: u64,
    pub(crate) timing: Timing,
    /// Absent from servers that do not build it: the detail then shows `timing`.
    pub(crate) timeline: Option<Vec<Segment>>,
    /// What it spent on LLM answers: only from a server with budgets.
    pub(crate) spend: Option<TaskSpend>,
}

/// A task's spend (`spend` of `GET /v1/tasks/{id}`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct TaskSpend {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) tokens: u64,
    pub(crate) cost_usd: f64,
}

/// A trace event from `GET /v1/events`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct TraceLine {
    pub(crate) seq: u64,
    pub(crate) time_ms: u64,
    pub(crate) task: u64,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) cause: String,
}

/// `GET /v1/cluster` of a cluster node: every shard and every node that joined, as
/// the node answering saw them. A lone server answers 404 there: no cluster.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Cluster {
    /// The node that answered.
    pub(crate) node: String,
    /// Every shard, lowest first.
    pub(crate) shards: Vec<ClusterShard>,
    /// Every node that joined, by name.
    pub(crate) nodes: Vec<ClusterNode>,
}

/// One shard of [`Cluster`]: who holds its lease, under which epoch, and what waits.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct ClusterShard {
    pub(crate) shard: u32,
    /// The node holding its lease (`None`: free).
    pub(crate) owner: Option<String>,
    pub(crate) epoch: u64,
    pub(crate) lease_age_ms: Option<u64>,
    pub(crate) expires_in_ms: Option<u64>,
    /// Its owner let the lease expire (it stopped or died).
    pub(crate) expired: bool,
    /// Submissions waiting in its inbox.
    pub(crate) inbox: u64,
    /// Journal entries after its latest checkpoint.
    pub(crate) lag: u64,
}

/// One node of [`Cluster`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct ClusterNode {
    pub(crate) node: String,
    pub(crate) addr: String,
    pub(crate) up_for_ms: u64,
    pub(crate) heartbeat_age_ms: u64,
    pub(crate) draining: bool,
    /// The shards whose lease it holds, lowest first.
    pub(crate) shards: Vec<u32>,
}

/// How many bits of a task id number it within its shard on a cluster: shard `s`
/// numbers its tasks from `s << TASK_SHARD_SHIFT` (the cluster's `TASK_ID_SHARD_SHIFT`).
const TASK_SHARD_SHIFT: u32 = 44;

/// The shard that made task `id` on a cluster: the top bits of its id.
pub(crate) fn shard_of_task(id: u64) -> u64 {
    id >> TASK_SHARD_SHIFT
}

/// Task `id` as a cluster's dashboard writes it, `SHARD:NUMBER` (`1:7` for
/// 17592186044423, shard 1's seventh task): a cluster's ids are 14 digits from shard 1
/// on, and differ only in their last ones.
pub(crate) fn short_id(id: u64) -> String {
    format!(
        "{}:{}",
        shard_of_task(id),
        id & ((1 << TASK_SHARD_SHIFT) - 1)
    )
}

/// A node whose heartbeat is older than this and that holds no shard is listed after
/// the others (the server's `spool_cluster_nodes` counts the rest).
pub(crate) const NODE_LIVE_MS: u64 = 60_000;

impl Cluster {
    /// How many shards the cluster has (at least one).
    pub(crate) fn shard_count(&self) -> u32 {
        u32::try_from(self.shards.len()).unwrap_or(u32::MAX).max(1)
    }

    /// The nodes to list: those holding a shard or beating within [`NODE_LIVE_MS`]
    /// first, then the others, each part by name as the server sends them.
    pub(crate) fn nodes_listed(&self) -> Vec<&ClusterNode> {
        let live = |n: &ClusterNode| !n.shards.is_empty() || n.heartbeat_age_ms < NODE_LIVE_MS;
        let (mut first, rest): (Vec<&ClusterNode>, Vec<&ClusterNode>) =
            self.nodes.iter().partition(|n| live(n));
        first.extend(rest);
        first
    }
}

/// Whether the server answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Connection {
    /// Nothing read yet.
    #[default]
    Connecting,
    /// The last poll was answered.
    Up,
    /// The last poll failed: what went wrong, and the attempt being made.
    Gone { error: String, attempt: u32 },
    /// The server refused the token.
    Unauthorized(String),
}

/// What the client reports.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Update {
    /// One poll's answers.
    Polled {
        queue: Box<Queue>,
        schedules: Vec<Schedule>,
        /// The recent tasks, when they were read this time.
        tasks: Option<Vec<Task>>,
        /// The cluster, when the server is a cluster node (`None`: a lone server).
        cluster: Option<Box<Cluster>>,
        /// The shard whose queue `queue` is (0 on a lone server).
        shard: u32,
    },
    /// The watched task, as read now (`None`: it is gone).
    Task(u64, Option<Box<Task>>),
    /// A trace event of the watched task.
    Event(TraceLine),
    /// A piece of an answer being streamed for the watched task.
    Delta(LiveDelta),
    /// A poll failed; the client tries again (attempt `attempt`).
    Gone { error: String, attempt: u32 },
    /// The server refused the token.
    Unauthorized(String),
    /// A line worth showing: what a cancel did, or why the trace is not followed.
    Status(String),
}

/// The state the detail shows for a task the server no longer has.
pub(crate) const GONE: &str = "gone";

/// The most trace events kept for the detail.
pub(crate) const TRACE_KEPT: usize = 200;

/// Everything the dashboard shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Model {
    /// The server's address, as given.
    pub(crate) addr: String,
    pub(crate) connection: Connection,
    pub(crate) queue: Queue,
    pub(crate) schedules: Vec<Schedule>,
    /// The recent tasks (for the wait percentiles).
    pub(crate) tasks: Vec<Task>,
    /// The task whose detail is open, as last read.
    pub(crate) task: Option<Task>,
    /// Its trace events, oldest first, at most [`TRACE_KEPT`].
    pub(crate) trace: Vec<TraceLine>,
    /// The answer being streamed for it, until the task has it whole.
    pub(crate) live: Option<LiveAnswer>,
    /// The last message worth a line (a cancel's outcome).
    pub(crate) status: Option<String>,
    /// The cluster as the node answering sees it; `None` on a lone server.
    pub(crate) cluster: Option<Cluster>,
    /// The shard whose queue is shown (a cluster node answers `/v1/queue` per shard).
    pub(crate) shard: u32,
}

impl Model {
    /// A model for the server at `addr`, nothing read yet.
    pub(crate) fn new(addr: impl Into<String>) -> Model {
        Model {
            addr: addr.into(),
            ..Model::default()
        }
    }

    /// Takes one update from the client.
    pub(crate) fn apply(&mut self, update: Update) {
        match update {
            Update::Polled {
                queue,
                schedules,
                tasks,
                cluster,
                shard,
            } => {
                self.connection = Connection::Up;
                self.queue = *queue;
                self.schedules = schedules;
                self.cluster = cluster.map(|c| *c);
                self.shard = shard;
                if let Some(tasks) = tasks {
                    self.tasks = tasks;
                }
            }
            Update::Task(id, task) => {
                // Only the task being watched: an answer for one closed since is late.
                if self.task.as_ref().is_some_and(|t| t.id == id) {
                    self.task = Some(task.map_or_else(
                        || Task {
                            id,
                            state: GONE.to_owned(),
                            ..Task::default()
                        },
                        |t| *t,
                    ));
                }
            }
            Update::Event(line) => {
                let watched = self.task.as_ref().map(|t| t.id);
                if watched == Some(line.task)
                    && self.trace.last().is_none_or(|last| last.seq < line.seq)
                {
                    // The streamed answer is whole once the task leaves Waiting with it.
                    if self.live.as_ref().is_some_and(|live| {
                        line.cause == format!("answer to request {}", live.request)
                    }) {
                        self.live = None;
                    }
                    self.trace.push(line);
                    if self.trace.len() > TRACE_KEPT {
                        let extra = self.trace.len() - TRACE_KEPT;
                        self.trace.drain(..extra);
                    }
                }
            }
            Update::Delta(delta) => {
                if self.task.as_ref().map(|t| t.id) == Some(delta.task) {
                    LiveAnswer::take(&mut self.live, delta);
                }
            }
            Update::Gone { error, attempt } => {
                self.connection = Connection::Gone { error, attempt };
            }
            Update::Unauthorized(message) => self.connection = Connection::Unauthorized(message),
            Update::Status(message) => self.status = Some(message),
        }
    }

    /// Opens the detail of task `id` (its data comes with the next updates).
    pub(crate) fn watch(&mut self, id: u64) {
        self.task = Some(Task {
            id,
            ..Task::default()
        });
        self.trace.clear();
        self.live = None;
    }

    /// Closes the detail.
    pub(crate) fn unwatch(&mut self) {
        self.task = None;
        self.trace.clear();
        self.live = None;
    }

    /// Whether the data shown is stale (the server is not answering).
    pub(crate) fn stale(&self) -> bool {
        !matches!(self.connection, Connection::Up)
    }

    /// The agents of the live tasks: `(agent, started, waiting for a slot or
    /// dependencies, share of the started tasks in percent)`, by name.
    pub(crate) fn shares(&self) -> Vec<(String, u64, u64, u64)> {
        let mut by_agent: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for d in &self.queue.details {
            let entry = by_agent.entry(d.agent.as_str()).or_default();
            if d.started() {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }
        let total: u64 = by_agent.values().map(|(s, _)| s).sum();
        by_agent
            .into_iter()
            .map(|(agent, (started, waiting))| {
                let share = (started * 100).checked_div(total).unwrap_or(0);
                (agent.to_owned(), started, waiting, share)
            })
            .collect()
    }

    /// The server's 95th percentile of the latest ended tasks' waits (for a slot or a
    /// rate limit), in milliseconds, and how many tasks it is over; `None` with none.
    pub(crate) fn p95_wait(&self) -> Option<(u64, usize)> {
        let waits = &self.queue.waits;
        let tasks = usize::try_from(waits.tasks).unwrap_or(usize::MAX);
        waits.p95_ms.map(|ms| (ms, tasks))
    }

    /// The server's average wait over the same tasks, in milliseconds.
    pub(crate) fn average_wait(&self) -> Option<u64> {
        self.queue.waits.avg_ms
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_queue_answer_reads_with_and_without_the_new_fields() {
        let old: Queue = serde_json::from_value(json!({
            "running": 1, "queued": 0, "blocked": 0, "ready": 0,
            "waiting": {"requests": 1, "timer": 0, "children": 0, "slot": 0, "dependencies": 0},
            "in_flight": 1, "held_requests": 0, "rate_limited": false, "backoffs": [],
            "stats": {"submitted": 1, "scheduled": 1, "total_wait": {"secs": 1, "nanos": 500_000_000}},
            "details": [{"id": 1, "agent": "default", "type": "react-agent", "priority": "normal",
                "state": "waiting", "age_ms": 5, "depth": 0, "iteration": 1, "score": null}]
        }))
        .expect("an answer of a server without the new fields reads");
        assert_eq!(old.details[0].waits_on, None);
        assert_eq!((old.stats.scheduled, old.waits.tasks), (1, 0));
        assert!(old.gates.is_empty());
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_tasks_shard_is_read_from_its_id_as_the_cluster_numbers_them() {
        assert_eq!(TASK_SHARD_SHIFT, spool_cluster::TASK_ID_SHARD_SHIFT);
        let id = spool_cluster::first_task_id(3) + 6;
        assert_eq!((shard_of_task(id), short_id(id)), (3, "3:7".to_owned()));
        assert_eq!(short_id(5), "0:5");
    }

    #[test]
    fn a_cluster_answer_reads_and_lists_live_nodes_first() {
        let cluster: Cluster = serde_json::from_value(json!({
            "node": "b",
            "shards": [
                {"shard": 0, "owner": "b", "epoch": 3, "lease_age_ms": 1200,
                    "expires_in_ms": 8800, "expired": false, "inbox": 1, "lag": 20},
                {"shard": 1, "owner": null, "epoch": 1, "lease_age_ms": null,
                    "expires_in_ms": null, "expired": false, "inbox": 0, "lag": 0},
            ],
            "nodes": [
                {"node": "a", "addr": "http://127.0.0.1:1", "up_for_ms": 90_000,
                    "heartbeat_age_ms": 61_000, "draining": false, "shards": []},
                {"node": "b", "addr": "http://127.0.0.1:2", "up_for_ms": 5_000,
                    "heartbeat_age_ms": 400, "draining": true, "shards": [0]},
                {"node": "c", "addr": "http://127.0.0.1:3", "up_for_ms": 80_000,
                    "heartbeat_age_ms": 70_000, "draining": false, "shards": [1]},
            ],
        }))
        .expect("the answer of GET /v1/cluster reads");
        assert_eq!(cluster.shard_count(), 2);
        assert_eq!(
            (
                cluster.shards[0].owner.as_deref(),
                cluster.shards[1].owner.as_deref()
            ),
            (Some("b"), None)
        );
        assert_eq!((cluster.shards[0].epoch, cluster.shards[0].lag), (3, 20));
        // A node holding a shard is listed with the live ones, whatever its heartbeat.
        let listed: Vec<(&str, bool)> = cluster
            .nodes_listed()
            .iter()
            .map(|n| (n.node.as_str(), n.draining))
            .collect();
        assert_eq!(listed, [("b", true), ("c", false), ("a", false)]);
        // A poll of a lone server after one of a node forgets the cluster.
        let mut model = Model::new("http://x");
        let polled = |cluster: Option<Cluster>, shard| Update::Polled {
            queue: Box::default(),
            schedules: Vec::new(),
            tasks: None,
            cluster: cluster.map(Box::new),
            shard,
        };
        model.apply(polled(Some(cluster.clone()), 1));
        assert_eq!((model.cluster.as_ref(), model.shard), (Some(&cluster), 1));
        model.apply(polled(None, 0));
        assert_eq!((model.cluster, model.shard), (None, 0));
    }

    #[test]
    fn the_watched_tasks_streamed_answer_grows_until_its_answer_comes() {
        let mut model = Model::new("http://x");
        model.watch(7);
        let piece = |task, seq, text: &str| {
            Update::Delta(LiveDelta {
                task,
                request: 2,
                seq,
                text: text.to_owned(),
                ..LiveDelta::default()
            })
        };
        for update in [piece(7, 0, "Hel"), piece(8, 1, "other"), piece(7, 1, "lo")] {
            model.apply(update);
        }
        assert_eq!(
            model.live.as_ref().map(|l| (l.request, l.shown())),
            Some((2, "Hello".to_owned()))
        );
        // Another request's answer leaves it; its own ends it.
        let answer = |seq, cause: &str| {
            Update::Event(TraceLine {
                seq,
                task: 7,
                cause: cause.to_owned(),
                ..TraceLine::default()
            })
        };
        model.apply(answer(5, "answer to request 1"));
        assert!(model.live.is_some());
        model.apply(answer(6, "answer to request 2"));
        assert_eq!(model.live, None);
        model.apply(piece(7, 0, "again"));
        model.unwatch();
        assert_eq!(model.live, None);
    }

    #[test]
    fn events_of_other_tasks_and_repeats_are_not_kept() {
        let mut model = Model::new("http://x");
        model.watch(7);
        let line = |seq, task| {
            Update::Event(TraceLine {
                seq,
                task,
                ..TraceLine::default()
            })
        };
        for update in [line(1, 7), line(2, 8), line(1, 7), line(3, 7)] {
            model.apply(update);
        }
        let seqs: Vec<u64> = model.trace.iter().map(|l| l.seq).collect();
        assert_eq!(seqs, [1, 3]);
    }

    #[test]
    fn a_task_read_is_kept_only_while_watched_and_a_missing_one_is_gone() {
        let mut model = Model::new("http://x");
        let read = |id| {
            Update::Task(
                id,
                Some(Box::new(Task {
                    id,
                    state: "running".to_owned(),
                    ..Task::default()
                })),
            )
        };
        model.apply(read(3));
        assert_eq!(model.task, None);
        model.watch(3);
        model.apply(read(4));
        assert_eq!(model.task.as_ref().map(|t| t.state.as_str()), Some(""));
        model.apply(read(3));
        assert_eq!(
            model.task.as_ref().map(|t| t.state.as_str()),
            Some("running")
        );
        model.apply(Update::Task(3, None));
        assert_eq!(
            model.task.as_ref().map(|t| (t.id, t.state.as_str())),
            Some((3, GONE))
        );
    }

    #[test]
    fn the_wait_figures_are_the_server_s_over_the_same_tasks() {
        let mut model = Model::new("http://x");
        // The task list read (for other panels) does not change them.
        model.tasks = vec![Task {
            id: 1,
            timing: Timing {
                queued_ms: 9_999,
                ..Timing::default()
            },
            ..Task::default()
        }];
        model.queue = serde_json::from_value(json!({
            "stats": {"scheduled": 1_200, "total_wait": {"secs": 8_049, "nanos": 800_000_000}},
            "waits": {"tasks": 1_000, "window": 1_000, "avg_ms": 49, "p50_ms": 10, "p95_ms": 10, "max_ms": 2_000},
        }))
        .unwrap_or_default();
        assert_eq!(
            (model.average_wait(), model.p95_wait()),
            (Some(49), Some((10, 1_000)))
        );
        model.queue.waits = Waits::default();
        assert_eq!((model.average_wait(), model.p95_wait()), (None, None));
    }

    #[test]
    fn shares_count_started_tasks_by_agent() {
        let mut model = Model::new("http://x");
        let task = |agent: &str, state: &str| Detail {
            agent: agent.to_owned(),
            state: state.to_owned(),
            ..Detail::default()
        };
        model.queue.details = vec![
            task("b", "running"),
            task("a", "waiting"),
            task("a", "queued"),
            task("b", "ready"),
            task("c", "waiting"),
            task("c", "blocked"),
        ];
        assert_eq!(
            model.shares(),
            [
                ("a".to_owned(), 1, 1, 25),
                ("b".to_owned(), 2, 0, 50),
                ("c".to_owned(), 1, 1, 25)
            ]
        );
    }
}
