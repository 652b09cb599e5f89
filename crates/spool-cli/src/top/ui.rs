//! Drawing: the whole screen from the [`App`] alone, so a frame is a pure function of
//! what was read (no clock: every duration on screen is one the server gave).
//!
//! Top to bottom: the header (counts, rate limit, gates), the task table beside the
//! agents' shares and the schedules (or a task's detail in their place), the
//! statistics, and a line of keys. Popups: the cancel confirmation and the help. On a
//! cluster node the side column starts with the cluster's nodes and shards
//! ([`cluster`]), and the header and the tasks are one shard's.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState};

use super::app::{App, Mode};
use super::model::{Connection, Detail, GONE, Gate, Model, Segment, Task, short_id};
use crate::terminal;

mod cluster;

/// Draws the dashboard.
pub(crate) fn draw(frame: &mut Frame<'_>, app: &App) {
    let model = &app.model;
    let gates = model.queue.gates.len().min(4) as u16;
    let error = u16::from(matches!(
        model.connection,
        Connection::Gone { .. } | Connection::Unauthorized(_)
    ));
    let [header, body, stats, keys] = Layout::vertical([
        Constraint::Length(5 + gates + error),
        Constraint::Min(6),
        Constraint::Length(4),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let base = if model.stale() {
        Style::default().fg(Color::DarkGray)
    } else {
        Style::default()
    };
    draw_header(frame, header, model, base);
    match &app.mode {
        Mode::Detail(_)
        | Mode::ConfirmCancel {
            from_detail: true, ..
        } => draw_detail(frame, body, model, base),
        _ => draw_lists(frame, body, app, base),
    }
    draw_stats(frame, stats, model, base);
    draw_keys(frame, keys, app);
    match &app.mode {
        Mode::ConfirmCancel { id, .. } => draw_confirm(frame, *id, model),
        Mode::Help(_) => draw_help(frame, model.cluster.is_some()),
        _ => {}
    }
    strip_controls(frame);
}

/// Text the server sent (names, states, errors, answers), with its control characters
/// written visibly: a cell must never carry `ESC` or `BEL` to the terminal, where they
/// would retitle the window, change colours or move the cursor (`terminal::safe`).
fn shown(text: &str) -> String {
    terminal::safe(text).into_owned()
}

/// The last guard: ratatui puts a zero-width `ESC` into the cell before it, and the
/// terminal receives it raw. Every string from outside is [`shown`] before it is laid
/// out; whatever control character is still in a cell after drawing is dropped.
fn strip_controls(frame: &mut Frame<'_>) {
    for cell in &mut frame.buffer_mut().content {
        if let std::borrow::Cow::Owned(clean) = terminal::strip(cell.symbol()) {
            let clean = if clean.is_empty() {
                " ".to_owned()
            } else {
                clean
            };
            cell.set_symbol(&clean);
        }
    }
}

/// `850ms`, `4.2s`, `3m12s`, `2h05m`.
pub(crate) fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1000, ms % 1000 / 100)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

fn connection_line(model: &Model) -> Span<'static> {
    match &model.connection {
        Connection::Connecting => Span::styled("connecting…", Style::default().fg(Color::Yellow)),
        Connection::Up => Span::styled("connected", Style::default().fg(Color::Green)),
        Connection::Gone { attempt, .. } => Span::styled(
            format!("server gone — reconnecting (attempt {attempt})"),
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        Connection::Unauthorized(_) => Span::styled(
            "unauthorized: check --token-file or SPOOL_TOKEN",
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
    }
}

fn draw_header(frame: &mut Frame<'_>, area: Rect, model: &Model, base: Style) {
    let q = &model.queue;
    let policy = if q.policy.is_empty() {
        "?"
    } else {
        q.policy.as_str()
    };
    let policy = shown(policy);
    let mut title = vec![
        Span::raw(format!(" spool top · {} · policy {policy} · ", model.addr)),
        connection_line(model),
        Span::raw(" "),
    ];
    if let Some(cluster) = &model.cluster {
        // After the connection, which must not be cut off in a narrow terminal.
        title.push(Span::raw(format!(
            "· shard {} of {} ",
            model.shard,
            cluster.shard_count()
        )));
    }
    let title = Line::from(title);
    let running = match q.max_running {
        Some(max) => format!("{}/{max}", q.running),
        None => q.running.to_string(),
    };
    let limited = if q.backoffs.is_empty() {
        if q.rate_limited {
            "yes (a window is full)".to_owned()
        } else {
            "no".to_owned()
        }
    } else {
        let kinds: Vec<String> = q
            .backoffs
            .iter()
            .map(|b| {
                format!(
                    "{} backs off for {}",
                    shown(&b.kind),
                    duration(b.remaining_ms)
                )
            })
            .collect();
        format!("yes — {}", kinds.join(", "))
    };
    let mut lines = vec![
        Line::from(format!(
            "Running: {running}   Queued: {}   Blocked: {}   Ready: {}   Requests: {} in flight, {} held back",
            q.queued, q.blocked, q.ready, q.in_flight, q.held_requests
        )),
        Line::from(format!("Rate limited: {limited}")),
        Line::from(format!(
            "Completed: {}   Failed: {}   Canceled: {}   Submitted: {}",
            q.stats.completed, q.stats.failed, q.stats.canceled, q.stats.submitted
        )),
    ];
    for gate in q.gates.iter().take(4) {
        lines.push(Line::from(gate_line(gate)));
    }
    if let Connection::Gone { error, .. } | Connection::Unauthorized(error) = &model.connection {
        lines.push(Line::from(Span::styled(
            format!("last error: {}", shown(error)),
            Style::default().fg(Color::Red),
        )));
    }
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(Paragraph::new(lines).style(base).block(block), area);
}

/// A window's length: `60s`, `1m`, `1h`, else as a duration.
fn window_len(ms: u64) -> String {
    if ms >= 3_600_000 && ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms >= 60_000 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else {
        duration(ms)
    }
}

/// A count of tokens: `950`, `15k`, `1.2M`.
fn count(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{}.{}M", n / 1_000_000, n % 1_000_000 / 100_000)
    } else if n >= 10_000 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// One gate on one line, what holds requests back first: its back-off, then its cap
/// and what it holds, then its windows.
fn gate_line(gate: &Gate) -> String {
    let mut parts = vec![format!("{}:", shown(&gate.kind))];
    match gate.backoff_ms {
        Some(ms) => parts.push(format!(
            "BACK-OFF {} ({}×429)",
            duration(ms),
            gate.backoff_hits
        )),
        None if gate.backoff_hits > 0 => parts.push(format!("{}×429", gate.backoff_hits)),
        None => {}
    }
    let cap = gate
        .max_in_flight
        .map_or_else(|| "∞".to_owned(), |m| m.to_string());
    parts.push(format!("in flight {}/{cap}", gate.in_flight));
    parts.push(format!("held {}", gate.held));
    if let Some(w) = &gate.window {
        parts.push(format!(
            "window {}/{} per {}",
            w.used,
            w.max,
            window_len(w.per_ms)
        ));
    }
    if let Some(t) = &gate.tokens {
        parts.push(format!(
            "tokens {}/{} per {}",
            count(t.used),
            count(t.max),
            window_len(t.per_ms)
        ));
    }
    parts.join("  ")
}

fn draw_lists(frame: &mut Frame<'_>, area: Rect, app: &App, base: Style) {
    let [tasks, side] =
        Layout::horizontal([Constraint::Min(50), Constraint::Length(34)]).areas(area);
    draw_tasks(frame, tasks, app, base);
    let shares = app.model.shares();
    let show_shares = app.model.queue.policy == "fair-share" || shares.len() > 1;
    let side = match &app.model.cluster {
        Some(status) => {
            // The cluster first; the agents and the schedules keep a line each.
            let kept = 3 + if show_shares { 4 } else { 0 };
            let height = cluster::height(status, side.height.saturating_sub(kept));
            let [top, rest] =
                Layout::vertical([Constraint::Length(height), Constraint::Min(3)]).areas(side);
            cluster::draw(frame, top, &app.model, base);
            rest
        }
        None => side,
    };
    if show_shares {
        let height = (shares.len() as u16 + 3).min(side.height / 2).max(4);
        let [agents, schedules] =
            Layout::vertical([Constraint::Length(height), Constraint::Min(3)]).areas(side);
        draw_shares(frame, agents, &app.model, base);
        draw_schedules(frame, schedules, &app.model, base);
    } else {
        draw_schedules(frame, side, &app.model, base);
    }
}

/// The live tasks' table, filtered and sorted as the app says, the selected one
/// highlighted; an empty one says why it is empty.
fn draw_tasks(frame: &mut Frame<'_>, area: Rect, app: &App, base: Style) {
    let rows = app.rows();
    let scored = rows.iter().any(|d| d.score.is_some());
    let clustered = app.model.cluster.is_some();
    let body: Vec<Row<'_>> = rows.iter().map(|d| task_row(d, clustered)).collect();
    // A cluster's ids are written `SHARD:NUMBER`, wider past 9999 tasks in a shard.
    let id_width = match clustered {
        true => rows
            .iter()
            .map(|d| short_id(d.id).len() as u16 + 1)
            .max()
            .unwrap_or(0)
            .max(5),
        false => 5,
    };
    let table = Table::new(
        body,
        [
            Constraint::Length(id_width),
            Constraint::Length(8),
            Constraint::Length(11),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(12),
            Constraint::Min(5),
        ],
    )
    .header(task_header(scored))
    .style(base)
    .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
    .highlight_symbol("▶")
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(tasks_title(app, rows.len())),
    );
    let mut state = TableState::default().with_selected(app.selected_index());
    frame.render_stateful_widget(table, area, &mut state);
    if rows.is_empty() {
        draw_no_tasks(frame, area, app, base);
    }
}

/// The task table's header: the priority column is the policy's score when the
/// server gives one (`scored`).
fn task_header(scored: bool) -> Row<'static> {
    Row::new([
        "ID",
        "AGENT",
        "TYPE",
        if scored { "SCORE" } else { "PRIO" },
        "STATE",
        "WAITS ON",
        "FOR",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD))
}

