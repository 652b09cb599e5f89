//! Connections past the cap: each is answered a short `503` on a task of its own,
//! so that the client reads the whole answer rather than a reset.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// The answer a connection past the cap gets.
const OVER_CAPACITY: &str = "{\"type\":\"https://spool.invalid/problems/unavailable\",\"title\":\"Service unavailable\",\"status\":503,\"detail\":\"the server has as many connections open as it takes; try again\"}";

/// How many connections past the cap are answered at once; past it, a connection is
/// closed unanswered.
pub(super) const MAX_REFUSING: usize = 64;

/// How long a refused connection's request head is waited for, and how long what the
/// client sends after the answer is read before the connection is closed.
const REFUSE_WAIT: Duration = Duration::from_secs(1);

/// Answers a connection past the cap with a `503` and closes it, on a task of its own
/// (one of at most [`MAX_REFUSING`]; past them it is closed unanswered).
pub(super) fn refuse(stream: TcpStream, refusing: &Arc<Semaphore>) {
    let Ok(permit) = Arc::clone(refusing).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        answer_refused(stream).await;
        drop(permit);
    });
}

/// Reads and drops the request's head (for up to [`REFUSE_WAIT`]), writes the `503`,
/// ends the writing side, and reads on (for up to [`REFUSE_WAIT`] again) until the
/// client closes. A socket closed with bytes of the client's unread, or closed before
/// they come, answers them with a reset, and a client told of a reset may drop the
/// answer it has not read yet.
async fn answer_refused(mut stream: TcpStream) {
    let mut scratch = [0u8; 4096];
    let head = tokio::time::timeout(REFUSE_WAIT, async {
        // The last bytes of the previous read: the empty line that ends a head may
        // come in two reads.
        let mut tail: Vec<u8> = Vec::with_capacity(scratch.len() + 2);
        loop {
            let n = read_some(&stream, &mut scratch).await?;
            if n == 0 {
                return Ok::<(), io::Error>(());
            }
            tail.extend_from_slice(&scratch[..n]);
            if tail.windows(3).any(|w| w == b"\n\r\n") || tail.windows(2).any(|w| w == b"\n\n") {
                return Ok(());
            }
            let keep = tail.len().saturating_sub(2);
            tail.drain(..keep);
        }
    })
    .await;
    if let Ok(Err(_)) = head {
        return;
    }
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{OVER_CAPACITY}",
        OVER_CAPACITY.len()
    );
    let written = tokio::time::timeout(REFUSE_WAIT, write_all(&stream, answer.as_bytes())).await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let _ = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_shutdown(cx)).await;
    let _ = tokio::time::timeout(REFUSE_WAIT, async {
        while read_some(&stream, &mut scratch).await.is_ok_and(|n| n > 0) {}
    })
    .await;
}

/// Reads what has come (0: the client ended its writing side).
async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            read => return read,
        }
    }
}

/// Writes all of `bytes`.
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
