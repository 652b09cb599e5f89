//! The `Host` check (a page that led a browser here through a name of its own is
//! answered 421) and the bearer scheme, whose name is case-insensitive.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use spool_http::Access;

use crate::support::{Api, Setup, TOKEN, problem, request};

/// An answer read raw off a connection the server closed.
#[derive(Debug)]
pub(crate) struct Raw {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) json: Value,
}

/// Sends `request` as it is on a new connection and reads until the server closes it
/// (20 s at most).
pub(crate) fn raw(addr: &str, request: &str) -> Raw {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    parse(&text)
}

/// The status, head and body of an answer's text.
pub(crate) fn parse(text: &str) -> Raw {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    Raw {
        status,
        head: head.to_ascii_lowercase(),
        json: serde_json::from_str(body).unwrap_or(Value::Null),
    }
}

/// `GET path` naming `host` (none: HTTP/1.0 without one), with the token.
fn get(addr: &str, path: &str, host: Option<&str>) -> Raw {
    let request = match host {
        Some(host) => format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        ),
        None => format!("GET {path} HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"),
    };
    raw(addr, &request)
}

fn misdirected(host: &str) -> Value {
    problem(
        421,
        "misdirected",
        "Misdirected request",
        &format!("this server does not answer for the host \"{host}\""),
    )
}

#[track_caller]
fn assert_misdirected(answer: &Raw, host: &str) {
    assert_eq!(answer.status, 421, "{answer:?}");
    assert!(
        answer
            .head
            .contains("content-type: application/problem+json"),
        "{answer:?}"
    );
    assert_eq!(answer.json, misdirected(host));
}

#[test]
fn a_host_the_server_does_not_answer_for_is_421_even_with_public_reads() {
    let api = Api::with(Setup {
        access: Access::PublicRead(TOKEN.to_owned()),
        ..Setup::default()
    });
    let addr = api.addr();
    let port = addr.rsplit_once(':').unwrap().1.to_owned();
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        "localhost".to_owned(),
        format!("[::1]:{port}"),
    ] {
        assert_misdirected(&get(&addr, "/v1/tasks", Some(&host)), &host);
    }
    // Without a token too (the GETs are public): the page learns nothing.
    let evil = raw(
        &addr,
        "GET /v1/tasks HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_misdirected(&evil, "evil.example");
    // The names of the bound address, on its port.
    for host in [addr.clone(), format!("localhost:{port}")] {
        let answer = get(&addr, "/v1/tasks", Some(&host));
        assert_eq!(answer.status, 200, "{host}: {answer:?}");
        assert_eq!(answer.json["tasks"], serde_json::json!([]));
    }
    // No Host at all (HTTP/1.0): answered; a browser always names one.
    assert_eq!(get(&addr, "/v1/tasks", None).status, 200);
    // The health check is answered whatever the Host (a probe may use any name).
    api.wait_for_text("/healthz", |_| true);
    let health = get(&addr, "/healthz", Some("evil.example"));
    assert_eq!(health.status, 200, "{health:?}");
}

#[test]
fn allowed_hosts_are_answered_on_any_port_or_the_one_they_name() {
    let api = Api::with(Setup {
        server: |server| {
            server
                .allow_host("spool.example")
                .allow_host("proxy.example:8443")
        },
        ..Setup::default()
    });
    let addr = api.addr();
    for host in [
        "spool.example",
        "spool.example:443",
        "SPOOL.example.",
        "proxy.example:8443",
        addr.as_str(),
    ] {
        assert_eq!(
            get(&addr, "/v1/tasks", Some(host)).status,
            200,
            "{host} is allowed"
        );
    }
    for host in ["proxy.example", "proxy.example:443", "evil.example"] {
        assert_misdirected(&get(&addr, "/v1/tasks", Some(host)), host);
    }
}

#[test]
fn a_star_allows_any_host() {
    let api = Api::with(Setup {
        server: |server| server.allow_host("*"),
        ..Setup::default()
    });
    let addr = api.addr();
    for host in [
        "evil.example",
        "evil.example:7420",
        "localhost:1",
        addr.as_str(),
    ] {
        let answer = get(&addr, "/v1/tasks", Some(host));
        assert_eq!(answer.status, 200, "{host}: {answer:?}");
        assert_eq!(answer.json["tasks"], serde_json::json!([]));
    }
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let api = Api::start();
    let url = format!("{}/v1/tasks", api.base);
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {TOKEN}");
        let answer = request("GET", &url, None, &[("Authorization", &auth)], None);
        assert_eq!(answer.status, 200, "{scheme}: {answer:?}");
    }
    for auth in [format!("Basic {TOKEN}"), format!("Bearer{TOKEN}")] {
        request("GET", &url, None, &[("Authorization", &auth)], None).assert_problem(
            401,
            problem(
                401,
                "unauthorized",
                "Unauthorized",
                "this request needs the header `Authorization: Bearer <token>`",
            ),
        );
    }
}
