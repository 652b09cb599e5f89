//! The web page at `/` of `spool serve` in a real browser: headless Chromium loads it
//! from a running server with the token in the address's fragment, and what the page
//! shows — the queue's counts, the statistics, the tasks, a task's waterfall and its
//! events — is checked against the API it reads. Without a token, or with a wrong one,
//! it asks for one. A screenshot is saved to `target/web/spool-web.png`. On a cluster
//! node the page shows the nodes and shards and one shard's queue (a stand-in node and
//! two real nodes on a throwaway PostgreSQL).
//!
//! Without `chromium` on the PATH the test runs `scripts/test-deps.sh` (Debian's
//! package) and fails, saying so, if it is still missing: it never skips.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

use support::Server;

const TOKEN: &str = "web-test-token";
/// The page, as `spool serve` serves it.
const PAGE: &str = include_str!("../../spool-http/src/web/index.html");
/// Tasks submitted and run to their end before the page is loaded.
const TASKS: u64 = 10;
/// The task whose timeline the page is opened on.
const TASK: u64 = 4;
/// Virtual time the page gets before its DOM is dumped: a few polls.
const BUDGET_MS: &str = "4000";

/// `chromium`, installed by `scripts/test-deps.sh` if it is missing.
fn chromium() -> PathBuf {
    if let Some(found) = on_path("chromium") {
        return found;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-deps.sh");
    eprintln!(
        "web: chromium is not on the PATH; running {}",
        script.display()
    );
    let ran = Command::new("bash").arg(&script).status();
    match on_path("chromium") {
        Some(found) => found,
        None => panic!(
            "the web page's test needs `chromium` (Debian's package) and it is not on the PATH; \
             {} did not install it ({ran:?}): run it as root, or `apt-get install chromium`",
            script.display()
        ),
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A `spool serve` the test started: SIGKILLed if the test fails before it stops it.
/// `spool serve` on a free loopback port with a token file, the scripted model at
/// 300 ms a call, and `args`.
fn serve(dir: &Path, args: &[&str]) -> Server {
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).expect("the token file");
    let store = dir.join("web.spool");
    let token = dir.join("token");
    let mut all: Vec<&OsStr> = ["serve", "--addr", "127.0.0.1:0", "--llm-latency-ms", "300"]
        .iter()
        .chain(args)
        .map(OsStr::new)
        .collect();
    all.extend([
        OsStr::new("--store"),
        store.as_os_str(),
        OsStr::new("--token-file"),
        token.as_os_str(),
    ]);
    Server::start(all)
}

fn client() -> ureq::Agent {
    support::client(Duration::from_secs(10))
}

/// `GET path` with the token: its JSON, which must come with a 200.
fn get(agent: &ureq::Agent, addr: &str, path: &str) -> Value {
    support::get_ok(agent, addr, TOKEN, path)
}

fn send(agent: &ureq::Agent, addr: &str, method: &str, path: &str, body: &Value) -> Value {
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .expect("a request");
    let mut response = agent
        .run(request)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {text}"
    );
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// The ids of a task's events on `GET /v1/events?task=ID` from the start of the ring,
/// read until its last (it has ended), in order.
fn event_ids(addr: &str, task: u64) -> Vec<u64> {
    let mut stream = TcpStream::connect(addr).expect("a connection");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        stream,
        "GET /v1/events?task={task} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Last-Event-ID: 0\r\n\r\n"
    )
    .expect("the request");
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    while !text.contains("\"to\":\"Completed(ok)\"") {
        let n = stream
            .read(&mut buffer)
            .unwrap_or_else(|e| panic!("the event stream of task {task}: {e}; so far:\n{text}"));
        assert!(n > 0, "the event stream ended early:\n{text}");
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("id: "))
        .map(|id| id.trim().parse().expect("an event id"))
        .collect()
}

/// Runs headless Chromium on `url` with a profile of its own; its standard output.
fn browse(chromium: &Path, url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("a profile dir");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={BUDGET_MS}"))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", chromium.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("chromium's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish in 60 s on {url}; it said:\n{}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().expect("chromium's stdout");
    let stderr = err.join().expect("chromium's stderr");
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}:\n{stderr}"
    );
    stdout
}

/// The markup of a dumped DOM, without the page's script (whose text holds the same
/// attribute names as the markup).
fn markup(dom: &str) -> &str {
    dom.find("<script").map_or(dom, |end| &dom[..end])
}

/// A 1280×860 screenshot (docs/web.png is kept under 200 KB) of `url` in `target/web/NAME`: its path and size, once it
/// is checked to be a PNG of that size with more than a blank page in it.
fn screenshot(chromium: &Path, url: &str, name: &str) -> (PathBuf, usize) {
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir")
        .join("web")
        .join(name);
    std::fs::create_dir_all(shot.parent().expect("a dir")).expect("target/web");
    let _ = std::fs::remove_file(&shot);
    browse(
        chromium,
        url,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,860",
        ],
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!((size(16), size(20)), (1280, 860), "the PNG's size");
    assert!(png.len() > 40_000, "a blank page? {} bytes", png.len());
    (shot, png.len())
}

/// The start tags of `dom` that hold `marker`, in order.
fn tags<'a>(dom: &'a str, marker: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = dom[from..].find(marker).map(|i| i + from) {
        let start = dom[..at].rfind('<').expect("a tag's start");
        let end = at + dom[at..].find('>').expect("a tag's end");
        found.push(&dom[start..=end]);
        from = end;
    }
    found
}

/// An attribute of a start tag, unescaped.
fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let len = tag[at..].find('"')?;
    Some(unescape(&tag[at..at + len]))
}

/// The text right after the (only) start tag holding `marker`.
fn text_after(dom: &str, marker: &str) -> String {
    let found = tags(dom, marker);
    assert_eq!(found.len(), 1, "{marker} is on {} tags", found.len());
    let at = dom.find(found[0]).expect("the tag") + found[0].len();
    let len = dom[at..].find('<').expect("the text's end");
    unescape(&dom[at..at + len])
}

/// The ids of the task rows of the queue's table (`live`) or the ended tasks' table.
fn task_rows(dom: &str, live: bool) -> Vec<String> {
    tags(dom, "data-task-row=")
        .iter()
        .filter(|t| attr(t, "data-live").is_some() == live)
        .map(|t| attr(t, "data-task-row").expect("an id"))
        .collect()
}

/// The text of `html` without its tags.
fn strip(html: &str) -> String {
    let mut text = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => text.push(c),
            _ => {}
        }
    }
    unescape(&text)
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The page's way of writing milliseconds (its `ms`), for the averages it computes.
fn page_ms(n: f64) -> String {
    if n < 1000.0 {
        format!("{} ms", n.round())
    } else if n < 10_000.0 {
        format!("{:.2} s", n / 1000.0)
    } else {
        format!("{:.1} s", n / 1000.0)
    }
}

/// One waterfall row: wait, kind ("" for none), start and end in ms, open.
type Interval = (String, String, u64, u64, bool);

/// The rows the page draws for `task`: its timeline's intervals, or one per nonzero
/// bucket of its timing totals, laid end to end (as the page says it does).
fn expected_intervals(task: &Value) -> (&'static str, Vec<Interval>) {
    if let Some(timeline) = task["timeline"].as_array() {
        let rows = timeline
            .iter()
            .map(|iv| {
                (
                    iv["wait"].as_str().expect("a wait").to_owned(),
                    iv["kind"].as_str().unwrap_or("").to_owned(),
                    iv["start_ms"].as_u64().expect("a start"),
                    iv["end_ms"].as_u64().expect("an end"),
                    iv["open"].as_bool().unwrap_or(false),
                )
            })
            .collect();
        return ("timeline", rows);
    }
    let timing = &task["timing"];
    let mut buckets: Vec<(&str, String, u64)> = vec![
        (
            "queued",
            String::new(),
            timing["queued_ms"].as_u64().expect("ms"),
        ),
        (
            "blocked",
            String::new(),
            timing["blocked_ms"].as_u64().expect("ms"),
        ),
        (
            "rate_limited",
            String::new(),
            timing["rate_limited_ms"].as_u64().expect("ms"),
        ),
    ];
    for (kind, n) in timing["waiting_ms"].as_object().expect("waiting_ms") {
        let n = n.as_u64().expect("ms");
        buckets.push(match kind.as_str() {
            "timer" | "children" => (kind.as_str(), String::new(), n),
            "several" => ("requests", String::new(), n),
            _ => ("request", kind.clone(), n),
        });
    }
    buckets.push((
        "running",
        String::new(),
        timing["running_ms"].as_u64().expect("ms"),
    ));
    let mut at = 0;
    let rows = buckets
        .into_iter()
        .filter(|(_, _, n)| *n > 0)
        .map(|(wait, kind, n)| {
            at += n;
            (wait.to_owned(), kind, at - n, at, false)
        })
        .collect();
    ("timing", rows)
}

