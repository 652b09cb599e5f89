//! `GET /v1/events` over every shard: each shard's stream (from this node or the one
//! that runs it), merged into one. An event's id is the position of every shard's
//! stream — `0:15,1:0,2:33`, the last sequence number sent of each shard — so a client
//! that reconnects with it as `Last-Event-ID` resumes every shard where it was: no
//! event twice, and none lost without an `event: gap` saying so. The first thing sent
//! is an `event: start` with the positions as its id, so a client that reconnects before
//! any event misses none either. When one shard's stream ends (its node stopped or died)
//! the merged stream ends, and the client's reconnection resumes that shard on the node
//! that took it over, where its numbering goes on.
//!
//! The pieces of answers under way (`event: delta`) come from the shard's runtime,
//! between its trace events, as a lone server sends them. Once a shard's stream has
//! sent a piece, that shard's position also names the last piece sent, `SHARD:SEQ:N`
//! (`0:15:7,1:0,2:33`), and is passed to the shard as the piece's own id `SEQ:N`, so a
//! stream resumed from it goes on with the pieces after it while their answer is live.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use spool_cluster::ShardId;
use spool_http::{EVENTS_START_HEADER, Problem};

use super::front::Front;

/// Where a shard's stream stands: the last trace event sent, and the last piece of an
/// answer sent (once one has been).
pub(crate) type Position = (u64, Option<u64>);

/// One block of a shard's stream, as read: its fields.
#[derive(Debug, Default, PartialEq, Eq)]
struct Block {
    /// `SEQ` (a trace event's id) or `SEQ:N` (a piece's).
    id: Option<Position>,
    event: Option<String>,
    data: Vec<String>,
}

/// What a shard's stream gives the merge: a block, or its end.
enum Part {
    Block(ShardId, Block),
    End,
}

/// Reads a shard's event id: `SEQ`, or `SEQ:N` for a piece of an answer.
fn position(text: &str) -> Option<Position> {
    match text.split_once(':') {
        None => Some((text.parse().ok()?, None)),
        Some((seq, piece)) => Some((seq.parse().ok()?, Some(piece.parse().ok()?))),
    }
}

/// A shard's position as its own stream's `Last-Event-ID`: `SEQ`, or `SEQ:N`.
fn shard_id(position: Position) -> String {
    match position {
        (seq, None) => seq.to_string(),
        (seq, Some(piece)) => format!("{seq}:{piece}"),
    }
}

/// Reads `Last-Event-ID` of a merged stream: `SHARD:SEQ` (or `SHARD:SEQ:N`) joined by
/// commas, one per shard of the cluster. `Err` for one that is not.
pub(crate) fn positions(text: &str, shards: u32) -> Result<BTreeMap<ShardId, Position>, String> {
    let mut positions = BTreeMap::new();
    for pair in text.split(',') {
        let parsed = pair
            .split_once(':')
            .and_then(|(s, rest)| Some((s.parse::<ShardId>().ok()?, position(rest)?)));
        match parsed {
            Some((shard, seq)) if shard < shards && positions.insert(shard, seq).is_none() => {}
            _ => {
                return Err(format!(
                    "`{pair}` is not SHARD:SEQ of a shard of this cluster"
                ));
            }
        }
    }
    if positions.len() != shards as usize {
        return Err(format!(
            "it names {} of the cluster's {shards} shards; an id of this cluster's merged \
             stream names every one",
            positions.len()
        ));
    }
    Ok(positions)
}

/// The id of a merged stream's event: every shard's position.
fn id_of(positions: &BTreeMap<ShardId, Position>) -> String {
    positions
        .iter()
        .map(|(shard, position)| format!("{shard}:{}", shard_id(*position)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Splits the bytes of a stream into its blocks (an empty line ends one), keeping what
/// follows the last whole block in `rest` (a character split between two reads stays
/// whole). Comments (keep-alives) make no block.
fn blocks(rest: &mut Vec<u8>) -> Vec<Block> {
    let mut out = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\n\n") {
        let bytes: Vec<u8> = rest.drain(..end + 2).collect();
        let text = String::from_utf8_lossy(&bytes);
        let mut block = Block::default();
        let mut any = false;
        for line in text.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => block.id = position(value),
                "event" => block.event = Some(value.to_owned()),
                "data" => block.data.push(value.to_owned()),
                _ => continue,
            }
            any = true;
        }
        if any {
            out.push(block);
        }
    }
    out
}

