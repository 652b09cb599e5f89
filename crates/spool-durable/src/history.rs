//! How much journal history a store keeps ([`History`]), the wall clock its checkpoints
//! are stamped with ([`WallClock`]), and which segments a checkpoint drops
//! ([`History::keep_from`]): the same rule on every backend.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One GiB, in bytes.
const GIB: u64 = 1 << 30;

/// How much history a store keeps: the segments (a checkpoint and the journal entries
/// after it, up to the next checkpoint) written within `max_age` and, newest first, up
/// to `max_bytes` in all. Applied when a checkpoint is written, oldest segments first;
/// the latest segment (what a recovery reads) is always kept.
///
/// The default keeps 7 days and at most 1 GiB ([`History::default`]);
/// [`History::off`] keeps only the latest segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct History {
    max_age: Option<Duration>,
    max_bytes: Option<u64>,
}

impl Default for History {
    /// 7 days, at most 1 GiB.
    fn default() -> History {
        History {
            max_age: Some(Duration::from_secs(7 * 24 * 3600)),
            max_bytes: Some(GIB),
        }
    }
}

impl History {
    /// No history: each checkpoint drops the segments before it, as a store without
    /// history does.
    pub fn off() -> History {
        History {
            max_age: Some(Duration::ZERO),
            max_bytes: Some(0),
        }
    }

    /// Keeps the segments that ended within `max_age` (`None`: however old) and, newest
    /// first, up to `max_bytes` in all (`None`: however many bytes).
    pub fn keep(max_age: Option<Duration>, max_bytes: Option<u64>) -> History {
        History { max_age, max_bytes }
    }

    /// How old a kept segment may be (the time since it ended); `None`: no limit.
    pub fn max_age(&self) -> Option<Duration> {
        self.max_age
    }

    /// How many bytes the kept segments may take; `None`: no limit.
    pub fn max_bytes(&self) -> Option<u64> {
        self.max_bytes
    }

    /// Whether no history is kept (only the latest segment).
    pub fn is_off(&self) -> bool {
        self.max_age == Some(Duration::ZERO) || self.max_bytes == Some(0)
    }

    /// The index in `segments` (oldest first, the latest last) of the oldest segment to
    /// keep at wall time `now_ms` (milliseconds since the Unix epoch): a segment goes
    /// when it ended `max_age` or longer ago, or when it and the newer ones take more
    /// than `max_bytes`; so do all older ones. The latest is always kept.
    pub fn keep_from(&self, segments: &[SegmentCost], now_ms: u64) -> usize {
        let Some(latest) = segments.len().checked_sub(1) else {
            return 0;
        };
        if self.is_off() {
            return latest;
        }
        let mut total = segments[latest].bytes;
        for index in (0..latest).rev() {
            let segment = segments[index];
            total = total.saturating_add(segment.bytes);
            let too_old = self.max_age.is_some_and(|age| {
                let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
                now_ms.saturating_sub(segment.ended_ms) >= age_ms
            });
            let too_big = self.max_bytes.is_some_and(|max| total > max);
            if too_old || too_big {
                return index + 1;
            }
        }
        0
    }
}

/// A segment as [`History::keep_from`] weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentCost {
    /// When it ended (the next checkpoint's wall time), in milliseconds since the Unix
    /// epoch; the latest segment's is not looked at.
    pub ended_ms: u64,
    /// What its checkpoint and entries take, encoded.
    pub bytes: u64,
}

/// Shows `7d`, `7d,1GiB`, `2GiB`, `off`, or `all` (no limit): what [`History::from_str`]
/// reads.
impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_off() {
            return f.write_str("off");
        }
        let mut parts = Vec::new();
        if let Some(age) = self.max_age {
            parts.push(show_age(age));
        }
        if let Some(bytes) = self.max_bytes {
            parts.push(show_bytes(bytes));
        }
        if parts.is_empty() {
            return f.write_str("all");
        }
        f.write_str(&parts.join(","))
    }
}

fn show_age(age: Duration) -> String {
    let secs = age.as_secs();
    for (unit, per) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if secs > 0 && secs.is_multiple_of(per) && age.subsec_nanos() == 0 {
            return format!("{}{unit}", secs / per);
        }
    }
    format!("{secs}s")
}

fn show_bytes(bytes: u64) -> String {
    for (unit, per) in [("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes > 0 && bytes.is_multiple_of(per) {
            return format!("{}{unit}", bytes / per);
        }
    }
    format!("{bytes}B")
}