#[test]
fn the_web_page_shows_the_api_live_in_headless_chromium() {
    let began = Instant::now();
    let chromium = chromium();
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut served = serve(
        dir.path(),
        &["--max-running", "3", "--limit", "llm=2,600/min"],
    );
    let addr = served.addr.clone();
    let agent = client();

    // A schedule (next run in an hour) and TASKS agents of three agents and priorities.
    send(
        &agent,
        &addr,
        "PUT",
        "/v1/schedules/hourly-digest",
        &json!({"prompt": "hourly digest", "schedule": {"type": "interval", "every": "1h"}}),
    );
    for i in 1..=TASKS {
        let agent_name = ["support", "research", "ops"][usize::try_from(i % 3).expect("small")];
        let priority =
            ["normal", "high", "low", "normal", "critical"][usize::try_from(i % 5).expect("small")];
        let body = json!({
            "type": "agent",
            "input": {"prompt": format!("web test {i}")},
            "agent": agent_name,
            "priority": priority,
        });
        let submitted = send(&agent, &addr, "POST", "/v1/tasks", &body);
        assert_eq!(submitted["id"], i, "{submitted}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let tasks = loop {
        let page = get(&agent, &addr, "/v1/tasks");
        let tasks = page["tasks"].as_array().expect("tasks").clone();
        let queue = get(&agent, &addr, "/v1/queue");
        if tasks.iter().all(|t| t["state"] == "completed") && queue["stats"]["completed"] == TASKS {
            break tasks;
        }
        assert!(Instant::now() < deadline, "not all completed: {page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(tasks.len() as u64, TASKS);
    let queue = get(&agent, &addr, "/v1/queue");
    let task = get(&agent, &addr, &format!("/v1/tasks/{TASK}"));
    let confirmations = get(&agent, &addr, "/v1/confirmations");
    let events = event_ids(&addr, TASK);

    // The page, with the token in its fragment, opened on one task.
    let url = format!("http://{addr}/#token={TOKEN}&task={TASK}");
    let dumped = loaded(&chromium, &url);
    let dom = markup(&dumped);
    assert_eq!(
        attr(tags(dom, "id=\"status\"")[0], "data-live").as_deref(),
        Some("true")
    );
    assert_eq!(
        attr(tags(dom, "id=\"login\"")[0], "hidden").as_deref(),
        Some("")
    );

    // The counts are the queue's.
    let count = |name: &str| text_after(dom, &format!("data-count=\"{name}\""));
    let stats = &queue["stats"];
    let waiting = &queue["waiting"];
    let number = |v: &Value| v.as_u64().expect("a count").to_string();
    for (name, want) in [
        ("running", number(&queue["running"])),
        ("ready", number(&queue["ready"])),
        ("queued", number(&queue["queued"])),
        ("blocked", number(&queue["blocked"])),
        (
            "waiting",
            (["requests", "timer", "children"]
                .iter()
                .map(|k| waiting[*k].as_u64().expect("a count"))
                .sum::<u64>())
            .to_string(),
        ),
        (
            "rate_limited",
            if queue["rate_limited"] == true {
                "yes"
            } else {
                "no"
            }
            .to_owned(),
        ),
        (
            "confirmations",
            confirmations.as_array().expect("a list").len().to_string(),
        ),
        ("completed", number(&stats["completed"])),
        ("failed", number(&stats["failed"])),
        ("canceled", number(&stats["canceled"])),
    ] {
        assert_eq!(count(name), want, "the count of {name}");
    }
    assert_eq!(count("completed"), TASKS.to_string());

    // The limits serve was started with: running of 3, the llm gate's cap and window
    // as the API gives them (every request was sent well within the minute).
    assert_eq!(queue["max_running"], 3);
    assert_eq!(text_after(dom, "data-note=\"running\""), "of 3");
    let gates = queue["gates"].as_array().expect("gates");
    let gate = gates
        .iter()
        .find(|g| g["kind"] == "llm")
        .unwrap_or_else(|| panic!("no llm gate in {gates:?}"));
    assert_eq!(
        (
            &gate["max_in_flight"],
            &gate["window"]["max"],
            &gate["window"]["per_ms"]
        ),
        (&json!(2), &json!(600), &json!(60_000))
    );
    let used = gate["window"]["used"].as_u64().expect("a count");
    assert!(used >= TASKS, "{gate}");
    let chip = tags(dom, "data-gate=\"llm\"")[0];
    assert_eq!(
        [
            attr(chip, "data-in-flight"),
            attr(chip, "data-max-in-flight"),
            attr(chip, "data-held"),
            attr(chip, "data-window"),
        ],
        [
            Some("0".to_owned()),
            Some("2".to_owned()),
            Some("0".to_owned()),
            Some(format!("{used}/600/60000")),
        ]
    );
    assert_eq!(
        text_after(dom, "data-gate=\"llm\""),
        format!("llm: 0/2 in flight · held 0 · window {used}/600 per min")
    );
    let stat = |name: &str| text_after(dom, &format!("data-stat=\"{name}\""));
    for name in [
        "submitted",
        "scheduled",
        "completed",
        "failed",
        "canceled",
        "rejected",
        "rate_limited",
        "peak_running",
        "peak_queued",
        "peak_ready",
        "peak_in_flight",
        "requests",
        "answers",
        "polls",
        "deadlines_exceeded",
        "evicted",
    ] {
        assert_eq!(stat(name), number(&stats[name]), "the statistic {name}");
    }
    // The wait figures are the server's, all over the same tasks: every one that
    // ended, each one's wait for a slot or a rate limit (its timing's queued and
    // rate-limited time, to a millisecond of rounding per interval).
    let waits = &queue["waits"];
    assert_eq!(waits["tasks"], TASKS, "{waits}");
    let ms = |name: &str| waits[name].as_u64().expect("milliseconds");
    for (stat_name, name) in [
        ("avg_wait", "avg_ms"),
        ("p50_wait", "p50_ms"),
        ("p95_wait", "p95_ms"),
        ("max_wait", "max_ms"),
    ] {
        assert_eq!(stat(stat_name), page_ms(ms(name) as f64), "{stat_name}");
    }
    assert!(
        ms("avg_ms") <= ms("max_ms") && ms("p50_ms") <= ms("p95_ms"),
        "{waits}"
    );
    let mut each: Vec<u64> = tasks
        .iter()
        .map(|t| {
            let timing = &t["timing"];
            timing["queued_ms"].as_u64().expect("ms")
                + timing["rate_limited_ms"].as_u64().expect("ms")
        })
        .collect();
    each.sort_unstable();
    let p95 = each[(each.len() * 95).div_ceil(100) - 1];
    let max = each[each.len() - 1];
    assert!(
        ms("p95_ms").abs_diff(p95) <= 2 && ms("max_ms").abs_diff(max) <= 2,
        "{waits} {each:?}"
    );
    assert_eq!(
        text_after(dom, "id=\"stats-sub\""),
        format!(
            "counts over the whole run · waits (for a slot or a rate limit) over the last {TASKS} \
             tasks that ended"
        )
    );

    // Every task ended: the queue is empty, the ended tasks are all of them (the ten
    // newest shown, newest first); the schedule is listed.
    assert_eq!(queue["details"], json!([]));
    assert_eq!(task_rows(dom, true), Vec::<String>::new());
    let rows = task_rows(dom, false);
    assert_eq!(
        attr(tags(dom, "id=\"recent-sub\"")[0], "data-ended"),
        Some(tasks.len().to_string())
    );
    let newest_first: Vec<String> = (1..=TASKS).rev().map(|i| i.to_string()).collect();
    assert_eq!(rows, newest_first);
    assert_eq!(
        tags(dom, "data-schedule=")
            .iter()
            .map(|t| attr(t, "data-schedule").expect("a slug"))
            .collect::<Vec<_>>(),
        ["hourly-digest"]
    );

    // The task's waterfall is its timeline (or its timing totals), row for row, with
    // the numbers as text.
    let section = tags(dom, "id=\"task\"")[0];
    assert_eq!(attr(section, "data-task"), Some(TASK.to_string()));
    assert_eq!(attr(section, "data-state").as_deref(), Some("completed"));
    let (source, want) = expected_intervals(&task);
    assert!(!want.is_empty(), "task {TASK} spent no time: {task}");
    assert_eq!(
        attr(tags(dom, "id=\"waterfall\"")[0], "data-source").as_deref(),
        Some(source)
    );
    let shown: Vec<Interval> = tags(dom, "data-interval=")
        .iter()
        .map(|t| {
            let n = |name: &str| {
                attr(t, name)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{name} on {t}"))
            };
            (
                attr(t, "data-wait").expect("data-wait"),
                attr(t, "data-kind").expect("data-kind"),
                n("data-start-ms"),
                n("data-end-ms"),
                attr(t, "data-open").as_deref() == Some("true"),
            )
        })
        .collect();
    assert_eq!(shown, want, "task {TASK}: {task}");
    let waterfall = &dom[dom.find("id=\"waterfall\"").expect("the waterfall")..];
    let waterfall = &waterfall[..waterfall.find("id=\"events\"").expect("the events")];
    let text = strip(waterfall);
    for (_, _, start, end, _) in &want {
        let numbers = format!("{} ms {start}–{end}", end - start);
        assert!(text.contains(&numbers), "no `{numbers}` in {text}");
    }
    // The scripted agent's requests: LLM calls and a search.
    let mut kinds: Vec<&str> = want
        .iter()
        .filter(|r| r.0 == "request")
        .map(|r| r.1.as_str())
        .collect();
    kinds.dedup();
    kinds.truncate(2);
    assert_eq!(kinds, ["llm", "tool:search"], "{task}");

    // Its events, newest first, are those the event stream has for it.
    let mut shown_events: Vec<u64> = tags(dom, "data-event=")
        .iter()
        .map(|t| {
            attr(t, "data-event")
                .and_then(|v| v.parse().ok())
                .expect("an event id")
        })
        .collect();
    shown_events.reverse();
    assert_eq!(shown_events, events);
    assert!(strip(dom).contains("Running → Completed(ok)"), "{dom}");

    // Without the token, or with a wrong one, the page asks for it.
    for (fragment, why) in [
        (
            String::new(),
            "this request needs the header `Authorization: Bearer <token>`",
        ),
        (
            "#token=not-the-token".to_owned(),
            "the bearer token is not the server's",
        ),
    ] {
        let dumped = browse(
            &chromium,
            &format!("http://{addr}/{fragment}"),
            &["--dump-dom"],
        );
        let dom = markup(&dumped);
        assert_eq!(attr(tags(dom, "id=\"login\"")[0], "hidden"), None, "{dom}");
        assert_eq!(text_after(dom, "id=\"login-why\""), why);
        assert_eq!(text_after(dom, "data-count=\"completed\""), "–");
    }

    // Live tasks of mixed priorities: under fifo the server lists them by submission,
    // each with its position, and the page shows them so, numbered by position (the
    // server sorted them by level under every policy).
    let levels = ["low", "critical", "normal", "high"];
    for i in 0..24 {
        let body = json!({
            "type": "agent",
            "input": {"prompt": format!("in order {i}")},
            "priority": levels[i % levels.len()],
        });
        send(&agent, &addr, "POST", "/v1/tasks", &body);
    }
    let dumped = browse(&chromium, &url, &["--dump-dom"]);
    let dom = markup(&dumped);
    let live: Vec<u64> = task_rows(dom, true)
        .iter()
        .map(|id| id.parse().expect("an id"))
        .collect();
    assert!(
        live.len() >= 2,
        "the tasks ended before the page read them: {live:?}"
    );
    assert!(
        live.windows(2).all(|w| w[0] < w[1]),
        "not in submission order: {live:?}"
    );
    let positions: Vec<String> = tags(dom, "data-position=")
        .iter()
        .map(|t| attr(t, "data-position").expect("a position"))
        .collect();
    let numbered: Vec<String> = (1..=live.len()).map(|n| n.to_string()).collect();
    assert_eq!(positions, numbered);

    // A screenshot, with a few tasks running.
    for i in 0..4 {
        send(
            &agent,
            &addr,
            "POST",
            "/v1/tasks",
            &json!({"type": "agent", "input": {"prompt": format!("live {i}")}, "agent": "support"}),
        );
    }
    let (shot, png) = screenshot(&chromium, &url, "spool-web.png");

    let status = served.terminate();
    assert!(
        status.success(),
        "spool serve ended {status}:\n{}",
        served.log()
    );
    println!(
        "web: page checked against the API, screenshot {} ({} bytes); {:.1} s",
        shot.display(),
        png,
        began.elapsed().as_secs_f64()
    );
}

/// The page at `url` as headless Chromium leaves it (`--dump-dom`), which must have
/// loaded the API: its body says `data-ready="true"`.
fn loaded(chromium: &Path, url: &str) -> String {
    let dumped = browse(chromium, url, &["--dump-dom"]);
    assert_eq!(
        attr(tags(markup(&dumped), "<body")[0], "data-ready").as_deref(),
        Some("true"),
        "the page never loaded the API:\n{dumped}"
    );
    dumped
}

/// A stand-in of `spool serve`'s HTTP API on 127.0.0.1 (tiny_http): `/` is the page,
/// and every other request is answered with the status, content type and body its
/// `answer` gives, which keeps what it saw in its state (and may read the request's
/// body).
struct StandInApi<S> {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<S>,
}

impl<S: Send + 'static> StandInApi<S> {
    /// Starts serving on a free loopback port.
    fn start(
        state: S,
        answer: impl FnMut(&mut S, &mut tiny_http::Request) -> (u16, &'static str, String)
        + Send
        + 'static,
    ) -> StandInApi<S> {
        StandInApi::serving(PAGE.to_owned(), state, answer)
    }

    /// Starts serving `page` at `/` on a free loopback port.
    fn serving(
        page: String,
        mut state: S,
        mut answer: impl FnMut(&mut S, &mut tiny_http::Request) -> (u16, &'static str, String)
        + Send
        + 'static,
    ) -> StandInApi<S> {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("a port on 127.0.0.1");
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(20)) else {
                    continue;
                };
                let (status, kind, body) = if request.url() == "/" {
                    (200, "text/html; charset=utf-8", page.clone())
                } else {
                    answer(&mut state, &mut request)
                };
                let header = tiny_http::Header::from_bytes("Content-Type", kind).expect("a header");
                let _ = request.respond(
                    tiny_http::Response::from_string(body)
                        .with_status_code(status)
                        .with_header(header),
                );
            }
            state
        });
        StandInApi { port, stop, thread }
    }

    /// Stops it: what its `answer` kept.
    fn stop(self) -> S {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().expect("the stand-in API")
    }
}

