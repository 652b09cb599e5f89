//! `spool serve --postgres` when its PostgreSQL goes away under load. Each test starts
//! a cluster of its own and one `spool serve` on a database in it; client threads
//! submit tasks without pause, each under an `Idempotency-Key` of its own, and send a
//! request again with the same key when it got no answer within a second, a `5xx` or a
//! `429`. Each time the clients have had a hundred answers since the last outage the
//! server goes away: `pg_ctl restart -m fast` twice and then a stop that lasts until
//! spool's back-off has grown to 1.6 s (reads are answered meanwhile), or the writer's
//! connection terminated from another session three times, the second inside its
//! `COMMIT` (after the commit was made: spool must find it committed, not write it
//! again).
//!
//! What it shows: `spool serve` logs that it lost the store's connection and that the
//! store is back (once at least for each outage), goes on answering, and every key
//! answered `202` is a task of its own that completed once with the scripted model's
//! answer to its prompt; the store holds no other task and counts one submission and
//! one completion per task; a submission sent again while the server was stopped is
//! answered `200` with the task its first request made. After the server stops, the
//! store verifies (every row's checksum) and a second `spool serve` on it finds the
//! same tasks, completed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_pgtest::PgCluster;
use spool_postgres::PgStore;

mod support;

use support::Server;

/// Client threads submitting at once.
const CLIENTS: usize = 4;
/// Answers the clients get before the first outage, between two, and after the last.
const ANSWERS_PER_PHASE: usize = 100;
/// The longest any phase may take to get its answers.
const PHASE_LIMIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "serve-postgres-test-token";
/// What `spool serve` logs when the writer finds its connection gone, and when the
/// store is back.
const LOST: &str = "the store's connection is lost: trying again";
const BACK: &str = "the store is back";

/// Starts `spool serve` on the store at `url`, on a free loopback port.
fn start(url: &str, token_file: &Path) -> Server {
    Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--llm-latency-ms".as_ref(),
        "5".as_ref(),
        "--postgres".as_ref(),
        url.as_ref(),
        "--token-file".as_ref(),
        token_file.as_os_str(),
    ])
}

/// An HTTP client that reports statuses instead of failing on them.
fn client() -> ureq::Agent {
    support::client(Duration::from_secs(30))
}

/// How long a client waits for the answer to a submission before it gives up and sends
/// it again: less than the longest outage, so that some are sent again while the store
/// is away.
const GIVE_UP: Duration = Duration::from_secs(1);

fn get(agent: &ureq::Agent, addr: &str, path: &str) -> (u16, Value) {
    support::get(agent, addr, TOKEN, path)
}

fn prompt_of(key: &str) -> String {
    format!("postgres outage test {key}")
}

/// What the server answered one key.
#[derive(Debug, Clone)]
struct Answered {
    id: u64,
    /// 202 (made) or 200 (the key's task, made by an earlier attempt).
    status: u16,
    /// Requests sent for the key, the answered one included.
    attempts: u32,
    /// When its first request was sent and when the answer came.
    sent: Instant,
    answered: Instant,
}

/// What the clients share with the test.
struct Shared {
    addr: String,
    stop: AtomicBool,
    answered: Mutex<BTreeMap<String, Answered>>,
    /// Answers no client should get (a 4xx other than 429, or none in 60 s).
    wrong: Mutex<Vec<String>>,
}

impl Shared {
    fn answers(&self) -> usize {
        self.answered.lock().expect("answered").len()
    }

    fn wrong(&self, what: String) {
        self.wrong.lock().expect("wrong").push(what);
    }
}