/// A task's row: its id (`SHARD:NUMBER` on a cluster node), agent, type, score (or
/// priority), state, what it waits on and for how long.
fn task_row(d: &Detail, clustered: bool) -> Row<'static> {
    let priority = d
        .score
        .map_or_else(|| shown(&d.priority), |s| s.to_string());
    Row::new([
        Cell::from(if clustered {
            short_id(d.id)
        } else {
            d.id.to_string()
        }),
        Cell::from(shown(&d.agent)),
        Cell::from(shown(&d.task_type)),
        Cell::from(priority),
        Cell::from(shown(&d.state)),
        Cell::from(d.waits_on.as_deref().map_or_else(|| "-".to_owned(), shown)),
        Cell::from(duration(d.since_ms)),
    ])
}

/// The task table's title: the `listed` tasks of all the live ones, their shard on a
/// cluster node, the sort and the filter.
fn tasks_title(app: &App, listed: usize) -> String {
    let filter = if app.filter.is_empty() {
        String::new()
    } else {
        format!(" · filter \"{}\"", shown(&app.filter))
    };
    let shard = if app.model.cluster.is_some() {
        format!(" · shard {}", app.model.shard)
    } else {
        String::new()
    };
    format!(
        " Tasks {listed} of {}{shard} · sort {}{filter} ",
        app.model.queue.details.len(),
        app.sort.name()
    )
}

