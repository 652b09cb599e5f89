//! Kill-a-node: three `spool serve --postgres` nodes on one PostgreSQL share six shards,
//! and their built-in agent talks to a stand-in OpenAI-compatible model on loopback.
//! 2,000 agent tasks are submitted round-robin to the three nodes over HTTP, each with
//! its Idempotency-Key (sent again, the same key, to the next node when a node does not
//! answer). Mid-run one node is SIGKILLed, then a second once the first's shards run
//! again elsewhere, then both come back under their names. Every task answered `202`
//! completes exactly once with its own prompt's answer, no key makes two tasks, no
//! request key reaches the model more than once per lease epoch of its shard, and the
//! time a dead node's shards take to be held and to answer again is measured and printed.
//! And, on its own, what a client that gets no answer does: the same key sent again
//! through another node's inbox makes no second task.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

use support::Server;
use support::cluster::{
    self, Node, StandInLlm, TestCluster, holders, one_shard_each, shard_number,
};

const TOKEN: &str = "serve-cluster-kill-token-0123456789";
/// Shards of the cluster: two per node while all three run.
const SHARDS: u32 = 6;
/// Tasks submitted.
const TASKS: usize = 2_000;
/// Agents the tasks belong to (task `i` is agent `i % AGENTS`'s).
const AGENTS: usize = 200;
/// Threads submitting at once.
const CLIENTS: usize = 6;
/// Times one submission is tried (on the next node each time) before its client gives
/// up on it.
const ATTEMPTS: usize = 100;
/// The nodes' lease ttl, as given to `--lease-ttl` and as a duration.
const TTL_ARG: &str = "2s";
const TTL: Duration = Duration::from_secs(2);
/// The nodes' names, in the order they start.
const NAMES: [&str; 3] = ["n1", "n2", "n3"];
/// How long the stand-in model takes to answer, so that requests are in flight when a
/// node dies.
const MODEL_DELAY: Duration = Duration::from_millis(30);
/// How long any one wait of the test may last.
const WAIT: Duration = Duration::from_secs(120);

/// What the failover may take past the lease: recovering the dead node's shards and
/// answering through the HTTP API, on a busy debug build.
const RECOVERY_SLACK: Duration = Duration::from_secs(4);

/// One chat completion the stand-in model was asked for.
struct Call {
    /// Its `X-Spool-Request-Key` header.
    key: Option<String>,
    /// The question of its conversation (its last user message).
    prompt: String,
    /// When it came.
    at: Instant,
}

/// The stand-in model: answers each chat completion, after [`MODEL_DELAY`], with the
/// final answer `done: PROMPT`, and records every call.
struct Model {
    url: String,
    calls: Arc<Mutex<Vec<Call>>>,
    _server: StandInLlm,
}

impl Model {
    fn start() -> Model {
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let recorded = Arc::clone(&calls);
        // Six shards' executors keep their connections open; leave room for them all.
        let server = StandInLlm::start(250, move |request| {
            // Each answer waits on a thread of its own: many are in flight at once.
            let recorded = Arc::clone(&recorded);
            thread::spawn(move || answer(request, &recorded));
        });
        Model {
            url: format!("{}/v1", server.base()),
            calls,
            _server: server,
        }
    }
}

/// Records a chat completion and answers it with `done: PROMPT` after [`MODEL_DELAY`].
fn answer(mut request: tiny_http::Request, calls: &Mutex<Vec<Call>>) {
    let at = Instant::now();
    let mut text = String::new();
    let _ = request.as_reader().read_to_string(&mut text);
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let key = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("X-Spool-Request-Key"))
        .map(|h| h.value.to_string());
    let prompt = body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let content = format!("done: {prompt}");
    calls
        .lock()
        .expect("the calls")
        .push(Call { key, prompt, at });
    thread::sleep(MODEL_DELAY);
    let _ = cluster::reply(request, "chatcmpl-kill", &content, 3);
}

/// What starting a node needs: the cluster's database, the token, the model, and each
/// node's address (kept across restarts, so that clients need not learn new ones).
struct Nodes {
    url: String,
    token_file: PathBuf,
    model: String,
    addrs: Vec<String>,
}

