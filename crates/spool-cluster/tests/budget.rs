//! A cluster-wide in-flight budget kept by three nodes' executors together: each node
//! with its own slice leased on one database, over a stand-in LLM that counts the
//! requests it has at once; per-minute budgets of requests and of estimated tokens; a
//! request estimated above the whole token budget going alone in its minute; and a
//! held request that is canceled is dropped unanswered without keeping room.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use spool_cluster::budget::{BudgetOptions, BudgetedExecutor, NodeBudget};
use spool_core::{
    CancelSignal, Executor, Kind, OutboundRequest, Replies, ReplySink, Request, RequestKey,
    Response, Time,
};
use spool_pgtest::PgCluster;
use spool_postgres::Cluster;
use spool_postgres::cluster::{Budget, SliceWant};

/// How many requests the stand-in has at once, the most it ever had, how many it was
/// sent in all, and their estimated tokens in all.
#[derive(Debug, Default)]
struct Concurrency {
    now: Mutex<(u32, u32, u32, u64)>,
}

impl Concurrency {
    fn enter(&self, tokens: u32) {
        let mut now = self.now.lock().expect("count");
        now.0 += 1;
        now.1 = now.1.max(now.0);
        now.2 += 1;
        now.3 += u64::from(tokens);
    }

    fn tokens(&self) -> u64 {
        self.now.lock().expect("count").3
    }

    fn total(&self) -> u32 {
        self.now.lock().expect("count").2
    }

    fn leave(&self) {
        self.now.lock().expect("count").0 -= 1;
    }

    fn most(&self) -> u32 {
        self.now.lock().expect("count").1
    }
}

/// A stand-in LLM: each request is worked on for a few milliseconds by a thread of its
/// own, which then answers with the request's payload.
struct StandIn {
    count: Arc<Concurrency>,
    work: Duration,
}

impl Executor for StandIn {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        self.count.enter(request.request.tokens);
        let replier = replies.replier();
        let count = Arc::clone(&self.count);
        let work = self.work;
        std::thread::spawn(move || {
            // The work the request takes, so that requests overlap.
            std::thread::sleep(work);
            count.leave();
            replier.send(Response::ok(
                request.key,
                request.request.payload.into_value(),
            ));
        });
    }
}

/// The answers a node's driver got, with a signal when one comes.
#[derive(Default)]
struct Answers {
    keys: Mutex<Vec<RequestKey>>,
    came: Condvar,
}

impl ReplySink for Answers {
    fn send(&self, response: Response) -> bool {
        self.keys.lock().expect("answers").push(response.key);
        self.came.notify_all();
        true
    }
}

/// A request of the LLM, numbered `n` for task `task`.
fn request(task: u64, n: u32) -> OutboundRequest {
    OutboundRequest {
        // A key as a stored one reads: the core makes keys, tests read them.
        key: serde_json::from_value(serde_json::json!({"task": task, "number": n, "slot": 0}))
            .expect("a request key"),
        request: Request::new(Kind::Llm, serde_json::json!(n)),
    }
}

/// A request of the LLM estimated at `tokens`, numbered `n` for task `task`.
fn sized(task: u64, n: u32, tokens: u32) -> OutboundRequest {
    let mut request = request(task, n);
    request.request = request.request.with_tokens(tokens);
    request
}

/// A new cluster of one shard in a database named `name`, with `llm`'s budget set.
fn cluster(name: &str, budget: Budget) -> String {
    let url = PgCluster::shared()
        .create_database(name)
        .unwrap_or_else(|e| panic!("database {name}: {e}"));
    let cluster = Cluster::init(&url, 1).expect("init");
    cluster.set_budget("llm", budget).expect("budget");
    url
}

