//! Durability of `spool serve` under SIGKILL: the server runs on a store while client
//! threads submit tasks to it without pause, each with an `Idempotency-Key` of its own;
//! it is SIGKILLed at seeded moments (at least ten) and restarted on the same store
//! each time. A client whose request got no answer (the server died first) sends the
//! same request with the same key to the next life.
//!
//! At the end every task answered `200`/`202` exists (`GET /v1/tasks/{id}`), completed
//! once with the scripted model's answer for its own prompt, and the store holds no
//! other task: a resubmission after a restart never made a second task for its key.
//!
//! The seed is printed; `SPOOL_SERVE_CRASH_SEED=N` (decimal or `0x` hex) replays one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::SeededRng;

mod support;

use support::Server;

/// Lives that are SIGKILLed, each at a moment drawn from the seed (at least ten).
const KILLS: usize = 20;
/// Client threads submitting at once.
const CLIENTS: usize = 4;
/// The longest a life runs before its SIGKILL, after it says it listens.
const MAX_LIFE_MS: u64 = 900;
const DEFAULT_SEED: u64 = 0x5e7e_c4a5_0014;
const SEED_VAR: &str = "SPOOL_SERVE_CRASH_SEED";
const TOKEN: &str = "serve-crash-test-token";

/// Starts a life of `spool serve` on `store` on a free loopback port.
fn start(store: &Path, token_file: &Path) -> Server {
    Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--llm-latency-ms".as_ref(),
        "5".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token_file.as_os_str(),
    ])
}

/// An HTTP client that reports statuses instead of failing on them.
fn client() -> ureq::Agent {
    support::client(Duration::from_secs(10))
}

fn get(agent: &ureq::Agent, addr: &str, path: &str) -> (u16, Value) {
    support::get(agent, addr, TOKEN, path)
}

/// What the server answered one key.
#[derive(Debug, Clone)]
struct Answered {
    id: u64,
    /// 202 (made) or 200 (the key's task, made by an earlier, unanswered attempt).
    status: u16,
    /// Requests sent for the key, the answered one included.
    attempts: u32,
}

/// What the clients share with the test: the live server's address, when to stop,
/// and what they were answered.
struct Shared {
    addr: RwLock<String>,
    stop: AtomicBool,
    answered: Mutex<BTreeMap<String, Answered>>,
    /// Answers no client should get (anything but 200, 202 or a 429 to retry).
    wrong: Mutex<Vec<String>>,
}

fn prompt_of(key: &str) -> String {
    format!("crash test {key}")
}

