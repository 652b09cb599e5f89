//! Cluster-wide budgets: set and read, slices of an in-flight budget that never sum
//! above it, a released or expired slice taken by another node, a fair share when a
//! node waits, and per-minute slices (of requests, of estimated tokens) within a minute of
//! PostgreSQL's clock.

use std::time::{Duration, Instant};

use spool_postgres::Cluster;
use spool_postgres::cluster::{Budget, Slice, SliceWant};

use crate::common::database;

/// A slice's time to live long enough never to expire in a test.
const LONG: Duration = Duration::from_secs(60);

/// A want of `in_flight` requests, `held` of them in flight.
fn in_flight(want: u32, held: u32) -> SliceWant {
    SliceWant {
        in_flight: want,
        in_flight_held: held,
        ..SliceWant::default()
    }
}

/// A cluster in a new database named `name`, with its nodes joined.
fn cluster(name: &str, nodes: &[&str]) -> Cluster {
    let cluster = Cluster::init(&database(name), 1).expect("init");
    for node in nodes {
        cluster.join(node, "127.0.0.1:1").expect("join");
    }
    cluster
}

#[test]
fn a_budget_is_set_and_read() {
    let cluster = cluster("budget_set", &[]);
    assert_eq!(cluster.budget("llm").expect("read"), None);
    cluster
        .set_budget("llm", Budget::new().in_flight(2).per_minute(60))
        .expect("set");
    assert_eq!(
        cluster.budget("llm").expect("read"),
        Some(Budget {
            in_flight: Some(2),
            per_minute: Some(60),
            tokens_per_minute: None,
        })
    );
    cluster
        .set_budget("llm", Budget::new().per_minute(30))
        .expect("set again");
    assert_eq!(
        cluster.budget("llm").expect("read"),
        Some(Budget {
            in_flight: None,
            per_minute: Some(30),
            tokens_per_minute: None,
        })
    );
    cluster
        .set_budget("llm", Budget::new().in_flight(1).tokens_per_minute(90_000))
        .expect("set tokens");
    assert_eq!(
        cluster.budget("llm").expect("read"),
        Some(Budget {
            in_flight: Some(1),
            per_minute: None,
            tokens_per_minute: Some(90_000),
        })
    );
    assert_eq!(
        cluster.budget("").expect_err("no kind").to_string(),
        "a kind must not be empty"
    );
    let free = cluster
        .lease_slice("a", "tool:search", in_flight(5, 0), LONG)
        .expect("no budget");
    assert_eq!(
        (
            free.in_flight,
            free.per_minute,
            free.tokens,
            free.tokens_budget
        ),
        (None, None, None, None)
    );
}

#[test]
fn three_nodes_never_hold_more_than_the_in_flight_budget() {
    let cluster = cluster("budget_in_flight", &["a", "b", "c"]);
    cluster
        .set_budget("llm", Budget::new().in_flight(2))
        .expect("set");
    let got = |node: &str, want: SliceWant| {
        cluster
            .lease_slice(node, "llm", want, LONG)
            .expect("leased")
            .in_flight
    };
    // The first node gets all it asks for; the others find nothing free.
    assert_eq!(got("a", in_flight(2, 0)), Some(2));
    assert_eq!(got("b", in_flight(2, 0)), Some(0));
    assert_eq!(got("c", in_flight(1, 0)), Some(0));
    // Others wait: the holder's share is capped at ceil(2 / 3) = 1, but its slice stays
    // recorded at the 2 it has in flight, so nobody gets more meanwhile.
    assert_eq!(got("a", in_flight(2, 2)), Some(1));
    assert_eq!(got("b", in_flight(2, 0)), Some(0));
    // One of its requests ended: its slice is recorded at 1, the other one is free.
    assert_eq!(got("a", in_flight(2, 1)), Some(1));
    assert_eq!(got("b", in_flight(2, 0)), Some(1));
    assert_eq!(got("c", in_flight(1, 0)), Some(0));
    // Many renewals in every order never hold more than 2 together.
    let mut held = [1u32, 1, 0];
    for round in 0..30u32 {
        let node = ["a", "b", "c"][(round % 3) as usize];
        let i = (round % 3) as usize;
        let slice = got(node, in_flight(2, held[i])).expect("a budget");
        // The node uses what it got, less one now and then.
        held[i] = if round % 4 == 0 {
            held[i].min(slice).saturating_sub(1)
        } else {
            slice.max(held[i].min(slice))
        };
        assert!(
            held.iter().sum::<u32>() <= 2,
            "round {round}: held {held:?}"
        );
    }
}