/// A client: submits tasks one after another, each under a key of its own; a request
/// with no answer (the connection failed or timed out), a 5xx or a 429 is sent again
/// with the same key until it is answered.
fn submitter(n: usize, shared: &Shared) {
    let agent = support::client(GIVE_UP);
    for i in 0.. {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let key = format!("c{n}-{i}");
        let body = json!({"type": "agent", "input": {"prompt": prompt_of(&key)}});
        let sent = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            if sent.elapsed() > Duration::from_secs(60) {
                shared.wrong(format!("{key}: no answer in 60 s ({attempts} attempts)"));
                return;
            }
            let response = agent
                .post(format!("http://{}/v1/tasks", shared.addr))
                .header("Authorization", format!("Bearer {TOKEN}"))
                .header("Idempotency-Key", &key)
                .send_json(&body);
            let Ok(mut response) = response else {
                thread::sleep(Duration::from_millis(10));
                continue;
            };
            let status = response.status().as_u16();
            let Ok(text) = response.body_mut().read_to_string() else {
                thread::sleep(Duration::from_millis(10));
                continue;
            };
            let answer: Option<Value> = serde_json::from_str(&text).ok();
            let id = answer.as_ref().and_then(|a| a["id"].as_u64());
            let admission = answer
                .as_ref()
                .and_then(|a| a["admission"]["status"].as_str())
                .unwrap_or("");
            match (status, id) {
                (200 | 202, Some(id)) if admission != "rejected" => {
                    if status == 200 && attempts == 1 {
                        shared.wrong(format!(
                            "{key}: its first request was answered 200 (an existing task {id}): {text}"
                        ));
                    }
                    let record = Answered {
                        id,
                        status,
                        attempts,
                        sent,
                        answered: Instant::now(),
                    };
                    shared
                        .answered
                        .lock()
                        .expect("answered")
                        .insert(key, record);
                    break;
                }
                (429 | 500..=599, _) => thread::sleep(Duration::from_millis(50)),
                _ => {
                    shared.wrong(format!("{key}: answered {status}: {text}"));
                    return;
                }
            }
        }
    }
}

/// Every task in the store, by id, a page at a time.
fn all_tasks(agent: &ureq::Agent, addr: &str) -> BTreeMap<u64, Value> {
    let mut tasks = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            None => "/v1/tasks?limit=1000".to_owned(),
            Some(c) => format!("/v1/tasks?limit=1000&cursor={c}"),
        };
        let (status, page) = get(agent, addr, &path);
        assert_eq!(status, 200, "GET {path}: {page}");
        for task in page["tasks"].as_array().expect("a list of tasks") {
            let id = task["id"].as_u64().expect("an id");
            assert!(
                tasks.insert(id, task.clone()).is_none(),
                "task {id} listed twice"
            );
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return tasks,
        }
    }
}

/// Waits until the clients have `count` answers, failing at once on an answer no
/// client should get or a server that ended, and after [`PHASE_LIMIT`].
fn wait_answers(shared: &Shared, server: &mut Server, count: usize, phase: &str) {
    let deadline = Instant::now() + PHASE_LIMIT;
    loop {
        let wrong = shared.wrong.lock().expect("wrong").clone();
        assert!(
            wrong.is_empty(),
            "{phase}: answers no client should get:\n{wrong:#?}\nspool serve said:\n{}",
            server.log()
        );
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "{phase}: spool serve ended ({status}); it said:\n{}",
                server.log()
            );
        }
        let answers = shared.answers();
        if answers >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{phase}: {answers} answers of {count} after {PHASE_LIMIT:?}; spool serve said:\n{}",
            server.log()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to 30 s until `server` has said `text` once more than `before` times,
