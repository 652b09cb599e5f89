//! Spend in `GET /v1/tasks/{id}` and `/metrics`: a server with a task budget of 100
//! tokens and prices for `gpt-4o`, whose scripted LLM reports 30 tokens in and 10 out
//! per answer.

use serde_json::json;
use spool_core::{Budget, Budgets, ModelPrice, Prices};

use crate::support::{Api, Setup};

fn budgets() -> Budgets {
    Budgets::new()
        .per_task(Budget::tokens(100))
        .prices(Prices::new().model("gpt-4o", ModelPrice::usd_per_million(2.5, 10.0)))
}

/// Three answers take the task to 120 tokens: its fourth LLM request fails unsent,
/// and the task's view and the metrics say what it spent, exactly.
#[test]
fn the_task_view_and_the_metrics_show_the_spend() {
    let api = Api::with(Setup {
        budgets: Some(budgets()),
        ..Setup::default()
    });
    let body = json!({"type": "script", "input": {"steps": 5}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let task = api.wait_for("/v1/tasks/1", |t| t["state"] == "failed");
    assert_eq!(
        task["error"],
        "request 4 failed: the task's budget is spent: 120 tokens of 100 tokens"
    );
    // 90 × $2.50/M + 30 × $10/M = $0.000225 + $0.0003.
    assert_eq!(
        task["spend"],
        json!({
            "input_tokens": 90,
            "output_tokens": 30,
            "tokens": 120,
            "cost_micro_usd": 525,
            "cost_usd": 0.000525,
            "answers": 3
        })
    );
    let metrics = api.wait_for_text("/metrics", |text| {
        text.lines().any(|l| l == "spool_tasks{state=\"failed\"} 1")
    });
    // The day's samples are labeled with today's UTC date (the runtime knows the wall
    // clock), shown here as DATE.
    let spend: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with("spool_spend") || l.starts_with("spool_budget"))
        .map(dated)
        .collect();
    assert_eq!(
        spend,
        [
            "spool_spend_tokens_total{agent=\"default\",direction=\"input\"} 90",
            "spool_spend_tokens_total{agent=\"default\",direction=\"output\"} 30",
            "spool_spend_cost_usd_total{agent=\"default\"} 0.000525",
            "spool_spend_day_tokens{date=\"DATE\",direction=\"input\"} 90",
            "spool_spend_day_tokens{date=\"DATE\",direction=\"output\"} 30",
            "spool_spend_day_cost_usd{date=\"DATE\"} 0.000525",
            "spool_budget_held_requests 0",
        ]
    );
}

/// `line` with the value of its `date` label, a `YYYY-MM-DD` date, as `DATE`.
fn dated(line: &str) -> String {
    let Some((before, rest)) = line.split_once("date=\"") else {
        return line.to_owned();
    };
    let (date, after) = rest.split_once('"').unwrap();
    assert!(
        date.parse::<jiff::civil::Date>().is_ok(),
        "not a date: {date}"
    );
    format!("{before}date=\"DATE\"{after}")
}

/// A server without budgets counts nothing: no spend in the view, no spend metrics.
#[test]
fn without_budgets_there_is_no_spend() {
    let api = Api::start();
    let body = json!({"type": "script", "input": {"steps": 1}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let task = api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    assert_eq!(task.get("spend"), None);
    let metrics = api.call("GET", "/metrics", None).text;
    assert!(!metrics.contains("spool_spend"), "{metrics}");
}

/// A day budget of 40 tokens that waits: the first answer spends it, so the task's
/// second LLM request is held for the next UTC day — the task waits, and the queue
/// and the metrics say why.
#[test]
fn a_request_held_for_the_next_day_shows_in_the_queue_and_the_metrics() {
    let api = Api::with(Setup {
        budgets: Some(
            Budgets::new()
                .per_day(Budget::tokens(40))
                .on_day_spent(spool_core::OnSpent::Wait),
        ),
        ..Setup::default()
    });
    let body = json!({"type": "script", "input": {"steps": 2}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let queue = api.wait_for("/v1/queue", |q| q["budget_held"]["requests"] == 1);
    assert_eq!(queue["held_requests"], 1);
    assert_eq!(queue["in_flight"], 0);
    let left = queue["budget_held"]["remaining_ms"].as_u64().unwrap();
    assert!(left <= 24 * 60 * 60 * 1000, "{left} ms to the next day");
    let task = api.call("GET", "/v1/tasks/1", None).json;
    assert_eq!(
        (&task["state"], &task["state_detail"]),
        (&json!("waiting"), &json!("Waiting(llm)"))
    );
    assert_eq!(task["spend"]["tokens"], 40);
    let metrics = api.wait_for_text("/metrics", |text| {
        text.lines().any(|l| l == "spool_budget_held_requests 1")
    });
    assert!(
        metrics
            .lines()
            .any(|l| l == "spool_requests_held{kind=\"llm\"} 1"),
        "{metrics}"
    );
}
