//! A streamed answer: the Server-Sent Events of a chat completion read as they come
//! (`data: {chunk}` lines, up to `data: [DONE]`), each chunk's piece handed on as a
//! [`Delta`], and the pieces assembled into the body a call without streaming would
//! have had, so that the answer is normalized by the same code ([`normalize`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};

use serde_json::{Map, Value, json};
use spool_core::{Delta, ToolCallDelta};

use super::body::{AnswerError, normalize, quote};
use super::budget::Hold;

/// How much more of the answer budget a streamed answer reserves when it needs room.
const STREAM_STEP: u64 = 64 * 1024;

/// Why a streamed answer was not read to its end.
pub(super) enum StreamError {
    /// Longer than the largest answer read (the limit, in bytes).
    TooLarge(u64),
    /// The answer needed more room than the budget had left.
    NoRoom { read: u64 },
    /// An event was not a chat-completion chunk (the message, quoting it).
    Malformed(String),
    /// An event was the provider's `{"error": ...}` (quoted).
    Provider(String),
    /// The connection broke, or timed out, before `data: [DONE]`.
    Transport(std::io::Error),
}

/// The numbering of one request's deltas, across its attempts: the next `seq`, and
/// whether an earlier attempt sent some (then the next attempt's first delta restarts
/// the answer).
#[derive(Debug, Default)]
pub(super) struct Numbering {
    next: u64,
    restart: bool,
}

impl Numbering {
    /// A new attempt begins: what earlier ones sent is void.
    pub(super) fn new_attempt(&mut self) {
        self.restart = self.next > 0;
    }

    /// Numbers `delta` and marks it as restarting the answer if it is the first of a
    /// retried attempt.
    fn number(&mut self, mut delta: Delta) -> Delta {
        delta.seq = self.next;
        delta.restart = std::mem::take(&mut self.restart);
        self.next += 1;
        delta
    }
}

/// One tool call being assembled from its fragments.
#[derive(Debug, Default)]
struct CallParts {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// The answer assembled so far from the chunks of the first choice.
#[derive(Debug, Default)]
struct Assembly {
    /// `None` until a chunk gives text (as a call without streaming has `null`).
    content: Option<String>,
    calls: BTreeMap<u32, CallParts>,
    finish_reason: Value,
    usage: Value,
    /// Whether any chunk had the first choice.
    choice: bool,
}

impl Assembly {
    /// Takes one chunk (the JSON of a `data:` line): adds its first choice's pieces to
    /// the answer and returns them as a delta (not numbered yet), if it had any.
    fn take(&mut self, chunk: &[u8]) -> Result<Option<Delta>, StreamError> {
        let malformed = |what: &str| StreamError::Malformed(format!("{what}: {}", quote(chunk)));
        let value: Value = serde_json::from_slice(chunk)
            .map_err(|e| malformed(&format!("an event of the answer is not JSON ({e})")))?;
        if value.get("error").is_some_and(|e| !e.is_null()) {
            return Err(StreamError::Provider(quote(chunk)));
        }
        if let Some(usage) = value.get("usage").filter(|u| !u.is_null()) {
            self.usage = usage.clone();
        }
        let choices = match value.get("choices") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(choices)) => choices,
            Some(_) => return Err(malformed("an event's `choices` is not an array")),
        };
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return Ok(None);
        };
        self.choice = true;
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = reason.clone();
        }
        let Some(delta) = choice.get("delta").filter(|d| !d.is_null()) else {
            return Ok(None);
        };
        let mut piece = Delta::default();
        match delta.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                self.content.get_or_insert_with(String::new).push_str(text);
                piece.text.clone_from(text);
            }
            Some(_) => return Err(malformed("a delta's `content` is neither text nor null")),
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for (position, call) in calls.iter().enumerate() {
                    let fragment = self
                        .call_fragment(position, call)
                        .map_err(|what| malformed(&what))?;
                    piece.tool_calls.push(fragment);
                }
            }
            Some(_) => return Err(malformed("a delta's `tool_calls` is not an array")),
        }
        if piece.text.is_empty() && piece.tool_calls.is_empty() {
            return Ok(None);
        }
        Ok(Some(piece))
    }

    /// Adds one tool-call fragment (the `position`th of its chunk) to its call.
    fn call_fragment(&mut self, position: usize, call: &Value) -> Result<ToolCallDelta, String> {
        let index = match call.get("index") {
            None => u32::try_from(position).unwrap_or(u32::MAX),
            Some(index) => index
                .as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| "a tool-call fragment's `index` is not a whole number".to_owned())?,
        };
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let function = call.get("function");
        let fragment = ToolCallDelta {
            index,
            id: text(call.get("id")),
            name: text(function.and_then(|f| f.get("name"))),
            arguments: text(function.and_then(|f| f.get("arguments"))).unwrap_or_default(),
        };
        let parts = self.calls.entry(index).or_default();
        if parts.id.is_none() {
            parts.id.clone_from(&fragment.id);
        }
        if parts.name.is_none() {
            parts.name.clone_from(&fragment.name);
        }
        parts.arguments.push_str(&fragment.arguments);
        Ok(fragment)
    }

    /// The body a call without streaming would have answered with these pieces.
    fn whole(self) -> Value {
        let calls: Vec<Value> = self
            .calls
            .into_values()
            .map(|call| {
                let mut function = Map::new();
                if let Some(name) = call.name {
                    function.insert("name".to_owned(), Value::String(name));
                }
                function.insert("arguments".to_owned(), Value::String(call.arguments));
                json!({"id": call.id, "type": "function", "function": function})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.content});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        })
    }
}

