//! A TCP proxy on loopback between a store and its server, which cuts the store's side
//! of every connection while the server's side stays open: the server's sessions live
//! on (holding their locks, committing what they were sent), as when a network path
//! breaks and the server has not noticed yet.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The proxy; its threads end with the test process.
pub(crate) struct Proxy {
    port: u16,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Every connection: the client's side and the server's (kept open).
    connections: Mutex<Vec<(TcpStream, TcpStream)>>,
    /// Cut the client's side once a `COMMIT` has been passed to the server.
    cut_after_commit: AtomicBool,
    /// Close every new connection at once, as a server that is away would.
    refuse: AtomicBool,
}

impl Proxy {
    /// A proxy to the server on 127.0.0.1:`server_port`.
    pub(crate) fn start(server_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("its address").port();
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if shared.refuse.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let server = TcpStream::connect(("127.0.0.1", server_port)).expect("the server");
                let pair = (
                    client.try_clone().expect("a clone"),
                    server.try_clone().expect("a clone"),
                );
                shared
                    .connections
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(pair);
                let state = Arc::clone(&shared);
                let (from_client, to_server) = (
                    client.try_clone().expect("a clone"),
                    server.try_clone().expect("a clone"),
                );
                std::thread::spawn(move || forward_to_server(from_client, to_server, &state));
                std::thread::spawn(move || forward(server, client));
            }
        });
        Proxy { port, state }
    }

    /// `url` (a URL of the cluster) through the proxy.
    pub(crate) fn url(&self, url: &str, server_port: u16) -> String {
        url.replacen(
            &format!("127.0.0.1:{server_port}"),
            &format!("127.0.0.1:{}", self.port),
            1,
        )
    }

    /// Cuts the client's side of every connection now.
    pub(crate) fn cut(&self) {
        for (client, _) in self
            .state
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = client.shutdown(Shutdown::Both);
        }
    }

    /// Closes every new connection at once (`true`), as a server that is away would,
    /// or lets them through again (`false`).
    pub(crate) fn refuse(&self, refuse: bool) {
        self.state.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Cuts the client's side of the next connection that sends `COMMIT`, once the
    /// server has it and before its answer comes back.
    pub(crate) fn cut_after_commit(&self) {
        self.state.cut_after_commit.store(true, Ordering::SeqCst);
    }
}

/// Copies from the client to the server; after a `COMMIT` (a simple query message)
/// when asked, cuts the client's side. The server's side is never closed.
fn forward_to_server(mut client: TcpStream, mut server: TcpStream, state: &State) {
    let mut buffer = [0u8; 64 * 1024];
    loop {
        let n = match client.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if server.write_all(&buffer[..n]).is_err() {
            return;
        }
        let commit = buffer[..n].windows(7).any(|w| w == b"COMMIT\0");
        if commit && state.cut_after_commit.swap(false, Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// Copies from the server to the client until either side ends.
fn forward(mut server: TcpStream, mut client: TcpStream) {
    let mut buffer = [0u8; 64 * 1024];
    loop {
        let n = match server.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if client.write_all(&buffer[..n]).is_err() {
            return;
        }
    }
}
