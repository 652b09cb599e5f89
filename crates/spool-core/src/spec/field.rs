//! Reads the five fields of a cron expression before croner sees them, so that every
//! mistake comes back naming its field, and croner is handed one plain dialect: numbers,
//! `*`, ranges, steps and lists (names are turned into numbers here).

use super::error::{CronField, FieldProblem, SpecError};

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The longest a month can be, February counted in a leap year.
const MONTH_LENGTHS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Checks a cron expression, expanding a nickname first, and gives back the text croner
/// parses: five fields of numbers, `*`, ranges, steps and lists.
pub(super) fn check(expr: &str) -> Result<String, SpecError> {
    let trimmed = expr.trim();
    let expanded = if trimmed.starts_with('@') {
        nickname(trimmed).ok_or_else(|| SpecError::UnknownNickname(trimmed.to_string()))?
    } else {
        trimmed
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(SpecError::FieldCount {
            found: fields.len(),
        });
    }
    let mut normalized = Vec::with_capacity(5);
    let mut values = Vec::with_capacity(5);
    for (field, text) in CronField::ALL.into_iter().zip(&fields) {
        let (plain, set) =
            check_field(field, text).map_err(|problem| SpecError::Field { field, problem })?;
        normalized.push(plain);
        values.push(set);
    }
    if never_fires(&fields, &values) {
        return Err(SpecError::NeverFires(expr.to_string()));
    }
    Ok(normalized.join(" "))
}

/// The nicknames Vixie cron takes (all but `@reboot`, which is no schedule).
fn nickname(text: &str) -> Option<&'static str> {
    let lower = text.to_ascii_lowercase();
    Some(match lower.as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => return None,
    })
}

/// A day field of `*` or `?` leaves the day to the other field (Vixie's rule); croner
/// reads the same two spellings as unrestricted.
fn is_unrestricted(text: &str) -> bool {
    text == "*" || text == "?"
}

/// Whether the day fields can never name a day that exists: only when day-of-week is
/// unrestricted (else any week has the weekday), and every month named is too short for
/// the smallest day named. February counts 29 days, so `0 0 29 2 *` is fine.
fn never_fires(fields: &[&str], values: &[u64]) -> bool {
    if is_unrestricted(fields[2]) || !is_unrestricted(fields[4]) {
        return false;
    }
    let smallest_day = values[2].trailing_zeros();
    (1..=12u32)
        .filter(|month| values[3] & (1 << month) != 0)
        .all(|month| MONTH_LENGTHS[month as usize - 1] < smallest_day)
}

/// Checks one field, giving back its plain spelling and the set of values it names
/// (bit `n` set for value `n`).
fn check_field(field: CronField, text: &str) -> Result<(String, u64), FieldProblem> {
    let (min, max) = field.range();
    let mut set = 0u64;
    let mut items = Vec::new();
    let in_list = text.contains(',');
    for item in text.split(',') {
        if item.is_empty() {
            return Err(FieldProblem::EmptyItem(text.to_string()));
        }
        // A bare `*` already names every value; croner refuses it beside others.
        if in_list && (item == "*" || item == "?") {
            return Err(FieldProblem::WildcardInList(text.to_string()));
        }
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(parse_step(step, max)?)),
            None => (item, None),
        };
        let (start, end, plain) = if base == "*" || (base == "?" && is_day_field(field)) {
            (min, max, "*".to_string())
        } else if let Some((from, to)) = base.split_once('-') {
            let from = value(field, from, item)?;
            let to = value(field, to, item)?;
            if from > to {
                return Err(FieldProblem::ReversedRange(base.to_string()));
            }
            (from, to, format!("{from}-{to}"))
        } else {
            let single = value(field, base, item)?;
            if step.is_some() {
                return Err(FieldProblem::StepWithoutRange {
                    text: item.to_string(),
                    suggestion: format!("{base}-{max}/{}", step.unwrap_or(1)),
                });
            }
            (single, single, single.to_string())
        };
        let step = step.unwrap_or(1);
        let mut n = start;
        while n <= end {
            set |= 1 << n;
            n += step;
        }
        items.push(match step {
            1 if base != "*" && base != "?" => plain,
            1 => "*".to_string(),
            _ => format!("{plain}/{step}"),
        });
    }
    if field == CronField::DayOfWeek && set & (1 << 7) != 0 {
        set |= 1; // 7 is Sunday, as 0 is
    }
    let plain = if is_day_field(field) && is_unrestricted(text) {
        "*".to_string()
    } else {
        items.join(",")
    };
    Ok((plain, set))
}

fn is_day_field(field: CronField) -> bool {
    matches!(field, CronField::DayOfMonth | CronField::DayOfWeek)
}

/// Reads a step: a whole number from 1 to the field's maximum.
fn parse_step(text: &str, max: u32) -> Result<u32, FieldProblem> {
    let bad = || FieldProblem::BadStep {
        step: text.to_string(),
        max,
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match text.parse::<u32>() {
        Ok(step) if (1..=max).contains(&step) => Ok(step),
        _ => Err(bad()),
    }
}

/// Reads one value: a number in the field's range, or a month or weekday name in its
/// field. `item` is the whole list item, for messages about syntax other dialects take.
fn value(field: CronField, text: &str, item: &str) -> Result<u32, FieldProblem> {
    let (min, max) = field.range();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let out_of_range = || FieldProblem::OutOfRange {
            value: text.to_string(),
            min,
            max,
        };
        let n: u32 = text.parse().map_err(|_| out_of_range())?;
        return if (min..=max).contains(&n) {
            Ok(n)
        } else {
            Err(out_of_range())
        };
    }
    let upper = text.to_ascii_uppercase();
    let (names, spelled): (&[&str], _) = match field {
        CronField::Month => (&MONTHS, Some("JAN-DEC")),
        CronField::DayOfWeek => (&WEEKDAYS, Some("SUN-SAT")),
        _ => (&[], None),
    };
    if let Some(index) = names.iter().position(|name| *name == upper) {
        return Ok(index as u32 + u32::from(field == CronField::Month));
    }
    if is_other_dialect(field, item) {
        return Err(FieldProblem::Unsupported(item.to_string()));
    }
    Err(FieldProblem::NotAValue {
        text: text.to_string(),
        names: spelled,
    })
}

/// Quartz and croner extensions: `L` (last), `W` (nearest weekday), `#` (nth weekday),
/// and `?` where it means nothing.
fn is_other_dialect(field: CronField, item: &str) -> bool {
    let upper = item.to_ascii_uppercase();
    upper.contains('#')
        || upper.contains('?')
        || (is_day_field(field) && (upper.contains('L') || upper.ends_with('W')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_question_marks_become_numbers_and_stars() {
        let plain = |expr| check(expr).expect("valid");
        assert_eq!(plain("0 9 ? jan-Mar,DEC mon-fri/2"), "0 9 * 1-3,12 1-5/2");
        assert_eq!(plain("*/15 0-23/6 1,15 * ?"), "*/15 0-23/6 1,15 * *");
        assert_eq!(plain("@Daily"), "0 0 * * *");
    }

    #[test]
    fn day_sets_decide_whether_a_spec_ever_fires() {
        assert!(check("0 0 29 2 *").is_ok());
        assert!(check("0 0 31 1-2 *").is_ok());
        assert_eq!(
            check("0 0 30,31 2 *"),
            Err(SpecError::NeverFires("0 0 30,31 2 *".to_string()))
        );
        assert!(check("0 0 31 4 *").is_err());
        // Either day field may match when both are restricted, so a weekday rescues it.
        assert!(check("0 0 31 4 MON").is_ok());
    }
}
