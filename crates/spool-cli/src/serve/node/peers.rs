//! The other nodes: who holds which shard (read from the cluster's tables, kept for a
//! moment), and passing a request on to the node that holds its shard.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Uri, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use spool_cluster::ShardId;
use spool_postgres::Cluster;
use spool_postgres::cluster::ClusterStatus;

use super::db::Db;

/// The header that carries, from one node to another, the shard a request is for:
/// the receiving node answers it from that shard if it holds it, and passes it on to
/// no one (a request crosses at most one hop).
pub(crate) const SHARD_HEADER: &str = "x-spool-shard";

/// The header naming the node that passed a request on.
pub(crate) const FORWARDED_HEADER: &str = "x-spool-forwarded-by";

/// The header that proves a request was passed on by a node of the cluster: a keyed
/// hash, under a key made from the API's token (which every node shares), of the
/// shard, the method, the path and query, and the passing node's name. A request
/// whose proof does not hold is answered as any client's, its `x-spool-` headers
/// dropped.
pub(crate) const HOP_HEADER: &str = "x-spool-hop";

/// The key that signs requests passed between nodes, made from the API's token.
#[derive(Clone)]
pub(crate) struct HopKey([u8; 32]);

impl std::fmt::Debug for HopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HopKey(..)")
    }
}

impl HopKey {
    /// The key of the cluster whose nodes share `token`.
    pub(crate) fn new(token: &str) -> HopKey {
        HopKey(blake3::derive_key(
            "spool cluster 2026-11 request passed between nodes",
            token.as_bytes(),
        ))
    }

    /// The proof for a request for `shard` passed on by node `by`.
    fn sign(&self, shard: ShardId, method: &str, path: &str, by: &str) -> blake3::Hash {
        let text = format!("{shard}\n{method}\n{path}\n{by}");
        blake3::keyed_hash(&self.0, text.as_bytes())
    }

    /// The shard a request names, if it carries a proof that a node of this cluster
    /// passed it on; `None` for any other request (the headers are then dropped).
    pub(crate) fn check(&self, request: &mut Request) -> Option<ShardId> {
        let headers = request.headers();
        let shard = headers
            .get(SHARD_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<ShardId>().ok());
        let by = headers.get(FORWARDED_HEADER).and_then(|v| v.to_str().ok());
        let proof = headers.get(HOP_HEADER).map(HeaderValue::as_bytes);
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let valid = match (shard, by, proof) {
            (Some(shard), Some(by), Some(proof)) => {
                let expected = self.sign(shard, request.method().as_str(), path, by);
                // `Hash` compares in constant time.
                blake3::Hash::from_hex(proof).is_ok_and(|proof| proof == expected)
            }
            _ => false,
        };
        if valid {
            return shard;
        }
        let headers = request.headers_mut();
        headers.remove(SHARD_HEADER);
        headers.remove(FORWARDED_HEADER);
        headers.remove(HOP_HEADER);
        None
    }
}

/// How long the owners read from the tables are used before they are read again.
const FRESH_FOR: Duration = Duration::from_millis(250);

/// How long connecting to another node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The owner of each shard and its address, as last read.
#[derive(Debug, Default)]
struct Owners {
    /// When they were read.
    read_at: Option<Instant>,
    /// Each shard with a live owner: the owner's name and address.
    shards: BTreeMap<ShardId, (String, String)>,
}

/// Who holds which shard, read again when older than a moment or when a node said it
/// no longer holds one — by one request at a time: the others wait for its reading.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    owners: Mutex<Owners>,
    reading: tokio::sync::Mutex<()>,
}

impl Peers {
    /// The live owner of `shard` (its name and address), read again from the tables
    /// if what was read is older than a moment, or older than this call when `fresh`
    /// asks for it.
    pub(crate) async fn owner(
        &self,
        db: &Db,
        shard: ShardId,
        fresh: bool,
    ) -> Result<Option<(String, String)>, String> {
        let asked = Instant::now();
        let current = |owners: &Owners| {
            owners.read_at.is_some_and(|at| {
                if fresh {
                    at >= asked
                } else {
                    at.elapsed() < FRESH_FOR
                }
            })
        };
        if current(&self.lock()) {
            return Ok(self.lock().shards.get(&shard).cloned());
        }
        let _reading = self.reading.lock().await;
        // Another request may have read them while this one waited.
        if !current(&self.lock()) {
            let read = db.run(Cluster::owners).await?;
            let mut owners = self.lock();
            owners.read_at = Some(Instant::now());
            owners.shards = read
                .into_iter()
                .map(|(shard, owner, addr)| (shard, (owner, addr)))
                .collect();
        }
        Ok(self.lock().shards.get(&shard).cloned())
    }