/// Drives `executor` as a runtime would: sends it `requests`, then polls it when it
/// asks (or an answer comes) until every request is answered (within 60 s) or `stop`
/// is set. Returns the keys answered, in order.
fn drive(
    mut executor: BudgetedExecutor<StandIn>,
    requests: Vec<OutboundRequest>,
    stop: &AtomicBool,
) -> Vec<RequestKey> {
    let answers = Arc::new(Answers::default());
    let sink: Arc<dyn ReplySink> = answers.clone();
    let started = Instant::now();
    let time = || Time::from_nanos(u64::try_from(started.elapsed().as_nanos()).expect("time"));
    let mut batch = Vec::new();
    let total = requests.len();
    for request in requests {
        let mut replies = Replies::new(time(), &mut batch, &sink);
        executor.execute(request, &mut replies);
    }
    let deadline = started + Duration::from_secs(60);
    loop {
        let mut replies = Replies::new(time(), &mut batch, &sink);
        let next = executor.poll(time(), &mut replies);
        for response in batch.drain(..) {
            sink.send(response);
        }
        let keys = answers.keys.lock().expect("answers");
        if keys.len() == total || stop.load(Ordering::SeqCst) {
            return keys.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} answered within 60 s",
            keys.len()
        );
        // Waits for an answer, or until the executor asked to be polled again.
        let wait = next.map_or(Duration::from_millis(50), |next| {
            Duration::from_nanos(next.as_nanos().saturating_sub(time().as_nanos()))
        });
        drop(answers.came.wait_timeout(keys, wait).expect("answers"));
    }
}

#[test]
fn three_nodes_keep_to_an_in_flight_budget_of_two_together() {
    let url = cluster("budget_three_nodes", Budget::new().in_flight(2));
    let count = Arc::new(Concurrency::default());
    let nodes: Vec<NodeBudget> = ["a", "b", "c"]
        .iter()
        .map(|node| NodeBudget::start(&url, node, BudgetOptions::new()).expect("started"))
        .collect();
    let drivers: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let executor = BudgetedExecutor::new(
                StandIn {
                    count: Arc::clone(&count),
                    work: Duration::from_millis(5),
                },
                node,
            );
            let task = u64::try_from(i).expect("small") + 1;
            let requests: Vec<_> = (0..100).map(|n| request(task, n)).collect();
            std::thread::spawn(move || drive(executor, requests, &AtomicBool::new(false)))
        })
        .collect();
    let mut answered = BTreeSet::new();
    for driver in drivers {
        let keys = driver.join().expect("driver");
        assert_eq!(keys.len(), 100);
        answered.extend(keys);
    }
    // Every request answered once, and the stand-in had exactly 2 at once at most.
    assert_eq!(answered.len(), 300);
    assert_eq!(count.most(), 2);
    for node in nodes {
        node.stop();
    }
}

#[test]
fn three_nodes_send_at_most_a_per_minute_budget_together_in_a_minute() {
    // A minute of the server's clock may end during a try: then it is tried again.
    for attempt in 0..3 {
        let url = cluster(
            &format!("budget_per_minute_{attempt}"),
            Budget::new().per_minute(6),
        );
        let cluster = Cluster::connect(&url).expect("connect");
        let count = Arc::new(Concurrency::default());
        let stop = Arc::new(AtomicBool::new(false));
        let names = ["a", "b", "c"];
        let nodes: Vec<NodeBudget> = names
            .iter()
            .map(|node| NodeBudget::start(&url, node, BudgetOptions::new()).expect("started"))
            .collect();
        let (_, first_minute) = cluster.slices("llm").expect("read");
        let drivers: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let executor = BudgetedExecutor::new(
                    StandIn {
                        count: Arc::clone(&count),
                        work: Duration::from_millis(1),
                    },
                    node,
                );
                let task = u64::try_from(i).expect("small") + 1;
                let requests: Vec<_> = (0..6).map(|n| request(task, n)).collect();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || drive(executor, requests, &stop))
            })
            .collect();
        // Every node has asked for all 6 of its requests (its want recorded at a renewal
        // after they arrived), the minute's slices are full and the stand-in was sent
        // what they hold: nobody may send more.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (slices, minute) = loop {
            let (slices, minute) = cluster.slices("llm").expect("read");
            let asked = slices.len() == 3
                && slices
                    .iter()
                    .all(|s| s.minute == minute && s.want_per_minute == 6);
            let granted: u32 = slices.iter().map(|s| s.per_minute).sum();
            if asked && granted == 6 && count.total() == 6 || minute != first_minute {
                break (slices, minute);
            }
            assert!(Instant::now() < deadline, "slices {slices:?} within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        stop.store(true, Ordering::SeqCst);
        for driver in drivers {
            driver.join().expect("driver");
        }
        let (_, last_minute) = cluster.slices("llm").expect("read");
        for node in nodes {
            node.stop();
        }
        if minute != first_minute || last_minute != first_minute {
            continue;
        }
        // Exactly the minute's 6 were sent, by all three nodes together.
        assert_eq!(count.total(), 6, "slices {slices:?}");
        return;
    }
    panic!("a minute ended during each of three tries");
}

