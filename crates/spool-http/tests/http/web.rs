//! `GET /`: the web page, served without a token, as HTML under a strict content
//! security policy, and fetching nothing from anywhere else.

use crate::support::{Api, request};

/// The policy the page is served with: its own inline script and style, requests to
/// this server only.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

#[test]
fn the_page_is_served_without_a_token_under_a_strict_policy() {
    let api = Api::start();
    let page = request("GET", &format!("{}/", api.base), None, &[], None);
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.content_type, "text/html; charset=utf-8");
    assert_eq!(page.header("content-security-policy"), Some(CSP));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert!(
        page.text.starts_with("<!doctype html>\n"),
        "{}",
        &page.text[..80]
    );
    // It reads the API the tests know, with the token in a header.
    for used in [
        "'/v1/queue'",
        "`/v1/tasks?limit=",
        "`/v1/tasks/${id}`",
        "'/v1/schedules'",
        "'/v1/confirmations'",
        "'/v1/events'",
        "`/v1/events?task=${id}`",
        "'Last-Event-ID'",
        "h.Authorization = `Bearer ${S.token}`",
    ] {
        assert!(page.text.contains(used), "the page does not use {used}");
    }
    // A wrong token does not matter: the page holds no data.
    let again = request(
        "GET",
        &format!("{}/", api.base),
        Some("not-the-token"),
        &[],
        None,
    );
    assert_eq!((again.status, again.text.len()), (200, page.text.len()));
    // HEAD answers the headers.
    let head = request("HEAD", &format!("{}/", api.base), None, &[], None);
    assert_eq!(
        (head.status, head.content_type.as_str(), head.text.as_str()),
        (200, "text/html; charset=utf-8", "")
    );
}

#[test]
fn the_page_loads_nothing_from_elsewhere() {
    let api = Api::start();
    let page = request("GET", &format!("{}/", api.base), None, &[], None).text;
    let lower = page.to_ascii_lowercase();
    // No URL to another host: no scheme at all, no protocol-relative address.
    for banned in ["http://", "https://", "\"//", "'//", "(//", "url("] {
        assert!(
            !lower.contains(banned),
            "the page holds `{banned}`: {}",
            &page[lower.find(banned).unwrap_or(0)..][..80]
        );
    }
    // Nothing is loaded by markup: no external script, style sheet, image or frame.
    for banned in ["<script src", "<img", "<iframe", "@import"] {
        assert!(!lower.contains(banned), "the page holds `{banned}`");
    }
    // Its one link is an empty icon, so that browsers do not ask for /favicon.ico.
    assert_eq!(lower.matches("<link").count(), 1);
    assert!(lower.contains("<link rel=\"icon\" href=\"data:,\">"));
    assert_eq!(lower.matches("<script").count(), 1);
    assert_eq!(lower.matches("<style").count(), 1);
}
