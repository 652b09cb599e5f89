//! Frames of `spool top` for seeded states, drawn on ratatui's test backend (100 × 30)
//! and compared with insta snapshots: the screen is a pure function of the model.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::json;

use super::app::{App, Mode};
use super::model::{
    Backoff, Cluster, ClusterNode, ClusterShard, Connection, Detail, Gate, Model, Queue, Schedule,
    ScheduleStatus, Segment, Stats, Task, Timing, TraceLine, Waits, WindowUse,
};
use super::ui;

/// The screen as text, one line per row, trailing spaces cut.
fn frame(app: &App) -> String {
    frame_of(app, 100, 30)
}

/// The screen of `width` × `height` as text.
fn frame_of(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
    terminal
        .draw(|f| ui::draw(f, app))
        .expect("the test backend draws");
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let mut line = String::new();
        for x in 0..buffer.area.width {
            line.push_str(buffer[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn detail(
    id: u64,
    agent: &str,
    priority: &str,
    state: &str,
    waits_on: &str,
    since_ms: u64,
) -> Detail {
    Detail {
        position: 0,
        id,
        agent: agent.to_owned(),
        task_type: "react-agent".to_owned(),
        priority: priority.to_owned(),
        state: state.to_owned(),
        age_ms: since_ms + 250,
        score: None,
        waits_on: (!waits_on.is_empty()).then(|| waits_on.to_owned()),
        since_ms,
    }
}

/// `details` as the server sends them: in the policy's order `order` (ids), each with
/// its position.
fn in_order(mut details: Vec<Detail>, order: &[u64]) -> Vec<Detail> {
    details.sort_by_key(|d| order.iter().position(|id| *id == d.id));
    for (d, position) in details.iter_mut().zip(1..) {
        d.position = position;
    }
    details
}

fn up(queue: Queue) -> Model {
    let mut model = Model::new("http://127.0.0.1:7420");
    model.connection = Connection::Up;
    model.queue = queue;
    model
}

fn standup() -> Schedule {
    Schedule {
        slug: "daily-standup".to_owned(),
        enabled: true,
        schedule: json!({"type": "cron", "expression": "0 9 * * 1-5"}),
        status: ScheduleStatus {
            next_run: Some("2026-11-27T08:00:00Z".to_owned()),
            last_run: Some("2026-11-26T08:00:00.120Z".to_owned()),
            last_result: Some("success".to_owned()),
            runs: 12,
            missed: 1,
            paused_reason: None,
        },
    }
}

/// A busy scheduler: ten running of ten, five queued, the LLM backing off after 429s.
fn busy() -> Model {
    let mut details = Vec::new();
    for id in 1..=10 {
        let (state, waits) = match id {
            1..=3 => ("waiting", "llm"),
            4 => ("waiting", "tool:search"),
            5 => ("running", ""),
            _ => ("waiting", "llm"),
        };
        let priority = if id % 4 == 0 { "high" } else { "normal" };
        details.push(detail(
            id,
            "default",
            priority,
            state,
            waits,
            4200 - id * 100,
        ));
    }
    for id in 11..=15 {
        let priority = if id == 13 { "critical" } else { "low" };
        details.push(detail(
            id,
            "default",
            priority,
            "queued",
            "slot",
            3000 - id * 100,
        ));
    }
    // The priority policy's order: by level, then by submission.
    let details = in_order(
        details,
        &[13, 4, 8, 1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 14, 15],
    );
    let mut model = up(Queue {
        running: 10,
        max_running: Some(10),
        queued: 5,
        blocked: 0,
        ready: 1,
        in_flight: 4,
        held_requests: 5,
        rate_limited: true,
        backoffs: vec![Backoff {
            kind: "llm".to_owned(),
            remaining_ms: 4200,
        }],
        stats: Stats {
            submitted: 57,
            scheduled: 52,
            completed: 40,
            failed: 1,
            canceled: 1,
            rejected: 2,
            rate_limited: 3,
            peak_queued: 9,
            peak_running: 10,
            peak_in_flight: 10,
        },
        waits: Waits {
            tasks: 40,
            avg_ms: Some(600),
            p95_ms: Some(3500),
        },
        policy: "priority".to_owned(),
        gates: vec![
            Gate {
                kind: "llm".to_owned(),
                in_flight: 3,
                max_in_flight: Some(10),
                held: 5,
                window: Some(WindowUse {
                    used: 48,
                    max: 50,
                    per_ms: 60_000,
                }),
                tokens: Some(WindowUse {
                    used: 150_000,
                    max: 200_000,
                    per_ms: 60_000,
                }),
                backoff_ms: Some(4200),
                backoff_hits: 2,
            },
            Gate {
                kind: "tool:search".to_owned(),
                in_flight: 1,
                max_in_flight: Some(4),
                ..Gate::default()
            },
        ],
        details,
    });
    model.schedules = vec![standup()];
    model.tasks = (1..=40)
        .map(|id| Task {
            id,
            timing: Timing {
                queued_ms: id * 40,
                rate_limited_ms: if id > 30 { 2000 } else { 0 },
                ..Timing::default()
            },
            ..Task::default()
        })
        .collect();
    model
}

#[test]
fn an_empty_server() {
    let mut model = up(Queue {
        policy: "fifo".to_owned(),
        ..Queue::default()
    });
    model.schedules = Vec::new();
    insta::assert_snapshot!("empty", frame(&App::new(model)));
}

#[test]
fn busy_with_a_429_back_off() {
    insta::assert_snapshot!("busy_backoff", frame(&App::new(busy())));
}

#[test]
fn fair_share_shows_each_agents_share() {
    let details = vec![
        detail(21, "alice", "normal", "waiting", "llm", 900),
        detail(22, "alice", "normal", "running", "", 20),
        detail(23, "alice", "normal", "queued", "slot", 1500),
        detail(24, "bob", "high", "waiting", "tool:search", 300),
        detail(25, "bob", "normal", "queued", "slot", 1400),
        detail(26, "carol", "low", "waiting", "llm", 700),
        detail(27, "carol", "normal", "blocked", "1 dependency", 2100),
        detail(28, "dave", "normal", "queued", "slot", 1300),
    ];
    // Fair share's order: the agent with the smallest share first, levels within one.
    let details = in_order(details, &[28, 24, 25, 27, 26, 21, 22, 23]);
    let model = up(Queue {
        running: 4,
        max_running: Some(4),
        queued: 3,
        blocked: 1,
        in_flight: 3,
        policy: "fair-share".to_owned(),
        stats: Stats {
            submitted: 8,
            scheduled: 4,
            peak_queued: 3,
            peak_running: 4,
            ..Stats::default()
        },
        details,
        ..Queue::default()
    });
    insta::assert_snapshot!("fair_share", frame(&App::new(model)));
}

fn traced_task(timeline: Option<Vec<Segment>>) -> Model {
    let mut model = busy();
    model.watch(7);
    model.task = Some(Task {
        id: 7,
        task_type: "react-agent".to_owned(),
        agent: "default".to_owned(),
        priority: "normal".to_owned(),
        state: "waiting".to_owned(),
        state_detail: "Waiting(llm)".to_owned(),
        result: None,
        error: None,
        in_flight: 1,
        age_ms: 3550,
        timing: Timing {
            queued_ms: 1200,
            blocked_ms: 0,
            rate_limited_ms: 800,
            waiting_ms: [("llm".to_owned(), 1400), ("tool:search".to_owned(), 90)]
                .into_iter()
                .collect(),
            running_ms: 60,
        },
        timeline,
        spend: None,
    });
    let events = [
        (101, 0, "New", "Waiting(slot)", "submitted"),
        (140, 1200, "Waiting(slot)", "Ready", "slot freed"),
        (141, 1210, "Ready", "Running", "scheduled"),
        (142, 1230, "Running", "Waiting(llm)", "yielded"),
        (160, 1900, "Waiting(llm)", "Waiting(llm)", "backed off"),
        (171, 2700, "Waiting(llm)", "Ready", "answered"),
        (172, 2710, "Ready", "Running", "scheduled"),
        (173, 2730, "Running", "Waiting(tool:search)", "yielded"),
        (180, 2820, "Waiting(tool:search)", "Ready", "answered"),
        (181, 2830, "Ready", "Running", "scheduled"),
        (182, 2850, "Running", "Waiting(llm)", "yielded"),
    ];
    for (seq, time_ms, from, to, cause) in events {
        model.apply(super::model::Update::Event(TraceLine {
            seq,
            time_ms,
            task: 7,
            from: from.to_owned(),
            to: to.to_owned(),
            cause: cause.to_owned(),
        }));
    }
    model
}

fn segment(wait: &str, kind: Option<&str>, start_ms: u64, end_ms: u64, open: bool) -> Segment {
    Segment {
        wait: wait.to_owned(),
        kind: kind.map(str::to_owned),
        start_ms,
        end_ms,
        open,
    }
}

#[test]
fn a_task_detail_with_its_timeline_and_trace() {
    let model = traced_task(Some(vec![
        segment("queued", None, 0, 1200, false),
        segment("running", None, 1200, 1230, false),
        segment("request", Some("llm"), 1230, 1900, false),
        segment("rate_limited", Some("llm"), 1900, 2700, false),
        segment("running", None, 2700, 2730, false),
        segment("request", Some("tool:search"), 2730, 2820, false),
        segment("running", None, 2820, 2850, false),
        segment("request", Some("llm"), 2850, 3550, true),
    ]));
    let mut app = App::new(model);
    app.mode = Mode::Detail(7);
    insta::assert_snapshot!("detail_timeline", frame(&app));
}

#[test]
fn a_task_detail_without_a_timeline_shows_the_timing_totals() {
    let mut app = App::new(traced_task(None));
    app.mode = Mode::Detail(7);
    insta::assert_snapshot!("detail_totals", frame(&app));
}

#[test]
fn a_finished_task_shows_its_answer_on_one_line_and_an_evicted_one_says_so() {
    let mut model = traced_task(None);
    if let Some(task) = &mut model.task {
        task.state = "completed".to_owned();
        task.state_detail = "Completed(ok)".to_owned();
        task.in_flight = 0;
        task.result = Some(
            json!({"agent": "agent", "answer": "Run 1 of this conversation: for \"standup\" the notes give the figure 687. And a long tail that does not fit on the line at all, so it is cut."}),
        );
    }
    let mut app = App::new(model);
    app.mode = Mode::Detail(7);
    let text = frame(&app);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[8..10],
        [
            "│react-agent · agent default · normal · completed · age 3.5s · requests out 0                      │",
            "│answer: Run 1 of this conversation: for \"standup\" the notes give the figure 687. And a long tail …│",
        ],
        "{text}"
    );
    app.model.apply(super::model::Update::Task(7, None));
    let text = frame(&app);
    assert_eq!(
        text.lines().nth(8),
        Some(
            "│task 7 is not on the server (ended and evicted, or never submitted)                               │"
        ),
        "{text}"
    );
}

#[test]
fn a_task_detail_shows_the_end_of_the_answer_being_streamed() {
    let mut app = App::new(traced_task(None));
    app.mode = Mode::Detail(7);
    let words = "The build is green and every check passed, the deploy went out at nine, \
                 and the on-call rotation has nothing to report for the night.";
    for (seq, word) in words.split_inclusive(' ').enumerate() {
        app.model
            .apply(super::model::Update::Delta(super::live::LiveDelta {
                task: 7,
                request: 3,
                seq: seq as u64,
                text: word.to_owned(),
                ..super::live::LiveDelta::default()
            }));
    }
    let text = frame(&app);
    assert_eq!(
        text.lines().nth(9),
        Some(
            "│answer so far (request 3): …at nine, and the on-call rotation has nothing to report for the night.│"
        ),
        "{text}"
    );
    // Its answer's transition ends it.
    app.model.apply(super::model::Update::Event(TraceLine {
        seq: 190,
        time_ms: 3600,
        task: 7,
        from: "Waiting(llm)".to_owned(),
        to: "Ready".to_owned(),
        cause: "answer to request 3".to_owned(),
    }));
    assert!(!frame(&app).contains("answer so far"));
}

#[test]
fn the_server_gone_keeps_the_last_data_and_says_so() {
    let mut model = busy();
    model.apply(super::model::Update::Gone {
        error: "io: Connection refused".to_owned(),
        attempt: 3,
    });
    insta::assert_snapshot!("server_gone", frame(&App::new(model)));
}

#[test]
fn the_cancel_confirmation_names_the_task() {
    let mut app = App::new(busy());
    app.mode = Mode::ConfirmCancel {
        id: 13,
        from_detail: false,
    };
    app.selected = Some(13);
    insta::assert_snapshot!("confirm_cancel", frame(&app));
}

#[test]
fn the_help_lists_the_keys() {
    let mut app = App::new(up(Queue::default()));
    app.mode = Mode::Help(None);
    insta::assert_snapshot!("help", frame(&app));
}

/// A string a submitter could send to retitle the operator's terminal and turn it red.
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[31mx";

/// Whether `text` holds a character a terminal would act on.
fn has_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c != '\n' && (c.is_control() || ('\u{80}'..='\u{9f}').contains(&c)))
}

#[test]
fn control_characters_from_the_server_are_drawn_visibly_in_the_lists() {
    let details = vec![
        detail(21, HOSTILE, "normal", "waiting", HOSTILE, 900),
        detail(22, "bob", HOSTILE, HOSTILE, "", 20),
    ];
    let details = in_order(details, &[22, 21]);
    let mut model = up(Queue {
        running: 1,
        queued: 1,
        policy: "fair-share".to_owned(),
        details,
        ..Queue::default()
    });
    let mut schedule = standup();
    schedule.slug = format!("s{HOSTILE}");
    schedule.status.paused_reason = Some(HOSTILE.to_owned());
    schedule.status.last_result = Some(HOSTILE.to_owned());
    model.schedules = vec![schedule];
    model.status = Some(format!("cancel failed: {HOSTILE}"));
    let text = frame(&App::new(model));
    assert!(!has_controls(&text), "{text:?}");
    insta::assert_snapshot!("hostile_lists", text);
}

#[test]
fn control_characters_from_the_server_are_drawn_visibly_in_a_tasks_detail() {
    let mut model = traced_task(None);
    if let Some(task) = &mut model.task {
        task.agent = HOSTILE.to_owned();
        task.task_type = HOSTILE.to_owned();
        task.error = Some(format!("tool said {HOSTILE}"));
        task.timing.waiting_ms = [(HOSTILE.to_owned(), 10)].into_iter().collect();
    }
    model.apply(super::model::Update::Event(TraceLine {
        seq: 190,
        time_ms: 2900,
        task: 7,
        from: HOSTILE.to_owned(),
        to: "Completed(error)".to_owned(),
        cause: HOSTILE.to_owned(),
    }));
    model.apply(super::model::Update::Gone {
        error: format!("io: {HOSTILE}"),
        attempt: 1,
    });
    let mut app = App::new(model);
    app.mode = Mode::Detail(7);
    let text = frame(&app);
    assert!(!has_controls(&text), "{text:?}");
    insta::assert_snapshot!("hostile_detail", text);
}

#[test]
fn a_filter_being_typed_shows_on_the_key_line_and_in_the_title() {
    let mut app = App::new(busy());
    app.mode = Mode::Filter;
    app.filter = "slot".to_owned();
    let text = frame(&app);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[29], "filter: slot▏  Enter keep · Esc clear");
    assert!(
        lines[7].starts_with("┌ Tasks 5 of 15 · sort policy · filter \"slot\" ─"),
        "{text}"
    );
    let ids: Vec<&str> = lines[9..14]
        .iter()
        .map(|l| {
            l.trim_start_matches(['│', '▶', ' '])
                .split_whitespace()
                .next()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(ids, ["13", "11", "12", "14", "15"], "{text}");
}

#[test]
fn addr_takes_an_http_url_and_refuses_others() {
    use super::{TopError, base_url};
    assert_eq!(
        base_url("http://127.0.0.1:7420/").ok().as_deref(),
        Some("http://127.0.0.1:7420")
    );
    assert_eq!(
        base_url(" http://localhost:80 ").ok().as_deref(),
        Some("http://localhost:80")
    );
    for bad in [
        "127.0.0.1:7420",
        "https://x:1",
        "http://",
        "http://x/v1",
        "ftp://x",
    ] {
        match base_url(bad) {
            Err(error @ TopError::BadAddr(_)) => assert_eq!(
                error.to_string(),
                format!(
                    "--addr {bad:?} is not a URL like http://127.0.0.1:7420 (https is not supported)"
                )
            ),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn the_token_comes_from_the_file_else_the_environment() {
    use super::token;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("token");
    std::fs::write(&file, "  s3cret\n").expect("the token is written");
    assert_eq!(
        token(Some(&file), Some("env".to_owned()))
            .ok()
            .flatten()
            .as_deref(),
        Some("s3cret")
    );
    assert_eq!(
        token(None, Some("env-token\n".to_owned()))
            .ok()
            .flatten()
            .as_deref(),
        Some("env-token")
    );
    assert_eq!(token(None, None).ok().flatten(), None);
    std::fs::write(&file, "two words").expect("the token is written");
    let error = token(Some(&file), None).expect_err("two words are not a token");
    assert_eq!(
        error.to_string(),
        format!(
            "the token file {}: must hold one token: visible characters, no spaces",
            file.display()
        )
    );
    let missing = dir.path().join("missing");
    let error = token(Some(&missing), None).expect_err("no file, no token");
    assert!(
        error.to_string().starts_with(&format!(
            "the token file {}: cannot be read: ",
            missing.display()
        )),
        "{error}"
    );
}

#[test]
fn top_takes_an_addr_and_a_token_file() {
    use clap::Parser;

    use crate::cli::{Cli, Command};
    let parse =
        |args: &[&str]| Cli::try_parse_from(std::iter::once("spool").chain(args.iter().copied()));
    match parse(&["top"]).map(|c| c.command) {
        Ok(Command::Top(args)) => {
            assert_eq!(
                (args.addr.as_str(), args.token_file),
                ("http://127.0.0.1:7420", None)
            );
        }
        other => panic!("{other:?}"),
    }
    match parse(&["top", "--addr", "http://h:1", "--token-file", "t"]).map(|c| c.command) {
        Ok(Command::Top(args)) => assert_eq!(
            (args.addr.as_str(), args.token_file),
            ("http://h:1", Some(std::path::PathBuf::from("t")))
        ),
        other => panic!("{other:?}"),
    }
}

/// Under a cap of four LLM calls with six made, the header counts the four in flight
/// and the two held apart, as the gate does: one meaning of "in flight" on the screen.
#[test]
fn the_header_counts_requests_in_flight_and_held_ones_apart_as_the_gate_does() {
    let model = up(Queue {
        running: 6,
        in_flight: 4,
        held_requests: 2,
        policy: "fifo".to_owned(),
        gates: vec![Gate {
            kind: "llm".to_owned(),
            in_flight: 4,
            max_in_flight: Some(4),
            held: 2,
            ..Gate::default()
        }],
        ..Queue::default()
    });
    let text = frame(&App::new(model));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        "│Running: 6   Queued: 0   Blocked: 0   Ready: 0   Requests: 4 in flight, 2 held back               │"
    );
    assert_eq!(
        lines[4],
        "│llm:  in flight 4/4  held 2                                                                       │"
    );
}

/// The task list shows the rows in the order the server sent them (the policy's),
/// not one of its own: under fair share with bob weighted 3 (which only the server
/// knows), bob's tasks come before alice's though he has more started.
#[test]
fn the_task_list_keeps_the_servers_order() {
    let details = in_order(
        vec![
            detail(1, "alice", "normal", "waiting", "llm", 900),
            detail(2, "bob", "normal", "waiting", "llm", 800),
            detail(3, "bob", "normal", "running", "", 700),
            detail(4, "bob", "high", "queued", "slot", 600),
            detail(5, "alice", "normal", "queued", "slot", 500),
        ],
        &[4, 2, 3, 5, 1],
    );
    let model = up(Queue {
        running: 3,
        queued: 2,
        policy: "fair-share".to_owned(),
        details,
        ..Queue::default()
    });
    let text = frame(&App::new(model));
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("│▶").or_else(|| line.strip_prefix("│ ")))
        .filter_map(|row| row.split_whitespace().next())
        .filter(|id| id.parse::<u64>().is_ok())
        .collect();
    assert_eq!(ids, ["4", "2", "3", "5", "1"]);
}

/// The task table's part of each of `lines`: what is left of the side panel.
fn table_part<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .iter()
        .map(|line| line.split("││").next().unwrap_or(line))
        .collect()
}

#[test]
fn a_filter_that_matches_no_task_says_so_in_the_empty_table() {
    let mut app = App::new(busy());
    app.filter = "no-such-agent".to_owned();
    let text = frame(&app);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[7].starts_with("┌ Tasks 0 of 15 · sort policy · filter \"no-such-agent\" ─"),
        "{text}"
    );
    assert_eq!(
        table_part(&lines[8..11]),
        [
            "│ID    AGENT    TYPE        PRIO     STATE    WAITS ON     FOR   ",
            "│                                                                ",
            "│ no live task matches the filter                                ",
        ],
        "{text}"
    );
}

#[test]
fn scored_tasks_show_the_policys_score_in_place_of_the_priority() {
    let mut model = busy();
    for (d, score) in model.queue.details.iter_mut().zip([-3, 0, 42]) {
        d.score = Some(score);
    }
    let text = frame(&App::new(model));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        table_part(&lines[8..12]),
        [
            "│ ID    AGENT    TYPE        SCORE    STATE    WAITS ON     FOR  ",
            "│▶13    default  react-agent -3       queued   slot         1.7s ",
            "│ 4     default  react-agent 0        waiting  tool:search  3.8s ",
            "│ 8     default  react-agent 42       waiting  llm          3.4s ",
        ],
        "{text}"
    );
}

/// A cluster of four shards: node-a holds 0 and 1, node-b (draining) 2; node-c died
/// and its lease of shard 3 expired; old-node left long ago.
fn cluster() -> Cluster {
    let node = |name: &str, beat: u64, draining, shards: &[u32]| ClusterNode {
        node: name.to_owned(),
        addr: format!("http://{name}:7420"),
        up_for_ms: 3_600_000,
        heartbeat_age_ms: beat,
        draining,
        shards: shards.to_vec(),
    };
    let shard = |shard, owner: &str, epoch, expired, inbox, lag| ClusterShard {
        shard,
        owner: Some(owner.to_owned()),
        epoch,
        lease_age_ms: Some(1200),
        expires_in_ms: Some(if expired { 0 } else { 8800 }),
        expired,
        inbox,
        lag,
    };
    Cluster {
        node: "node-a".to_owned(),
        shards: vec![
            shard(0, "node-a", 3, false, 0, 12),
            shard(1, "node-a", 4, false, 0, 1_250),
            shard(2, "node-b", 7, false, 2, 48_000),
            shard(3, "node-c", 2, true, 7, 310),
        ],
        nodes: vec![
            node("node-a", 300, false, &[0, 1]),
            node("node-b", 1_400, true, &[2]),
            node("node-c", 14_200, false, &[]),
            node("old-node", 7_300_000, false, &[]),
        ],
    }
}

#[test]
fn a_cluster_node_shows_the_nodes_and_shards_and_which_shards_queue_it_is() {
    let mut model = busy();
    model.cluster = Some(cluster());
    insta::assert_snapshot!("cluster_nodes", frame(&App::new(model)));
}

/// At 80 × 24: the nodes, and the shards that fit, around the one shown; the
/// schedules keep a line.
#[test]
fn a_cluster_node_stays_readable_in_80_by_24() {
    let mut model = busy();
    model.queue.gates.clear();
    // Shard 3's ids: its number in the top bits.
    for d in &mut model.queue.details {
        d.id += 3 << 44;
    }
    model.cluster = Some(cluster());
    model.shard = 3;
    let mut app = App::new(model);
    app.shard = 3;
    insta::assert_snapshot!("cluster_small", frame_of(&app, 80, 24));
}