/// Why a history setting could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad history `{given}`: {reason} (expected `off`, `all`, an age like `7d`, a size like `2GiB`, or both: `7d,2GiB`)"
)]
pub struct HistoryParseError {
    given: String,
    reason: String,
}

/// Reads `off`, `all`, an age (`30m`, `12h`, `7d`, `90s`), a size (`500MiB`, `2GiB`,
/// `1048576B`), or an age and a size separated by a comma (`7d,2GiB`). Given one, the
/// other has no limit.
impl FromStr for History {
    type Err = HistoryParseError;

    fn from_str(given: &str) -> Result<History, HistoryParseError> {
        let fail = |reason: String| HistoryParseError {
            given: given.to_owned(),
            reason,
        };
        let text = given.trim();
        match text {
            "off" => return Ok(History::off()),
            "all" => return Ok(History::keep(None, None)),
            "" => return Err(fail("it is empty".to_owned())),
            _ => {}
        }
        let mut age = None;
        let mut bytes = None;
        for part in text.split(',').map(str::trim) {
            let digits = part.chars().take_while(char::is_ascii_digit).count();
            let (number, unit) = part.split_at(digits);
            let number: u64 = number
                .parse()
                .map_err(|_| fail(format!("`{part}` does not start with a number")))?;
            let duplicate = |what: &str| fail(format!("it gives {what} twice"));
            let scaled = |per: u64| {
                number
                    .checked_mul(per)
                    .ok_or_else(|| fail(format!("`{part}` is too large")))
            };
            match unit {
                "s" | "m" | "h" | "d" => {
                    if age.is_some() {
                        return Err(duplicate("an age"));
                    }
                    let per = match unit {
                        "s" => 1,
                        "m" => 60,
                        "h" => 3600,
                        _ => 86_400,
                    };
                    age = Some(Duration::from_secs(scaled(per)?));
                }
                "B" | "KiB" | "MiB" | "GiB" | "TiB" => {
                    if bytes.is_some() {
                        return Err(duplicate("a size"));
                    }
                    let per = match unit {
                        "B" => 1,
                        "KiB" => 1 << 10,
                        "MiB" => 1 << 20,
                        "GiB" => GIB,
                        _ => GIB << 10,
                    };
                    bytes = Some(scaled(per)?);
                }
                "" => return Err(fail(format!("`{part}` has no unit"))),
                other => return Err(fail(format!("`{other}` is not a unit"))),
            }
        }
        Ok(History::keep(age, bytes))
    }
}

/// The wall clock a store stamps its checkpoints with and weighs their age by: the
/// system's, or one a test sets ([`WallClock::manual`]), so that retention by age is
/// tested without waiting.
#[derive(Clone, Default)]
pub struct WallClock {
    manual: Option<Arc<AtomicU64>>,
}

impl WallClock {
    /// The system's clock.
    pub fn system() -> WallClock {
        WallClock::default()
    }

    /// A clock that reads `at` until it is [`set`](WallClock::set) or
    /// [`advance`](WallClock::advance)d; its clones share it.
    pub fn manual(at: SystemTime) -> WallClock {
        WallClock {
            manual: Some(Arc::new(AtomicU64::new(unix_ms(at)))),
        }
    }

    /// Sets a manual clock to `at` (a system clock is left as it is).
    pub fn set(&self, at: SystemTime) {
        if let Some(ms) = &self.manual {
            ms.store(unix_ms(at), Ordering::SeqCst);
        }
    }

    /// Moves a manual clock on by `by` (a system clock is left as it is).
    pub fn advance(&self, by: Duration) {
        if let Some(ms) = &self.manual {
            let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
            ms.fetch_add(by, Ordering::SeqCst);
        }
    }

    /// Now, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match &self.manual {
            Some(ms) => ms.load(Ordering::SeqCst),
            None => unix_ms(SystemTime::now()),
        }
    }
}

/// Two clocks are equal when both are the system's or both are the same manual clock.
impl PartialEq for WallClock {
    fn eq(&self, other: &WallClock) -> bool {
        match (&self.manual, &other.manual) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for WallClock {}

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.manual {
            None => f.write_str("WallClock::system"),
            Some(ms) => write!(f, "WallClock::manual({} ms)", ms.load(Ordering::SeqCst)),
        }
    }
}