/// What the stand-in API answers `GET path` (with the token): a status and a body.
fn canned(path: &str) -> (u16, &'static str, String) {
    let task = |id: u64, state: &str, detail: &str, timeline: Value| {
        json!({
            "id": id, "type": "react-agent", "agent": "support", "priority": "high",
            "state": state, "state_detail": detail, "result": null, "error": null,
            "in_flight": 1, "age_ms": 4560,
            "timing": {"queued_ms": 120, "blocked_ms": 0, "rate_limited_ms": 2000,
                "waiting_ms": {"confirm": 1500, "llm": 780, "tool:search": 150}, "running_ms": 10},
            "timeline": timeline,
        })
    };
    let json = "application/json";
    match path {
        "/v1/queue" => (200, json, json!({
            "running": 1, "queued": 1, "blocked": 0, "ready": 0,
            "waiting": {"requests": 1, "timer": 0, "children": 0, "slot": 1, "dependencies": 0},
            "max_running": 4,
            "in_flight": 2, "held_requests": 3, "rate_limited": true,
            "backoffs": [{"kind": "llm", "remaining_ms": 4000}],
            "gates": [
                {"kind": "tool:search", "in_flight": 0, "max_in_flight": 2, "held": 0,
                    "window": null, "tokens": null, "backoff_ms": null, "backoff_hits": 0},
                {"kind": "llm", "in_flight": 1, "max_in_flight": 2, "held": 3,
                    "window": {"used": 60, "max": 60, "per_ms": 60_000},
                    "tokens": {"used": 15_400, "max": 90_000, "per_ms": 60_000},
                    "backoff_ms": 4000, "backoff_hits": 2},
            ],
            "stats": {"submitted": 9, "completed": 6, "failed": 1, "canceled": 0, "scheduled": 8,
                "rejected": 0, "rate_limited": 4, "total_wait": {"secs": 1, "nanos": 500_000_000},
                "peak_running": 2, "peak_queued": 1, "peak_ready": 1, "peak_in_flight": 2},
            "waits": {"tasks": 7, "window": 1000, "avg_ms": 188, "p50_ms": 40, "p95_ms": 900, "max_ms": 900},
            "policy": "fifo",
            "details": [
                {"position": 1, "id": 7, "agent": "support", "type": "react-agent", "priority": "high", "state": "waiting", "age_ms": 4560, "depth": 0, "iteration": 1, "score": null},
                {"position": 2, "id": 9, "agent": "ops", "type": "react-agent", "priority": "low", "state": "queued", "age_ms": 800, "depth": 0, "iteration": 1, "score": null},
            ],
        }).to_string()),
        "/v1/tasks?limit=200" => (200, json, json!({"tasks": [
            task(7, "waiting", "Waiting(confirm)", timeline()),
            task(9, "queued", "Waiting(slot)", json!([{"wait": "queued", "kind": null, "start_ms": 0, "end_ms": 800, "open": true}])),
            ended_with_a_large_result(),
        ], "next_cursor": null}).to_string()),
        "/v1/tasks/7" => (200, json, task(7, "waiting", "Waiting(confirm)", timeline()).to_string()),
        "/v1/schedules" => (200, json, "[]".to_owned()),
        "/v1/confirmations" => (200, json, json!([{"key": "7.3", "task": 7, "number": 3, "question": {"question": "send it?"}, "since_ms": 1500}]).to_string()),
        "/metrics" => (200, "text/plain", "spool_requests_in_flight{kind=\"confirm\"} 1\nspool_requests_in_flight{kind=\"llm\"} 1\nspool_backoff_seconds{kind=\"llm\"} 4\n".to_owned()),
        "/v1/events?task=7" => (200, "text/event-stream", "id: 41\nevent: transition\ndata: {\"seq\":41,\"time_ms\":100,\"task\":7,\"from\":\"New\",\"to\":\"Ready\",\"cause\":\"submitted\"}\n\n: keep-alive\n\nid: 57\nevent: transition\ndata: {\"seq\":57,\"time_ms\":3160,\"task\":7,\"from\":\"Running\",\"to\":\"Waiting(confirm)\",\"cause\":\"1 request\"}\n\n".to_owned()),
        "/v1/events" => (200, "text/event-stream", String::new()),
        _ => (404, json, json!({"detail": format!("no {path}")}).to_string()),
    }
}