impl Nodes {
    /// Starts node `n` (`NAMES[n]`) on its address.
    fn start(&self, n: usize) -> Server {
        node(
            &self.url,
            &self.token_file,
            &self.addrs[n],
            NAMES[n],
            &self.model,
        )
    }
}

/// Starts node `name` on `addr`, its agents talking to the model at `model`.
fn node(url: &str, token_file: &Path, addr: &str, name: &str, model: &str) -> Server {
    Node::new(url, token_file, name)
        .addr(addr)
        .ttl(TTL_ARG)
        .env("OPENAI_BASE_URL", model)
        .env("OPENAI_API_KEY", "sk-test")
        .start()
}

fn get(agent: &ureq::Agent, addr: &str, path: &str) -> (u16, Value) {
    support::get(agent, addr, TOKEN, path)
}

/// `GET /v1/cluster` from `addr`, or `None` if it did not answer `200`.
fn cluster(agent: &ureq::Agent, addr: &str) -> Option<Value> {
    cluster::cluster(agent, addr, TOKEN)
}

/// Waits up to [`WAIT`] until `done` holds for what `addr`'s `GET /v1/cluster` says.
fn wait_cluster(
    agent: &ureq::Agent,
    addr: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    cluster::wait_cluster(agent, addr, TOKEN, WAIT, what, done)
}

