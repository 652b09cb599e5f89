//! The screen in front of the router: what is answered before it, the `Host` check
//! (`421`) and the early `413`.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use axum::response::IntoResponse;

use crate::problem::Problem;

/// Which requests are answered before the router: the `Host` check and the early
/// `413`.
#[derive(Debug)]
pub(super) struct Screen {
    pub(super) hosts: HostRule,
    pub(super) body_limit: usize,
}

impl Screen {
    /// The answer to a request that goes no further, or `None`.
    pub(super) fn refusal<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        if request.uri().path() != "/healthz" {
            let host = request
                .uri()
                .authority()
                .map(|a| Ok(a.as_str()))
                .or_else(|| request.headers().get(header::HOST).map(|h| h.to_str()));
            match host {
                // No host at all (HTTP/1.0): a browser always sends one, so this is
                // not a page led here by a name it resolved.
                None => {}
                Some(Ok(host)) if self.hosts.allows(host) => {}
                Some(Ok(host)) => return Some(misdirected(host)),
                Some(Err(_)) => return Some(misdirected("(not text)")),
            }
        }
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.body_limit as u64) {
            return Some(Problem::too_large(self.body_limit).into_response());
        }
        None
    }
}

fn misdirected(host: &str) -> Response<Body> {
    Problem::new(
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected",
        "Misdirected request",
        format!("this server does not answer for the host {host:?}"),
    )
    .into_response()
}

/// The hosts a request may name.
#[derive(Debug)]
pub(super) enum HostRule {
    /// Any: `*` was allowed.
    Any,
    /// Bound to every address: an IP address or `localhost` on any port (a page that
    /// led a browser here through a name of its own always names a domain), and the
    /// hosts allowed besides.
    Every { extra: Vec<(String, Option<u16>)> },
    /// These names on the bound port, and the hosts allowed besides.
    Listed {
        port: u16,
        names: Vec<String>,
        extra: Vec<(String, Option<u16>)>,
    },
}

impl HostRule {
    pub(super) fn new(bound: SocketAddr, extra: Vec<(String, Option<u16>)>) -> HostRule {
        let ip = bound.ip();
        if ip.is_unspecified() {
            return HostRule::Every { extra };
        }
        let mut names = Vec::new();
        if ip.is_loopback() {
            names.push("localhost".to_owned());
        }
        names.push(host_form(ip));
        HostRule::Listed {
            port: bound.port(),
            names,
            extra,
        }
    }

    fn allows(&self, host: &str) -> bool {
        let extra = match self {
            HostRule::Any => return true,
            HostRule::Every { extra } | HostRule::Listed { extra, .. } => extra,
        };
        let Some((name, given)) = split_host(host) else {
            return false;
        };
        // No port in `Host`: the scheme's, 80.
        let at = given.unwrap_or(80);
        let own = match self {
            HostRule::Listed { port, names, .. } => at == *port && names.contains(&name),
            _ => name == "localhost" || is_address(&name),
        };
        own || extra
            .iter()
            .any(|(n, p)| *n == name && p.is_none_or(|p| p == at))
    }
}

/// Whether a name (as [`split_host`] gives it) is an IPv4 address or a bracketed
/// IPv6 one.
fn is_address(name: &str) -> bool {
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
}

/// An address as it is written in a `Host` header.
fn host_form(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// `name[:port]` as (lower-case name without a final dot, port); `None` if it is not
/// a host.
pub(super) fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip: std::net::Ipv6Addr = v6.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?.parse().ok()?),
        };
        (format!("[{ip}]"), port)
    } else if let Ok(ip) = host.parse::<std::net::Ipv6Addr>() {
        (format!("[{ip}]"), None)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port.parse().ok()?)),
            None => (host.to_owned(), None),
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let fits = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    fits.then_some((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(bound: &str, extra: &[&str]) -> HostRule {
        let extra = extra
            .iter()
            .map(|h| split_host(h).expect("a host"))
            .collect();
        HostRule::new(bound.parse().expect("an address"), extra)
    }

    #[test]
    fn a_loopback_server_answers_its_own_names_on_its_port_only() {
        let rule = listed("127.0.0.1:7420", &[]);
        for host in ["127.0.0.1:7420", "localhost:7420", "LocalHost.:7420"] {
            assert!(rule.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7420",
            "localhost",
            "127.0.0.1:7421",
            "[::1]:7420",
            "localhost:x",
            "",
        ] {
            assert!(!rule.allows(host), "{host}");
        }
        let v6 = listed("[::1]:80", &[]);
        assert!(v6.allows("[::1]"));
        assert!(v6.allows("localhost:80"));
        assert!(!v6.allows("127.0.0.1"));
    }

    #[test]
    fn allowed_hosts_match_any_port_unless_they_name_one() {
        let rule = listed("127.0.0.1:7420", &["spool.example", "proxy.example:8443"]);
        assert!(rule.allows("spool.example"));
        assert!(rule.allows("spool.example:443"));
        assert!(rule.allows("proxy.example:8443"));
        assert!(!rule.allows("proxy.example"));
        assert!(!rule.allows("evil.example"));
        assert_eq!(split_host("a b"), None);
        assert_eq!(split_host("[::1]:x"), None);
        assert_eq!(
            split_host("[0:0::1]:9"),
            Some(("[::1]".to_owned(), Some(9)))
        );
    }

    #[test]
    fn every_address_answers_ip_addresses_and_localhost_on_any_port_and_allowed_hosts() {
        for bound in ["0.0.0.0:7420", "[::]:7420"] {
            let rule = listed(bound, &["spool.example"]);
            for host in [
                "127.0.0.1:7420",
                "127.0.0.1",
                "192.168.1.20:8080",
                "10.0.0.1.",
                "[::1]",
                "[::1]:9000",
                "[fe80::1]:7420",
                "[::ffff:10.0.0.1]",
                "localhost",
                "LocalHost:8080",
                "spool.example",
                "spool.example:443",
            ] {
                assert!(rule.allows(host), "{bound}: {host}");
            }
            for host in [
                "evil.example",
                "evil.example:7420",
                "127.0.0.1.evil.example",
                "10.0.0.1.nip.io:7420",
                "localhost.evil.example",
                "127.1",
                "0x7f.0.0.1",
                "[::1",
                "",
            ] {
                assert!(!rule.allows(host), "{bound}: {host}");
            }
        }
        assert!(listed("0.0.0.0:7420", &[]).allows("[::1]:7420"));
        assert!(!listed("0.0.0.0:7420", &[]).allows("spool.example"));
    }
}