/// Task 8 in the stand-in API's list: ended with a result too large for a list row,
/// which the list leaves out and sizes.
fn ended_with_a_large_result() -> Value {
    json!({
        "id": 8, "type": "agent", "agent": "ops", "priority": "normal",
        "state": "completed", "state_detail": "Completed(Ok)", "result": null,
        "result_omitted": true, "result_bytes": 12_345, "error": null,
        "in_flight": 0, "age_ms": 9000,
        "timing": {"queued_ms": 0, "blocked_ms": 0, "rate_limited_ms": 0,
            "waiting_ms": {"llm": 900}, "running_ms": 5},
        "timeline": [],
    })
}

/// Task 7's timeline in the stand-in API: queued, an LLM call, a rate limit, a tool
/// call, a poll, and a confirmation it still waits for.
fn timeline() -> Value {
    json!([
        {"wait": "queued", "kind": null, "start_ms": 0, "end_ms": 120},
        {"wait": "request", "kind": "llm", "start_ms": 120, "end_ms": 900},
        {"wait": "rate_limited", "kind": "llm", "start_ms": 900, "end_ms": 2900},
        {"wait": "request", "kind": "tool:search", "start_ms": 2900, "end_ms": 3050},
        {"wait": "running", "kind": null, "start_ms": 3050, "end_ms": 3060},
        {"wait": "request", "kind": "confirm", "start_ms": 3060, "end_ms": 4560, "open": true},
    ])
}

/// The page, served by a stand-in for the API whose answers the test writes (a
/// timeline with an open interval, a rate limit, a confirmation waiting), draws them:
/// what `spool serve` cannot be made to show on demand.
#[test]
fn the_web_page_draws_a_timeline_a_rate_limit_and_a_waiting_person() {
    let chromium = chromium();
    let seen: (Vec<String>, Vec<Option<String>>) = (Vec::new(), Vec::new());
    let api = StandInApi::start(seen, |(unauthorized, resumed), request| {
        let path = request.url().to_owned();
        let last_event_id = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Last-Event-ID"))
            .map(|h| h.value.to_string());
        if path == "/v1/events?task=7" {
            resumed.push(last_event_id.clone());
        }
        if request.headers().iter().any(|h| {
            h.field.equiv("Authorization") && h.value.as_str() == format!("Bearer {TOKEN}")
        }) {
            // A stream that resumes after the last event gets nothing new.
            match last_event_id.as_deref() {
                Some("57") => (200, "text/event-stream", String::new()),
                _ => canned(&path),
            }
        } else {
            unauthorized.push(path);
            (
                401,
                "application/json",
                json!({"detail": "no token"}).to_string(),
            )
        }
    });

    let url = format!("http://127.0.0.1:{}/#token={TOKEN}&task=7", api.port);
    let dumped = loaded(&chromium, &url);
    let (shot, png) = screenshot(&chromium, &url, "spool-web-timeline.png");
    let (unauthorized, resumed) = api.stop();
    assert_eq!(
        unauthorized,
        Vec::<String>::new(),
        "requests without the token"
    );
    let dom = markup(&dumped);
    // A lone server (404 at /v1/cluster) has no cluster panel.
    assert_eq!(
        attr(tags(dom, "id=\"cluster\"")[0], "hidden").as_deref(),
        Some("")
    );

    // The timeline, interval for interval, the open one marked, the numbers as text.
    assert_eq!(
        attr(tags(dom, "id=\"waterfall\"")[0], "data-source").as_deref(),
        Some("timeline")
    );
    let rows: Vec<(String, String, String, String, Option<String>)> = tags(dom, "data-interval=")
        .iter()
        .map(|t| {
            let a = |name: &str| attr(t, name).unwrap_or_else(|| panic!("{name} on {t}"));
            (
                a("data-wait"),
                a("data-kind"),
                a("data-start-ms"),
                a("data-end-ms"),
                attr(t, "data-open"),
            )
        })
        .collect();
    let want: Vec<(String, String, String, String, Option<String>)> = timeline()
        .as_array()
        .expect("intervals")
        .iter()
        .map(|iv| {
            (
                iv["wait"].as_str().expect("a wait").to_owned(),
                iv["kind"].as_str().unwrap_or("").to_owned(),
                iv["start_ms"].to_string(),
                iv["end_ms"].to_string(),
                iv["open"].as_bool().map(|_| "true".to_owned()),
            )
        })
        .collect();
    assert_eq!(rows, want);
    let text = strip(dom);
    for shown in [
        "queued (slot)120 ms 0–120",
        "llm780 ms 120–900",
        "rate limited (llm)2000 ms 900–2900",
        "tool:search150 ms 2900–3050",
        "running10 ms 3050–3060",
        "confirm (person)1500 ms 3060–4560…",
    ] {
        assert!(text.contains(shown), "no `{shown}` in {text}");
    }
    // One colour per wait: queued, LLM, rate limited, tools, running, person.
    let bars: Vec<String> = tags(dom, "class=\"wf-bar ")
        .iter()
        .map(|t| attr(t, "class").expect("a class"))
        .collect();
    assert_eq!(
        bars,
        [
            "wf-bar c-queued",
            "wf-bar c-llm",
            "wf-bar c-rate",
            "wf-bar c-tool",
            "wf-bar c-running",
            "wf-bar c-person open"
        ]
    );

    // The queue in the API's order, with what each waits on and for how long.
    assert_eq!(task_rows(dom, true), ["7", "9"]);
    assert_eq!(
        tags(dom, "data-position=")
            .iter()
            .map(|t| attr(t, "data-position"))
            .collect::<Vec<_>>(),
        [Some("1".to_owned()), Some("2".to_owned())]
    );
    assert_eq!(task_rows(dom, false), ["8"]);
    // A result the list leaves out is sized, and found in the task's own view.
    assert!(text.contains("13 KB result: open the task"), "{text}");
    assert!(
        text.contains("1#7supportreact-agenthighwaitingconfirm1.50 s"),
        "{text}"
    );
    assert!(
        text.contains("2#9opsreact-agentlowqueuedslot800 ms"),
        "{text}"
    );

    // The header: rate limited until a time, a person to confirm; the gates.
    assert_eq!(text_after(dom, "data-count=\"rate_limited\""), "yes");
    assert!(
        text_after(dom, "data-note=\"rate_limited\"").starts_with("until "),
        "{text}"
    );
    assert_eq!(text_after(dom, "data-count=\"confirmations\""), "1");
    assert_eq!(text_after(dom, "data-count=\"waiting\""), "1");
    assert_eq!(text_after(dom, "data-count=\"running\""), "1");
    assert_eq!(text_after(dom, "data-note=\"running\""), "of 4");
    assert_eq!(text_after(dom, "data-gate=\"held\""), "held back 3");
    // A chip a kind, by kind: the gates the queue gives, and `confirm`, which has
    // requests in flight (from /metrics) and no gate.
    let gates: Vec<String> = tags(dom, "data-gate=")
        .iter()
        .map(|t| attr(t, "data-gate").expect("a kind"))
        .collect();
    assert_eq!(
        gates,
        ["in_flight", "held", "confirm", "llm", "tool:search"]
    );
    assert_eq!(
        text_after(dom, "data-gate=\"confirm\""),
        "confirm: 1 in flight"
    );
    let llm = tags(dom, "data-gate=\"llm\"")[0];
    let llm_attrs: Vec<Option<String>> = [
        "class",
        "data-in-flight",
        "data-max-in-flight",
        "data-held",
        "data-window",
        "data-tokens",
        "data-backoff-ms",
        "data-backoff-hits",
    ]
    .iter()
    .map(|name| attr(llm, name))
    .collect();
    assert_eq!(
        llm_attrs,
        [
            "chip warn",
            "1",
            "2",
            "3",
            "60/60/60000",
            "15400/90000/60000",
            "4000",
            "2"
        ]
        .map(|v| Some(v.to_owned()))
    );
    let llm_text = text_after(dom, "data-gate=\"llm\"");
    let (before, after) = llm_text
        .split_once(" · backing off until ")
        .unwrap_or_else(|| panic!("no back-off in {llm_text}"));
    assert_eq!(
        before,
        "llm: 1/2 in flight · held 3 · window 60/60 per min · tokens 15k/90k per min"
    );
    assert!(after.ends_with(" (2×429)"), "{llm_text}");
    let search = tags(dom, "data-gate=\"tool:search\"")[0];
    assert_eq!(attr(search, "class").as_deref(), Some("chip"));
    assert_eq!(attr(search, "data-window"), None);
    assert_eq!(attr(search, "data-backoff-ms"), None);
    assert_eq!(
        text_after(dom, "data-gate=\"tool:search\""),
        "tool:search: 0/2 in flight · held 0"
    );
    assert_eq!(
        ["avg_wait", "p50_wait", "p95_wait", "max_wait"]
            .map(|name| text_after(dom, &format!("data-stat=\"{name}\""))),
        ["188 ms", "40 ms", "900 ms", "900 ms"]
    );

    // The events the stream gave, newest first.
    let events: Vec<String> = tags(dom, "data-event=")
        .iter()
        .map(|t| attr(t, "data-event").expect("an id"))
        .collect();
    assert_eq!(events, ["57", "41"]);
    println!(
        "web: timeline drawn, screenshot {} ({png} bytes)",
        shot.display()
    );
    // The task's stream started at the ring's start and, once it ended, resumed after
    // the last event it had.
    assert_eq!(
        resumed[..2],
        [Some("0".to_owned()), Some("57".to_owned())],
        "{resumed:?}"
    );
}