#[test]
fn three_nodes_send_at_most_a_token_budget_together_in_a_minute() {
    // A minute of the server's clock may end during a try: then it is tried again.
    for attempt in 0..3 {
        let url = cluster(
            &format!("budget_tokens_{attempt}"),
            Budget::new().tokens_per_minute(900),
        );
        let cluster = Cluster::connect(&url).expect("connect");
        let count = Arc::new(Concurrency::default());
        let stop = Arc::new(AtomicBool::new(false));
        let nodes: Vec<NodeBudget> = ["a", "b", "c"]
            .iter()
            .map(|node| NodeBudget::start(&url, node, BudgetOptions::new()).expect("started"))
            .collect();
        let (_, first_minute) = cluster.slices("llm").expect("read");
        let drivers: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let executor = BudgetedExecutor::new(
                    StandIn {
                        count: Arc::clone(&count),
                        work: Duration::from_millis(1),
                    },
                    node,
                );
                let task = u64::try_from(i).expect("small") + 1;
                // A request with no estimate, which a token budget does not hold back;
                // then 600 estimated tokens a node, 1,800 in all.
                let mut requests = vec![sized(task, 6, 0)];
                requests.extend((0..6).map(|n| sized(task, n, 100)));
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || drive(executor, requests, &stop))
            })
            .collect();
        // Every node has asked for all 600 of its tokens, the minute's slices hold the
        // whole 900 and the stand-in was sent what they hold: nobody may send more.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (slices, minute) = loop {
            let (slices, minute) = cluster.slices("llm").expect("read");
            let asked = slices.len() == 3
                && slices
                    .iter()
                    .all(|s| s.minute == minute && s.want_tokens == 600);
            let granted: u64 = slices.iter().map(|s| s.tokens).sum();
            if asked && granted == 900 && count.tokens() == 900 && count.total() >= 12
                || minute != first_minute
            {
                break (slices, minute);
            }
            assert!(
                Instant::now() < deadline,
                "slices {slices:?}, {} tokens sent, within 20 s",
                count.tokens()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        stop.store(true, Ordering::SeqCst);
        for driver in drivers {
            driver.join().expect("driver");
        }
        let (_, last_minute) = cluster.slices("llm").expect("read");
        for node in nodes {
            node.stop();
        }
        if minute != first_minute || last_minute != first_minute {
            continue;
        }
        // Exactly the minute's 900 estimated tokens were sent by the three nodes
        // together (9 requests of 100), and the 3 requests with no estimate.
        assert_eq!(count.tokens(), 900, "slices {slices:?}");
        assert_eq!(count.total(), 12, "slices {slices:?}");
        return;
    }
    panic!("a minute ended during each of three tries");
}