/// Says, inside an empty task table, why it is empty: no live tasks, or none that
/// matches the filter.
fn draw_no_tasks(frame: &mut Frame<'_>, area: Rect, app: &App, base: Style) {
    let inner = Rect {
        x: area.x + 2,
        y: area.y + 3,
        width: area.width.saturating_sub(4),
        height: 1.min(area.height.saturating_sub(4)),
    };
    let text = if app.filter.is_empty() {
        "no live tasks"
    } else {
        "no live task matches the filter"
    };
    frame.render_widget(Paragraph::new(text).style(base), inner);
}

fn draw_shares(frame: &mut Frame<'_>, area: Rect, model: &Model, base: Style) {
    let rows: Vec<Row<'_>> = model
        .shares()
        .into_iter()
        .map(|(agent, started, waiting, share)| {
            Row::new([
                shown(&agent),
                started.to_string(),
                waiting.to_string(),
                format!("{share}%"),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Min(10),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(5),
        ],
    )
    .header(
        Row::new(["AGENT", "STARTED", "WAITING", "SHARE"])
            .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .style(base)
    .block(Block::default().borders(Borders::ALL).title(" Agents "));
    frame.render_widget(table, area);
}

/// `2026-11-27T08:00:00Z` → `11-27 08:00`.
fn short_time(at: Option<&str>) -> String {
    match at.and_then(|t| t.get(5..16)) {
        Some(t) => t.replacen('T', " ", 1),
        None => "-".to_owned(),
    }
}

fn draw_schedules(frame: &mut Frame<'_>, area: Rect, model: &Model, base: Style) {
    let mut lines = Vec::new();
    if model.schedules.is_empty() {
        lines.push(Line::from("no schedules"));
    }
    for s in &model.schedules {
        let paused = match (&s.status.paused_reason, s.enabled) {
            (Some(reason), _) => format!(" (paused: {})", shown(reason)),
            (None, false) => " (paused)".to_owned(),
            (None, true) => String::new(),
        };
        lines.push(Line::from(Span::styled(
            format!("{}{paused}", shown(&s.slug)),
            Style::default().add_modifier(Modifier::BOLD),
        )));
        lines.push(Line::from(format!(
            " next {}",
            short_time(s.status.next_run.as_deref())
        )));
        lines.push(Line::from(format!(
            " last {} {}",
            short_time(s.status.last_run.as_deref()),
            s.status
                .last_result
                .as_deref()
                .map_or_else(|| "(never run)".to_owned(), shown)
        )));
        lines.push(Line::from(format!(
            " runs {} · missed {}",
            s.status.runs, s.status.missed
        )));
    }
    let block = Block::default().borders(Borders::ALL).title(" Schedules ");
    frame.render_widget(Paragraph::new(lines).style(base).block(block), area);
}

fn draw_stats(frame: &mut Frame<'_>, area: Rect, model: &Model, base: Style) {
    let s = &model.queue.stats;
    let average = model
        .average_wait()
        .map_or_else(|| "-".to_owned(), duration);
    let p95 = model.p95_wait().map_or_else(
        || "-".to_owned(),
        |(ms, n)| format!("{} ({n} tasks)", duration(ms)),
    );
    let lines = vec![
        Line::from(format!(
            "Scheduled: {}  Completed: {}  Rejected: {}  Rate limited: {}  Wait avg: {average}  p95: {p95}",
            s.scheduled, s.completed, s.rejected, s.rate_limited
        )),
        Line::from(format!(
            "Peaks: queued {}  running {}  requests in flight {}   (waits: for a slot or a rate limit)",
            s.peak_queued, s.peak_running, s.peak_in_flight
        )),
    ];
    let block = Block::default().borders(Borders::ALL).title(" Statistics ");
    frame.render_widget(Paragraph::new(lines).style(base).block(block), area);
}

fn draw_keys(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let text = match &app.mode {
        Mode::Filter => format!("filter: {}▏  Enter keep · Esc clear", shown(&app.filter)),
        Mode::Detail(_) => "Esc back · c cancel · ? help · q quit".to_owned(),
        _ => {
            let keys = if app.model.cluster.is_some() {
                "j/k move · / filter · s sort · Enter detail · c cancel · [/] shard · ? help · q quit"
            } else {
                "j/k move · / filter · s sort · Enter detail · c cancel · ? help · q quit"
            };
            match &app.model.status {
                Some(status) => format!("{keys} · {}", shown(status)),
                None => keys.to_owned(),
            }
        }
    };
    frame.render_widget(
        Paragraph::new(text).style(Style::default().fg(Color::Cyan)),
        area,
    );
}

/// A segment's label: `llm`, `tool:search`, `queued`, `rate limited (llm)`.
fn segment_label(segment: &Segment) -> String {
    let wait = shown(&segment.wait.replace('_', " "));
    match (&segment.kind, segment.wait.as_str()) {
        (Some(kind), "request") => shown(kind),
        (Some(kind), _) => format!("{wait} ({})", shown(kind)),
        (None, _) => wait,
    }
}

fn timeline_lines(task: &Task, width: u16) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    match &task.timeline {
        Some(timeline) if !timeline.is_empty() => {
            let total = timeline.iter().map(|s| s.end_ms).max().unwrap_or(0).max(1);
            // The text before the bar takes 52 columns.
            let bar_width = u64::from(width.saturating_sub(53).max(8));
            lines.push(Line::from(Span::styled(
                "Timeline (ms since submission)",
                Style::default().add_modifier(Modifier::BOLD),
            )));
            for s in timeline {
                let start = s.start_ms * bar_width / total;
                let end = (s.end_ms * bar_width / total).max(start + 1);
                let bar = format!(
                    "{}{}",
                    " ".repeat(usize::try_from(start).unwrap_or(0)),
                    "█".repeat(usize::try_from(end - start).unwrap_or(0))
                );
                let open = if s.open { "…" } else { " " };
                lines.push(Line::from(format!(
                    " {:<20} {:>7} → {:>7}{open} {:>7}  {bar}",
                    segment_label(s),
                    s.start_ms,
                    s.end_ms,
                    duration(s.end_ms.saturating_sub(s.start_ms)),
                )));
            }
        }
        _ => {
            let t = &task.timing;
            lines.push(Line::from(Span::styled(
                "Time spent (totals; this server sends no timeline)",
                Style::default().add_modifier(Modifier::BOLD),
            )));
            let mut parts = vec![
                ("waiting for a slot".to_owned(), t.queued_ms),
                ("blocked on dependencies".to_owned(), t.blocked_ms),
                ("rate limited".to_owned(), t.rate_limited_ms),
            ];
            for (kind, ms) in &t.waiting_ms {
                parts.push((format!("waiting for {}", shown(kind)), *ms));
            }
            parts.push(("running".to_owned(), t.running_ms));
            for (label, ms) in parts {
                lines.push(Line::from(format!(" {label:<28} {:>8}", duration(ms))));
            }
        }
    }
    lines
}

fn draw_detail(frame: &mut Frame<'_>, area: Rect, model: &Model, base: Style) {
    let Some(task) = &model.task else {
        return;
    };
    let title = match model.cluster {
        Some(_) => format!(" Task {} ({}) ", task.id, short_id(task.id)),
        None => format!(" Task {} ", task.id),
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if task.state.is_empty() {
        frame.render_widget(Paragraph::new("reading…").style(base), inner);
        return;
    }
    if task.state == GONE {
        let text = format!(
            "task {} is not on the server (ended and evicted, or never submitted)",
            task.id
        );
        frame.render_widget(Paragraph::new(text).style(base), inner);
        return;
    }
    // `Waiting(llm)` → `waiting on llm`; other states say enough by their tag.
    let state = match task
        .state_detail
        .strip_prefix("Waiting(")
        .and_then(|s| s.strip_suffix(')'))
    {
        Some(on) => format!("{} on {}", shown(&task.state), shown(on)),
        None => shown(&task.state),
    };
    let mut lines = vec![Line::from(format!(
        "{} · agent {} · {} · {state} · age {} · requests out {}",
        shown(&task.task_type),
        shown(&task.agent),
        shown(&task.priority),
        duration(task.age_ms),
        task.in_flight
    ))];
    let width = usize::from(inner.width);
    if let Some(error) = &task.error {
        lines.push(Line::from(clip(&format!("error: {error}"), width)));
    } else if let Some(result) = &task.result {
        let text = match result["answer"].as_str() {
            Some(answer) => format!("answer: {answer}"),
            None => format!("result: {result}"),
        };
        lines.push(Line::from(clip(&text, width)));
    }
    if let Some(spend) = &task.spend {
        let text = format!(
            "spent {} tokens ({} in, {} out) · ${}",
            spend.tokens, spend.input_tokens, spend.output_tokens, spend.cost_usd
        );
        lines.push(Line::from(clip(&text, width)));
    }
    if let Some(live) = &model.live {
        // The end of the answer so far: where it grows.
        let text = live.shown().replace(['\n', '\r'], " ");
        let label = format!("answer so far (request {}): ", live.request);
        let room = width.saturating_sub(label.chars().count() + 1);
        let count = text.chars().count();
        let tail: String = if count > room {
            let cut: String = text.chars().skip(count - room).collect();
            format!("…{cut}")
        } else {
            text
        };
        lines.push(Line::from(clip(&format!("{label}{tail}"), width)));
    }
    lines.push(Line::from(""));
    lines.extend(timeline_lines(task, inner.width));
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        format!("Trace ({} events)", model.trace.len()),
        Style::default().add_modifier(Modifier::BOLD),
    )));
    let room = usize::from(inner.height).saturating_sub(lines.len());
    let skip = model.trace.len().saturating_sub(room);
    for e in model.trace.iter().skip(skip) {
        lines.push(Line::from(format!(
            " #{:<6} {:>8}ms  {} → {}  ({})",
            e.seq,
            e.time_ms,
            shown(&e.from),
            shown(&e.to),
            shown(&e.cause)
        )));
    }
    frame.render_widget(Paragraph::new(lines).style(base), inner);
}

