//! Fencing of `spool serve --postgres` nodes: a node frozen with SIGSTOP past its
//! lease while another node takes its shards, then let go on with SIGCONT, has its next
//! write refused, stops those shards, and nothing it did after losing the lease is
//! visible — not through either node's API, not in the shards' journals.
//!
//! The LLM is a stand-in on loopback that holds every call until the test lets the
//! calling node's calls go, numbers the calls, records each one's request key and
//! which node sent it (each node is given its own base URL), and answers `answer to
//! call #N of KEY.`: a task's result names the call, so the node, that answered it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use spool_postgres::cluster::shard_for;

mod support;

use support::Server;
use support::cluster::{self, Node, StandInLlm, TestCluster};

const TOKEN: &str = "serve-cluster-fence-token-0123456789";

/// The cluster's shard count.
const SHARDS: u32 = 4;

/// Tasks placed in each shard node A holds.
const TASKS_PER_SHARD: usize = 3;

/// One call the stand-in received.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    /// Its number, from 1, in the order the stand-in received them.
    number: usize,
    /// The node that sent it (`a` or `b`: the first part of the URL's path).
    node: String,
    /// Its `X-Spool-Request-Key`.
    key: String,
}

/// What the stand-in has received, what it holds, and whose calls it lets go.
#[derive(Default)]
struct Calls {
    calls: Vec<Call>,
    /// The calls not answered yet, with their numbers and requests.
    held: Vec<(Call, tiny_http::Request)>,
    /// The nodes whose calls are answered as they come.
    released: BTreeSet<String>,
}

/// The stand-in LLM: an OpenAI-compatible chat-completions server on loopback.
struct StandIn {
    base: String,
    calls: Arc<Mutex<Calls>>,
    _server: StandInLlm,
}

impl StandIn {
    /// Starts serving on a free loopback port.
    fn start() -> StandIn {
        let calls: Arc<Mutex<Calls>> = Arc::default();
        let kept = calls.clone();
        // Every call is held on a connection of its own: grow tiny_http's connection
        // threads first, so that none waits for a thread.
        let server = StandInLlm::start(48, move |request| {
            let node = request
                .url()
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            let key = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("X-Spool-Request-Key"))
                .map(|h| h.value.to_string())
                .unwrap_or_default();
            let mut calls = lock(&kept);
            let call = Call {
                number: calls.calls.len() + 1,
                node,
                key,
            };
            calls.calls.push(call.clone());
            if calls.released.contains(&call.node) {
                // A late call of a released node: not held, and answered as any.
                let _ = answer(&call, request);
            } else {
                calls.held.push((call, request));
            }
        });
        StandIn {
            base: server.base(),
            calls,
            _server: server,
        }
    }

    /// The base URL node `node` is given as `OPENAI_BASE_URL`.
    fn url_for(&self, node: &str) -> String {
        format!("{}/{node}/v1", self.base)
    }

    /// Every call so far, in the order received.
    fn calls(&self) -> Vec<Call> {
        lock(&self.calls).calls.clone()
    }

    /// Answers every held call of `node` now (the answers are written to its
    /// connections, whether or not it reads them now), and from now on its calls as
    /// they come; returns the calls answered.
    fn release(&self, node: &str) -> Vec<Call> {
        let mut calls = lock(&self.calls);
        calls.released.insert(node.to_owned());
        let (theirs, others): (Vec<_>, Vec<_>) = std::mem::take(&mut calls.held)
            .into_iter()
            .partition(|(call, _)| call.node == node);
        calls.held = others;
        theirs
            .into_iter()
            .map(|(call, request)| {
                answer(&call, request)
                    .unwrap_or_else(|e| panic!("call {call:?} cannot be answered: {e}"));
                call
            })
            .collect()
    }
}

fn lock(calls: &Mutex<Calls>) -> MutexGuard<'_, Calls> {
    calls.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The answer a call gets: a final answer that names it.
