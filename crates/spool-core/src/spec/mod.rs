//! When a schedule fires: a cron expression in a time zone, a fixed interval, or one
//! instant. Pure arithmetic on instants the caller passes in; the schedule table owns
//! the clock, the anchors and what to do about missed fires.

mod cron;
mod error;
mod every;
mod field;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

pub use cron::CronSpec;
pub use error::{CronField, FieldProblem, IntervalProblem, SpecError};

/// When a schedule fires.
///
/// All answers are UTC instants ([`jiff::Timestamp`]); a cron spec reads its fields on
/// its zone's wall clock. See `docs/schedules.md`, "When a schedule fires".
///
/// Serialized (with serde's default enum form) as `{"Cron": {"cron": "0 9 * * *", "tz":
/// "UTC"}}`, `{"Every": {"secs": 3600, "nanos": 0}}` or `{"Once":
/// "2027-01-01T00:00:00Z"}`.
///
/// # Example
///
/// ```
/// use spool_core::{CronSpec, Spec};
///
/// let every = Spec::Every(Spec::parse_every("1h30m").unwrap());
/// let after: jiff::Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
/// assert_eq!(every.next_after(after).unwrap().to_string(), "2027-01-01T01:30:00Z");
///
/// let cron = Spec::Cron(CronSpec::parse("30 2 * * *", "America/New_York").unwrap());
/// // 02:30 does not exist on 2027-03-14 in New York: the job runs at 03:00 EDT.
/// let after: jiff::Timestamp = "2027-03-14T05:00:00Z".parse().unwrap();
/// assert_eq!(cron.next_after(after).unwrap().to_string(), "2027-03-14T07:00:00Z");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Spec {
    /// A cron expression in a time zone.
    Cron(CronSpec),
    /// Every `Duration` (from the last run's start; the schedule table decides the
    /// anchor). A zero interval never fires.
    Every(Duration),
    /// Once, at this instant.
    Once(Timestamp),
}

impl Spec {
    /// The first fire strictly after `after` (`None`: never again). For `Every`, `after +
    /// interval`; for `Once`, its instant if that is after `after`.
    ///
    /// # Example
    ///
    /// ```
    /// use spool_core::Spec;
    ///
    /// let at: jiff::Timestamp = "2027-06-01T12:00:00Z".parse().unwrap();
    /// let once = Spec::Once(at);
    /// assert_eq!(once.next_after("2027-06-01T11:59:59Z".parse().unwrap()), Some(at));
    /// assert_eq!(once.next_after(at), None);
    /// ```
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Spec::Cron(cron) => cron.next_after(after),
            Spec::Every(interval) => {
                let interval = SignedDuration::try_from(*interval).ok()?;
                if interval.is_zero() {
                    return None;
                }
                after.checked_add(interval).ok()
            }
            Spec::Once(at) => (*at > after).then_some(*at),
        }
    }

    /// The latest fire at or before `at` and strictly after `since` (`None` if none), for
    /// catch-up after downtime.
    ///
    /// The work is bounded whatever the outage: cron searches backwards field by field,
    /// `Every` divides. `Every` counts its fires from `since` (the last run's start, as
    /// [`Spec::next_after`] does when iterated from it): the answer is `since + n ×
    /// interval` for the largest `n ≥ 1` that is not past `at`.
    ///
    /// # Example
    ///
    /// ```
    /// use spool_core::Spec;
    ///
    /// let every = Spec::Every(Spec::parse_every("60m").unwrap());
    /// let since: jiff::Timestamp = "2027-01-01T00:10:00Z".parse().unwrap();
    /// let at: jiff::Timestamp = "2027-01-01T05:00:00Z".parse().unwrap();
    /// assert_eq!(every.last_between(since, at).unwrap().to_string(), "2027-01-01T04:10:00Z");
    /// ```
    pub fn last_between(&self, since: Timestamp, at: Timestamp) -> Option<Timestamp> {
        if at <= since {
            return None;
        }
        match self {
            Spec::Cron(cron) => cron.last_between(since, at),
            Spec::Every(interval) => {
                let step = interval.as_nanos();
                if step == 0 {
                    return None;
                }
                let gap = (at.as_nanosecond() - since.as_nanosecond()).unsigned_abs();
                let fires = gap / step;
                if fires == 0 {
                    return None;
                }
                let offset = i128::try_from(fires * step).ok()?;
                Timestamp::from_nanosecond(since.as_nanosecond() + offset).ok()
            }
            Spec::Once(once) => (since < *once && *once <= at).then_some(*once),
        }
    }

    /// Parses an interval like `"60m"`, `"1h30m"`, `"90s"`, `"2h"`, `"1d"`: whole numbers
    /// with the units `d`, `h`, `m`, `s`, each at most once and largest first.
    ///
    /// # Errors
    ///
    /// [`SpecError::Interval`] if the text cannot be read, adds up to zero, or is longer
    /// than 366 days.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use spool_core::Spec;
    ///
    /// assert_eq!(Spec::parse_every("1h30m"), Ok(Duration::from_secs(5400)));
    /// assert_eq!(
    ///     Spec::parse_every("0m").unwrap_err().to_string(),
    ///     "interval \"0m\": must be more than zero"
    /// );
    /// ```
    pub fn parse_every(text: &str) -> Result<Duration, SpecError> {
        every::parse(text)
    }
}
