//! A tokens-per-window limit for LLM requests: providers limit tokens, not only calls.

use std::collections::VecDeque;
use std::time::Duration;

use crate::Time;

/// At most `max` estimated tokens sent in any `per`-long window. A request larger than
/// the whole budget goes out alone when the window is empty, rather than never.
#[derive(Clone, Debug)]
pub(crate) struct TokenWindow {
    max: u64,
    per: Duration,
    sent: VecDeque<(Time, u32)>,
    sum: u64,
}

impl TokenWindow {
    pub(crate) fn new(max: u64, per: Duration) -> TokenWindow {
        TokenWindow {
            max,
            per,
            sent: VecDeque::new(),
            sum: 0,
        }
    }

    fn prune(&mut self, now: Time) {
        while let Some((at, tokens)) = self.sent.front() {
            if *at + self.per <= now {
                self.sum -= u64::from(*tokens);
                self.sent.pop_front();
            } else {
                break;
            }
        }
    }

    pub(crate) fn has_room(&mut self, now: Time, tokens: u32) -> bool {
        self.prune(now);
        self.sent.is_empty() || self.sum + u64::from(tokens) <= self.max
    }

    /// When `tokens` more will fit, if not now.
    pub(crate) fn free_at(&mut self, now: Time, tokens: u32) -> Option<Time> {
        if self.has_room(now, tokens) {
            return None;
        }
        // Drop entries from the front until it fits (or the window is empty).
        let mut sum = self.sum;
        for (i, (at, t)) in self.sent.iter().enumerate() {
            sum -= u64::from(*t);
            if sum + u64::from(tokens) <= self.max || i + 1 == self.sent.len() {
                return Some(*at + self.per);
            }
        }
        None
    }

    /// Whether anything fits at `now`, without pruning (for views).
    pub(crate) fn room_at(&self, now: Time) -> bool {
        let used: u64 = self
            .sent
            .iter()
            .rev()
            .take_while(|(at, _)| *at + self.per > now)
            .map(|(_, t)| u64::from(*t))
            .sum();
        used < self.max
    }

    pub(crate) fn record(&mut self, now: Time, tokens: u32) {
        self.sent.push_back((now, tokens));
        self.sum += u64::from(tokens);
    }
}