fn answer_text(call: &Call) -> String {
    format!("answer to call #{} of {}.", call.number, call.key)
}

/// Answers `request` with the chat completion whose text is [`answer_text`].
fn answer(call: &Call, request: tiny_http::Request) -> std::io::Result<()> {
    let id = format!("chatcmpl-{}", call.number);
    cluster::reply(request, &id, &answer_text(call), 5)
}

/// Starts node `name` on the cluster at `url`, on a free loopback port, with leases of
/// 2 s and its LLM calls going to `llm`.
fn node(url: &str, token_file: &Path, name: &str, llm: &str) -> Server {
    Node::new(url, token_file, name)
        .env("OPENAI_BASE_URL", llm)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "test-model")
        .start()
}

/// A node's process, frozen with SIGSTOP until this is dropped (whatever happened
/// meanwhile, a failed assertion too): then it goes on with SIGCONT, and can be
/// stopped, and stops, as any other.
struct Frozen(Pid);

impl Frozen {
    fn freeze(server: &Server) -> Frozen {
        let pid = Pid::from_raw(i32::try_from(server.child.id()).expect("a pid"));
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // It ended already if it cannot be signalled.
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

fn client() -> ureq::Agent {
    support::client(Duration::from_secs(30))
}

fn get(agent: &ureq::Agent, addr: &str, path: &str) -> (u16, Value) {
    support::get(agent, addr, TOKEN, path)
}

fn get_ok(agent: &ureq::Agent, addr: &str, path: &str) -> Value {
    support::get_ok(agent, addr, TOKEN, path)
}

/// `GET path` with the token: its JSON if answered 200 (a node may answer 503 while
/// a shard has no live owner, or not answer while it is stopped).
fn try_get(agent: &ureq::Agent, addr: &str, path: &str) -> Option<Value> {
    let mut response = agent
        .get(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .ok()?;
    if response.status().as_u16() != 200 {
        return None;
    }
    response.body_mut().read_json().ok()
}

/// `GET /healthz`: its text.
fn healthz(agent: &ureq::Agent, addr: &str) -> String {
    let mut response = agent
        .get(format!("http://{addr}/healthz"))
        .call()
        .unwrap_or_else(|e| panic!("GET /healthz on {addr}: {e}"));
    assert_eq!(response.status().as_u16(), 200);
    response
        .body_mut()
        .read_to_string()
        .expect("the body of /healthz")
}

/// Waits up to 30 s until `done` gives something.
fn wait_for<T>(what: &str, mut done: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match done() {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "{what}: {last}"),
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Each shard's owner and epoch, as `GET /v1/cluster` on `addr` says (expired leases
/// have no owner).
fn leases(agent: &ureq::Agent, addr: &str) -> Result<BTreeMap<u32, (String, u64)>, String> {
    let (status, cluster) = get(agent, addr, "/v1/cluster");
    if status != 200 {
        return Err(format!("{status} {cluster}"));
    }
    Ok(cluster::leases(&cluster))
}

/// The shards `node` holds in `leases`, in order.
fn held_by(leases: &BTreeMap<u32, (String, u64)>, node: &str) -> Vec<u32> {
    leases
        .iter()
        .filter(|(_, (owner, _))| owner == node)
        .map(|(shard, _)| *shard)
        .collect()
}

/// Every `spool.*` byte column's rows of the shards `shards` (journal entries,
/// checkpoints, task rows), as bytes.
fn stored_bytes(db: &mut postgres::Client, shards: &[u32]) -> Vec<Vec<u8>> {
    let shards: Vec<i32> = shards
        .iter()
        .map(|s| i32::try_from(*s).expect("an i32"))
        .collect();
    let mut bytes = Vec::new();
    for table in ["entries", "checkpoints", "tasks"] {
        let rows = db
            .query(
                &format!("SELECT body FROM spool.{table} WHERE shard = ANY($1)"),
                &[&shards],
            )
            .unwrap_or_else(|e| panic!("spool.{table}: {e}"));
        bytes.extend(rows.iter().map(|row| row.get::<_, Vec<u8>>(0)));
    }
    bytes
}

/// A task as `GET /v1/tasks/{id}` shows it, without its age (which grows).
fn without_age(mut task: Value) -> Value {
    if let Some(task) = task.as_object_mut() {
        task.remove("age_ms");
    }
    task
}

/// What the writer of epoch `ours` says when its write is refused because the
/// writer of epoch `found` took its shard over (`PgStoreError::Fenced`, in the
/// runtime's `journal write failed` line).
fn fenced(found: u64, ours: u64) -> String {
    format!(
        "was taken over by another writer (epoch {found}, this writer's is {ours}): \
         nothing more is written by this one"
    )
}

/// How many times each refusal A's shards 0 and 1 get says so in `log`, and how many
/// times it should.
fn refusals(
    log: &str,
    before: &BTreeMap<u32, (String, u64)>,
    taken: &BTreeMap<u32, (String, u64)>,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut expected = BTreeMap::new();
    for shard in [0, 1] {
        *expected
            .entry(fenced(taken[&shard].1, before[&shard].1))
            .or_default() += 1;
    }
    let found = expected
        .keys()
        .map(|text| {
            // The run loop's own line, one per refused writer.
            let count = log
                .lines()
                .filter(|line| {
                    line.contains("journal write failed") && line.contains(text.as_str())
                })
                .count();
            (text.clone(), count)
        })
        .collect();
    (found, expected)
}

/// Whether one of `rows` holds `text`'s bytes.
fn holds(rows: &[Vec<u8>], text: &str) -> bool {
    let needle = text.as_bytes();
    rows.iter()
        .any(|row| row.windows(needle.len()).any(|w| w == needle))
}

#[test]
fn a_node_frozen_past_its_lease_is_fenced_and_nothing_it_did_after_is_visible() {
    let TestCluster {
        url,
        dir: _dir,
        token_file,
    } = TestCluster::init("serve_cluster_fence", SHARDS, TOKEN);
    let llm = StandIn::start();
    let agent = client();

    // A alone takes every shard; once B joins, A hands over its highest two. A keeps
    // the lowest, 0 and 1 — and when A comes back later, B, holding all four, hands
    // over its highest two (2 and 3): the shards of the tasks stay with B.
    let mut a = node(&url, &token_file, "node-a", &llm.url_for("a"));
    wait_for("node-a holds every shard", || {
        let leases = leases(&agent, &a.addr)?;
        (held_by(&leases, "node-a").len() == 4)
            .then_some(())
            .ok_or(format!("{leases:?}"))
    });
    let b = node(&url, &token_file, "node-b", &llm.url_for("b"));
    let before = wait_for("node-a and node-b hold two shards each", || {
        let leases = leases(&agent, &b.addr)?;
        (held_by(&leases, "node-a") == [0, 1] && held_by(&leases, "node-b") == [2, 3])
            .then_some(leases.clone())
            .ok_or(format!("{leases:?}"))
    });

    // Agents whose tasks land in A's shards, three in each, submitted through A.
    let mut names: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for name in (0..).map(|i| format!("agent-{i}")) {
        let of_shard = names.entry(shard_for(&name, SHARDS)).or_default();
        if of_shard.len() < TASKS_PER_SHARD {
            of_shard.push(name);
        }
        if (0..2).all(|s| names.get(&s).map(Vec::len) == Some(TASKS_PER_SHARD)) {
            break;
        }
    }
    let mut tasks = BTreeMap::new();
    for shard in [0, 1] {
        for name in &names[&shard] {
            let body = json!({
                "type": "agent",
                "input": {"prompt": format!("hello from {name}")},
                "agent": name,
            });
            let (status, answer) =
                cluster::submit(&agent, &a.addr, TOKEN, &format!("key-{name}"), &body);
            assert_eq!(status, 202, "{answer}");
            let id = answer["id"].as_u64().expect("an id");
            assert_eq!(id >> 44, u64::from(shard), "task {id} of {name}");
            tasks.insert(id, shard);
        }
    }

    // Every task's first LLM call is held at the stand-in, sent by A: request keys
    // `ID:1`.
    let keys: BTreeSet<String> = tasks.keys().map(|id| format!("{id}:1")).collect();
    let of_a = wait_for("node-a calls the LLM for every task", || {
        let calls = llm.calls();
        let sent: BTreeSet<String> = calls.iter().map(|c| c.key.clone()).collect();
        (sent == keys)
            .then_some(calls.clone())
            .ok_or(format!("{calls:?}"))
    });
    assert!(
        of_a.len() == keys.len() && of_a.iter().all(|c| c.node == "a"),
        "{of_a:?}"
    );

    // A freezes with its calls out. Its leases expire, and B takes its shards, each
    // under a newer epoch, recovers them, and sends the calls in flight again with
    // the same request keys.
    let frozen = Frozen::freeze(&a);
    let taken = wait_for("node-b holds every shard", || {
        let leases = leases(&agent, &b.addr)?;
        (held_by(&leases, "node-b") == [0, 1, 2, 3])
            .then_some(leases.clone())
            .ok_or(format!("{leases:?}"))
    });
    for shard in [0, 1] {
        assert!(
            taken[&shard].1 > before[&shard].1,
            "{before:?} then {taken:?}"
        );
    }
    let of_b: BTreeMap<String, Call> = wait_for("node-b sends the calls again", || {
        let again: BTreeMap<String, Call> = llm
            .calls()
            .into_iter()
            .filter(|c| c.node == "b")
            .map(|c| (c.key.clone(), c))
            .collect();
        (again.keys().cloned().collect::<BTreeSet<_>>() == keys)
            .then_some(again)
            .ok_or(format!("{:?}", llm.calls()))
    });

    // A's calls are answered first, while it is still frozen: the answers wait in its
    // connections, there for it to journal the moment it goes on if it still could.
    // Then A goes on, and B's calls are answered.
    let answered_a = llm.release("a");
    assert_eq!(answered_a.len(), keys.len(), "{answered_a:?}");
    drop(frozen);
    let answered_b = llm.release("b");
    assert_eq!(answered_b.len(), keys.len(), "{answered_b:?}");

    // From then until every task completes, both nodes are asked for every task, over
    // and over: neither ever shows one of A's answers.
    let of_a_answers: BTreeSet<String> = answered_a.iter().map(answer_text).collect();
    wait_for("every task completes", || {
        let mut completed = 0;
        for id in tasks.keys() {
            for addr in [&a.addr, &b.addr] {
                let Some(task) = try_get(&agent, addr, &format!("/v1/tasks/{id}")) else {
                    continue;
                };
                if let Some(answer) = task["result"]["answer"].as_str() {
                    assert!(!of_a_answers.contains(answer), "{addr} shows {task}");
                }
                if addr == &b.addr && task["state"] == json!("completed") {
                    completed += 1;
                }
            }
        }
        (completed == tasks.len())
            .then_some(())
            .ok_or(format!("{completed} of {} completed", tasks.len()))
    });

    // A's writes under its old epochs are refused (a shard's runtime writes at least
    // the turn that stops it), and it stops both shards — its watchdog or its lease
    // thread, whichever sees it first, says so with the shard's number.
    wait_for(
        "node-a says its writes were refused and both shards stop",
        || {
            let log = a.log();
            let stops = |shard: u32| {
                log.lines().any(|line| {
                    line.contains("; the shard stops") && line.ends_with(&format!(" shard={shard}"))
                })
            };
            // The node names the shard whose write was refused.
            let named = |shard: u32| {
                let text = fenced(taken[&shard].1, before[&shard].1);
                log.lines().any(|line| {
                    line.contains("spool_cluster::lease")
                        && line.contains(&text)
                        && line.contains(&format!(" shard={shard}"))
                })
            };
            let (found, expected) = refusals(&log, &before, &taken);
            (found == expected && stops(0) && stops(1) && named(0) && named(1))
                .then_some(())
                .ok_or(log)
        },
    );
    // It still runs and answers, holding neither (only what B hands back to it, 2
    // and 3, once it is back among the live nodes).
    assert!(
        a.child.try_wait().expect("node-a is waited for").is_none(),
        "node-a ended:\n{}",
        a.log()
    );
    wait_for("node-a runs neither shard 0 nor 1", || {
        let text = healthz(&agent, &a.addr);
        let shards: Vec<&str> = text
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .split(',')
            .collect();
        (text.starts_with("ok node node-a shards ")
            && !shards.contains(&"0")
            && !shards.contains(&"1"))
        .then_some(())
        .ok_or(text)
    });

    // Every task completed with B's answer, and both nodes say the same of it.
    for (id, shard) in &tasks {
        let key = format!("{id}:1");
        let expected = answer_text(&of_b[&key]);
        let task = get_ok(&agent, &b.addr, &format!("/v1/tasks/{id}"));
        assert_eq!(task["state"], json!("completed"), "{task}");
        assert_eq!(
            task["result"]["answer"],
            json!(expected),
            "task {id} in shard {shard}"
        );
        let from_a = get_ok(&agent, &a.addr, &format!("/v1/tasks/{id}"));
        assert_eq!(without_age(from_a), without_age(task), "task {id}");
    }

    // The shards' stores: their head rows carry B's epochs (a writer of an older one
    // cannot write), their leases are still B's, each store is whole, and they hold
    // each of B's answers and, no shard, any of A's.
    let mut db = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
    for shard in [0_i32, 1] {
        let row = db
            .query_one(
                "SELECT h.epoch, s.epoch, s.owner FROM spool.head h JOIN spool.shards s
                 USING (shard) WHERE shard = $1",
                &[&shard],
            )
            .expect("the head and the lease");
        let (head, lease, owner): (i64, i64, Option<String>) = (row.get(0), row.get(1), row.get(2));
        let of_b = taken[&u32::try_from(shard).expect("a u32")].1;
        assert_eq!(
            (head, lease, owner.as_deref()),
            (
                i64::try_from(of_b).expect("an i64"),
                i64::try_from(of_b).expect("an i64"),
                Some("node-b")
            ),
            "shard {shard}"
        );
    }
    for shard in [0, 1] {
        let store = spool_postgres::PgStore::connect_read_only_with(
            &url,
            spool_postgres::PgOptions::new().shard(shard),
        )
        .expect("the shard's store");
        store
            .verify()
            .unwrap_or_else(|e| panic!("shard {shard}: {e}"));
    }
    let stored = stored_bytes(&mut db, &[0, 1]);
    for call in of_b.values() {
        assert!(holds(&stored, &answer_text(call)), "{call:?} is not stored");
    }
    let stored = stored_bytes(&mut db, &[0, 1, 2, 3]);
    for call in &answered_a {
        assert!(!holds(&stored, &answer_text(call)), "{call:?} is stored");
    }
    // A sent nothing more for them: each was called once by A, once by B.
    let calls = llm.calls();
    for key in &keys {
        let of_key: Vec<&str> = calls
            .iter()
            .filter(|c| &c.key == key)
            .map(|c| c.node.as_str())
            .collect();
        assert_eq!(of_key, ["a", "b"], "{key}: {calls:?}");
    }

    // Nothing else was refused, and nothing else failed, on A: the two shards it lost
    // were stopped at their first write, and what it took back later runs.
    let log = a.log();
    let (found, expected) = refusals(&log, &before, &taken);
    assert_eq!(found, expected, "{log}");
    assert_eq!(log.matches("journal write failed").count(), 2, "{log}");
    b.stop();
    a.stop();
}
