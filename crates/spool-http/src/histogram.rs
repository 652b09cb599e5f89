//! Histograms of durations for `/metrics`: how long tasks waited for a slot or a rate
//! limit, how long they took, and how long they waited on each kind of request,
//! observed as each task ends.

use std::collections::BTreeMap;
use std::time::Duration;

use spool_core::{Time, Timeline, Wait};

/// The buckets' upper bounds, in milliseconds (5 ms to 5 minutes; above is `+Inf`): from
/// a tool answered at once to an LLM call that streams for minutes, or a long queue.
pub const BOUNDS_MS: [u64; 15] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000,
];

/// A Prometheus histogram of durations: counts per bucket of [`BOUNDS_MS`] (and one
/// above them all), their sum, and how many.
///
/// ```
/// use std::time::Duration;
/// use spool_http::Histogram;
///
/// let mut waits = Histogram::default();
/// waits.observe(Duration::from_millis(7));
/// waits.observe(Duration::from_secs(3));
/// let buckets: Vec<(String, u64)> = waits.buckets().collect();
/// assert_eq!(buckets[0], ("0.005".to_owned(), 0));
/// assert_eq!(buckets[1], ("0.01".to_owned(), 1)); // 7 ms is at most 10 ms
/// assert_eq!(buckets[9], ("5".to_owned(), 2)); // cumulative
/// assert_eq!(buckets.last(), Some(&("+Inf".to_owned(), 2)));
/// assert_eq!(waits.count(), 2);
/// assert_eq!(waits.sum(), Duration::from_millis(3_007));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// How many fell in each bucket (not cumulative): `BOUNDS_MS`, then `+Inf`.
    counts: [u64; BOUNDS_MS.len() + 1],
    sum: Duration,
}

impl Histogram {
    /// Counts one duration.
    pub fn observe(&mut self, took: Duration) {
        let bucket = BOUNDS_MS.partition_point(|&ms| Duration::from_millis(ms) < took);
        self.counts[bucket] += 1;
        self.sum += took;
    }

    /// How many were observed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their sum.
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// Each bucket's upper bound in seconds as Prometheus writes it (`le`), with how
    /// many were at most that long (cumulative), ending with `+Inf`.
    pub fn buckets(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        let bounds = BOUNDS_MS
            .iter()
            .map(|&ms| Some(ms))
            .chain(std::iter::once(None));
        bounds.zip(&self.counts).scan(0, |below, (bound, &n)| {
            *below += n;
            let le = bound.map_or_else(
                || "+Inf".to_owned(),
                |ms| format!("{}", Duration::from_millis(ms).as_secs_f64()),
            );
            Some((le, *below))
        })
    }
}

/// The histograms `/metrics` gives, over the tasks that ended while the views
/// watched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskHistograms {
    /// Each ended task's time waiting for a slot or a rate limit (queued plus rate
    /// limited: the wait that counts), for tasks seen from their submission.
    pub wait: Histogram,
    /// Each ended task's time from its submission to its end.
    pub duration: Histogram,
    /// Each wait of a task on one request, by kind (`llm`, `tool:NAME`, `confirm`: a
    /// person), for tasks seen from their submission. A wait on several requests at
    /// once is not counted (it is not one kind's).
    pub request_wait: BTreeMap<String, Histogram>,
}

impl TaskHistograms {
    /// Counts a task that ended at `end`, submitted at `created`, with `timeline`.
    /// Its waits count only if the timeline starts at its submission (a task restored
    /// at start has only what came after). Returns the wait it counted (for a slot or
    /// a rate limit), if it counted one.
    pub fn observe(&mut self, timeline: &Timeline, created: Time, end: Time) -> Option<Duration> {
        self.duration.observe(end.saturating_since(created));
        if timeline.started() != Some(created) {
            return None;
        }
        let mut waited = Duration::ZERO;
        for interval in timeline.intervals(end) {
            let took = interval.duration();
            match &interval.wait {
                Wait::Queued | Wait::RateLimited(_) => waited += took,
                Wait::Request(kind) => self
                    .request_wait
                    .entry(kind.to_string())
                    .or_default()
                    .observe(took),
                _ => {}
            }
        }
        self.wait.observe(waited);
        Some(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_on_a_bound_is_in_that_bucket() {
        let mut h = Histogram::default();
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_millis(5) + Duration::from_nanos(1));
        h.observe(Duration::from_secs(301));
        h.observe(Duration::ZERO);
        let buckets: Vec<(String, u64)> = h.buckets().collect();
        assert_eq!(buckets[0], ("0.005".to_owned(), 2));
        assert_eq!(buckets[1], ("0.01".to_owned(), 3));
        assert_eq!(buckets[14], ("300".to_owned(), 3));
        assert_eq!(buckets[15], ("+Inf".to_owned(), 4));
        assert_eq!(buckets.len(), BOUNDS_MS.len() + 1);
        let les: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
        assert_eq!(
            les,
            [
                "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
                "30", "60", "120", "300", "+Inf"
            ]
        );
    }
}