/// What a streamed answer ended as: the normalized answer and the tokens it used.
pub(super) type Streamed = Result<(Value, Option<u32>), StreamError>;

/// Reads the events of a streamed answer from `body` up to `data: [DONE]`, holding
/// the bytes read within `hold` (grown a step at a time, never past `limit`), handing
/// each piece to `progress` as it comes, numbered by `numbering`. The answer is
/// normalized as a call without streaming would be.
pub(super) fn read_stream(
    body: impl Read,
    hold: &mut Hold<'_>,
    limit: u64,
    numbering: &mut Numbering,
    progress: &mut dyn FnMut(Delta),
) -> Streamed {
    let mut reader = BufReader::new(body);
    let mut assembly = Assembly::default();
    let mut line = Vec::new();
    let mut data: Vec<u8> = Vec::new();
    let mut read: u64 = 0;
    loop {
        line.clear();
        read_line(&mut reader, &mut line, &mut read, hold, limit)?;
        let text = trim_line_end(&line);
        if !text.is_empty() {
            // A field of the event: only `data` means anything here.
            if let Some(value) = text.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if !data.is_empty() {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
            }
            continue;
        }
        // A blank line ends an event.
        if data.is_empty() {
            continue;
        }
        if data.as_slice() == b"[DONE]" {
            break;
        }
        if let Some(piece) = assembly.take(&data)? {
            progress(numbering.number(piece));
        }
        data.clear();
    }
    if !assembly.choice {
        return Err(StreamError::Malformed(
            "the streamed answer had no event with `choices[0]`".to_owned(),
        ));
    }
    let whole = serde_json::to_vec(&assembly.whole()).unwrap_or_default();
    normalize(&whole).map_err(|error| match error {
        AnswerError::Malformed(message) => StreamError::Malformed(message),
        AnswerError::Provider => StreamError::Provider(quote(&whole)),
    })
}

/// Reads the next line (to its `\n`, or the end of the body) onto `line`, never more
/// than the room `hold` has: when the bytes `read` so far fill it, the hold grows by a
/// step (up to `limit`) before anything more is read, as a body read whole does, so a
/// long line cannot take memory the shared budget has not given.
fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    read: &mut u64,
    hold: &mut Hold<'_>,
    limit: u64,
) -> Result<(), StreamError> {
    loop {
        let room = hold.bytes().min(limit).saturating_sub(*read);
        if room == 0 {
            if *read >= limit {
                // The limit is read: the answer is too large unless the body ends here.
                if reader
                    .fill_buf()
                    .map_err(StreamError::Transport)?
                    .is_empty()
                {
                    break;
                }
                return Err(StreamError::TooLarge(limit));
            }
            if !hold.grow(STREAM_STEP.min(limit - *read)) {
                return Err(StreamError::NoRoom { read: *read });
            }
            continue;
        }
        let n = reader
            .by_ref()
            .take(room)
            .read_until(b'\n', line)
            .map_err(StreamError::Transport)?;
        *read += n as u64;
        if n == 0 || line.last() == Some(&b'\n') {
            break;
        }
    }
    if line.is_empty() {
        // The connection ended without `[DONE]`: the answer is not whole.
        return Err(StreamError::Transport(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the answer's stream ended before `data: [DONE]`",
        )));
    }
    Ok(())
}

