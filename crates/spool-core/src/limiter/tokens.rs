//! A tokens-per-window limit for LLM requests: providers limit tokens, not only calls.

use std::collections::VecDeque;
use std::time::Duration;

use crate::id::RequestKey;
use crate::time::Time;

/// At most `max` tokens sent in any `per`-long window. A request counts its estimate
/// ([`Request::tokens`](crate::Request::tokens)) when it goes out, and the tokens the
/// provider reports ([`Response::tokens_used`](crate::Response::tokens_used)) once
/// answered. A request larger than the whole budget goes out alone when the window is
/// empty, rather than never.
#[derive(Clone, Debug)]
pub(crate) struct TokenWindow {
    max: u64,
    per: Duration,
    sent: VecDeque<(Time, RequestKey, u32)>,
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
        while let Some((at, _, tokens)) = self.sent.front() {
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
        for (i, (at, _, t)) in self.sent.iter().enumerate() {
            sum -= u64::from(*t);
            if sum + u64::from(tokens) <= self.max || i + 1 == self.sent.len() {
                return Some(*at + self.per);
            }
        }
        None
    }

    /// Whether `tokens` more fit at `now`, without pruning (for views).
    pub(crate) fn room_at(&self, now: Time, tokens: u32) -> bool {
        let mut in_window = self.in_window(now).peekable();
        if in_window.peek().is_none() {
            return true;
        }
        let used: u64 = in_window.sum();
        used + u64::from(tokens) <= self.max
    }

    /// The tokens of each request in the window ending at `now`, newest first, without
    /// pruning.
    fn in_window(&self, now: Time) -> impl Iterator<Item = u64> + '_ {
        self.sent
            .iter()
            .rev()
            .take_while(move |(at, _, _)| *at + self.per > now)
            .map(|(_, _, t)| u64::from(*t))
    }

    /// Tokens counted in the window ending at `now`, the most it takes, and its length
    /// (for views).
    pub(crate) fn use_at(&self, now: Time) -> (u64, u64, Duration) {
        (self.in_window(now).sum(), self.max, self.per)
    }

    pub(crate) fn record(&mut self, now: Time, key: RequestKey, tokens: u32) {
        self.sent.push_back((now, key, tokens));
        self.sum += u64::from(tokens);
    }

    /// The provider says request `key` used `tokens`: it counts that instead of its
    /// estimate for the rest of the window (if it is still in it).
    pub(crate) fn settle(&mut self, key: RequestKey, tokens: u32) {
        if let Some(entry) = self.sent.iter_mut().rev().find(|(_, k, _)| *k == key) {
            self.sum = self.sum - u64::from(entry.2) + u64::from(tokens);
            entry.2 = tokens;
        }
    }

    /// What the window counts, oldest first (for snapshots).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Time, RequestKey, u32)> + '_ {
        self.sent.iter().copied()
    }

    /// Counts `entries` (oldest first), as a snapshot had them.
    pub(crate) fn restore(&mut self, entries: impl IntoIterator<Item = (Time, RequestKey, u32)>) {
        self.sent = entries.into_iter().collect();
        self.sum = self.sent.iter().map(|(_, _, t)| u64::from(*t)).sum();
    }
}