/// Task 7 of shard 1 of the stand-in cluster: its id carries its shard in its top bits.
const CLUSTER_TASK: u64 = (1 << 44) + 7;

/// What a stand-in cluster node answers `GET path`: four shards, node-a (the one
/// answering) holding 0 and 1, node-b draining with 2, node-c gone with its lease of 3
/// expired. Its queue and event streams are per shard (`?shard=N`, required as on a
/// node); shard 1 has task [`CLUSTER_TASK`] waiting on a person.
fn canned_node(path: &str) -> (u16, &'static str, String) {
    let json = "application/json";
    let task = || {
        json!({
            "id": CLUSTER_TASK, "type": "react-agent", "agent": "support", "priority": "normal",
            "state": "waiting", "state_detail": "Waiting(confirm)", "result": null, "error": null,
            "in_flight": 1, "age_ms": 900,
            "timing": {"queued_ms": 0, "blocked_ms": 0, "rate_limited_ms": 0,
                "waiting_ms": {"confirm": 900}, "running_ms": 0},
            "timeline": [{"wait": "request", "kind": "confirm", "start_ms": 0, "end_ms": 900, "open": true}],
        })
    };
    let shard = |n: u32, owner: &str, epoch: u64, expired: bool, inbox: u64, lag: u64| {
        json!({"shard": n, "owner": owner, "epoch": epoch, "lease_age_ms": 1200,
            "expires_in_ms": if expired { 0 } else { 8800 }, "expired": expired,
            "inbox": inbox, "lag": lag})
    };
    let events = format!(
        "id: 3\nevent: transition\ndata: {{\"seq\":3,\"time_ms\":40,\"task\":{CLUSTER_TASK},\"from\":\"Running\",\"to\":\"Waiting(confirm)\",\"cause\":\"1 request\"}}\n\n"
    );
    match path {
        "/v1/cluster" => (200, json, json!({
            "node": "node-a",
            "shards": [
                shard(0, "node-a", 3, false, 0, 12),
                shard(1, "node-a", 4, false, 2, 120),
                shard(2, "node-b", 7, false, 0, 48_000),
                shard(3, "node-c", 2, true, 5, 310),
            ],
            "nodes": [
                {"node": "node-a", "addr": "http://127.0.0.1:7001", "up_for_ms": 3_600_000,
                    "heartbeat_age_ms": 300, "draining": false, "shards": [0, 1]},
                {"node": "node-b", "addr": "http://127.0.0.1:7002", "up_for_ms": 60_000,
                    "heartbeat_age_ms": 1400, "draining": true, "shards": [2]},
                {"node": "node-c", "addr": "http://127.0.0.1:7003", "up_for_ms": 90_000,
                    "heartbeat_age_ms": 14_200, "draining": false, "shards": []},
            ],
        }).to_string()),
        "/v1/queue?shard=1" => (200, json, json!({
            "running": 1, "queued": 0, "blocked": 0, "ready": 0,
            "waiting": {"requests": 1, "timer": 0, "children": 0, "slot": 0, "dependencies": 0},
            "in_flight": 1, "held_requests": 0, "rate_limited": false, "backoffs": [], "gates": [],
            "stats": {"submitted": 3, "completed": 2}, "waits": {}, "policy": "fifo",
            "details": [{"position": 1, "id": CLUSTER_TASK, "agent": "support", "type": "react-agent",
                "priority": "normal", "state": "waiting", "age_ms": 900}],
        }).to_string()),
        "/v1/queue" | "/v1/events" => (400, json, json!({"detail": "name a shard: ?shard=N"}).to_string()),
        "/v1/tasks?limit=200" => (200, json, json!({"tasks": [task()], "next_cursor": null}).to_string()),
        "/v1/schedules" | "/v1/confirmations" => (200, json, "[]".to_owned()),
        "/metrics" => (200, "text/plain", "spool_requests_in_flight{shard=\"0\",kind=\"llm\"} 5\nspool_requests_in_flight{shard=\"1\",kind=\"confirm\"} 1\n".to_owned()),
        "/v1/events?shard=1" => (200, "text/event-stream", String::new()),
        _ if path == format!("/v1/tasks/{CLUSTER_TASK}") => (200, json, task().to_string()),
        _ if path == format!("/v1/events?task={CLUSTER_TASK}&shard=1") => (200, "text/event-stream", events),
        _ => (404, json, json!({"detail": format!("no {path}")}).to_string()),
    }
}

/// On a cluster node (`GET /v1/cluster` answers) the page shows the nodes with the
/// shards each holds and the shards with their owners, epochs, leases, inboxes and
/// lags; the queue, gates and event streams are those of the shard the address names
/// (`#shard=1`), and a task's events are read from the shard its id says.
#[test]
fn the_web_page_shows_a_clusters_nodes_and_shards_and_one_shards_queue() {
    let chromium = chromium();
    let api = StandInApi::start(Vec::new(), |asked: &mut Vec<String>, request| {
        let path = request.url().to_owned();
        asked.push(path.clone());
        canned_node(&path)
    });
    let url = format!(
        "http://127.0.0.1:{}/#token={TOKEN}&shard=1&task={CLUSTER_TASK}",
        api.port
    );
    let dumped = loaded(&chromium, &url);
    let (shot, png) = screenshot(&chromium, &url, "spool-web-cluster.png");
    let asked = api.stop();
    let dom = markup(&dumped);
    let panel = tags(dom, "id=\"cluster\"")[0];
    assert_eq!(
        (attr(panel, "hidden"), attr(panel, "data-shard").as_deref()),
        (None, Some("1")),
        "{panel}"
    );
    let rows = |marker: &str, names: &[&str]| -> Vec<Vec<String>> {
        tags(dom, marker)
            .iter()
            .map(|t| {
                names
                    .iter()
                    .map(|n| attr(t, n).unwrap_or_else(|| panic!("{n} on {t}")))
                    .collect()
            })
            .collect()
    };
    assert_eq!(
        rows("data-node=", &["data-node", "data-shards", "data-draining"]),
        [
            ["node-a", "0,1", "false"],
            ["node-b", "2", "true"],
            ["node-c", "", "false"]
        ]
    );
    assert_eq!(
        rows(
            "data-shard-row=",
            &[
                "data-shard-row",
                "data-owner",
                "data-epoch",
                "data-expired",
                "data-inbox",
                "data-lag"
            ]
        ),
        [
            ["0", "node-a", "3", "false", "0", "12"],
            ["1", "node-a", "4", "false", "2", "120"],
            ["2", "node-b", "7", "false", "0", "48000"],
            ["3", "node-c", "2", "true", "5", "310"],
        ]
    );
    let selected: Vec<String> = tags(dom, "data-shard-row=")
        .iter()
        .filter(|t| attr(t, "class").as_deref() == Some("selected"))
        .map(|t| attr(t, "data-shard-row").expect("a shard"))
        .collect();
    assert_eq!(selected, ["1"]);
    let text = strip(dom);
    for shown in [
        "node-a (this one)http://127.0.0.1:70010-11h 0m300 ms ago",
        "node-bhttp://127.0.0.1:700221m 0s1.40 s agodraining",
        "node-chttp://127.0.0.1:7003none1m 30s14.2 s ago",
        "1node-a48.80 s left2120",
        "3node-c2expired5310",
        "1 live on shard 1, in the policy's order",
    ] {
        assert!(text.contains(shown), "no `{shown}` in {text}");
    }
    // The queue, the gates (from the shard's samples of /metrics) and the events are
    // shard 1's.
    assert_eq!(task_rows(dom, true), [CLUSTER_TASK.to_string()]);
    let gates: Vec<String> = tags(dom, "data-gate=")
        .iter()
        .map(|t| attr(t, "data-gate").expect("a kind"))
        .collect();
    assert_eq!(gates, ["in_flight", "held", "confirm"]);
    let events: Vec<String> = tags(dom, "data-event=")
        .iter()
        .map(|t| attr(t, "data-event").expect("an id"))
        .collect();
    assert_eq!(events, ["3"]);
    // It asked first whether the server is a node, then every per-shard read named
    // shard 1, and the task's stream its own shard.
    assert_eq!(asked.first().map(String::as_str), Some("/v1/cluster"));
    assert!(
        !asked.iter().any(|p| p == "/v1/queue" || p == "/v1/events"),
        "{asked:?}"
    );
    for path in [
        "/v1/queue?shard=1".to_owned(),
        "/v1/events?shard=1".to_owned(),
        format!("/v1/events?task={CLUSTER_TASK}&shard=1"),
    ] {
        assert!(asked.contains(&path), "{path} not in {asked:?}");
    }
    println!(
        "web: cluster drawn, screenshot {} ({png} bytes)",
        shot.display()
    );
}

