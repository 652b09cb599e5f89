//! Showing a connection string without its password, for a URL the client could not
//! read (one it reads is named from its reading instead: `display_name`). No spelling
//! may slip past: in a URL, the user information is taken to run to the *last* `@`
//! after the scheme (the client stops at the first, but a URL it refused may hold an
//! unescaped `@` in its password), so a password may hold `/`, `?`, `#` or `@`, and the
//! password follows its first `:`; a `password` in a URL's query; in the `key = value`
//! form, a `password` key with spaces around its `=` or a quoted value.

use std::ops::Range;

/// The prefixes the client reads as a URL; anything else is the `key = value` form.
const URL_PREFIXES: [&str; 2] = ["postgres://", "postgresql://"];

/// `url` with every password in it replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let mut shown = url.to_owned();
    for span in password_spans(url).into_iter().rev() {
        shown.replace_range(span, "***");
    }
    shown
}

/// Every password written in `url`, as written and as the client decodes it, for
/// taking out of a message that may quote it.
pub(crate) fn passwords(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    for span in password_spans(url) {
        let raw = &url[span];
        if raw.is_empty() {
            continue;
        }
        found.push(raw.to_owned());
        let decoded = percent_decode(raw);
        if decoded != raw {
            found.push(decoded);
        }
    }
    found
}

/// `text` with every password of `url` in it replaced by `***`.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    let mut text = text.to_owned();
    for password in passwords(url) {
        text = text.replace(&password, "***");
    }
    text
}

/// Where the passwords are in `url`.
fn password_spans(url: &str) -> Vec<Range<usize>> {
    match URL_PREFIXES.iter().find(|p| url.starts_with(*p)) {
        Some(prefix) => url_spans(url, prefix.len()),
        None => key_value_spans(url),
    }
}

/// A URL's password spans: the user information's, and a `password` in the query.
fn url_spans(url: &str, start: usize) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let rest = &url[start..];
    let mut host_from = start;
    if let Some(at) = rest.rfind('@') {
        let creds = &rest[..at];
        if let Some(colon) = creds.find(':') {
            spans.push(start + colon + 1..start + at);
        }
        host_from = start + at + 1;
    }
    if let Some(query) = url[host_from..].find('?') {
        let mut pos = host_from + query + 1;
        for pair in url[pos..].split('&') {
            if let Some((key, _)) = pair.split_once('=')
                && percent_decode(key).eq_ignore_ascii_case("password")
            {
                spans.push(pos + key.len() + 1..pos + pair.len());
            }
            pos += pair.len() + 1;
        }
    }
    spans
}

/// The `key = value` form's password spans, read as the client reads it: a key runs to
/// whitespace or `=`; spaces may stand around `=`; a value is quoted with `'` (a `\`
/// escapes the next character) or runs to whitespace.
fn key_value_spans(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        let key_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'=' {
            i += 1;
        }
        if i == key_start {
            return spans;
        }
        let key = &text[key_start..i];
        i = skip_ws(i);
        if bytes.get(i) != Some(&b'=') {
            // Not the client's grammar: what follows is not read as a value.
            return spans;
        }
        i = skip_ws(i + 1);
        let (value, next) = if bytes.get(i) == Some(&b'\'') {
            let from = i + 1;
            let mut j = from;
            while j < bytes.len() && bytes[j] != b'\'' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let to = j.min(bytes.len());
            (from..to, (to + 1).min(bytes.len()))
        } else {
            let from = i;
            let mut j = from;
            while j < bytes.len() && !bytes[j].is_ascii_whitespace() {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let to = j.min(bytes.len());
            (from..to, to)
        };
        if key.eq_ignore_ascii_case("password") {
            spans.push(value);
        }
        i = next;
    }
}

/// `text` with its `%XX` escapes decoded (bytes that are not UTF-8 shown lossily).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling of a password the client takes is hidden, and nothing else.
    #[test]
    fn every_password_the_client_reads_is_hidden() {
        let cases = [
            ("postgres://me:s3cret@db:5/x", "postgres://me:***@db:5/x"),
            (
                "postgresql://me:se/cret@db/team",
                "postgresql://me:***@db/team",
            ),
            (
                "postgres://app:se?cret@db/team",
                "postgres://app:***@db/team",
            ),
            (
                "postgres://app:se#c:ret@db/team",
                "postgres://app:***@db/team",
            ),
            ("postgres://u:p@ss:w@h/db", "postgres://u:***@h/db"),
            ("postgres://me@db/x", "postgres://me@db/x"),
            ("postgres://db/x", "postgres://db/x"),
            (
                "postgres://me@db/x?password=s3cret&sslmode=disable",
                "postgres://me@db/x?password=***&sslmode=disable",
            ),
            (
                "postgres://me:a@db/x?pass%77ord=b",
                "postgres://me:***@db/x?pass%77ord=***",
            ),
            (
                "host=db password=s3cret user=me",
                "host=db password=*** user=me",
            ),
            ("host=db password = s3cret", "host=db password = ***"),
            (
                "host=db password='s3 cret' user=me",
                "host=db password='***' user=me",
            ),
            (
                r"host=db password='it\'s' user=me",
                "host=db password='***' user=me",
            ),
            (r"password=a\ b user=me", "password=*** user=me"),
            ("host=db PASSWORD=x", "host=db PASSWORD=***"),
            ("host=db", "host=db"),
        ];
        for (given, shown) in cases {
            assert_eq!(redact_url(given), shown, "{given}");
        }
    }

    /// A password's decoded spelling is taken out of a message too.
    #[test]
    fn a_message_loses_the_password_in_either_spelling() {
        let url = "postgres://me:p%40ss@db/x";
        assert_eq!(scrub("bad p%40ss and p@ss", url), "bad *** and ***");
    }
}
