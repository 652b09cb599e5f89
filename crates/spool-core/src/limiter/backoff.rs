//! The back-off after a provider's 429: the larger of its `Retry-After` and an
//! exponential delay from consecutive hits; success resets the count. 429s to requests
//! sent before the back-off began are the same hit, not one each, and no wait is longer
//! than `max_wait` or takes a request past its `budget`.

use std::time::Duration;

use crate::request::BackoffBound;
use crate::time::Time;

/// How long to back off after a 429 (`2^hits` seconds, hits capped at 6), and
/// how long a request may be held back by 429s before its task gets the error.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// Whether a 429 holds the kind back and the request is sent again; off, a 429 is
    /// answered to the task like any other error.
    pub enabled: bool,
    /// The delay after the first hit; doubled per further consecutive hit.
    pub base: Duration,
    /// The longest exponential delay (a larger `Retry-After` still wins, up to
    /// `max_wait`).
    pub max: Duration,
    /// How many times one request is sent again after 429s before the error is
    /// answered to its task.
    pub max_retries: u32,
    /// The longest `Retry-After` waited out (default 5 minutes). A 429 asking for longer
    /// is answered to its task at once as
    /// [`RequestError::RateLimitExceeded`](crate::RequestError::RateLimitExceeded); the
    /// kind still backs off, for `max_wait`. No back-off of a kind is longer.
    pub max_wait: Duration,
    /// How long one request may be held back by 429s in all (default 5 minutes): a 429
    /// whose back-off would take it past this is answered to its task as
    /// [`RequestError::RateLimitExceeded`](crate::RequestError::RateLimitExceeded).
    pub budget: Duration,
}

impl Default for BackoffConfig {
    fn default() -> BackoffConfig {
        BackoffConfig {
            enabled: true,
            base: Duration::from_secs(2),
            max: Duration::from_secs(64),
            max_retries: 20,
            max_wait: Duration::from_secs(300),
            budget: Duration::from_secs(300),
        }
    }
}

/// One kind's back-off state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Backoff {
    pub(crate) until: Time,
    /// Consecutive hits since the last success.
    pub(crate) hits: u32,
    /// How many hits have begun a back-off, ever: a request sent through the gate
    /// carries the epoch it left in, so that a 429 to a request sent before the current
    /// back-off began is known as part of the same hit.
    pub(crate) epoch: u32,
}

/// What a 429 does to its request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hit {
    /// The request waits at its gate until the back-off ends, then goes again; its
    /// back-off so far is now `waited`.
    Resend { until: Time, waited: Duration },
    /// The request is given up: the wait would pass `bound`.
    GiveUp { bound: BackoffBound },
}

impl Backoff {
    /// Records a 429 at `now` to a request sent in back-off `epoch`, which had been held
    /// back `waited` by earlier 429s. A hit counts (and doubles the delay) unless the
    /// request was sent before the current back-off began: then only the provider's
    /// `Retry-After` can lengthen the back-off.
    pub(crate) fn hit(
        &mut self,
        config: &BackoffConfig,
        now: Time,
        retry_after: Option<Duration>,
        epoch: u32,
        waited: Duration,
    ) -> Hit {
        let asked = retry_after.unwrap_or_default();
        let mut delay = asked;
        if self.hits == 0 || epoch == self.epoch {
            self.hits = self.hits.saturating_add(1);
            self.epoch = self.epoch.wrapping_add(1);
            let doublings = self.hits.saturating_sub(1).min(30);
            let exponential = config
                .base
                .saturating_mul(1u32 << doublings)
                .min(config.max);
            delay = delay.max(exponential);
        }
        self.until = self.until.max(now + delay.min(config.max_wait));
        if asked > config.max_wait {
            return Hit::GiveUp {
                bound: BackoffBound::MaxWait(config.max_wait),
            };
        }
        let waited = waited.saturating_add(self.until.saturating_since(now));
        if waited > config.budget {
            return Hit::GiveUp {
                bound: BackoffBound::Budget(config.budget),
            };
        }
        Hit::Resend {
            until: self.until,
            waited,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn at(n: u64) -> Time {
        Time::from_duration(secs(n))
    }

    /// 32 requests sent together, all answered 429 with `Retry-After: 1s`: one hit, a
    /// back-off of 2 s, not 2 s doubled 31 times. Sent again in the new epoch, their
    /// 429s are one more hit: 4 s.
    #[test]
    fn answers_to_requests_sent_before_the_back_off_began_are_one_hit() {
        let config = BackoffConfig::default();
        let mut backoff = Backoff::default();
        for _ in 0..32 {
            let hit = backoff.hit(&config, at(1), Some(secs(1)), 0, Duration::ZERO);
            assert_eq!(
                hit,
                Hit::Resend {
                    until: at(3),
                    waited: secs(2)
                }
            );
        }
        assert_eq!((backoff.hits, backoff.epoch), (1, 1));
        for _ in 0..32 {
            let hit = backoff.hit(&config, at(4), Some(secs(1)), 1, secs(2));
            assert_eq!(
                hit,
                Hit::Resend {
                    until: at(8),
                    waited: secs(6)
                }
            );
        }
        assert_eq!((backoff.hits, backoff.epoch), (2, 2));
    }

    /// A `Retry-After` past `max_wait` — a day, `u64::MAX` seconds, the largest
    /// duration there is — gives the request up and backs the kind off `max_wait`.
    #[test]
    fn a_retry_after_past_the_longest_wait_gives_up_and_backs_off_only_that_long() {
        let config = BackoffConfig::default();
        for asked in [secs(86_400), secs(u64::MAX), Duration::MAX] {
            let mut backoff = Backoff::default();
            let hit = backoff.hit(&config, at(10), Some(asked), 0, Duration::ZERO);
            assert_eq!(
                hit,
                Hit::GiveUp {
                    bound: BackoffBound::MaxWait(secs(300))
                }
            );
            assert_eq!(backoff.until, at(310));
        }
    }

    /// Near the end of time nothing overflows: the back-off saturates at `Time::MAX`.
    #[test]
    fn back_offs_saturate_at_the_end_of_time() {
        let config = BackoffConfig {
            max_wait: Duration::MAX,
            budget: Duration::MAX,
            ..BackoffConfig::default()
        };
        let mut backoff = Backoff::default();
        let hit = backoff.hit(&config, Time::MAX, Some(Duration::MAX), 0, Duration::MAX);
        assert_eq!(
            hit,
            Hit::Resend {
                until: Time::MAX,
                waited: Duration::MAX
            }
        );
    }

    /// The budget counts the back-off the request was told to wait, over all its 429s.
    #[test]
    fn a_back_off_past_the_budget_gives_up() {
        let config = BackoffConfig {
            budget: secs(5),
            ..BackoffConfig::default()
        };
        let mut backoff = Backoff::default();
        assert_eq!(
            backoff.hit(&config, at(0), None, 0, Duration::ZERO),
            Hit::Resend {
                until: at(2),
                waited: secs(2)
            }
        );
        assert_eq!(
            backoff.hit(&config, at(2), None, 1, secs(2)),
            Hit::GiveUp {
                bound: BackoffBound::Budget(secs(5))
            }
        );
        assert_eq!(backoff.until, at(6), "the kind still backs off");
    }
}
