//! A cron expression in a time zone: parsed once, then asked when it next fires (or last
//! fired) as a UTC instant. croner searches the local wall clock; jiff's compiled-in
//! time-zone rules turn wall clock times into instants across daylight-saving changes.

use std::cmp::Ordering;
use std::fmt;
use std::sync::{Arc, LazyLock};

use croner::{CivilDate, CivilDateTime, CivilTime, Cron, CronDateTime, Resolution, Weekday};
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};
use jiff::{SignedDuration, Timestamp, ZonedDateTime};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::SpecError;
use super::field;

/// The IANA rules compiled into the binary: a schedule fires at the same instants on
/// every machine, whatever its `/usr/share/zoneinfo` holds or lacks.
static TZDB: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);

/// A five-field cron expression (minute hour day-of-month month day-of-week) in an IANA
/// time zone.
///
/// The fields are Vixie cron's: numbers, `*`, ranges `a-b`, steps `*/n` and `a-b/n`,
/// lists `a,b`, month names `JAN`-`DEC` and weekday names `SUN`-`SAT` (any case), `?`
/// for `*` in the two day fields, and the nicknames `@yearly`, `@annually`, `@monthly`,
/// `@weekly`, `@daily`, `@midnight`, `@hourly`. When both day fields are restricted
/// (neither is `*` or `?`), a day matches if either matches. See `docs/schedules.md`,
/// "When a schedule fires", for what happens when the clocks change.
///
/// It serializes as `{"cron": expression, "tz": zone}`; deserializing parses again and
/// fails with the [`SpecError`] message on a bad expression or zone.
///
/// # Example
///
/// ```
/// use spool_core::CronSpec;
///
/// // 09:00 on weekdays in New York.
/// let spec = CronSpec::parse("0 9 * * MON-FRI", "America/New_York").unwrap();
/// let after: jiff::Timestamp = "2027-01-01T14:00:00Z".parse().unwrap(); // a Friday, 09:00 EST
/// assert_eq!(spec.next_after(after).unwrap().to_string(), "2027-01-04T14:00:00Z");
/// ```
#[derive(Clone)]
pub struct CronSpec {
    expression: String,
    zone: String,
    /// Shared: croner's parsed pattern is several hundred bytes, and a spec is cloned
    /// with its schedule.
    cron: Arc<Cron>,
    tz: TimeZone,
}

impl CronSpec {
    /// Parses a cron expression to be read in the IANA time zone `tz` (such as `"UTC"` or
    /// `"Europe/London"`).
    ///
    /// # Errors
    ///
    /// [`SpecError::Field`] naming the first bad field, [`SpecError::FieldCount`] unless
    /// there are exactly five fields, [`SpecError::UnknownNickname`],
    /// [`SpecError::NeverFires`] for an expression that names no existing day (`0 0 30 2
    /// *`), and [`SpecError::UnknownTimeZone`]. ([`SpecError::Rejected`] would mean the
    /// field checks let through something croner refuses: a bug.)
    ///
    /// # Example
    ///
    /// ```
    /// use spool_core::CronSpec;
    ///
    /// assert!(CronSpec::parse("*/5 * * * *", "UTC").is_ok());
    /// let err = CronSpec::parse("0 0 * *", "UTC").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "expected 5 fields (minute hour day-of-month month day-of-week), found 4"
    /// );
    /// ```
    pub fn parse(expr: &str, tz: &str) -> Result<CronSpec, SpecError> {
        let plain = field::check(expr)?;
        let zone = TZDB
            .get(tz)
            .map_err(|_| SpecError::UnknownTimeZone(tz.to_string()))?;
        // The checks above take only what croner takes; should the two ever disagree, the
        // expression is refused rather than trusted.
        let cron = plain.parse::<Cron>().map_err(|err| SpecError::Rejected {
            expression: expr.to_string(),
            reason: err.to_string(),
        })?;
        Ok(CronSpec {
            expression: expr.to_string(),
            zone: zone.iana_name().unwrap_or(tz).to_string(),
            cron: Arc::new(cron),
            tz: zone,
        })
    }

    /// The expression as given to [`CronSpec::parse`].
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone's IANA name, as the database spells it (`"america/new_york"` reads
    /// back as `"America/New_York"`).
    pub fn time_zone(&self) -> &str {
        &self.zone
    }