/// `text` on one line of `width` columns, cut with `…` if longer: its line breaks are
/// spaces, its other control characters written visibly.
fn clip(text: &str, width: usize) -> String {
    let one_line = shown(&text.replace(['\n', '\r'], " "));
    if one_line.chars().count() <= width {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A rectangle `width` × `height` in the middle of `area`.
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

fn draw_confirm(frame: &mut Frame<'_>, id: u64, model: &Model) {
    let what = model
        .queue
        .details
        .iter()
        .find(|d| d.id == id)
        .map(|d| {
            format!(
                " ({}, agent {}, {})",
                shown(&d.task_type),
                shown(&d.agent),
                shown(&d.state)
            )
        })
        .unwrap_or_default();
    let area = centered(frame.area(), 60, 5);
    frame.render_widget(Clear, area);
    let text = vec![
        Line::from(format!("Cancel task {id}{what}?")),
        Line::from(""),
        Line::from("y: cancel it   any other key: keep it"),
    ];
    frame.render_widget(
        Paragraph::new(text).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" Cancel ")
                .border_style(Style::default().fg(Color::Red)),
        ),
        area,
    );
}

/// The keys; `[` and `]` only on a cluster node, where they do something.
fn draw_help(frame: &mut Frame<'_>, clustered: bool) {
    let mut keys = vec![
        (
            "j / ↓, k / ↑",
            "move the selection (PgUp/PgDn, g/G: further)",
        ),
        ("/", "filter by id, agent, type, state, priority or wait"),
        ("s", "sort: policy, waited, agent, state, id"),
        ("Enter", "the task's detail: timeline and trace (Esc: back)"),
        ("c", "cancel the task (asks first)"),
    ];
    if clustered {
        keys.push(("[, ]", "the queue of the previous, the next shard"));
    }
    keys.extend([("?", "this help"), ("q, Ctrl-C", "quit")]);
    let lines: Vec<Line<'_>> = keys
        .iter()
        .map(|(key, what)| Line::from(format!(" {key:<14} {what}")))
        .collect();
    let area = centered(frame.area(), 72, lines.len() as u16 + 2);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" Keys (any key closes) "),
        ),
        area,
    );
}
