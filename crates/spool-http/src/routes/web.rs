//! `GET /`: the live web page (docs/web.md), one static HTML file with its CSS and
//! JavaScript inline, compiled into the binary. It holds no data, so it needs no
//! token; the API calls it makes do, with the token the user gives it.

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::IntoResponse;

/// The page: no build step, nothing fetched from elsewhere.
pub(crate) const PAGE: &str = include_str!("../web/index.html");

/// What the page may do: run its own inline script and style, and talk to this
/// server only. No framing, no forms posted anywhere, no `<base>`.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; \
     script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; \
     img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page, with headers that keep it from being framed, sniffed or cached stale,
/// and that keep its address (which may hold the token in its fragment) out of
/// `Referer` headers.
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                HeaderName::from_static("x-frame-options"),
                HeaderValue::from_static("DENY"),
            ),
        ],
        PAGE,
    )
}