    /// The first fire strictly after `after`, or `None` if it never fires again (before
    /// the year 5000, where croner stops looking).
    ///
    /// # Example
    ///
    /// ```
    /// use spool_core::CronSpec;
    ///
    /// let spec = CronSpec::parse("0 0 29 2 *", "UTC").unwrap();
    /// let after: jiff::Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
    /// assert_eq!(spec.next_after(after).unwrap().to_string(), "2028-02-29T00:00:00Z");
    /// ```
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // Fires fall on whole minutes, so a search from the whole second at or before
        // `after`, exclusive of it, finds the same fire.
        let start = self.local(after)?;
        let found = self.cron.find_next_occurrence(&start, false).ok()?;
        Some(found.0.timestamp())
    }

    /// The latest fire at or before `at` and strictly after `since`, or `None`.
    ///
    /// This searches backwards from `at` through the calendar, field by field, so its
    /// cost does not grow with the number of fires missed.
    ///
    /// # Example
    ///
    /// ```
    /// use spool_core::CronSpec;
    ///
    /// let spec = CronSpec::parse("0 9 * * *", "UTC").unwrap();
    /// let since: jiff::Timestamp = "2027-01-01T09:00:00Z".parse().unwrap();
    /// let at: jiff::Timestamp = "2027-01-05T12:00:00Z".parse().unwrap();
    /// assert_eq!(spec.last_between(since, at).unwrap().to_string(), "2027-01-05T09:00:00Z");
    /// ```
    pub fn last_between(&self, since: Timestamp, at: Timestamp) -> Option<Timestamp> {
        if at <= since {
            return None;
        }
        let start = self.local(at)?;
        let found = self.cron.find_previous_occurrence(&start, true).ok()?;
        let fire = found.0.timestamp();
        (fire > since).then_some(fire)
    }

    /// `at` on this zone's wall clock, cut to the whole second (croner's precision).
    fn local(&self, at: Timestamp) -> Option<Local> {
        let second = Timestamp::from_second(at.as_second()).ok()?;
        Some(Local(second.to_zoned_datetime(self.tz.clone())))
    }
}

impl PartialEq for CronSpec {
    fn eq(&self, other: &CronSpec) -> bool {
        self.expression == other.expression && self.zone == other.zone
    }
}

impl Eq for CronSpec {}

impl fmt::Debug for CronSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronSpec")
            .field("cron", &self.expression)
            .field("tz", &self.zone)
            .finish()
    }
}

/// The serialized form: the text a user wrote, never croner's parsed state.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CronRecord<'a> {
    #[serde(borrow)]
    cron: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    tz: std::borrow::Cow<'a, str>,
}

impl Serialize for CronSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CronRecord {
            cron: self.expression.as_str().into(),
            tz: self.zone.as_str().into(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CronSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<CronSpec, D::Error> {
        let record = CronRecord::deserialize(deserializer)?;
        CronSpec::parse(&record.cron, &record.tz).map_err(serde::de::Error::custom)
    }
}

/// A wall clock time in a zone, as croner searches it. A newtype, since neither the
/// trait nor `ZonedDateTime` is ours; croner's own jiff backend is built for jiff 0.2.
#[derive(Clone)]
struct Local(ZonedDateTime);

impl CronDateTime for Local {
    fn to_civil(&self) -> CivilDateTime {
        let dt = self.0.datetime();
        // jiff keeps every part in range, so croner's unchecked constructors are safe.
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(
                i32::from(dt.year()),
                dt.month() as u32,
                dt.day() as u32,
            ),
            CivilTime::from_parts_unchecked(
                dt.hour() as u32,
                dt.minute() as u32,
                dt.second() as u32,
            ),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        Weekday::from_days_from_sunday(self.0.weekday().to_sunday_zero_offset() as u32)
    }

    fn resolve_civil(
        &self,
        civil: CivilDateTime,
    ) -> Result<Resolution<Self>, croner::errors::CronError> {
        use croner::errors::CronError;
        let year = i16::try_from(civil.year()).map_err(|_| CronError::InvalidDate)?;
        let dt = DateTime::new(
            year,
            civil.month() as i8,
            civil.day() as i8,
            civil.hour() as i8,
            civil.minute() as i8,
            civil.second() as i8,
            0,
        )
        .map_err(|_| CronError::InvalidDate)?;
        let ambiguous = self.0.time_zone().to_ambiguous_zoned_datetime(dt);
        Ok(match ambiguous.offset() {
            AmbiguousOffset::Unambiguous { .. } => Resolution::Single(Local(
                ambiguous
                    .unambiguous()
                    .map_err(|_| CronError::InvalidTime)?,
            )),
            AmbiguousOffset::Fold { .. } => Resolution::Ambiguous(
                Local(
                    ambiguous
                        .clone()
                        .earlier()
                        .map_err(|_| CronError::InvalidTime)?,
                ),
                Local(ambiguous.later().map_err(|_| CronError::InvalidTime)?),
            ),
            AmbiguousOffset::Gap { .. } => Resolution::Gap,
        })
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0
            .checked_add(SignedDuration::from_secs(seconds))
            .ok()
            .map(Local)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.timestamp().cmp(&other.0.timestamp())
    }
}