/// The page served by a real cluster node: two `spool serve` nodes share the two
/// shards of a cluster on a throwaway PostgreSQL, a task of an agent of shard 1 waits
/// on its LLM call, and the page of one node, opened on shard 1 and that task, shows
/// the nodes and shards as `GET /v1/cluster` says, the task in shard 1's queue, and its
/// events from shard 1's stream.
#[test]
fn the_web_page_of_a_cluster_node_shows_its_cluster_and_a_shards_queue() {
    use spool_postgres::cluster::shard_for;
    use support::cluster::{Node, TestCluster, wait_one_shard_each};

    let chromium = chromium();
    let shared = TestCluster::init("web_cluster_node", 2, &format!("{TOKEN}\n"));
    let node = |name| {
        Node::new(&shared.url, &shared.token_file, name)
            .llm_latency_ms("20000")
            .start()
    };
    let a = node("node-a");
    let _b = node("node-b");
    let agent = client();
    let cluster = wait_one_shard_each(&agent, &a.addr, TOKEN, &["node-a", "node-b"]);
    let name = (0..)
        .map(|i| format!("agent-{i}"))
        .find(|name| shard_for(name, 2) == 1)
        .expect("an agent of shard 1");
    send(
        &agent,
        &a.addr,
        "POST",
        "/v1/tasks",
        &json!({"type": "agent", "input": {"prompt": "hello"}, "agent": name}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let queue = get(&agent, &a.addr, "/v1/queue?shard=1");
        if let Some(id) = queue["details"][0]["id"].as_u64()
            && queue["details"][0]["state"] == "waiting"
        {
            break id;
        }
        assert!(Instant::now() < deadline, "shard 1's queue is {queue}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(id >> 44, 1, "task {id} is shard 1's");

    let page = format!("http://{}/#token={TOKEN}&shard=1&task={id}", a.addr);
    let dumped = loaded(&chromium, &page);
    let dom = markup(&dumped);
    assert_eq!(
        attr(tags(dom, "id=\"cluster\"")[0], "hidden"),
        None,
        "{dumped}"
    );
    // The nodes and the shards' owners and epochs as the API says.
    let shown: Vec<(String, String)> = tags(dom, "data-node=")
        .iter()
        .map(|t| {
            (
                attr(t, "data-node").expect("a node"),
                attr(t, "data-shards").expect("its shards"),
            )
        })
        .collect();
    let said: Vec<(String, String)> = cluster["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            let shards: Vec<String> = n["shards"]
                .as_array()
                .expect("shards")
                .iter()
                .map(Value::to_string)
                .collect();
            (
                n["node"].as_str().expect("a name").to_owned(),
                shards.join(","),
            )
        })
        .collect();
    assert_eq!(shown, said);
    let shards: Vec<(String, String, String)> = tags(dom, "data-shard-row=")
        .iter()
        .map(|t| {
            let a = |n: &str| attr(t, n).unwrap_or_else(|| panic!("{n} on {t}"));
            (a("data-shard-row"), a("data-owner"), a("data-epoch"))
        })
        .collect();
    let want: Vec<(String, String, String)> = cluster["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| {
            (
                s["shard"].to_string(),
                s["owner"].as_str().unwrap_or("").to_owned(),
                s["epoch"].to_string(),
            )
        })
        .collect();
    assert_eq!(shards, want);
    // Shard 1's queue holds the task; its events come from shard 1's stream.
    assert_eq!(task_rows(dom, true), [id.to_string()]);
    let events: Vec<String> = tags(dom, "data-event=")
        .iter()
        .map(|t| attr(t, "data-event").expect("an id"))
        .collect();
    assert_eq!(events, ["3", "2", "1"], "{dumped}");
    assert!(
        strip(dom).contains("Running → Waiting(llm)"),
        "{}",
        strip(dom)
    );
}

/// The page with `script` run after its own: how a test clicks and types in it as a
/// person would (the page has no hook for tests).
fn with_script(script: &str) -> String {
    let at = PAGE.rfind("</body>").expect("the page's end");
    format!(
        "{}<script>\n{script}\n</script>\n{}",
        &PAGE[..at],
        &PAGE[at..]
    )
}

/// A script that clicks the "fork from here" of step `step` and then, for each of
/// `attempts` (a request's number and the text typed as its new answer), picks the
/// request, types the text and submits the form; after each attempt but the last it
/// waits for the form's error.
fn fork_script(step: u32, attempts: &[(u32, String)]) -> String {
    let attempts = serde_json::to_string(attempts).expect("JSON");
    r#"(async () => {
  const until = async (find) => {
    for (;;) {
      const found = find();
      if (found) return found;
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  (await until(() => document.querySelector('button[data-fork="STEP"]'))).click();
  const attempts = ATTEMPTS;
  for (const [i, [request, text]] of attempts.entries()) {
    const form = await until(() => document.querySelector('form[data-fork-at="STEP"]'));
    const select = form.querySelector('select');
    select.value = String(request);
    select.dispatchEvent(new Event('change'));
    const area = form.querySelector('textarea');
    area.value = text;
    area.dispatchEvent(new Event('input'));
    const before = document.querySelector('[data-fork-error]');
    form.querySelector('button[type="submit"]').click();
    if (i + 1 < attempts.length) {
      await until(() => {
        const error = document.querySelector('[data-fork-error]');
        return error && error !== before ? error : null;
      });
    }
  }
})();"#
        .replace("STEP", &step.to_string())
        .replace("ATTEMPTS", &attempts)
}

/// A request's header, if it has it.
fn header(request: &tiny_http::Request, name: &str) -> Option<String> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.to_string())
}

/// A request's body.
fn body_of(request: &mut tiny_http::Request) -> String {
    let mut body = String::new();
    request
        .as_reader()
        .read_to_string(&mut body)
        .expect("a request's body");
    body
}

/// Passes `request` on to the `spool serve` at `upstream`, with its token, content type
/// and `body` (read from it already): the status, content type and body it answered.
/// The event streams, which do not end, are answered empty (the page reconnects a
/// second later).
fn pass_on(
    agent: &ureq::Agent,
    upstream: &str,
    request: &tiny_http::Request,
    body: Option<String>,
) -> (u16, &'static str, String) {
    let url = request.url().to_owned();
    if url.starts_with("/v1/events") {
        return (200, "text/event-stream", String::new());
    }
    let mut builder = ureq::http::Request::builder()
        .method(request.method().as_str())
        .uri(format!("http://{upstream}{url}"));
    for name in ["Authorization", "Content-Type", "Accept"] {
        if let Some(value) = header(request, name) {
            builder = builder.header(name, value);
        }
    }
    let sent = match body {
        Some(body) => agent.run(builder.body(body).expect("a request")),
        None => agent.run(builder.body(()).expect("a request")),
    };
    let mut response = sent.unwrap_or_else(|e| panic!("{url} to {upstream}: {e}"));
    let kind = match response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
    {
        k if k.starts_with("application/problem+json") => "application/problem+json",
        k if k.starts_with("application/json") => "application/json",
        k if k.starts_with("text/plain") => "text/plain",
        _ => "application/octet-stream",
    };
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, kind, text)
}

/// A JSON value as the page previews it: compact, cut to 48 characters with `…`.
fn preview(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 48 {
        let mut cut: String = text.chars().take(47).collect();
        cut.push('…');
        cut
    } else {
        text
    }
}