/// The merged stream of every shard, resumed after `last` (`Last-Event-ID`).
pub(crate) async fn merged(front: &Front, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let last = match parts.headers.get("last-event-id") {
        None => None,
        Some(value) => match value
            .to_str()
            .map_err(|e| e.to_string())
            .and_then(|text| positions(text, front.shards))
        {
            Ok(positions) => Some(positions),
            Err(why) => {
                return Problem::bad_request(format!(
                    "Last-Event-ID is not an id of this cluster's merged stream: {why}"
                ))
                .into_response();
            }
        },
    };
    let mut at = BTreeMap::new();
    let mut streams = Vec::new();
    for shard in 0..front.shards {
        let mut request = Request::new(Body::empty());
        *request.headers_mut() = parts.headers.clone();
        request.headers_mut().remove("last-event-id");
        if let Some(position) = last.as_ref().and_then(|p| p.get(&shard))
            && let Ok(value) = HeaderValue::from_str(&shard_id(*position))
        {
            request.headers_mut().insert("last-event-id", value);
        }
        *request.uri_mut() = match parts.uri.query() {
            Some(query) => format!("/v1/events?{query}"),
            None => "/v1/events".to_owned(),
        }
        .parse()
        .unwrap_or_default();
        let response = front.to_shard(shard, request).await;
        if response.status() != StatusCode::OK {
            return response;
        }
        let given = last.as_ref().and_then(|p| p.get(&shard).copied());
        let start = response
            .headers()
            .get(EVENTS_START_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .or(given.map(|(seq, _)| seq))
            .unwrap_or(0);
        // The last piece the client saw stays in the position until a newer one comes.
        at.insert(shard, (start, given.and_then(|(_, piece)| piece)));
        streams.push(shard_parts(shard, response.into_body()));
    }
    let first = Event::default()
        .id(id_of(&at))
        .event("start")
        .data(serde_json::json!({"shards": front.shards}).to_string());
    let merged = futures::stream::select_all(streams)
        .take_while(|part| std::future::ready(matches!(part, Part::Block(..))))
        .filter_map(move |part| {
            let Part::Block(shard, block) = part else {
                return std::future::ready(None);
            };
            if let Some((seq, piece)) = block.id {
                // A trace event moves the shard's position on and keeps the last
                // piece sent; a piece names both.
                let kept = at.get(&shard).and_then(|(_, kept)| *kept);
                at.insert(shard, (seq, piece.or(kept)));
            }
            std::future::ready(Some(relabel(shard, block, &at)))
        });
    let stream = futures::stream::once(std::future::ready(first))
        .chain(merged)
        .take_until(front.closed())
        .map(Ok::<Event, Infallible>);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// One shard's stream as parts: its blocks, then its end.
fn shard_parts(shard: ShardId, body: Body) -> futures::stream::BoxStream<'static, Part> {
    let reads = futures::stream::unfold(
        (body.into_data_stream(), Vec::<u8>::new(), false),
        move |(mut data, mut rest, ended)| async move {
            if ended {
                return None;
            }
            loop {
                match data.next().await {
                    Some(Ok(bytes)) => {
                        rest.extend_from_slice(&bytes);
                        let found = blocks(&mut rest);
                        if !found.is_empty() {
                            let parts: Vec<Part> = found
                                .into_iter()
                                .map(|block| Part::Block(shard, block))
                                .collect();
                            return Some((futures::stream::iter(parts), (data, rest, false)));
                        }
                    }
                    Some(Err(_)) | None => {
                        return Some((futures::stream::iter(vec![Part::End]), (data, rest, true)));
                    }
                }
            }
        },
    );
    reads.flatten().boxed()
}

/// A shard's block as an event of the merged stream: the positions as its id, and a
/// gap's data naming its shard.
fn relabel(shard: ShardId, block: Block, at: &BTreeMap<ShardId, Position>) -> Event {
    let data = block.data.join("\n");
    let event = Event::default().event(block.event.as_deref().unwrap_or("message"));
    match block.id {
        Some(_) => event.id(id_of(at)).data(data),
        None => {
            let data = match serde_json::from_str::<serde_json::Value>(&data) {
                Ok(serde_json::Value::Object(mut object)) => {
                    object.insert("shard".to_owned(), serde_json::json!(shard));
                    serde_json::Value::Object(object).to_string()
                }
                _ => data,
            };
            event.data(data)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{Block, blocks, id_of, positions};

    #[test]
    fn an_id_names_every_shards_position() {
        let at = BTreeMap::from([(0, (15, None)), (1, (0, None)), (2, (33, None))]);
        assert_eq!(id_of(&at), "0:15,1:0,2:33");
        assert_eq!(positions("0:15,1:0,2:33", 3), Ok(at));
        // A shard that has sent a piece of an answer names it too.
        let at = BTreeMap::from([(0, (15, Some(7))), (1, (0, None))]);
        assert_eq!(id_of(&at), "0:15:7,1:0");
        assert_eq!(positions("0:15:7,1:0", 2), Ok(at));
        assert_eq!(
            positions("0:15:7:1,1:0", 2),
            Err("`0:15:7:1` is not SHARD:SEQ of a shard of this cluster".to_owned())
        );
        assert!(positions("0:15:,1:0", 2).is_err());
        assert_eq!(
            positions("0:15,1:0", 3),
            Err(
                "it names 2 of the cluster's 3 shards; an id of this cluster's merged stream \
                 names every one"
                    .to_owned()
            )
        );
        assert_eq!(
            positions("0:15,3:1,1:0", 3),
            Err("`3:1` is not SHARD:SEQ of a shard of this cluster".to_owned())
        );
        assert!(positions("0:1,0:2,1:0", 3).is_err());
        assert!(positions("17", 1).is_err());
    }

    #[test]
    fn a_stream_is_read_block_by_block() {
        let mut rest = "id: 4\nevent: transition\ndata: {\"seq\":4}\n\n: keep-alive\n\nid: 4:9\nevent: delta\ndata: {\"seq\":0}\n\nevent: gap\ndata: {\"after\":1}\n\nid: 5\nda".as_bytes().to_vec();
        assert_eq!(
            blocks(&mut rest),
            [
                Block {
                    id: Some((4, None)),
                    event: Some("transition".to_owned()),
                    data: vec!["{\"seq\":4}".to_owned()],
                },
                Block {
                    id: Some((4, Some(9))),
                    event: Some("delta".to_owned()),
                    data: vec!["{\"seq\":0}".to_owned()],
                },
                Block {
                    id: None,
                    event: Some("gap".to_owned()),
                    data: vec!["{\"after\":1}".to_owned()],
                },
            ]
        );
        assert_eq!(rest, b"id: 5\nda");
        // A character cut between two reads is whole once the rest comes.
        let mut rest = "data: \u{e9}\n\n".as_bytes().to_vec();
        let cut = rest.split_off(7);
        assert!(blocks(&mut rest).is_empty());
        rest.extend_from_slice(&cut);
        assert_eq!(blocks(&mut rest)[0].data, ["\u{e9}"]);
    }
}
