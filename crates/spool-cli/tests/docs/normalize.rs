//! Output lines as the docs check compares them: what varies from run to run replaced
//! by placeholders, and `…` standing for what a doc cuts.

/// `line` with what varies from run to run replaced by placeholders.
fn normalize(line: &str) -> String {
    let line = times(line);
    let line = ports(&line);
    let line = clock(&line);
    let line = seconds(&line);
    let line = json_numbers(&line);
    if line.starts_with("date: ") {
        return "date: <DATE>".to_owned();
    }
    if let Some(n) = line.strip_prefix("ok ")
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
    {
        return "ok <N>".to_owned();
    }
    let line = metric(&line);
    collapse_spaces(&line)
}

/// Runs of two spaces or more as two spaces.
fn collapse_spaces(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut spaces = 0;
    for c in line.chars() {
        if c == ' ' {
            spaces += 1;
            if spaces <= 2 {
                out.push(c);
            }
        } else {
            spaces = 0;
            out.push(c);
        }
    }
    out
}

/// RFC 3339 instants as `<TIME>`.
fn times(line: &str) -> String {
    let b = line.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd";
    let fits = |at: usize| {
        at + shape.len() <= b.len()
            && shape.iter().zip(&b[at..]).all(|(s, c)| match s {
                b'd' => c.is_ascii_digit(),
                s => s == c,
            })
    };
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if fits(i) {
            let mut j = i + shape.len();
            if b.get(j) == Some(&b'.') {
                j += 1;
                while b.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
            }
            if b.get(j) == Some(&b'Z') {
                j += 1;
            } else if matches!(b.get(j), Some(b'+' | b'-')) && b.len() >= j + 6 && b[j + 3] == b':'
            {
                j += 6;
            }
            out.push_str("<TIME>");
            i = j;
        } else {
            let c = line[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Loopback ports as `<PORT>`.
fn ports(line: &str) -> String {
    let host = "127.0.0.1:";
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(host) {
        let after = &rest[at + host.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..at + host.len()]);
        if digits > 0 {
            out.push_str("<PORT>");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// A clock time (`HH:MM:SS `) opening a line as `<CLOCK> `.
fn clock(line: &str) -> String {
    let b = line.as_bytes();
    let is_clock = b.len() > 8
        && b[..8].iter().enumerate().all(|(i, c)| {
            if i == 2 || i == 5 {
                *c == b':'
            } else {
                c.is_ascii_digit()
            }
        })
        && b[8] == b' ';
    if is_clock {
        format!("<CLOCK>{}", &line[8..])
    } else {
        line.to_owned()
    }
}

/// Times in seconds with a fraction (`3.040s`) as `<S>`.
fn seconds(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'));
        if starts {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if b.get(j) == Some(&b'.') && b.get(j + 1).is_some_and(u8::is_ascii_digit) {
                let mut k = j + 1;
                while k < b.len() && b[k].is_ascii_digit() {
                    k += 1;
                }
                // `3.040s`, or `0.056 s`.
                let unit = if b.get(k) == Some(&b' ') { k + 1 } else { k };
                let ends = b.get(unit) == Some(&b's')
                    && !b.get(unit + 1).is_some_and(|c| c.is_ascii_alphanumeric());
                if ends {
                    out.push_str("<S>");
                    i = unit + 1;
                    continue;
                }
            }
            out.push_str(&line[i..j]);
            i = j;
            continue;
        }
        let c = line[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The numbers of JSON members that are times as `<N>`: `…_ms`, `secs`, `nanos`, and
/// every member of `waiting_ms`.
fn json_numbers(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    let mut in_waiting = false;
    while let Some(colon) = rest.find("\":") {
        let key_start = rest[..colon].rfind('"').map_or(0, |q| q + 1);
        let key = &rest[key_start..colon];
        let after = &rest[colon + 2..];
        out.push_str(&rest[..colon + 2]);
        if key == "waiting_ms" {
            in_waiting = true;
        }
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let timed = key.ends_with("_ms") || key == "secs" || key == "nanos" || in_waiting;
        if digits > 0 && timed {
            out.push_str("<N>");
            rest = &after[digits..];
        } else {
            rest = after;
        }
        if in_waiting && key != "waiting_ms" && rest.starts_with('}') {
            in_waiting = false;
        }
    }
    out.push_str(rest);
    out
}

/// The value of a Prometheus line that varies with timing as `<N>`.
fn metric(line: &str) -> String {
    if !line.starts_with("spool_") {
        return line.to_owned();
    }
    let Some((series, _value)) = line.rsplit_once(' ') else {
        return line.to_owned();
    };
    let name = series.split('{').next().unwrap_or(series);
    let varies = ["_bucket", "_sum", "_max"]
        .iter()
        .any(|s| name.ends_with(s))
        || name.starts_with("spool_loop_turn")
        || name == "spool_views_generation";
    if varies {
        format!("{series} <N>")
    } else {
        line.to_owned()
    }
}

/// Whether `text` fits `pattern`, where `…` stands for any text.
fn line_fits(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Whether `actual` fits `expected` (both normalized), where a line `…` stands for any
/// lines.
pub(crate) fn fits(expected: &[String], actual: &[String]) -> bool {
    // fit[i][j]: expected[i..] fits actual[j..].
    let (n, m) = (expected.len(), actual.len());
    let mut fit = vec![vec![false; m + 1]; n + 1];
    fit[n][m] = true;
    for i in (0..n).rev() {
        for j in (0..=m).rev() {
            fit[i][j] = if expected[i] == "…" {
                fit[i + 1][j] || (j < m && fit[i][j + 1])
            } else {
                j < m && line_fits(&expected[i], &actual[j]) && fit[i + 1][j + 1]
            };
        }
    }
    fit[0][0]
}

/// What a mismatch report says of one command: what the doc says and what it printed.
pub(crate) fn difference(command: &str, expected: &[String], actual: &[String]) -> String {
    format!(
        "\n$ {command}\n--- the doc says:\n{}\n--- it printed:\n{}\n",
        expected.join("\n"),
        actual.join("\n")
    )
}

/// Each of `lines` normalized.
pub(crate) fn normalized(lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| normalize(l)).collect()
}

#[test]
fn normalizing_keeps_what_is_fixed_and_hides_what_varies() {
    assert_eq!(
        normalize(r#"{"created_at":"2026-11-26T10:59:58.709104221Z","age_ms":64,"id":7}"#),
        r#"{"created_at":"<TIME>","age_ms":<N>,"id":7}"#
    );
    assert_eq!(
        normalize(r#""waiting_ms":{"llm":56,"tool:search":8},"running_ms":0,"bytes":487"#),
        r#""waiting_ms":{"llm":<N>,"tool:search":<N>},"running_ms":<N>,"bytes":487"#
    );
    assert_eq!(
        normalize("10:15:11 queue-check: run started (task 1, fire 2026-11-26T10:15:11Z)"),
        "<CLOCK> queue-check: run started (task 1, fire <TIME>)"
    );
    assert_eq!(normalize("ok 14"), "ok <N>");
    assert_eq!(
        normalize("listening on http://127.0.0.1:46145"),
        "listening on http://127.0.0.1:<PORT>"
    );
    assert_eq!(
        normalize("1  default  3.040s  Completed(ok) at 5.040340116s, 0.5 s"),
        "1  default  <S>  Completed(ok) at <S>, <S>"
    );
    assert_eq!(normalize("TASK  FIRE       STATE"), "TASK  FIRE  STATE");
    assert_eq!(
        normalize("date: Thu, 26 Nov 2026 22:32:32 GMT"),
        "date: <DATE>"
    );
    assert_eq!(
        normalize(r#"spool_task_duration_seconds_bucket{le="0.1"} 2"#),
        r#"spool_task_duration_seconds_bucket{le="0.1"} <N>"#
    );
    assert_eq!(
        normalize("spool_tasks_submitted_total 2"),
        "spool_tasks_submitted_total 2"
    );
    assert!(line_fits(r#"{"id":1,…,"x":2}"#, r#"{"id":1,"a":[],"x":2}"#));
    assert!(!line_fits(
        r#"{"id":1,…,"x":2}"#,
        r#"{"id":2,"a":[],"x":2}"#
    ));
    let lines = |s: &[&str]| s.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert!(fits(
        &lines(&["a", "…", "d"]),
        &lines(&["a", "b", "c", "d"])
    ));
    assert!(fits(&lines(&["a", "…"]), &lines(&["a"])));
    assert!(!fits(&lines(&["a", "…", "d"]), &lines(&["a", "b"])));
}
