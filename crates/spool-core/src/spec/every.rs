//! Intervals as people write them: `90s`, `60m`, `1h30m`, `2h`, `1d`.

use std::time::Duration;

use super::error::{IntervalProblem, SpecError};

/// The longest interval taken: a yearly job belongs in cron, where it keeps its date.
pub(super) const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);

/// Parses one or more `<number><unit>` parts, units `d`, `h`, `m`, `s`, each at most
/// once and largest first.
pub(super) fn parse(text: &str) -> Result<Duration, SpecError> {
    let fail = |problem| SpecError::Interval {
        text: text.to_string(),
        problem,
    };
    let rest = text.trim();
    if rest.is_empty() {
        return Err(fail(IntervalProblem::Empty));
    }
    let mut total: u64 = 0;
    // Units must come in this order; `next_unit` is the index of the first still allowed.
    const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];
    let mut next_unit = 0;
    let mut chars = rest.char_indices().peekable();
    while let Some(&(start, first)) = chars.peek() {
        if !first.is_ascii_digit() {
            return Err(fail(IntervalProblem::Unexpected(rest[start..].to_string())));
        }
        let mut end = start;
        while let Some(&(i, c)) = chars.peek() {
            if !c.is_ascii_digit() {
                break;
            }
            end = i + c.len_utf8();
            chars.next();
        }
        let number = &rest[start..end];
        let Some((_, unit)) = chars.next() else {
            return Err(fail(IntervalProblem::MissingUnit(number.to_string())));
        };
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(fail(IntervalProblem::Unexpected(
                rest[end..].chars().take(8).collect(),
            )));
        };
        if index < next_unit {
            return Err(fail(IntervalProblem::UnitOrder));
        }
        next_unit = index + 1;
        // Anything past 366 days is refused anyway, so an overflow is simply "too long".
        let seconds = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(UNITS[index].1))
            .and_then(|s| s.checked_add(total))
            .ok_or_else(|| fail(IntervalProblem::TooLong))?;
        total = seconds;
    }
    let interval = Duration::from_secs(total);
    if interval.is_zero() {
        return Err(fail(IntervalProblem::Zero));
    }
    if interval > MAX_INTERVAL {
        return Err(fail(IntervalProblem::TooLong));
    }
    Ok(interval)
}