/// A client: submits tasks one after another, each under a key of its own, and sends
/// a request the server did not answer again, with the same key, until it is answered.
fn submitter(n: usize, shared: &Shared) {
    let agent = client();
    for i in 0.. {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let key = format!("c{n}-{i}");
        let body = json!({"type": "agent", "input": {"prompt": prompt_of(&key)}});
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            if started.elapsed() > Duration::from_secs(60) {
                shared
                    .wrong
                    .lock()
                    .expect("wrong")
                    .push(format!("{key}: no answer in 60 s ({attempts} attempts)"));
                return;
            }
            let addr = shared.addr.read().expect("the address").clone();
            let sent = agent
                .post(format!("http://{addr}/v1/tasks"))
                .header("Authorization", format!("Bearer {TOKEN}"))
                .header("Idempotency-Key", &key)
                .send_json(&body);
            // No answer (refused: the server is down; reset: it died with the request):
            // the same request again.
            let Ok(mut response) = sent else {
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
                        shared.wrong.lock().expect("wrong").push(format!(
                            "{key}: its first request was answered 200 (an existing task {id}): {text}"
                        ));
                    }
                    let record = Answered {
                        id,
                        status,
                        attempts,
                    };
                    shared
                        .answered
                        .lock()
                        .expect("answered")
                        .insert(key, record);
                    break;
                }
                (429 | 503, _) => thread::sleep(Duration::from_millis(50)),
                _ => {
                    shared
                        .wrong
                        .lock()
                        .expect("wrong")
                        .push(format!("{key}: answered {status}: {text}"));
                    break;
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

fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
                None => text.replace('_', "").parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{SEED_VAR}={text} is not a seed: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

#[test]
fn spool_serve_killed_under_load_keeps_every_answered_task_and_runs_each_once() {
    let seed = seed();
    println!("serve_crash: seed {seed:#x} (replay with {SEED_VAR}={seed:#x})");
    let began = Instant::now();
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = dir.path().join("serve.store");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("the token file");
    let mut rng = SeededRng::new(seed);

    let mut life = start(&store, &token_file);
    let shared = Arc::new(Shared {
        addr: RwLock::new(life.addr.clone()),
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

    let mut lives = Vec::new();
    for _ in 0..KILLS {
        let after = Duration::from_millis(rng.below(MAX_LIFE_MS + 1));
        thread::sleep(after);
        if let Ok(Some(status)) = life.child.try_wait() {
            panic!(
                "spool serve ended by itself ({status}) before its kill; it said:\n{}",
                life.log()
            );
        }
        let answered_before = shared.answered.lock().expect("answered").len();
        life.child.kill().expect("SIGKILL");
        life.child.wait().expect("the killed server is waited for");
        lives.push((after, answered_before));
        life = start(&store, &token_file);
        *shared.addr.write().expect("the address") = life.addr.clone();
    }
    // The last life takes submissions for a while, then the clients stop (each after
    // its current key is answered).
    thread::sleep(Duration::from_millis(300));
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
    println!(
        "serve_crash: {KILLS} SIGKILLs after {:?} ms of life (answers so far: {:?})",
        lives.iter().map(|(d, _)| d.as_millis()).collect::<Vec<_>>(),
        lives.iter().map(|(_, n)| n).collect::<Vec<_>>(),
    );
    assert!(
        answered.len() >= 100,
        "too few submissions to show anything: {}",
        answered.len()
    );

    // Every answered task runs to its end on the last life.
    let agent = client();
    let addr = life.addr.clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    let tasks = loop {
        let tasks = all_tasks(&agent, &addr);
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
            break tasks;
        }
        assert!(
            Instant::now() < deadline,
            "{live} of {} tasks still not ended 30 s after the last restart",
            tasks.len()
        );
        thread::sleep(Duration::from_millis(100));
    };

    // Each key has a task of its own, that exists, completed once with its answer.
    let mut by_id: BTreeMap<u64, &str> = BTreeMap::new();
    for (key, record) in &answered {
        if let Some(other) = by_id.insert(record.id, key) {
            panic!(
                "keys {other} and {key} were both answered task {}",
                record.id
            );
        }
        let (status, task) = get(&agent, &addr, &format!("/v1/tasks/{}", record.id));
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
        // One LLM turn for the search, one for the answer: a task run twice over the
        // same journal would not say more, but one made twice would be listed twice.
        assert_eq!(
            task["result"]["turns"], 2,
            "{key}: task {}: {task}",
            record.id
        );
    }
    // No other task: none made by a resubmission, none made from nothing.
    let unanswered: Vec<(&u64, &Value)> = tasks
        .iter()
        .filter(|(id, _)| !by_id.contains_key(id))
        .collect();
    assert!(
        unanswered.is_empty(),
        "{} tasks in the store that no key was answered with (a second task for a key?): {:#?}",
        unanswered.len(),
        unanswered.iter().take(5).collect::<Vec<_>>()
    );
    let answered_ids: BTreeSet<u64> = answered.values().map(|a| a.id).collect();
    assert_eq!(tasks.keys().copied().collect::<BTreeSet<_>>(), answered_ids);

    // The scheduler's counters, kept in the store across the lives: one submission and
    // one completion per task, nothing failed or canceled, and three requests each
    // answered once per task (two LLM turns and a search): no task ran twice.
    let (status, queue) = get(&agent, &addr, "/v1/queue");
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
    println!(
        "serve_crash: the scheduler counted {} submitted, {} completed, {} requests and {} answers \
         ({} dropped) over all lives",
        stats["submitted"],
        stats["completed"],
        stats["requests"],
        stats["answers"],
        stats["dropped_answers"]
    );

    let retried = answered.values().filter(|a| a.attempts > 1).count();
    let existing = answered.values().filter(|a| a.status == 200).count();
    println!(
        "serve_crash: {} tasks submitted and answered over {} lives ({KILLS} SIGKILLs); \
         {retried} keys sent again after a kill, {existing} of them answered with the task \
         an unanswered attempt had made; all {} present, completed once, no other task; {:.1} s",
        answered.len(),
        KILLS + 1,
        tasks.len(),
        began.elapsed().as_secs_f64()
    );

    // The last life stops cleanly on SIGTERM.
    life.stop();
}