/// The cells of a step's row as the page should show them, from the step as
/// `GET /v1/tasks/{id}/history` gives it (answers that are values).
fn step_cells(history: &Value, step: &Value) -> Vec<String> {
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "-".to_owned()
        } else {
            items.join("; ")
        }
    };
    let since =
        step["at"].as_u64().expect("a time") - history["submitted_at"].as_u64().expect("a time");
    let received = step["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| format!("#{} {}", a["request"], preview(&a["result"]["Ok"])))
        .collect();
    let asked = step["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| {
            format!(
                "#{} {} {}",
                r["number"],
                r["kind"].as_str().expect("a kind"),
                preview(&r["payload"])
            )
        })
        .collect();
    let end = match &step["end"] {
        Value::String(word) if word == "Waiting" => "waits".to_owned(),
        Value::String(word) if word == "Yielded" => "yielded".to_owned(),
        end => format!("returned {}", preview(&end["Returned"])),
    };
    vec![
        step["step"].to_string(),
        format!("+{:.3}s", since as f64 / 1e9),
        list(received),
        list(asked),
        end,
        "fork from here".to_owned(),
    ]
}

/// The cells' text of the row of step `step` in the page's steps.
fn row_cells(dom: &str, step: u64) -> Vec<String> {
    let start = dom
        .find(&format!("<tr data-step=\"{step}\""))
        .unwrap_or_else(|| panic!("no row of step {step}"));
    let row = &dom[start..];
    let row = &row[..row.find("</tr>").expect("the row's end")];
    row.split("<td")
        .skip(1)
        .map(|cell| strip(&format!("<td{cell}")))
        .collect()
}

/// `spool serve` on a store keeps its tasks' histories: the page shows a task's steps
/// (one row a step: what it received, what it asked, how it ended) with a "fork from
/// here" on each; a fork made through the page's form, with an answer edited, is a new
/// task the API lists with its origin, which the page then opens.
#[test]
fn the_web_page_shows_a_tasks_steps_and_forks_it_from_one() {
    let chromium = chromium();
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut served = serve(dir.path(), &[]);
    let addr = served.addr.clone();
    let agent = client();
    let submitted = send(
        &agent,
        &addr,
        "POST",
        "/v1/tasks",
        &json!({"type": "agent", "input": {"prompt": "fork me"}}),
    );
    let id = submitted["id"].as_u64().expect("an id");
    let ended = |id: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let task = get(&agent, &addr, &format!("/v1/tasks/{id}"));
            if task["state"] == "completed" {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} did not complete: {task}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let original = ended(id);
    let history = get(&agent, &addr, &format!("/v1/tasks/{id}/history"));
    let steps = history["steps"].as_array().expect("steps");
    // The scripted agent: it asks the LLM, which calls search; it gets the search's
    // answer and asks the LLM again; it gets that answer and returns.
    let received: Vec<Vec<u64>> = steps
        .iter()
        .map(|s| {
            s["answers"]
                .as_array()
                .expect("answers")
                .iter()
                .map(|a| a["request"].as_u64().expect("a number"))
                .collect()
        })
        .collect();
    assert_eq!(received, [vec![], vec![1], vec![2], vec![3]], "{history}");
    assert_eq!(steps[1]["requests"][0]["kind"], "tool:search", "{history}");

    // The page on the task: its steps, each with what the API says and a fork button.
    let dumped = loaded(
        &chromium,
        &format!("http://{addr}/#token={TOKEN}&task={id}"),
    );
    let dom = markup(&dumped);
    assert_eq!(
        attr(tags(dom, "id=\"steps\"")[0], "data-history").as_deref(),
        Some("kept")
    );
    let rows: Vec<String> = tags(dom, "data-step=")
        .iter()
        .map(|t| attr(t, "data-step").expect("a step"))
        .collect();
    assert_eq!(rows, ["0", "1", "2", "3"]);
    let buttons: Vec<String> = tags(dom, "data-fork=")
        .iter()
        .map(|t| attr(t, "data-fork").expect("a step"))
        .collect();
    assert_eq!(buttons, ["0", "1", "2", "3"]);
    for step in steps {
        let n = step["step"].as_u64().expect("a number");
        assert_eq!(row_cells(dom, n), step_cells(&history, step), "step {n}");
    }
    assert_eq!(
        text_after(dom, "id=\"steps-sub\""),
        "4 steps, oldest first · fork one to run the task again from there, with an answer changed"
    );
    // Not a fork: no origin.
    assert_eq!(
        attr(tags(dom, "id=\"steps-origin\"")[0], "hidden").as_deref(),
        Some("")
    );

    // A fork through the page: from step 3 (the LLM's last call goes out again), with
    // the search's answer (request 2) edited. The page is served by a proxy of the
    // server that runs the test's clicks after the page's script.
    let edited = json!({"figure": 42, "hits": ["an edited hit"], "query": "fork me"});
    let page = with_script(&fork_script(3, &[(2, edited.to_string())]));
    let upstream = addr.clone();
    let forwarding = agent.clone();
    let proxy = StandInApi::serving(page, Vec::new(), move |posted: &mut Vec<Value>, request| {
        let body = (*request.method() == tiny_http::Method::Post).then(|| body_of(request));
        if let Some(body) = &body {
            posted.push(json!({
                "path": request.url(),
                "authorization": header(request, "Authorization"),
                "body": serde_json::from_str::<Value>(body).unwrap_or(Value::Null),
            }));
        }
        pass_on(&forwarding, &upstream, request, body)
    });
    let dumped = loaded(
        &chromium,
        &format!("http://127.0.0.1:{}/#token={TOKEN}&task={id}", proxy.port),
    );
    let posted = proxy.stop();
    // One POST, with the page's token, the step and the edit.
    assert_eq!(
        posted,
        [json!({
            "path": format!("/v1/tasks/{id}/fork"),
            "authorization": format!("Bearer {TOKEN}"),
            "body": {"at": 3, "edit": {"answer": {"request": 2, "result": edited}}},
        })]
    );
    // The API lists the fork with its origin; it completes with the edited answer
    // (the figure it gives is the edit's), and the original is untouched.
    let tasks = get(&agent, &addr, "/v1/tasks");
    let listed: Vec<(u64, Value)> = tasks["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| (t["id"].as_u64().expect("an id"), t["forked_from"].clone()))
        .collect();
    let fork = id + 1;
    assert_eq!(
        listed,
        [(id, Value::Null), (fork, json!({"task": id, "step": 3}))],
        "{tasks}"
    );
    let forked = ended(fork);
    let answer = forked["result"]["answer"].as_str().expect("an answer");
    assert!(
        answer.ends_with("the notes give the figure 42."),
        "{forked}"
    );
    let after = get(&agent, &addr, &format!("/v1/tasks/{id}"));
    assert_eq!(
        (&after["state"], &after["result"], &after["forked_from"]),
        (&original["state"], &original["result"], &Value::Null)
    );
    // The page opened the fork once it was made: its origin links to the original.
    let dom = markup(&dumped);
    assert_eq!(
        attr(tags(dom, "id=\"task\"")[0], "data-task"),
        Some(fork.to_string())
    );
    let origin = tags(dom, "id=\"steps-origin\"")[0];
    assert_eq!(
        (
            attr(origin, "hidden"),
            attr(origin, "data-origin-task"),
            attr(origin, "data-origin-step")
        ),
        (None, Some(id.to_string()), Some("3".to_owned()))
    );
    let start = dom.find("id=\"steps-origin\"").expect("the origin");
    let line = &dom[start..];
    let line = &line[..line.find("</div>").expect("its end")];
    assert!(
        line.contains(&format!("<a href=\"#task={id}\">task {id}</a>")),
        "{line}"
    );
    assert_eq!(
        strip(&format!("<div {line}")),
        format!("forked from task {id} at step 3")
    );

    let status = served.terminate();
    assert!(
        status.success(),
        "spool serve ended {status}:\n{}",
        served.log()
    );
}

/// Task 7's history in the stand-in API: a task that is itself a fork (of task 3 at
/// step 1), still live, with an answer that is an error, a child spawned and ended, and
/// a step that yielded.
fn canned_history() -> Value {
    json!({
        "task": 7, "type_name": "react-agent", "agent": "support",
        "submitted_at": 1_000_000_000_u64, "input": {"prompt": "plan"},
        "origin": {"task": 3, "step": 1},
        "steps": [
            {"step": 0, "at": 1_120_000_000_u64, "answers": [], "children_ended": [],
                "requests": [{"number": 1, "kind": "llm", "payload": {"prompt": "plan"}}],
                "spawned": [], "end": "Waiting"},
            {"step": 1, "at": 1_900_000_000_u64,
                "answers": [{"request": 1, "result": {"Ok": "search the notes for the figure"}}],
                "children_ended": [],
                "requests": [{"number": 2, "kind": "tool:search", "payload": {"query": "the figure"}}],
                "spawned": [8], "end": "Yielded"},
            {"step": 2, "at": 3_050_000_000_u64,
                "answers": [{"request": 2, "result": {"Err": {"Failed": {"message": "search is down"}}}}],
                "children_ended": [8],
                "requests": [{"number": 3, "kind": "confirm", "payload": {"question": "send it?"}}],
                "spawned": [], "end": "Waiting"},
        ],
        "end": "Live",
    })
}

/// What the stand-in answers a fork: refused, with a detail holding markup (which the
/// page must show as text).
const FORK_REFUSED: &str =
    "/edit/answer/request: the stand-in refuses <img src=x onerror=alert(1)>";

/// The stand-in API of task 7 serving `page`: its history (`kept`) or the 409 of a
/// server that keeps none, forks refused with a 422; it keeps each history request's
/// token and each fork's path, token and body.
fn history_api(page: String, kept: bool) -> StandInApi<Vec<Value>> {
    StandInApi::serving(page, Vec::new(), move |seen: &mut Vec<Value>, request| {
        let path = request.url().to_owned();
        let token = header(request, "Authorization");
        let problem = "application/problem+json";
        match path.as_str() {
            "/v1/tasks/7/history" => {
                seen.push(json!({"path": path, "authorization": token}));
                if kept {
                    (200, "application/json", canned_history().to_string())
                } else {
                    (409, problem, json!({
                        "type": "https://spool.invalid/problems/history-not-kept",
                        "title": "History not kept", "status": 409,
                        "detail": "no history is kept: this runtime has no store to read it from \
                                   (run it on a store that keeps history)",
                    }).to_string())
                }
            }
            "/v1/tasks/7/fork" => {
                let body = body_of(request);
                seen.push(json!({
                    "path": path, "authorization": token,
                    "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
                }));
                (422, problem, json!({
                    "type": "https://spool.invalid/problems/invalid", "title": "Invalid request",
                    "status": 422, "detail": FORK_REFUSED,
                    "errors": [{"path": "/edit/answer/request", "message": "the stand-in refuses"}],
                }).to_string())
            }
            _ => canned(&path),
        }
    })
}

/// The steps of a history the test writes — an error answered, a child spawned and
/// ended, a step that yielded, a task that is a fork — are drawn row for row; a fork
/// the server refuses shows its problem in the form, as text, and the page stays on
/// the task (an answer that is not JSON is not sent: the script waits for that error
/// before it types JSON); a server that keeps no history gets one line saying so and
/// how to keep it.
#[test]
fn the_web_page_shows_steps_a_refused_fork_and_a_server_without_history() {
    let chromium = chromium();
    let bearer = Some(format!("Bearer {TOKEN}"));
    let url = |port: u16| format!("http://127.0.0.1:{port}/#token={TOKEN}&task=7");

    let script = fork_script(
        2,
        &[(1, "not json".to_owned()), (1, "{\"x\": 1}".to_owned())],
    );
    let api = history_api(with_script(&script), true);
    let dumped = loaded(&chromium, &url(api.port));
    let seen = api.stop();
    let dom = markup(&dumped);
    assert_eq!(
        attr(tags(dom, "id=\"steps\"")[0], "data-history").as_deref(),
        Some("kept")
    );
    let rows: Vec<Vec<String>> = (0..3).map(|n| row_cells(dom, n)).collect();
    let fork = "fork from here";
    assert_eq!(
        rows,
        [
            [
                "0",
                "+0.120s",
                "-",
                "#1 llm {\"prompt\":\"plan\"}",
                "waits",
                fork
            ],
            [
                "1",
                "+0.900s",
                "#1 \"search the notes for the figure\"",
                "#2 tool:search {\"query\":\"the figure\"}; spawned task 8",
                "yielded",
                fork
            ],
            [
                "2",
                "+2.050s",
                "#2 error: Failed: search is down; task 8 ended",
                "#3 confirm {\"question\":\"send it?\"}",
                "waits",
                fork
            ],
        ]
        .map(|row| row.map(str::to_owned).to_vec())
    );
    assert_eq!(
        text_after(dom, "id=\"steps-sub\""),
        "3 steps, oldest first · fork one to run the task again from there, with an answer changed"
    );
    // A fork itself: its origin, from its history.
    let origin = tags(dom, "id=\"steps-origin\"")[0];
    assert_eq!(
        (
            attr(origin, "data-origin-task"),
            attr(origin, "data-origin-step")
        ),
        (Some("3".to_owned()), Some("1".to_owned()))
    );
    // The form of step 2 offers the requests made before it; the fork the server
    // refused shows its problem as text, and the page stays on the task.
    let options: Vec<String> = tags(dom, "<option")
        .iter()
        .map(|t| attr(t, "value").expect("a value"))
        .collect();
    assert_eq!(options, ["1", "2"]);
    assert_eq!(
        text_after(dom, "data-fork-error"),
        format!("the server refused the fork (422): {FORK_REFUSED}")
    );
    assert!(
        !dumped.contains("<img"),
        "markup from the server became HTML"
    );
    assert_eq!(
        attr(tags(dom, "id=\"task\"")[0], "data-task").as_deref(),
        Some("7")
    );
    // Every call with the token; one fork sent (the answer that is not JSON was not).
    let forks: Vec<&Value> = seen.iter().filter(|s| s.get("body").is_some()).collect();
    assert_eq!(
        forks,
        [&json!({
            "path": "/v1/tasks/7/fork", "authorization": bearer,
            "body": {"at": 2, "edit": {"answer": {"request": 1, "result": {"x": 1}}}},
        })]
    );
    assert!(
        !seen.is_empty() && seen.iter().all(|s| s["authorization"] == json!(bearer)),
        "{seen:?}"
    );

    // A server that keeps no history: one line, no steps, no fork.
    let api = history_api(PAGE.to_owned(), false);
    let dumped = loaded(&chromium, &url(api.port));
    let seen = api.stop();
    let dom = markup(&dumped);
    assert_eq!(
        attr(tags(dom, "id=\"steps\"")[0], "data-history").as_deref(),
        Some("not-kept")
    );
    assert_eq!(
        text_after(dom, "id=\"steps-note\""),
        "This server keeps no history of task 7 (no history is kept: this runtime has no store \
         to read it from (run it on a store that keeps history)). spool serve keeps it on its \
         store with --history AGE[,SIZE] (for example --history 7d; the default is 7d,1GiB)."
    );
    assert_eq!(tags(dom, "data-step=").len(), 0);
    assert_eq!(tags(dom, "data-fork=").len(), 0);
    // It is asked once: a server that keeps no history will not start to.
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        attr(tags(dom, "id=\"status\"")[0], "data-live").as_deref(),
        Some("true")
    );
}