/// Each shard's lease epoch, as `GET /v1/cluster` says.
fn epochs(cluster: &Value) -> BTreeMap<u32, u64> {
    cluster["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| (shard_number(s), s["epoch"].as_u64().expect("an epoch")))
        .collect()
}

/// Whether every node holds its fair share: two shards each.
fn shared_out(cluster: &Value) -> bool {
    let holders = holders(cluster);
    NAMES
        .iter()
        .all(|name| holders.get(*name).map(Vec::len) == Some(2))
}

/// One answer (or none) to one submission.
struct Answer {
    /// The task's number `i` (key `key-i`, prompt `task i`).
    task: usize,
    /// The HTTP status, or `None` when the node did not answer (the error is the body).
    status: Option<u16>,
    body: Value,
}

/// Submits task `i` to the node at `addr`: its status and body, or why it had none.
fn submit(agent: &ureq::Agent, addr: &str, i: usize) -> Result<(u16, Value), String> {
    let body = json!({
        "type": "agent",
        "input": {"prompt": format!("task {i}")},
        "agent": format!("agent-{}", i % AGENTS),
    });
    cluster::try_submit(agent, addr, TOKEN, &format!("key-{i}"), &body).map_err(|e| e.to_string())
}

/// What the clients share with the test: how many tasks are submitted (answered, or
/// given up on), and a task id of each shard seen so far.
#[derive(Default)]
struct Progress {
    submitted: AtomicUsize,
    ids: Mutex<BTreeMap<u32, u64>>,
}

/// Client `c`: submits the tasks `c`, `c + CLIENTS`, ..., task `i` first to node
/// `i % 3`; one that gets no answer, or a `5xx`, goes with the same key to the next
/// node, up to [`ATTEMPTS`] times. Every answer is kept.
fn client(c: usize, addrs: &[String], progress: &Progress) -> Vec<Answer> {
    let agent = support::client(Duration::from_secs(20));
    let mut answers = Vec::new();
    for i in (c..TASKS).step_by(CLIENTS) {
        let mut at = i % addrs.len();
        for _ in 0..ATTEMPTS {
            let (status, body) = match submit(&agent, &addrs[at], i) {
                Ok((status, body)) => (Some(status), body),
                Err(error) => (None, json!(error)),
            };
            if let Some(id) = body["id"].as_u64() {
                let shard = u32::try_from(id >> 44).expect("a shard number");
                progress.ids.lock().expect("the ids").insert(shard, id);
            }
            answers.push(Answer {
                task: i,
                status,
                body,
            });
            match status {
                // Taken, or refused (which the checks report).
                Some(status) if status < 500 => break,
                _ => {
                    at = (at + 1) % addrs.len();
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
        progress.submitted.fetch_add(1, Ordering::SeqCst);
    }
    answers
}

/// Waits up to [`WAIT`] until at least `n` tasks are submitted.
fn wait_submitted(progress: &Progress, n: usize) {
    let deadline = Instant::now() + WAIT;
    while progress.submitted.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "{n} tasks were not submitted");
        thread::sleep(Duration::from_millis(5));
    }
}

/// How long a SIGKILLed node's shards took to come back.
struct Failover {
    /// Until a live node held each of them on a lease that had not expired.
    held: Duration,
    /// Until, moreover, a task of each of them was answered (`200`).
    answered: Duration,
}

/// SIGKILLs `victim`, which holds `shards`, then measures how long until every one of
/// them is held by one of the `live` nodes and a GET of its task `ids[shard]`, through
/// the node at `probe`, answers `200`.
fn kill_and_measure(
    victim: &mut Server,
    shards: &[u32],
    ids: &BTreeMap<u32, u64>,
    live: &[&str],
    probe: &str,
) -> Failover {
    let agent = support::client(Duration::from_secs(20));
    victim.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    victim.child.wait().expect("the killed node is waited for");
    let deadline = killed + WAIT;
    loop {
        if let Some(cluster) = cluster(&agent, probe) {
            let holders = holders(&cluster);
            let held = shards.iter().all(|shard| {
                live.iter()
                    .any(|node| holders.get(*node).is_some_and(|h| h.contains(shard)))
            });
            if held {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "shards {shards:?} were not held again by {live:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let held = killed.elapsed();
    for shard in shards {
        let id = ids[shard];
        loop {
            let (status, task) = get(&agent, probe, &format!("/v1/tasks/{id}"));
            if status == 200 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} of shard {shard}: {status} {task}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
    Failover {
        held,
        answered: killed.elapsed(),
    }
}

/// The tasks in state `state` (every task if `None`), gathered from every shard
/// through `addr`, page by page.
fn listed(agent: &ureq::Agent, addr: &str, state: Option<&str>) -> Vec<Value> {
    let filter = state.map_or_else(String::new, |s| format!("&state={s}"));
    cluster::list_tasks(agent, addr, TOKEN, &format!("limit=1000{filter}"))
}

/// The number `i` of a prompt `task i`.
fn task_number(prompt: &str) -> usize {
    prompt
        .strip_prefix("task ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a prompt of the test: {prompt:?}"))
}

fn millis(d: Duration) -> u128 {
    d.as_millis()
}

#[test]
fn tasks_complete_exactly_once_while_nodes_are_killed_and_restarted() {
    let started = Instant::now();
    let TestCluster {
        url,
        dir: _dir,
        token_file,
    } = TestCluster::init("serve_cluster_kill", SHARDS, TOKEN);
    let model = Model::start();
    let mut nodes = Nodes {
        url,
        token_file,
        model: model.url.clone(),
        addrs: Vec::new(),
    };
    let mut running = Vec::new();
    for n in 0..NAMES.len() {
        // Each address is free once the node before it holds its own.
        nodes.addrs.push(support::free_addr());
        running.push(nodes.start(n));
    }
    let agent = support::client(Duration::from_secs(20));
    let settled = wait_cluster(
        &agent,
        &nodes.addrs[2],
        "three nodes share six shards",
        shared_out,
    );
    let first_epochs = epochs(&settled);

    let progress = Arc::new(Progress::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (addrs, progress) = (nodes.addrs.clone(), Arc::clone(&progress));
            thread::spawn(move || client(c, &addrs, &progress))
        })
        .collect();

    // A third in: n1 dies; n2 and n3 take its shards once its leases expire.
    wait_submitted(&progress, TASKS / 3);
    let now = cluster(&agent, &nodes.addrs[1]).expect("the cluster");
    let of_n1 = holders(&now).remove("n1").expect("n1 holds shards");
    let ids = progress.ids.lock().expect("the ids").clone();
    let first = kill_and_measure(
        &mut running[0],
        &of_n1,
        &ids,
        &["n2", "n3"],
        &nodes.addrs[2],
    );
    eprintln!(
        "kill-a-node: n1 SIGKILLed holding shards {of_n1:?} at {} of {TASKS} tasks submitted: \
         held by live nodes after {} ms, a task of each answered after {} ms (lease ttl {} ms)",
        TASKS / 3,
        millis(first.held),
        millis(first.answered),
        millis(TTL)
    );

    // A dead node's leases run out at most a ttl after it died, and a live node takes
    // them at its next round (a third of a ttl); what is left is the recovery. The
    // bound leaves room for a busy machine's recovery and HTTP answers, and is far
    // below what waiting for a restart would take.
    let bound = TTL * 4 / 3 + RECOVERY_SLACK;
    assert!(
        first.answered <= bound,
        "n1's shards answered after {} ms, past the lease plus recovery ({} ms)",
        millis(first.answered),
        millis(bound)
    );

    // Two thirds in: n2 dies too; n3 takes every shard.
    wait_submitted(&progress, 2 * TASKS / 3);
    let now = cluster(&agent, &nodes.addrs[2]).expect("the cluster");
    let of_n2 = holders(&now).remove("n2").expect("n2 holds shards");
    let ids = progress.ids.lock().expect("the ids").clone();
    let second = kill_and_measure(&mut running[1], &of_n2, &ids, &["n3"], &nodes.addrs[2]);
    eprintln!(
        "kill-a-node: n2 SIGKILLed holding shards {of_n2:?} at {} of {TASKS} tasks submitted: \
         held by n3 after {} ms, a task of each answered after {} ms (lease ttl {} ms)",
        2 * TASKS / 3,
        millis(second.held),
        millis(second.answered),
        millis(TTL)
    );

    assert!(
        second.answered <= bound,
        "n2's shards answered after {} ms, past the lease plus recovery ({} ms)",
        millis(second.answered),
        millis(bound)
    );

    // Both come back under their names, and the shards are shared out again.
    let restarted = Instant::now();
    running[0] = nodes.start(0);
    running[1] = nodes.start(1);
    wait_cluster(
        &agent,
        &nodes.addrs[2],
        "the shards shared out again",
        shared_out,
    );
    eprintln!(
        "kill-a-node: n1 and n2 restarted: two shards each again after {} ms",
        millis(restarted.elapsed())
    );

    let mut answers: Vec<Answer> = Vec::new();
    for handle in clients {
        answers.extend(handle.join().expect("a client"));
    }
    let deadline = Instant::now() + WAIT;
    let completed = loop {
        let completed = listed(&agent, &nodes.addrs[0], Some("completed"));
        if completed.len() >= TASKS {
            break completed;
        }
        if Instant::now() >= deadline {
            let others: Vec<Value> = listed(&agent, &nodes.addrs[0], None)
                .into_iter()
                .filter(|t| t["state"] != "completed")
                .collect();
            let answered: Vec<&Answer> = answers
                .iter()
                .filter(|a| {
                    !completed.iter().any(|t| {
                        t["id"].as_u64().is_some() && t["id"].as_u64() == a.body["id"].as_u64()
                    })
                })
                .collect();
            panic!(
                "{} of {TASKS} tasks completed; the others: {others:?}; answers whose id did \
                 not complete: {:?}; the cluster: {}",
                completed.len(),
                answered
                    .iter()
                    .map(|a| (a.task, a.status, a.body.to_string()))
                    .collect::<Vec<_>>(),
                cluster(&agent, &nodes.addrs[0]).map_or_else(String::new, |c| c.to_string())
            );
        }
        thread::sleep(Duration::from_millis(250));
    };

    // Every key was taken (`202`, or `200` for a repeat), and never gave two ids.
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut taken = vec![false; TASKS];
    let mut ids_of_key: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); TASKS];
    for answer in &answers {
        let kind = match (answer.status, answer.body["id"].as_u64()) {
            (None, _) => "no answer".to_owned(),
            (Some(status @ (200 | 202)), None) => format!("{status} without id"),
            (Some(status), _) => status.to_string(),
        };
        *by_status.entry(kind).or_default() += 1;
        match answer.status {
            Some(200 | 202) => {
                taken[answer.task] = true;
                if let Some(id) = answer.body["id"].as_u64() {
                    ids_of_key[answer.task].insert(id);
                }
            }
            Some(status) => assert!(
                status >= 500,
                "key-{} was refused: {status} {}",
                answer.task,
                answer.body
            ),
            None => {}
        }
    }
    eprintln!(
        "kill-a-node: {} answers to {TASKS} submissions: {by_status:?}",
        answers.len()
    );
    let untaken: Vec<usize> = (0..TASKS).filter(|&i| !taken[i]).collect();
    assert!(
        untaken.is_empty(),
        "tasks never answered 202/200: {untaken:?}"
    );
    for (i, ids) in ids_of_key.iter().enumerate() {
        assert!(ids.len() <= 1, "key-{i} gave tasks {ids:?}");
    }

    // The completed tasks, from every shard: each task once, with its own prompt's
    // answer, and the id its key was answered with (a key answered without one takes
    // its id from here); no task is in any other state.
    let mut id_of_task: BTreeMap<usize, u64> = BTreeMap::new();
    for task in &completed {
        let id = task["id"].as_u64().expect("an id");
        let result = &task["result"];
        let prompt = result["messages"][0]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("task {id} has no prompt: {task}"));
        let i = task_number(prompt);
        assert_eq!(result["answer"], json!(format!("done: task {i}")), "{task}");
        assert_eq!(
            task["agent"],
            json!(format!("agent-{}", i % AGENTS)),
            "{task}"
        );
        if let Some(earlier) = id_of_task.insert(i, id) {
            panic!("task {i} completed twice: as {earlier} and {id}");
        }
        if let Some(answered) = ids_of_key[i].first() {
            assert_eq!(*answered, id, "key-{i} was answered with another task");
        }
    }
    assert_eq!(id_of_task.len(), TASKS);
    assert_eq!(completed.len(), TASKS);

    // A shard's runtime sends each request once in its life, and a life is a lease
    // epoch: a node that takes the shard over (epoch + 1) recovers it from its
    // checkpoint and journal and sends again, with the same request key, what was in
    // flight and not journaled as answered. So a key reaches the model at most
    // once per epoch its task lived through: 1 + the takeovers of its shard since the
    // test began (its epoch at the end minus its epoch before the first submission).
    let last_epochs = epochs(&cluster(&agent, &nodes.addrs[2]).expect("the cluster"));
    let takeovers: BTreeMap<u32, u64> = first_epochs
        .iter()
        .map(|(shard, first)| (*shard, last_epochs[shard] - first))
        .collect();
    let calls = model.calls.lock().expect("the calls");
    // Each request key: how many times it came, its prompt, its first and last time.
    let mut sent: BTreeMap<String, (usize, String, Instant, Instant)> = BTreeMap::new();
    for call in calls.iter() {
        let key = call
            .key
            .clone()
            .expect("every call carries its request key");
        let entry = sent
            .entry(key.clone())
            .or_insert((0, call.prompt.clone(), call.at, call.at));
        entry.0 += 1;
        entry.2 = entry.2.min(call.at);
        entry.3 = entry.3.max(call.at);
        assert_eq!(entry.1, call.prompt, "request key {key} with two prompts");
    }
    let mut again = 0;
    let mut gaps: Vec<u128> = Vec::new();
    for (key, (times, prompt, first_at, last_at)) in &sent {
        let task: u64 = key
            .split(':')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("a request key {key:?} that is not TASK:NUMBER"));
        assert_eq!(
            Some(&task),
            id_of_task.get(&task_number(prompt)),
            "request key {key} carried {prompt:?}"
        );
        let shard = u32::try_from(task >> 44).expect("a shard number");
        let bound = 1 + takeovers[&shard];
        assert!(
            *times as u64 <= bound,
            "request key {key} was sent {times} times; shard {shard} changed hands {} times",
            takeovers[&shard]
        );
        if *times > 1 {
            again += 1;
            gaps.push(millis(*last_at - *first_at));
        }
    }
    gaps.sort_unstable();
    eprintln!(
        "kill-a-node: {} model calls for {} request keys, {again} sent again by the shard's \
         next owner ({} to {} ms after the first send); takeovers per shard {takeovers:?}; \
         {} s in all",
        calls.len(),
        sent.len(),
        gaps.first().copied().unwrap_or(0),
        gaps.last().copied().unwrap_or(0),
        started.elapsed().as_secs()
    );
    assert_eq!(sent.len(), TASKS, "one request per task");

    // No task besides the completed ones: none failed, and no key made a second one
    // (not even one refused as a repeat of a live key).
    let every: Vec<u64> = listed(&agent, &nodes.addrs[1], None)
        .iter()
        .map(|t| t["id"].as_u64().expect("an id"))
        .collect();
    let done: Vec<u64> = completed
        .iter()
        .map(|t| t["id"].as_u64().expect("an id"))
        .collect();
    let not_completed: Vec<Value> = every
        .iter()
        .filter(|id| !done.contains(id))
        .map(|id| get(&agent, &nodes.addrs[1], &format!("/v1/tasks/{id}")).1)
        .collect();
    assert!(
        not_completed.is_empty() && every.len() == done.len(),
        "tasks that did not complete, or more tasks than keys: {not_completed:?} \
         ({} tasks, {} completed)",
        every.len(),
        done.len()
    );
}

