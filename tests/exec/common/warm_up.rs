//! Shared by the tests that serve chat completions with tiny_http (this crate's LLM and
//! load tests, and the CLI's endpoint test, which includes this file by path).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;

/// tiny_http serves each connection on a thread of its own from a pool that starts
/// with 4 and grows one thread at a time; a burst of new connections larger than its
/// idle threads can leave one connection unserved (a lost wake-up in its task pool) for
/// as long as the others stay open — and with keep-alive they stay open for the whole
/// run, so a request would hang until its timeout. Grow the pool first: open `n`
/// connections one after another, each answered before the next opens, then close
/// them all, leaving `n` idle threads for the run's burst. Returns the ports they came
/// from, not to count them.
pub(crate) fn grow_connection_threads(port: u16, n: usize) -> HashSet<u16> {
    let mut connections = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .write_all(b"GET /warm-up HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
            .expect("send");
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).expect("an answer");
        connections.push(stream);
    }
    connections
        .iter()
        .filter_map(|c| c.local_addr().ok())
        .map(|a| a.port())
        .collect()
}