/// A line without its `\n` or `\r\n`.
fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::llm::budget::AnswerBudget;

    /// Reads `events` as a stream; the answer and the deltas handed on.
    fn read(events: &str) -> (Result<Value, String>, Vec<Delta>) {
        let budget = AnswerBudget::new(1 << 20);
        let mut hold = budget
            .reserve(16, Instant::now() + Duration::from_secs(1))
            .expect("an empty budget has room");
        let mut deltas = Vec::new();
        let mut numbering = Numbering::default();
        let answer = read_stream(
            events.as_bytes(),
            &mut hold,
            1 << 20,
            &mut numbering,
            &mut |d| deltas.push(d),
        );
        let answer = answer.map(|(value, _)| value).map_err(|error| match error {
            StreamError::Malformed(m) => format!("malformed: {m}"),
            StreamError::Provider(q) => format!("provider: {q}"),
            StreamError::Transport(e) => format!("transport: {e}"),
            StreamError::TooLarge(l) => format!("too large: {l}"),
            StreamError::NoRoom { read } => format!("no room: {read}"),
        });
        (answer, deltas)
    }

    #[test]
    fn text_pieces_are_numbered_and_joined_with_usage_from_the_last_event() {
        let (answer, deltas) = read(concat!(
            ": a comment\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n",
            "data: [DONE]\n\n",
        ));
        assert_eq!(
            answer,
            Ok(
                json!({"content": "Hello", "tool_calls": [], "finish_reason": "stop",
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
            )
        );
        assert_eq!(deltas, vec![Delta::text(0, "Hel"), Delta::text(1, "lo")]);
    }

    #[test]
    fn a_stream_cut_before_done_and_a_chunk_that_is_not_json_are_errors() {
        let (answer, deltas) = read("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n");
        assert_eq!(
            answer,
            Err("transport: the answer's stream ended before `data: [DONE]`".to_owned())
        );
        assert_eq!(deltas, vec![Delta::text(0, "Hi")]);
        let (answer, _) = read("data: {nope\n\ndata: [DONE]\n\n");
        assert_eq!(
            answer,
            Err(
                "malformed: an event of the answer is not JSON (key must be a string at line 1 \
                 column 2): `{nope`"
                    .to_owned()
            )
        );
        let (answer, _) = read("data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
        assert_eq!(
            answer,
            Err("provider: `{\"error\":{\"message\":\"overloaded\"}}`".to_owned())
        );
    }

    /// A body that counts the bytes taken from it.
    struct Counted<'a> {
        body: &'a [u8],
        taken: &'a std::cell::Cell<usize>,
    }

    impl Read for Counted<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.body.read(buf)?;
            self.taken.set(self.taken.get() + n);
            Ok(n)
        }
    }

    #[test]
    fn a_long_line_is_read_only_as_far_as_the_shared_budget_has_room() {
        let budget = AnswerBudget::new(128 * 1024);
        let mut hold = budget
            .reserve(16, Instant::now() + Duration::from_secs(1))
            .expect("an empty budget has room");
        let mut line = b"data: ".to_vec();
        line.resize(512 * 1024, b'a');
        let taken = std::cell::Cell::new(0);
        let body = Counted {
            body: &line,
            taken: &taken,
        };
        let mut numbering = Numbering::default();
        let answer = read_stream(body, &mut hold, 1 << 20, &mut numbering, &mut |_| {});
        let read = match answer {
            Err(StreamError::NoRoom { read }) => read,
            _ => panic!("the answer should have found no room"),
        };
        // The room held: the first 16 bytes and one step; the next step does not fit.
        assert_eq!(read, 16 + STREAM_STEP);
        assert_eq!(hold.bytes(), 16 + STREAM_STEP);
        // At most the room held and one buffer more was taken from the body.
        assert!(
            taken.get() <= 16 + STREAM_STEP as usize + 8 * 1024,
            "{}",
            taken.get()
        );
    }

    #[test]
    fn an_answer_longer_than_the_limit_is_too_large_whatever_its_lines() {
        let (answer, _) = read(&format!("data: {}", "a".repeat((1 << 20) + 1)));
        assert_eq!(answer, Err(format!("too large: {}", 1 << 20)));
        let exactly = format!("{}data: [DONE]\n\n", ":\n".repeat(((1 << 20) - 14) / 2));
        assert_eq!(exactly.len(), 1 << 20);
        let (answer, _) = read(&exactly);
        assert_eq!(
            answer,
            Err("malformed: the streamed answer had no event with `choices[0]`".to_owned())
        );
    }

    #[test]
    fn a_retried_attempt_restarts_the_numbering_it_continues() {
        let mut numbering = Numbering::default();
        numbering.new_attempt();
        assert_eq!(numbering.number(Delta::text(9, "a")), Delta::text(0, "a"));
        numbering.new_attempt();
        let mut restarted = Delta::text(1, "b");
        restarted.restart = true;
        assert_eq!(numbering.number(Delta::text(9, "b")), restarted);
        assert_eq!(numbering.number(Delta::text(9, "c")), Delta::text(2, "c"));
    }
}
