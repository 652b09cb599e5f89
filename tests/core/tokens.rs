//! The tokens-per-window limit counts what the provider reports a request used, once it
//! answers, instead of the estimate the request went out with.

use std::time::Duration;

use serde_json::json;
use spool::{Config, Kind, NewTask, Request, RequestLimits, Response, Scheduler, Time};

use crate::support::ask_once;

/// A scheduler with a budget of 1,000 LLM tokens a minute and two tasks asking with
/// estimates of `first` and `second` tokens.
fn two_asks(first: u32, second: u32) -> Scheduler {
    let mut s = Scheduler::new(Config::new().requests(RequestLimits::new().tokens(
        Kind::Llm,
        1_000,
        Duration::from_secs(60),
    )));
    for tokens in [first, second] {
        let ask = ask_once("asker", Request::llm(json!("q")).with_tokens(tokens));
        s.submit(Time::ZERO, NewTask::new(ask)).unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    s
}

/// Estimated 900, used 100: once the answer says so, an 800-token request fits at once.
#[test]
fn a_smaller_reported_use_frees_the_budget_for_the_next_request() {
    let mut s = two_asks(900, 800);
    let first = s.poll_request().unwrap();
    assert_eq!(s.poll_request(), None, "900 + 800 estimated is over 1,000");
    let at = Time::from_duration(Duration::from_secs(1));
    let _ = s.handle_response(
        at,
        Response::ok(first.key, json!("a")).with_tokens_used(100),
    );
    let second = s.poll_request().expect("100 used + 800 fits");
    assert_eq!(second.request.tokens, 800);
}

/// Estimated 100, used 900: the next 200-token request waits until the first leaves the
/// window, a minute after it went out.
#[test]
fn a_larger_reported_use_holds_the_next_request_until_the_window_moves() {
    let mut s = two_asks(100, 200);
    let first = s.poll_request().unwrap();
    let second = s.poll_request().unwrap();
    assert_eq!(second.request.tokens, 200, "100 + 200 estimated fits");
    let at = Time::from_duration(Duration::from_secs(1));
    let _ = s.handle_response(
        at,
        Response::ok(first.key, json!("a")).with_tokens_used(900),
    );
    let _ = s.handle_response(
        at,
        Response::ok(second.key, json!("b")).with_tokens_used(200),
    );
    // A third request of 200 tokens: 900 + 200 counted is over budget.
    s.submit(
        at,
        NewTask::new(ask_once("asker", Request::llm(json!("q")).with_tokens(200))),
    )
    .unwrap();
    while s.step(at).is_some() {}
    assert_eq!(s.poll_request(), None);
    assert_eq!(
        s.poll_timeout(),
        Some(Time::from_duration(Duration::from_secs(60)))
    );
    s.handle_timeout(Time::from_duration(Duration::from_secs(60)));
    assert_eq!(s.poll_request().unwrap().request.tokens, 200);
}