#[test]
fn a_released_or_expired_slice_is_taken_by_another_node() {
    let cluster = cluster("budget_handover", &["a", "b"]);
    cluster
        .set_budget("llm", Budget::new().in_flight(2))
        .expect("set");
    let lease = |node: &str, ttl: Duration| {
        cluster
            .lease_slice(node, "llm", in_flight(2, 0), ttl)
            .expect("leased")
            .in_flight
    };
    assert_eq!(lease("a", LONG), Some(2));
    assert_eq!(lease("b", LONG), Some(0));
    assert!(cluster.release_slice("a", "llm").expect("released"));
    let (slices, _) = cluster.slices("llm").expect("read");
    let held: Vec<_> = slices
        .iter()
        .map(|s| (s.node.as_str(), s.in_flight, s.want_in_flight, s.expired))
        .collect();
    assert_eq!(held, [("a", 0, 0, true), ("b", 0, 2, false)]);
    assert!(!cluster.release_slice("z", "llm").expect("none held"));
    assert_eq!(lease("b", LONG), Some(2));
    // b's slice lapses: a gets it once it has expired, not before.
    assert_eq!(lease("b", Duration::from_millis(300)), Some(2));
    assert_eq!(lease("a", LONG), Some(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match lease("a", LONG) {
            Some(2) => break,
            Some(0) => {}
            other => panic!("a got {other:?}"),
        }
        assert!(Instant::now() < deadline, "b's slice never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn per_minute_slices_sum_to_at_most_the_budget_within_a_minute() {
    let cluster = cluster("budget_per_minute", &["a", "b", "c"]);
    cluster
        .set_budget("llm", Budget::new().per_minute(60))
        .expect("set");
    let per_minute = |want: u32, sent: u32, minute: Option<i64>| SliceWant {
        per_minute: want,
        sent,
        minute,
        ..SliceWant::default()
    };
    // Tried again if a minute of the server's clock ends in the middle.
    for _ in 0..3 {
        let lease = |node: &str, want: SliceWant| -> Slice {
            cluster
                .lease_slice(node, "llm", want, LONG)
                .expect("leased")
        };
        let a = lease("a", per_minute(40, 0, None));
        let b = lease("b", per_minute(40, 0, None));
        let c = lease("c", per_minute(40, 0, None));
        // a used 10 of its 40 and gives the rest back; c takes them up to its fair share
        // (ceil(60 / 3) = 20), since b waits for more than it holds.
        let a2 = lease("a", per_minute(10, 10, Some(a.minute)));
        let c2 = lease("c", per_minute(40, 0, Some(c.minute)));
        // b asks for more than anyone can have: it gets its fair share, which it sent.
        let b2 = lease("b", per_minute(60, 20, Some(b.minute)));
        let minutes = [
            a.minute, b.minute, c.minute, a2.minute, c2.minute, b2.minute,
        ];
        if minutes.iter().any(|m| *m != a.minute) {
            cluster.release_slice("a", "llm").expect("released");
            continue;
        }
        let got = [a, b, c, a2, c2, b2].map(|slice| slice.per_minute.expect("a budget"));
        assert_eq!(got, [40, 20, 0, 10, 20, 20]);
        assert!(a.minute_left <= Duration::from_secs(60));
        assert_eq!(a.per_minute, Some(40));
        assert_eq!(a2.in_flight, None);
        // What the minute's slices hold together now.
        assert_eq!(got[3] + got[4] + got[5], 50);
        // The 10 left are c's once b no longer waits for more.
        let b3 = lease("b", per_minute(20, 20, Some(b.minute)));
        let c3 = lease("c", per_minute(40, 0, Some(c.minute)));
        if b3.minute == a.minute && c3.minute == a.minute {
            assert_eq!((b3.per_minute, c3.per_minute), (Some(20), Some(30)));
        }
        return;
    }
    panic!("three minutes ended during three tries");
}

#[test]
fn token_slices_sum_to_at_most_the_budget_within_a_minute() {
    let cluster = cluster("budget_tokens_per_minute", &["a", "b", "c"]);
    cluster
        .set_budget("llm", Budget::new().tokens_per_minute(90_000))
        .expect("set");
    let tokens = |want: u64, sent: u64, minute: Option<i64>| SliceWant {
        tokens: want,
        tokens_sent: sent,
        minute,
        ..SliceWant::default()
    };
    // Tried again if a minute of the server's clock ends in the middle.
    for _ in 0..3 {
        let lease = |node: &str, want: SliceWant| -> Slice {
            cluster
                .lease_slice(node, "llm", want, LONG)
                .expect("leased")
        };
        let a = lease("a", tokens(60_000, 0, None));
        let b = lease("b", tokens(60_000, 0, None));
        let c = lease("c", tokens(60_000, 0, None));
        // a sent 15,000 of its 60,000 and gives the rest back; c takes them up to its
        // fair share (90,000 / 3), since b waits for more than it holds.
        let a2 = lease("a", tokens(15_000, 15_000, Some(a.minute)));
        let c2 = lease("c", tokens(60_000, 0, Some(c.minute)));
        // b asks for more than anyone can have: it gets its fair share, which it sent.
        let b2 = lease("b", tokens(90_000, 30_000, Some(b.minute)));
        let minutes = [
            a.minute, b.minute, c.minute, a2.minute, c2.minute, b2.minute,
        ];
        if minutes.iter().any(|m| *m != a.minute) {
            cluster.release_slice("a", "llm").expect("released");
            continue;
        }
        let got = [a, b, c, a2, c2, b2].map(|slice| slice.tokens.expect("a budget"));
        assert_eq!(got, [60_000, 30_000, 0, 15_000, 30_000, 30_000]);
        assert_eq!(a.tokens_budget, Some(90_000));
        assert_eq!((a.in_flight, a.per_minute), (None, None));
        let (slices, minute) = cluster.slices("llm").expect("read");
        if minute != a.minute {
            continue;
        }
        let recorded: Vec<_> = slices
            .iter()
            .map(|s| (s.node.as_str(), s.tokens, s.want_tokens))
            .collect();
        assert_eq!(
            recorded,
            [
                ("a", 15_000, 15_000),
                ("b", 30_000, 90_000),
                ("c", 30_000, 60_000)
            ]
        );
        // What the minute's slices hold together is never above the budget; the 15,000
        // left are c's once b no longer waits for more.
        let b3 = lease("b", tokens(30_000, 30_000, Some(b.minute)));
        let c3 = lease("c", tokens(60_000, 0, Some(c.minute)));
        if b3.minute == a.minute && c3.minute == a.minute {
            assert_eq!((b3.tokens, c3.tokens), (Some(30_000), Some(45_000)));
        }
        // Released, a's sent tokens still count in their minute.
        assert!(cluster.release_slice("a", "llm").expect("released"));
        let d = lease("c", tokens(90_000, 0, Some(c.minute)));
        if d.minute == a.minute {
            assert_eq!(d.tokens, Some(45_000));
        }
        return;
    }
    panic!("three minutes ended during three tries");
}