/// Task 7's event stream in the stand-in API while its second LLM request streams:
/// its transitions, then pieces of the answer (one sent twice, as a resumed stream
/// may), text and a tool call's fragments.
fn streaming_events() -> String {
    let delta = |n: u64, body: Value| format!("id: 57:{n}\nevent: delta\ndata: {body}\n\n");
    let mut text = String::from(
        "id: 57\nevent: transition\ndata: {\"seq\":57,\"time_ms\":3160,\"task\":7,\"from\":\"Running\",\"to\":\"Waiting(llm)\",\"cause\":\"1 request\"}\n\n",
    );
    text += &delta(1, json!({"task": 7, "request": 2, "seq": 0, "text": "Hel"}));
    text += &delta(
        2,
        json!({"task": 7, "request": 2, "seq": 1, "text": "lo, "}),
    );
    text += &delta(
        2,
        json!({"task": 7, "request": 2, "seq": 1, "text": "lo, "}),
    );
    text += &delta(
        3,
        json!({"task": 7, "request": 2, "seq": 2, "text": "world",
        "tool_calls": [{"index": 0, "id": "call_1", "name": "search", "arguments": "{\"q\": "}]}),
    );
    text += &delta(
        4,
        json!({"task": 7, "request": 2, "seq": 3,
        "tool_calls": [{"index": 0, "arguments": "\"rust\"}"}]}),
    );
    text
}

/// The task view shows the answer being streamed as it grows, from the event stream's
/// `delta` events: each piece once, text and tool calls.
#[test]
fn the_web_page_shows_a_streamed_answer_as_it_grows() {
    let chromium = chromium();
    let api = StandInApi::start((), |(), request| {
        let path = request.url().to_owned();
        let resumed = request
            .headers()
            .iter()
            .any(|h| h.field.equiv("Last-Event-ID") && h.value.as_str() != "0");
        match path.as_str() {
            // A stream that resumes after the last piece gets nothing new.
            "/v1/events?task=7" if resumed => (200, "text/event-stream", String::new()),
            "/v1/events?task=7" => (200, "text/event-stream", streaming_events()),
            _ => canned(&path),
        }
    });
    let url = format!("http://127.0.0.1:{}/#token={TOKEN}&task=7", api.port);
    let dumped = loaded(&chromium, &url);
    api.stop();
    let dom = markup(&dumped);
    let live = tags(dom, "id=\"task-live\"");
    assert_eq!(live.len(), 1, "{dom}");
    assert_eq!(
        attr(live[0], "hidden"),
        None,
        "the live answer is hidden: {}",
        live[0]
    );
    assert_eq!(
        (attr(live[0], "data-request"), attr(live[0], "data-seq")),
        (Some("2".to_owned()), Some("3".to_owned()))
    );
    assert_eq!(
        text_after(dom, "class=\"live-text\""),
        "Hello, world\nsearch({\"q\": \"rust\"})"
    );
}