    /// The cluster's status, read now.
    pub(crate) async fn status(&self, db: &Db) -> Result<ClusterStatus, String> {
        db.run(Cluster::status).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long a node waits for another's answer to begin (a node answers at once, or
/// after waiting up to 5 s for a shard it has just leased): past it, the other node is
/// taken for frozen or gone.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(8);

/// Why a request could not be passed on.
#[derive(Debug)]
pub(crate) struct NotPassed {
    /// Whether the request may have reached the other node (it was sent, and no
    /// answer came): then one that changes something must not be sent again.
    pub(crate) sent: bool,
    /// What went wrong.
    pub(crate) why: String,
}

impl NotPassed {
    fn before(why: String) -> NotPassed {
        NotPassed { sent: false, why }
    }
}

/// Sends `request` to the node at `addr` (`http://HOST:PORT`, as it joined with) for
/// `shard`, as node `me`, signed with `key`, and gives its answer, streamed. `Err` if
/// the node could not be reached, or did not begin to answer within
/// [`ANSWER_TIMEOUT`].
pub(crate) async fn forward(
    addr: &str,
    shard: ShardId,
    me: &str,
    key: &HopKey,
    request: Request,
) -> Result<Response, NotPassed> {
    forward_inner(addr, shard, me, key, request).await
}

async fn forward_inner(
    addr: &str,
    shard: ShardId,
    me: &str,
    key: &HopKey,
    request: Request,
) -> Result<Response, NotPassed> {
    let authority = authority(addr).map_err(NotPassed::before)?;
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&authority))
        .await
        .map_err(|_| NotPassed::before(format!("connecting to {authority} timed out")))?
        .map_err(|e| NotPassed::before(format!("cannot connect to {authority}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| NotPassed::before(format!("cannot talk to {authority}: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = path
        .parse::<Uri>()
        .map_err(|e| NotPassed::before(format!("cannot pass on {path}: {e}")))?;
    let host = HeaderValue::from_str(&authority).map_err(|e| NotPassed::before(e.to_string()))?;
    parts.headers.insert(header::HOST, host);
    parts.headers.insert(SHARD_HEADER, HeaderValue::from(shard));
    let by = HeaderValue::from_str(me)
        .map_err(|_| NotPassed::before(format!("the node name {me:?} is not a header value")))?;
    parts.headers.insert(FORWARDED_HEADER, by);
    let proof = key.sign(shard, parts.method.as_str(), &path, me).to_hex();
    let proof =
        HeaderValue::from_str(proof.as_str()).map_err(|e| NotPassed::before(e.to_string()))?;
    parts.headers.insert(HOP_HEADER, proof);
    let answer = tokio::time::timeout(
        ANSWER_TIMEOUT,
        sender.send_request(Request::from_parts(parts, body)),
    )
    .await;
    match answer {
        Ok(Ok(response)) => Ok(response.map(Body::new)),
        Ok(Err(e)) => Err(NotPassed {
            sent: !e.is_canceled(),
            why: format!("{authority} did not answer: {e}"),
        }),
        Err(_) => Err(NotPassed {
            sent: true,
            why: format!(
                "{authority} did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            ),
        }),
    }
}

/// `HOST:PORT` of a node's address (`http://HOST:PORT`, or `HOST:PORT`).
pub(crate) fn authority(addr: &str) -> Result<String, String> {
    let rest = addr
        .strip_prefix("http://")
        .unwrap_or(addr)
        .trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || addr.starts_with("https://") {
        return Err(format!(
            "the node address `{addr}` is not http://HOST:PORT (spool's nodes talk plain HTTP)"
        ));
    }
    Ok(rest.to_owned())
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn a_nodes_address_gives_host_and_port() {
        assert_eq!(
            authority("http://10.0.0.5:7420"),
            Ok("10.0.0.5:7420".to_owned())
        );
        assert_eq!(authority("http://h:1/"), Ok("h:1".to_owned()));
        assert_eq!(authority("127.0.0.1:9"), Ok("127.0.0.1:9".to_owned()));
        assert_eq!(
            authority("https://h:1"),
            Err("the node address `https://h:1` is not http://HOST:PORT (spool's nodes talk plain HTTP)".to_owned())
        );
        assert!(authority("http://h:1/x").is_err());
    }
}