/// failing at once if it says its store failed.
fn wait_said(server: &Server, text: &str, before: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.log().matches(text).count() == before {
        let log = server.log();
        assert!(
            !log.contains("spool serve: the store failed"),
            "spool serve stopped before it said {text:?}; it said:\n{log}"
        );
        assert!(
            Instant::now() < deadline,
            "spool serve did not say {text:?} in 30 s; it said:\n{log}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to 30 s until every task listed has ended; returns them.
fn all_ended(agent: &ureq::Agent, addr: &str) -> BTreeMap<u64, Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tasks = all_tasks(agent, addr);
        let live = tasks
            .values()
            .filter(|t| {
                !matches!(
                    t["state"].as_str(),
                    Some("completed" | "failed" | "canceled")
                )
            })
            .count();
        if live == 0 {
            return tasks;
        }
        assert!(
            Instant::now() < deadline,
            "{live} of {} tasks still not ended after 30 s",
            tasks.len()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Checks what the server at `addr` holds against what the clients were answered:
/// each key's task exists and completed once with the answer to its own prompt, no
/// other task is there, and the counters say one submission and one completion per
/// task, two LLM turns and a search each.
fn check_tasks(agent: &ureq::Agent, addr: &str, answered: &BTreeMap<String, Answered>) {
    let tasks = all_ended(agent, addr);
    let mut by_id: BTreeMap<u64, &str> = BTreeMap::new();
    for (key, record) in answered {
        if let Some(other) = by_id.insert(record.id, key) {
            panic!(
                "keys {other} and {key} were both answered task {}",
                record.id
            );
        }
        let (status, task) = get(agent, addr, &format!("/v1/tasks/{}", record.id));
        assert_eq!(status, 200, "{key} was answered task {}: {task}", record.id);
        assert_eq!(
            task["state"], "completed",
            "{key}: task {}: {task}",
            record.id
        );
        let answer = task["result"]["answer"].as_str().unwrap_or("");
        let expected = format!(
            "Run 1 of this conversation: for \"{}\" the notes give ",
            prompt_of(key)
        );
        assert!(
            answer.starts_with(&expected),
            "{key}: task {} answered {answer:?}, not the scripted model's answer to its prompt ({expected}...)",
            record.id
        );
        assert_eq!(
            task["result"]["turns"], 2,
            "{key}: task {}: {task}",
            record.id
        );
    }
    let answered_ids: BTreeSet<u64> = by_id.keys().copied().collect();
    let listed: BTreeSet<u64> = tasks.keys().copied().collect();
    let others: Vec<&u64> = listed.difference(&answered_ids).collect();
    assert!(
        others.is_empty(),
        "{} tasks in the store that no key was answered with (a second task for a key?): {:?}",
        others.len(),
        others.iter().take(10).collect::<Vec<_>>()
    );
    assert_eq!(listed, answered_ids);

    let (status, queue) = get(agent, addr, "/v1/queue");
    assert_eq!(status, 200, "{queue}");
    let stats = &queue["stats"];
    let n = tasks.len() as u64;
    for (counter, want) in [
        ("submitted", n),
        ("completed", n),
        ("failed", 0),
        ("canceled", 0),
        ("requests", 3 * n),
        ("answers", 3 * n),
    ] {
        assert_eq!(
            stats[counter].as_u64(),
            Some(want),
            "stats.{counter}: {stats}"
        );
    }
}

/// What an outage is given: the cluster, the store's URL, the server and what its
/// clients were answered so far, and which outage it is (from 0).
struct Outage<'a> {
    cluster: &'a PgCluster,
    url: &'a str,
    server: &'a Server,
    shared: &'a Shared,
    round: usize,
}

/// Runs `spool serve --postgres` on database `name` of `cluster` under load from
/// [`CLIENTS`] threads; `outages` times, once the clients have had
/// [`ANSWERS_PER_PHASE`] answers since the last, calls `outage` (which takes the store
/// away and lets it come back), then checks everything the module doc says. Returns
/// what `outage` returned each time and what each key was answered, for the test's own
/// checks.
fn through_outages<T>(
    cluster: &PgCluster,
    name: &str,
    outages: usize,
    mut outage: impl FnMut(&Outage<'_>) -> T,
) -> (Vec<T>, BTreeMap<String, Answered>) {
    let began = Instant::now();
    let url = cluster.create_database(name).expect("a database");
    println!("serve_postgres: {name} on {url}");
    let dir = tempfile::tempdir().expect("a temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("the token file");

    let mut server = start(&url, &token_file);
    let shared = Arc::new(Shared {
        addr: server.addr.clone(),
        stop: AtomicBool::new(false),
        answered: Mutex::new(BTreeMap::new()),
        wrong: Mutex::new(Vec::new()),
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let shared = shared.clone();
            thread::spawn(move || submitter(n, &shared))
        })
        .collect();

    let mut seen = Vec::new();
    // When each outage began and ended.
    let mut windows = Vec::new();
    for round in 0..outages {
        let target = shared.answers() + ANSWERS_PER_PHASE;
        wait_answers(
            &shared,
            &mut server,
            target,
            &format!("before outage {}", round + 1),
        );
        let from = Instant::now();
        seen.push(outage(&Outage {
            cluster,
            url: &url,
            server: &server,
            shared: &shared,
            round,
        }));
        windows.push((from, Instant::now()));
    }
    // It goes on serving after the last.
    let target = shared.answers() + ANSWERS_PER_PHASE;
    wait_answers(&shared, &mut server, target, "after the last outage");
    shared.stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().expect("a client thread");
    }
    let wrong = shared.wrong.lock().expect("wrong").clone();
    assert!(
        wrong.is_empty(),
        "answers no client should get:\n{wrong:#?}"
    );
    let answered = shared.answered.lock().expect("answered").clone();

    // It said it lost the store and that the store is back, at least once an outage.
    let log = server.log();
    let lost = log.matches(LOST).count();
    let back = log.matches(BACK).count();
    // Which way each return went: the batch found committed (the connection broke in
    // its COMMIT), or written again.
    let found_committed = log.matches("the batch was committed").count();
    assert!(
        lost >= outages && back >= outages,
        "{outages} outages, but spool serve logged {lost} lost connections and {back} returns:\n{log}"
    );
    let agent = client();
    check_tasks(&agent, &server.addr, &answered);
    server.stop();

    // What the store holds, read by another connection: every row's checksum is right
    // and there is a journal to go on from; a second life of spool serve goes on from it
    // with the same tasks, all completed, and the same counters.
    let store = PgStore::connect_read_only(&url).expect("the store opens to read");
    store.verify().expect("every row of the store checks");
    assert!(
        store.recover().expect("the store recovers").is_some(),
        "the store holds no journal"
    );
    drop(store);
    let again = start(&url, &token_file);
    check_tasks(&agent, &again.addr, &answered);
    again.stop();

    let retried = answered.values().filter(|a| a.attempts > 1).count();
    let existing = answered.values().filter(|a| a.status == 200).count();
    let longest = answered
        .values()
        .map(|a| a.answered - a.sent)
        .max()
        .unwrap_or_default();
    println!(
        "serve_postgres: {name}: {} tasks answered through {outages} outages (of {:?} ms), \
         {retried} sent more than once ({existing} answered 200), longest wait {} ms; \
         spool serve logged {lost} lost connections and {back} returns ({found_committed} \
         finding the batch committed); all completed once, and again after a restart of \
         spool serve; {:.1} s",
        answered.len(),
        windows
            .iter()
            .map(|(from, to)| (*to - *from).as_millis())
            .collect::<Vec<_>>(),
        longest.as_millis(),
        began.elapsed().as_secs_f64()
    );
    (seen, answered)
}

#[test]
fn spool_serve_goes_on_through_postgres_restarts_under_load_and_runs_every_answered_task_once() {
    let cluster = PgCluster::builder()
        .setting("synchronous_commit", "on")
        .start()
        .expect("a cluster of the test's own");
    let (_, answered) = through_outages(&cluster, "serve_restarted", 3, |outage| {
        if outage.round < 2 {
            outage.cluster.restart().expect("the server restarts");
            return;
        }
        // The last time the server stays down until spool serve's back-off has
        // doubled to 1.6 s; meanwhile what it holds is read as ever.
        let server = outage.server;
        let longest = "trying again in 1600 ms";
        let before = server.log().matches(longest).count();
        outage.cluster.stop().expect("the server stops");
        wait_said(server, longest, before);
        reads_answer(server, outage.shared);
        outage
            .cluster
            .start_again()
            .expect("the server starts again");
    });
    // A submission outlived a client's patience while the server was stopped: the
    // client sent it again with its key and was answered with the task it made.
    let again = answered
        .values()
        .filter(|a| a.attempts > 1 && a.status == 200)
        .count();
    assert!(
        again > 0,
        "no submission was sent again and answered 200 with its task (most attempts: {:?})",
        answered.values().map(|a| a.attempts).max()
    );
}

/// Checks that `server` answers reads (its health, the queue, the list of tasks, a
/// task answered before) while its store is away: they need nothing from the store.
fn reads_answer(server: &Server, shared: &Shared) {
    let agent = support::client(Duration::from_secs(5));
    let (key, first) = {
        let answered = shared.answered.lock().expect("answered");
        let (key, record) = answered.iter().next().expect("an answer before the outage");
        (key.clone(), record.id)
    };
    let health = agent
        .get(format!("http://{}/healthz", server.addr))
        .call()
        .expect("GET /healthz is answered while the store is away");
    assert_eq!(health.status(), 200, "GET /healthz");
    let (status, queue) = get(&agent, &server.addr, "/v1/queue");
    assert_eq!(status, 200, "{queue}");
    let (status, list) = get(&agent, &server.addr, "/v1/tasks?limit=10");
    assert_eq!(status, 200, "{list}");
    assert!(
        list["tasks"].as_array().is_some_and(|t| !t.is_empty()),
        "{list}"
    );
    let (status, task) = get(&agent, &server.addr, &format!("/v1/tasks/{first}"));
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["id"].as_u64(), Some(first), "{key}: {task}");
}

/// The server process holding the store's writer lock in `admin`'s database (waiting
/// up to 30 s for one to hold it).
fn writer_pid(admin: &mut postgres::Client) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let row = admin
            .query_opt(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                   AND objsubid = 2 \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .expect("pg_locks is read");
        if let Some(row) = row {
            return row.get(0);
        }
        assert!(
            Instant::now() < deadline,
            "no session holds the store's writer lock after 30 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn spool_serve_goes_on_when_its_writer_connection_is_cut_under_load_and_runs_every_answered_task_once()
 {
    let cluster = PgCluster::start().expect("a cluster of the test's own");
    let (cut, _) = through_outages(&cluster, "serve_cut", 3, |outage| {
        let mut admin = postgres::Client::connect(outage.url, postgres::NoTls).expect("a session");
        if outage.round == 1 {
            return cut_in_commit(&mut admin, outage.server);
        }
        let pid = writer_pid(&mut admin);
        terminate(&mut admin, pid);
        pid
    });
    // Each cut ended another session: the writer took its lock again on a new one.
    let distinct: BTreeSet<i32> = cut.iter().copied().collect();
    assert_eq!(distinct.len(), cut.len(), "the sessions cut: {cut:?}");
}

/// Ends session `pid` from `admin`.
fn terminate(admin: &mut postgres::Client, pid: i32) {
    let ended: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .expect("pg_terminate_backend")
        .get(0);
    assert!(ended, "session {pid} was not terminated");
}

/// Cuts the writer's connection inside its `COMMIT`, after the commit is made and
/// before the writer hears so: a synchronous standby that does not exist is named, so
/// that a commit waits for it (`SyncRep`) once it is written locally; the writer's
/// session is ended while it waits, and the setting is taken back. Waits until
/// `server` says the batch was found committed when it came back; returns the session
/// ended.
fn cut_in_commit(admin: &mut postgres::Client, server: &Server) -> i32 {
    let committed = "the store is back: the batch was committed";
    let before = server.log().matches(committed).count();
    let set = |admin: &mut postgres::Client, statement: &str| {
        admin
            .batch_execute(statement)
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .expect("the settings are reloaded");
    };
    set(
        admin,
        "ALTER SYSTEM SET synchronous_standby_names = 'no_such_standby'",
    );
    let pid = writer_pid(admin);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = admin
            .query_opt(
                "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'",
                &[&pid],
            )
            .expect("pg_stat_activity is read");
        if waiting.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the writer's session {pid} did not wait in a commit in 30 s"
        );
        thread::sleep(Duration::from_millis(1));
    }
    terminate(admin, pid);
    set(admin, "ALTER SYSTEM RESET synchronous_standby_names");
    wait_said(server, committed, before);
    pid
}