#[test]
fn a_request_estimated_above_the_token_budget_goes_alone_in_its_minute() {
    for attempt in 0..3 {
        let url = cluster(
            &format!("budget_tokens_above_{attempt}"),
            Budget::new().tokens_per_minute(500),
        );
        let cluster = Cluster::connect(&url).expect("connect");
        let count = Arc::new(Concurrency::default());
        let stop = Arc::new(AtomicBool::new(false));
        let node = NodeBudget::start(&url, "a", BudgetOptions::new()).expect("started");
        let (_, first_minute) = cluster.slices("llm").expect("read");
        let executor = BudgetedExecutor::new(
            StandIn {
                count: Arc::clone(&count),
                work: Duration::from_millis(1),
            },
            &node,
        );
        // 600 estimated tokens, above the whole budget of 500; then 1 more.
        let requests = vec![sized(1, 0, 600), sized(1, 1, 1)];
        let driver = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || drive(executor, requests, &stop))
        };
        // The first went, counted as the whole budget; a renewal since found the
        // second waiting and got it no room in this minute.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (slices, minute) = loop {
            let (slices, minute) = cluster.slices("llm").expect("read");
            let full = slices
                .iter()
                .any(|s| s.minute == minute && s.tokens == 500 && s.want_tokens == 501);
            if full && count.total() == 1 || minute != first_minute {
                break (slices, minute);
            }
            assert!(Instant::now() < deadline, "slices {slices:?} within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        // Another node finds nothing left in the minute.
        let other = cluster
            .lease_slice(
                "b",
                "llm",
                SliceWant {
                    tokens: 1,
                    ..SliceWant::default()
                },
                Duration::from_secs(10),
            )
            .expect("leased");
        stop.store(true, Ordering::SeqCst);
        let answered = driver.join().expect("driver");
        let (_, last_minute) = cluster.slices("llm").expect("read");
        node.stop();
        if minute != first_minute || last_minute != first_minute || other.minute != minute {
            continue;
        }
        assert_eq!(other.tokens, Some(0));
        assert_eq!(answered, vec![sized(1, 0, 600).key], "slices {slices:?}");
        assert_eq!((count.total(), count.tokens()), (1, 600));
        return;
    }
    panic!("a minute ended during each of three tries");
}

#[test]
fn a_held_request_canceled_is_dropped_unanswered_and_keeps_no_room() {
    let url = cluster("budget_cancel_held", Budget::new().in_flight(1));
    let node = NodeBudget::start(&url, "a", BudgetOptions::new()).expect("started");
    let count = Arc::new(Concurrency::default());
    let mut executor = BudgetedExecutor::new(
        StandIn {
            count: Arc::clone(&count),
            work: Duration::from_millis(1),
        },
        &node,
    );
    let answers = Arc::new(Answers::default());
    let sink: Arc<dyn ReplySink> = answers.clone();
    let mut batch = Vec::new();
    // Nothing is leased yet: both are held, and the executor asks to be polled again.
    let mut replies = Replies::new(Time::ZERO, &mut batch, &sink);
    executor.execute(request(1, 0), &mut replies);
    executor.execute(request(1, 1), &mut replies);
    assert_eq!(executor.held(), 2);
    assert_eq!(
        executor.poll(Time::ZERO, &mut replies),
        Some(Time::ZERO.saturating_add(Duration::from_millis(10)))
    );
    executor.cancel(
        CancelSignal {
            key: request(1, 1).key,
            kind: Kind::Llm,
        },
        &mut replies,
    );
    assert_eq!(executor.held(), 1);
    // The first goes once the slice is leased, and is answered; the canceled one never.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent_third = false;
    loop {
        let mut replies = Replies::new(Time::ZERO, &mut batch, &sink);
        executor.poll(Time::ZERO, &mut replies);
        let keys = answers.keys.lock().expect("answers").clone();
        if keys.len() == 1 && !sent_third {
            // Its slot is back: a third request goes too.
            executor.execute(request(1, 2), &mut replies);
            sent_third = true;
        }
        if keys.len() == 2 {
            assert_eq!(keys, vec![request(1, 0).key, request(1, 2).key]);
            assert_eq!(executor.held(), 0);
            break;
        }
        assert!(Instant::now() < deadline, "answered {keys:?} within 20 s");
        let keys = answers.keys.lock().expect("answers");
        drop(
            answers
                .came
                .wait_timeout(keys, Duration::from_millis(10))
                .expect("answers"),
        );
    }
    assert_eq!(count.most(), 1);
    node.stop();
}
