//! What can be wrong with a spec: a cron field, the number of fields, the time zone,
//! an interval. Each message names the part that was wrong, so a user can fix it.

use std::fmt;

/// A spec that cannot be used, saying what was wrong and where.
///
/// # Example
///
/// ```
/// use spool_core::{CronSpec, SpecError};
///
/// let err = CronSpec::parse("61 * * * *", "UTC").unwrap_err();
/// assert_eq!(err.to_string(), "minute: 61 is out of range 0-59");
/// assert!(matches!(err, SpecError::Field { .. }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// One field of a cron expression is wrong.
    #[error("{field}: {problem}")]
    Field {
        /// Which field.
        field: CronField,
        /// What is wrong with it.
        problem: FieldProblem,
    },
    /// A cron expression without exactly five fields.
    #[error(
        "expected 5 fields (minute hour day-of-month month day-of-week), found {found}{}",
        if *found == 6 || *found == 7 { "; a seconds or year field is not supported" } else { "" }
    )]
    FieldCount {
        /// How many whitespace-separated fields the expression had.
        found: usize,
    },
    /// A nickname other than `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
    /// `@midnight` or `@hourly`.
    #[error(
        "unknown nickname {0:?} (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
    )]
    UnknownNickname(String),
    /// A valid cron expression that names no day that exists, such as `0 0 30 2 *`.
    #[error("{0:?} never fires: no month it names has the day of the month it names")]
    NeverFires(String),
    /// An expression that passed spool's own field checks but that croner refused. The
    /// checks are meant to take only what croner takes, so this is a bug to report.
    #[error("cron expression {expression:?} was refused by the cron parser: {reason}")]
    Rejected {
        /// The expression as given.
        expression: String,
        /// croner's message.
        reason: String,
    },
    /// A time zone name that is not in the compiled-in IANA database.
    #[error("unknown time zone {0:?}")]
    UnknownTimeZone(String),
    /// An interval that cannot be read, is zero, or is longer than 366 days.
    #[error("interval {text:?}: {problem}")]
    Interval {
        /// The interval as given.
        text: String,
        /// What is wrong with it.
        problem: IntervalProblem,
    },
}

/// The five fields of a cron expression, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CronField {
    /// Minute of the hour, 0-59.
    Minute,
    /// Hour of the day, 0-23.
    Hour,
    /// Day of the month, 1-31.
    DayOfMonth,
    /// Month, 1-12 or `JAN`-`DEC`.
    Month,
    /// Day of the week, 0-7 (0 and 7 are Sunday) or `SUN`-`SAT`.
    DayOfWeek,
}

impl CronField {
    /// The fields in the order they are written.
    pub const ALL: [CronField; 5] = [
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    /// The field's name as error messages spell it: `minute`, `hour`, `day-of-month`,
    /// `month`, `day-of-week`.
    pub fn name(self) -> &'static str {
        match self {
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
        }
    }

    /// The smallest and largest number the field takes.
    pub fn range(self) -> (u32, u32) {
        match self {
            CronField::Minute => (0, 59),
            CronField::Hour => (0, 23),
            CronField::DayOfMonth => (1, 31),
            CronField::Month => (1, 12),
            CronField::DayOfWeek => (0, 7),
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with one cron field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldProblem {
    /// A number outside the field's range.
    #[error("{value} is out of range {min}-{max}")]
    OutOfRange {
        /// The number as written.
        value: String,
        /// The smallest the field takes.
        min: u32,
        /// The largest the field takes.
        max: u32,
    },
    /// Something that is neither a number nor, in the month and day-of-week fields, a
    /// name.
    #[error("{text:?} is not a number{}", names_hint(*names))]
    NotAValue {
        /// The text as written.
        text: String,
        /// The names the field would have taken, if any (`JAN-DEC`, `SUN-SAT`).
        names: Option<&'static str>,
    },
    /// An empty item in a list, as in `1,,2` or `1,`.
    #[error("empty item in list {0:?}")]
    EmptyItem(String),
    /// A bare `*` or `?` beside other items, as in `*,5`: it already names every value.
    #[error("{0:?}: * names every value and cannot be one item of a list")]
    WildcardInList(String),
    /// A range whose start is after its end, as in `5-2`.
    #[error("{0:?} is a reversed range (start after end)")]
    ReversedRange(String),
    /// A step that is not a whole number from 1 to the field's maximum.
    #[error("step {step:?} must be a whole number from 1 to {max}")]
    BadStep {
        /// The step as written.
        step: String,
        /// The largest step the field takes.
        max: u32,
    },
    /// A step after a single value, as in `5/15`: cron needs `*` or a range before a step.
    #[error("{text:?}: a step needs * or a range before it (write {suggestion})")]
    StepWithoutRange {
        /// The item as written.
        text: String,
        /// The same item written with a range.
        suggestion: String,
    },
    /// Syntax that some cron dialects take but spool does not (`L`, `W`, `#`, `?` outside
    /// the day fields, a seconds field).
    #[error(
        "{0:?} is not supported (numbers, names, *, ranges a-b, steps */n and a-b/n, and lists are)"
    )]
    Unsupported(String),
}

fn names_hint(names: Option<&'static str>) -> String {
    match names {
        Some(names) => format!(" or a name ({names})"),
        None => String::new(),
    }
}

/// What is wrong with an interval such as `"1h30m"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntervalProblem {
    /// Nothing was given.
    #[error("is empty (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)")]
    Empty,
    /// A number without a unit after it.
    #[error("{0} has no unit (use d, h, m or s)")]
    MissingUnit(String),
    /// A unit without a number before it, or a character that is neither.
    #[error("unexpected {0:?} (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)")]
    Unexpected(String),
    /// A unit given twice, or after a smaller one (`30m1h`).
    #[error("units must each appear once, largest first (d, h, m, s)")]
    UnitOrder,
    /// The interval adds up to zero.
    #[error("must be more than zero")]
    Zero,
    /// The interval is longer than 366 days.
    #[error("must be at most 366 days")]
    TooLong,
}
