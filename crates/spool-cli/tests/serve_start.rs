//! What `spool serve` says and checks at start: the token it makes is written to a
//! file of the owner's only, never to stderr; a short token, an address beyond
//! loopback and `--allow-host '*'` are warned about; `--allow-host` names the hosts
//! answered besides the bound address's (others get 421), which on every address are
//! any IP address and localhost; `--max-connections` caps the connections.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

mod support;

use support::Server;

/// `GET /v1/tasks` naming `host`, with `token`: the answer's status line. A `503`
/// (the views not published yet, or the last connection not yet seen closed under
/// `--max-connections 1`) is tried again, for up to 20 s.
fn status(addr: &str, host: &str, token: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        // A refused connection too takes the whole request and gives a whole answer.
        write!(
            stream,
            "GET /v1/tasks HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let line = text.lines().next().unwrap_or_default().to_owned();
        if !line.contains(" 503 ") || Instant::now() >= deadline {
            return line;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_made_token_goes_to_a_file_of_the_owners_and_not_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let server = Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
    ]);
    let path = dir.path().join("s.spool.token");
    let token = std::fs::read_to_string(&path).unwrap().trim().to_owned();
    assert_eq!(token.len(), 64, "{token}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    assert_eq!(
        status(&server.addr, &server.addr, &token),
        "HTTP/1.1 200 OK"
    );
    let log = server.log();
    assert!(
        log.contains(&format!(
            "spool serve: token written to {} (use --token-file {0} to keep it)\n",
            path.display()
        )),
        "{log}"
    );
    assert!(!log.contains(&token), "the token is on stderr:\n{log}");
    server.stop();
}

#[test]
fn a_short_token_and_an_address_beyond_loopback_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "x\n").unwrap();
    let store = dir.path().join("s.spool");
    let server = Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "0.0.0.0:0".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
    ]);
    let log = server.log();
    for warning in [
        "spool serve: the token has 1 characters; a token of fewer than 16 can be guessed \
         (make one with `openssl rand -hex 32`)",
        "without TLS: the token and every prompt cross the network in clear; put spool \
         behind a proxy that does TLS",
        "spool serve: on every address, a Host that is an IP address or localhost is \
         answered; name the other hosts clients use with --allow-host (others get 421)",
    ] {
        assert!(log.contains(warning), "no warning {warning:?} in:\n{log}");
    }
    // Any IP address and localhost, on any port, are answered (reached on loopback);
    // a name is not: a page that led a browser here through a name of its own reads
    // nothing.
    let port = server.addr.rsplit_once(':').unwrap().1.to_owned();
    let loopback = format!("127.0.0.1:{port}");
    for host in [
        loopback.clone(),
        format!("localhost:{port}"),
        "localhost".to_owned(),
        "192.168.1.20:8080".to_owned(),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(status(&loopback, &host, "x"), "HTTP/1.1 200 OK", "{host}");
    }
    for host in ["evil.example", "127.0.0.1.nip.io"] {
        assert_eq!(
            status(&loopback, host, "x"),
            "HTTP/1.1 421 Misdirected Request",
            "{host}"
        );
    }
    server.stop();
    // On loopback with a long token: none.
    std::fs::write(&token, "a-token-of-sixteen-or-more\n").unwrap();
    let server = Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
    ]);
    assert!(!server.log().contains("WARN"), "{}", server.log());
    server.stop();
    // `--allow-host '*'`: any Host is answered, and that is warned about.
    let server = Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
        "--allow-host".as_ref(),
        "*".as_ref(),
    ]);
    let warning = "spool serve: --allow-host '*' answers any Host: a web page that leads a \
                   browser here through a name of its own (DNS rebinding) can use the API; \
                   name the hosts instead";
    assert!(server.log().contains(warning), "{}", server.log());
    assert_eq!(
        status(&server.addr, "evil.example", "a-token-of-sixteen-or-more"),
        "HTTP/1.1 200 OK"
    );
    server.stop();
}

#[test]
fn allowed_hosts_are_answered_and_others_are_421() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "serve-start-test-token\n").unwrap();
    let store = dir.path().join("s.spool");
    let server = Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
        "--allow-host".as_ref(),
        "spool.example".as_ref(),
        "--max-connections".as_ref(),
        "1".as_ref(),
    ]);
    let port = server.addr.rsplit_once(':').unwrap().1.to_owned();
    let token = "serve-start-test-token";
    for host in [
        server.addr.clone(),
        format!("localhost:{port}"),
        "spool.example".to_owned(),
    ] {
        assert_eq!(
            status(&server.addr, &host, token),
            "HTTP/1.1 200 OK",
            "{host}"
        );
    }
    assert_eq!(
        status(&server.addr, "evil.example", token),
        "HTTP/1.1 421 Misdirected Request"
    );
    // One connection at a time: a second, while one is open, is refused. (The first
    // is tried again, on a whole 503, while the last connection is not yet seen
    // closed.)
    let request = format!(
        "GET /v1/tasks HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        server.addr
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let mut first = TcpStream::connect(&server.addr).unwrap();
        first
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        first.write_all(request.as_bytes()).unwrap();
        let mut head = [0u8; 15];
        first.read_exact(&mut head).unwrap();
        if &head == b"HTTP/1.1 200 OK" {
            break first;
        }
        assert_eq!(&head, b"HTTP/1.1 503 Se");
        assert!(Instant::now() < deadline, "the first is still refused");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut second = TcpStream::connect(&server.addr).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    second.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    second.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{text}"
    );
    drop(first);
    server.stop();
}

/// Under an open-file limit it cannot raise (the hard one is low too), a cap of
/// connections past it is warned about; under one it can, the limit is raised.
#[cfg(unix)]
#[test]
fn a_cap_of_connections_past_the_open_file_limit_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "serve-start-test-token\n").unwrap();
    let store = dir.path().join("s.spool");
    let serve = |limits: &str, max: &str| {
        let mut command = std::process::Command::new("sh");
        command
            .arg("-c")
            .arg(format!("{limits}; exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_spool"))
            .args(["serve", "--addr", "127.0.0.1:0", "--max-connections", max])
            .arg("--store")
            .arg(&store)
            .arg("--token-file")
            .arg(&token)
            .env_remove("OPENAI_BASE_URL");
        Server::spawn(command)
    };
    let server = serve("ulimit -n 256 && ulimit -Hn 256", "1000");
    let warning = "spool serve: --max-connections 1000 needs about 1128 open files and the \
                   limit is 256; connections past about 128 will fail (raise `ulimit -n`, or \
                   lower --max-connections)";
    assert!(server.log().contains(warning), "{}", server.log());
    server.stop();
    // A soft limit of 256 under a hard one of 2048: raised, and no warning.
    let server = serve("ulimit -Sn 256 && ulimit -Hn 2048", "1000");
    assert!(!server.log().contains("WARN"), "{}", server.log());
    let pid = server.child.id();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>();
    assert_eq!(open_files, ["1128", "2048"], "{limits}");
    server.stop();
}
