//! The delay a 429 asks for: `Retry-After` (seconds or an HTTP date),
//! `retry-after-ms`, and the providers' rate-limit reset headers.

use std::time::{Duration, SystemTime};

/// The delay a 429 asks for, from its headers (names compared without case), relative
/// to `now`:
///
/// 1. `retry-after-ms`: milliseconds (some providers send it beside `Retry-After`);
/// 2. `Retry-After`: seconds, or an HTTP date (a date in the past means no delay);
/// 3. the provider's rate-limit headers, `x-ratelimit-reset-requests` and
///    `x-ratelimit-reset-tokens` (durations such as `1s`, `6m0s`, `250ms`): the reset of
///    the budget whose `x-ratelimit-remaining-*` is 0, or the later of the two if
///    neither says.
///
/// `None` if none of them is present and readable.
///
/// # Example
/// ```
/// use std::time::{Duration, SystemTime};
/// use spool_exec::rate_limit_delay;
///
/// let now = SystemTime::now();
/// assert_eq!(rate_limit_delay([("Retry-After", "2")], now), Some(Duration::from_secs(2)));
/// let headers = [
///     ("x-ratelimit-remaining-requests", "0"),
///     ("x-ratelimit-reset-requests", "1s"),
///     ("x-ratelimit-remaining-tokens", "9000"),
///     ("x-ratelimit-reset-tokens", "6m0s"),
/// ];
/// assert_eq!(rate_limit_delay(headers, now), Some(Duration::from_secs(1)));
/// ```
pub fn rate_limit_delay<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    now: SystemTime,
) -> Option<Duration> {
    let mut retry_after_ms = None;
    let mut retry_after = None;
    let mut reset = [None, None];
    let mut exhausted = [false, false];
    for (name, value) in headers {
        let name = name.trim();
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("retry-after-ms") {
            retry_after_ms = retry_after_ms.or_else(|| seconds(value.trim(), 1000.0));
        } else if is("retry-after") {
            retry_after = retry_after.or_else(|| parse_retry_after(value, now));
        } else if is("x-ratelimit-reset-requests") {
            reset[0] = reset[0].or_else(|| parse_reset_duration(value));
        } else if is("x-ratelimit-reset-tokens") {
            reset[1] = reset[1].or_else(|| parse_reset_duration(value));
        } else if is("x-ratelimit-remaining-requests") {
            exhausted[0] = value.trim().parse::<f64>().is_ok_and(|n| n <= 0.0);
        } else if is("x-ratelimit-remaining-tokens") {
            exhausted[1] = value.trim().parse::<f64>().is_ok_and(|n| n <= 0.0);
        }
    }
    if retry_after_ms.is_some() {
        return retry_after_ms;
    }
    if retry_after.is_some() {
        return retry_after;
    }
    let spent: Option<Duration> = (0..2)
        .filter(|&i| exhausted[i])
        .filter_map(|i| reset[i])
        .max();
    spent.or_else(|| reset.iter().flatten().copied().max())
}

/// Reads a `Retry-After` value: whole or decimal seconds, or an HTTP date (taken
/// relative to `now`; a date in the past is no delay). `None` if it is neither. A
/// delay too long for a [`Duration`] (`u64::MAX` seconds and more) is
/// [`Duration::MAX`]: the scheduler's `max_wait` decides what to do with it.
///
/// # Example
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use spool_exec::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_770); // Sun, 06 Nov 1994 08:49:30 GMT
/// assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
///     Some(Duration::from_secs(7))
/// );
/// assert_eq!(parse_retry_after("soon", now), None);
/// assert_eq!(parse_retry_after("99999999999999999999999", now), Some(Duration::MAX));
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Some(delay) = seconds(value, 1.0) {
        return Some(delay);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `value` — digits with at most one `.` — divided by `per_second`, as a duration,
/// saturating at [`Duration::MAX`]; `None` if it is not such a number.
fn seconds(value: &str, per_second: f64) -> Option<Duration> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    if fraction.is_empty() && per_second == 1.0 {
        // Whole seconds, exactly, however many.
        return Some(whole.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let number: f64 = value.parse().ok()?;
    Some(Duration::try_from_secs_f64(number / per_second).unwrap_or(Duration::MAX))
}

/// Reads a rate-limit reset duration as providers send it (Go's duration format):
/// numbers with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`, in sequence (`6m0s`,
/// `1h2m3.5s`, `250ms`, `0.5s`); a bare number is seconds. `None` if it is not one.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_exec::parse_reset_duration;
///
/// assert_eq!(parse_reset_duration("6m0s"), Some(Duration::from_secs(360)));
/// assert_eq!(parse_reset_duration("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_reset_duration("1.5s"), Some(Duration::from_millis(1500)));
/// assert_eq!(parse_reset_duration("later"), None);
/// ```
pub fn parse_reset_duration(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let nanos = decimal_nanos(value, 1_000_000_000)?;
        return Some(from_nanos_saturating(nanos));
    }
    let mut total: u128 = 0;
    let mut rest = value;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per: u128 = match &rest[..unit_len] {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.saturating_add(decimal_nanos(number, nanos_per)?);
    }
    Some(from_nanos_saturating(total))
}

/// `nanos` nanoseconds, or [`Duration::MAX`] if that is longer.
fn from_nanos_saturating(nanos: u128) -> Duration {
    match u64::try_from(nanos / 1_000_000_000) {
        // The rest is below a billion: it fits.
        Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
        Err(_) => Duration::MAX,
    }
}

/// `number` (digits, at most one `.`) times `unit` nanoseconds, exactly (fractions of
/// a nanosecond dropped), saturating at `u128::MAX`; `None` if it is not a number.
fn decimal_nanos(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else if whole.bytes().all(|b| b.is_ascii_digit()) {
        whole.parse().unwrap_or(u128::MAX)
    } else {
        return None;
    };
    let mut nanos = whole.saturating_mul(unit);
    let fraction = &fraction[..fraction.len().min(18)];
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        nanos = nanos.saturating_add(digits * unit / 10u128.pow(fraction.len() as u32));
    }
    Some(nanos)
}