/// `at` in milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The wall time `ms` milliseconds after the Unix epoch.
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// What a store keeps of a checkpoint that the segments are listed from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KeptCheckpoint {
    /// Its id.
    pub id: u64,
    /// The sequence number of the last entry before it.
    pub last_seq: u64,
    /// The wall time it was written, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The bytes it was given.
    pub bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    pub prior: u64,
}

/// The segments of `kept` (oldest first), the latest running to entry `last_seq` with
/// `tail` bytes of entries: each checkpoint with the entries up to the next one.
pub fn segments_of(kept: &[KeptCheckpoint], last_seq: u64, tail: u64) -> Vec<crate::SegmentInfo> {
    kept.iter()
        .enumerate()
        .map(|(index, row)| {
            let next = kept.get(index + 1);
            let last_entry = next.map_or(last_seq, |next| next.last_seq);
            let entry_bytes = next.map_or(tail, |next| next.prior);
            crate::SegmentInfo::new(
                row.id,
                from_unix_ms(row.at_ms),
                row.last_seq + 1,
                last_entry,
                row.bytes + entry_bytes,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(ended_ms: u64, bytes: u64) -> SegmentCost {
        SegmentCost { ended_ms, bytes }
    }

    /// Age drops the segments that ended `max_age` or longer ago, and all before them.
    #[test]
    fn age_drops_old_segments() {
        let history = History::keep(Some(Duration::from_secs(10)), None);
        let segments = [seg(1_000, 1), seg(5_000, 1), seg(12_000, 1), seg(0, 1)];
        // At 15 s, the segment that ended at 5 s is 10 s old: gone.
        assert_eq!(history.keep_from(&segments, 15_000), 2);
        assert_eq!(history.keep_from(&segments, 14_999), 1);
        assert_eq!(history.keep_from(&segments, 22_000), 3);
        assert_eq!(history.keep_from(&segments, 10_999), 0);
    }

    /// Size keeps the newest segments that fit, the latest always.
    #[test]
    fn size_keeps_the_newest_that_fit() {
        let history = History::keep(None, Some(10));
        let segments = [seg(0, 4), seg(0, 4), seg(0, 4), seg(0, 20)];
        assert_eq!(history.keep_from(&segments, 0), 3);
        // 2 + 4 + 4 fit in 10 bytes; one more segment does not.
        let segments = [seg(0, 4), seg(0, 4), seg(0, 4), seg(0, 2)];
        assert_eq!(history.keep_from(&segments, 0), 1);
        assert_eq!(History::off().keep_from(&segments, 0), 3);
        assert_eq!(History::keep(None, None).keep_from(&segments, 0), 0);
        assert_eq!(History::off().keep_from(&[], 0), 0);
    }

    /// Settings read as written, and show as they read; bad ones say why.
    #[test]
    fn parses_and_shows() {
        let cases = [
            ("7d", "7d"),
            ("7d,2GiB", "7d,2GiB"),
            ("2GiB,7d", "7d,2GiB"),
            ("off", "off"),
            ("all", "all"),
            ("90s", "90s"),
            ("120m", "2h"),
            ("512MiB", "512MiB"),
        ];
        for (given, shown) in cases {
            let history: History = given.parse().expect(given);
            assert_eq!(history.to_string(), shown, "{given}");
        }
        assert_eq!(History::default().to_string(), "7d,1GiB");
        let error = "7x".parse::<History>().expect_err("refused").to_string();
        assert_eq!(
            error,
            "bad history `7x`: `x` is not a unit (expected `off`, `all`, an age like `7d`, \
             a size like `2GiB`, or both: `7d,2GiB`)"
        );
        let error = "7d,1d".parse::<History>().expect_err("refused").to_string();
        assert!(
            error.starts_with("bad history `7d,1d`: it gives an age twice"),
            "{error}"
        );
        let error = "d".parse::<History>().expect_err("refused").to_string();
        assert!(
            error.starts_with("bad history `d`: `d` does not start with a number"),
            "{error}"
        );
    }

    /// A manual clock reads what it is set to; its clones share it.
    #[test]
    fn manual_clock() {
        let clock = WallClock::manual(from_unix_ms(5_000));
        let other = clock.clone();
        other.advance(Duration::from_millis(250));
        assert_eq!(clock.now_ms(), 5_250);
        assert_eq!(clock, other);
        assert_ne!(clock, WallClock::system());
    }
}
