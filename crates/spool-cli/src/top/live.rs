//! The answer being streamed for the watched task: the event stream's `delta` events
//! put together, each piece once, started over when the server says so, until the
//! answer's transition shows the task has it whole.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A piece of an answer from `GET /v1/events` (`event: delta`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct LiveDelta {
    pub(crate) task: u64,
    /// The request's number within its task.
    pub(crate) request: u32,
    pub(crate) seq: u64,
    /// The answer started over with this piece.
    pub(crate) restart: bool,
    pub(crate) text: String,
    pub(crate) tool_calls: Vec<LiveCallDelta>,
}

/// A fragment of a tool call in a [`LiveDelta`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct LiveCallDelta {
    pub(crate) index: usize,
    pub(crate) name: Option<String>,
    pub(crate) arguments: String,
}

/// The answer so far of one request of the watched task.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LiveAnswer {
    pub(crate) request: u32,
    /// The last piece taken.
    pub(crate) seq: u64,
    pub(crate) text: String,
    /// Tool calls so far: name and arguments' text, by index. A map, not a list, so
    /// that a fragment with a large index takes room for itself only.
    pub(crate) calls: BTreeMap<usize, (String, String)>,
}

impl LiveAnswer {
    /// `live` with `delta` added: a piece of another request, or one that restarts,
    /// starts a new answer; a piece already taken is dropped.
    pub(crate) fn take(live: &mut Option<LiveAnswer>, delta: LiveDelta) {
        let same = live.as_ref().is_some_and(|l| l.request == delta.request);
        if !same || delta.restart {
            *live = Some(LiveAnswer {
                request: delta.request,
                seq: delta.seq,
                ..LiveAnswer::default()
            });
        } else if live.as_ref().is_some_and(|l| delta.seq <= l.seq) {
            return;
        }
        let Some(answer) = live.as_mut() else { return };
        answer.seq = delta.seq;
        answer.text.push_str(&delta.text);
        for call in delta.tool_calls {
            let (name, arguments) = answer.calls.entry(call.index).or_default();
            if name.is_empty()
                && let Some(given) = call.name
            {
                *name = given;
            }
            arguments.push_str(&call.arguments);
        }
    }

    /// The answer as one text: its content, then each call as `name(arguments)`.
    pub(crate) fn shown(&self) -> String {
        let mut text = self.text.clone();
        for (name, arguments) in self.calls.values() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&format!("{name}({arguments})"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(request: u32, seq: u64, text: &str) -> LiveDelta {
        LiveDelta {
            task: 7,
            request,
            seq,
            text: text.to_owned(),
            ..LiveDelta::default()
        }
    }

    #[test]
    fn pieces_join_once_each_and_start_over_on_a_restart_or_another_request() {
        let mut live = None;
        for delta in [piece(2, 0, "Hel"), piece(2, 1, "lo"), piece(2, 1, "lo")] {
            LiveAnswer::take(&mut live, delta);
        }
        let call = LiveDelta {
            tool_calls: vec![
                LiveCallDelta {
                    index: 0,
                    name: Some("search".to_owned()),
                    arguments: "{\"q\":".to_owned(),
                },
                LiveCallDelta {
                    index: 0,
                    name: None,
                    arguments: "1}".to_owned(),
                },
            ],
            ..piece(2, 2, "")
        };
        LiveAnswer::take(&mut live, call);
        assert_eq!(
            live.as_ref().map(LiveAnswer::shown).as_deref(),
            Some("Hello search({\"q\":1})")
        );
        let mut again = piece(2, 3, "Hi");
        again.restart = true;
        LiveAnswer::take(&mut live, again);
        assert_eq!(live.as_ref().map(LiveAnswer::shown).as_deref(), Some("Hi"));
        LiveAnswer::take(&mut live, piece(3, 0, "next"));
        assert_eq!(
            live.as_ref().map(|l| (l.request, l.shown())),
            Some((3, "next".to_owned()))
        );
    }

    #[test]
    fn calls_are_kept_by_their_index_without_room_for_the_indexes_between() {
        let fragment = |index: usize, name: &str| LiveCallDelta {
            index,
            name: Some(name.to_owned()),
            arguments: "{}".to_owned(),
        };
        let mut live = None;
        let calls = LiveDelta {
            tool_calls: vec![fragment(5, "later"), fragment(0, "first")],
            ..piece(2, 0, "")
        };
        LiveAnswer::take(&mut live, calls);
        assert_eq!(
            live.as_ref().map(LiveAnswer::shown).as_deref(),
            Some("first({}) later({})")
        );
        let far = LiveDelta {
            tool_calls: vec![fragment(4_000_000_000, "far")],
            ..piece(2, 1, "")
        };
        LiveAnswer::take(&mut live, far);
        assert_eq!(
            live.as_ref().map(LiveAnswer::shown).as_deref(),
            Some("first({}) later({}) far({})")
        );
    }
}
