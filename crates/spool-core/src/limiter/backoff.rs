//! The back-off after a provider's 429: the larger of its `Retry-After` and an
//! exponential delay from consecutive hits; success resets the count.

use std::time::Duration;

use crate::Time;

/// How long to back off after a 429 (seed 001: `2^hits` seconds, hits capped at 6).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// Whether a 429 holds the kind back and the request is sent again; off, a 429 is
    /// answered to the task like any other error.
    pub enabled: bool,
    /// The delay after the first hit; doubled per further consecutive hit.
    pub base: Duration,
    /// The longest exponential delay (a larger `Retry-After` still wins).
    pub max: Duration,
    /// How many times one request is sent again after 429s before the error is
    /// answered to its task.
    pub max_retries: u32,
}

impl Default for BackoffConfig {
    fn default() -> BackoffConfig {
        BackoffConfig {
            enabled: true,
            base: Duration::from_secs(2),
            max: Duration::from_secs(64),
            max_retries: 20,
        }
    }
}

/// One kind's back-off state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Backoff {
    pub(crate) until: Time,
    pub(crate) hits: u32,
}

impl Backoff {
    /// Records a 429 at `now`; returns the end of the back-off.
    pub(crate) fn hit(
        &mut self,
        config: &BackoffConfig,
        now: Time,
        retry_after: Option<Duration>,
    ) -> Time {
        self.hits = self.hits.saturating_add(1);
        let doublings = self.hits.saturating_sub(1).min(30);
        let exponential = config
            .base
            .saturating_mul(1u32 << doublings)
            .min(config.max);
        let delay = retry_after.unwrap_or_default().max(exponential);
        self.until = self.until.max(now + delay);
        self.until
    }

    /// A success: the next 429 starts from the base delay again. A back-off already
    /// running is kept: the provider asked for it.
    pub(crate) fn success(&mut self) {
        self.hits = 0;
    }

    pub(crate) fn active(&self, now: Time) -> bool {
        now < self.until
    }
}