/// The same key sent again through a node that does not hold its shard goes through
/// the shard's inbox a second time; the owner finds the key taken and answers with its
/// task, and no second task (not even a refused one) is made.
#[test]
fn a_key_sent_again_through_the_inbox_makes_no_second_task() {
    let TestCluster {
        url,
        dir: _dir,
        token_file,
    } = TestCluster::init("serve_cluster_kill_inbox_repeat", 2, TOKEN);
    let scripted = |name: &str| {
        Node::new(&url, &token_file, name)
            .ttl(TTL_ARG)
            .llm_latency_ms("5")
            .start()
    };
    let a = scripted("a");
    let b = scripted("b");
    let agent = support::client(Duration::from_secs(20));
    let settled = wait_cluster(&agent, &a.addr, "two nodes share two shards", |c| {
        one_shard_each(c, &["a", "b"])
    });
    // An agent of the shard `a` holds, submitted through `b`: through the inbox.
    let of_a = holders(&settled)["a"][0];
    let i = (0..)
        .find(|i| spool_postgres::cluster::shard_for(&format!("agent-{}", i % AGENTS), 2) == of_a)
        .expect("an agent of a's shard");
    let (status, first) = submit(&agent, &b.addr, i).expect("b answers");
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["admission"]["status"], json!("inbox"), "{first}");
    let id = first["id"].as_u64().expect("the task's id");
    // Again through `b`, while the task may still run, then once it has ended.
    for round in ["live", "ended"] {
        if round == "ended" {
            let deadline = Instant::now() + WAIT;
            while get(&agent, &a.addr, &format!("/v1/tasks/{id}")).1["state"] != "completed" {
                assert!(Instant::now() < deadline, "task {id} did not complete");
                thread::sleep(Duration::from_millis(20));
            }
        }
        // Answered as a lone server answers a repeat: 200, the key's task.
        let (status, again) = submit(&agent, &b.addr, i).expect("b answers");
        assert_eq!(status, 200, "{round}: {again}");
        assert_eq!(again["id"].as_u64(), Some(id), "{round}: {again}");
        assert_eq!(
            again["admission"]["status"],
            json!("existing"),
            "{round}: {again}"
        );
    }
    let tasks: Vec<Value> = listed(&agent, &a.addr, None)
        .into_iter()
        .map(|t| json!({"id": t["id"], "state": t["state"], "error": t["error"]}))
        .collect();
    assert_eq!(
        tasks,
        vec![json!({"id": id, "state": "completed", "error": null})]
    );
}
