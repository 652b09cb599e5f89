//! The options of `spool serve`, and the environment its help ends with.

use std::path::PathBuf;

use clap::Args;

use super::ModelArgs;
use super::limits::LimitArgs;
use super::location::StoreLocation;

/// The environment `spool serve` reads.
pub(crate) const SERVE_ENVIRONMENT: &str = concat!(
    "\
Environment for serve: as for run (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL).

Every request needs `Authorization: Bearer TOKEN`; without --token-file a token is
made at start and written to STORE.token, or DB.token in the working directory for
--postgres (mode 0600; its path is said on stderr).
Once it takes connections it prints `listening on http://ADDR` on stderr, and the
live web page's address on stdout (docs/web.md): `web page: http://ADDR/#token=TOKEN`
with a token it made, without the token when it came from --token-file.
With --postgres on a database made by `spool cluster init`, it runs a node of the
cluster (--node-id, --advertise, --lease-ttl; --token-file required, the same on every
node): any node answers for every shard (docs/cluster.md).
Requests must name the server in `Host` (its address, localhost, any IP address when
bound to 0.0.0.0 or ::, or --allow-host).
See docs/http.md.

",
    store_limits_help!()
);

/// The options of `spool serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The store to serve: `--store PATH` or `--postgres URL`.
    #[command(flatten)]
    pub(crate) location: StoreLocation,
    /// Where to listen: loopback unless told otherwise; port 0 takes
    /// any free port
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADDR, verbatim_doc_comment)]
    pub(crate) addr: std::net::SocketAddr,
    /// A file holding the bearer token (else one is made and written
    /// to STORE.token, or DB.token)
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    pub(crate) token_file: Option<PathBuf>,
    /// GET requests need no token
    #[arg(long)]
    pub(crate) public_read: bool,
    /// Seconds a shutdown waits for the requests taken in before it
    /// cuts connections
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "SECS",
        default_value_t = DEFAULT_SHUTDOWN_SECS,
        value_parser = clap::value_parser!(u64).range(..=3600),
    )]
    pub(crate) shutdown_timeout: u64,
    /// Also answer requests whose Host is HOST (NAME for any port,
    /// NAME:PORT for one, '*' for any Host); repeatable
    #[arg(long = "allow-host", value_name = "HOST", verbatim_doc_comment)]
    pub(crate) allow_hosts: Vec<String>,
    /// Connections open at once; past it a client gets 503 with
    /// Retry-After
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        value_parser = parse_max_connections,
    )]
    pub(crate) max_connections: usize,
    /// As a node of a cluster (a --postgres database made by `spool
    /// cluster init`): its name, unique in the cluster [default:
    /// the host's name and the port]
    #[arg(long, value_name = "NAME", verbatim_doc_comment, value_parser = parse_node_id)]
    pub(crate) node_id: Option<String>,
    /// As a node: the URL other nodes reach this one at [default:
    /// http://ADDR, with the host's name for an unspecified address]
    #[arg(long, value_name = "URL", verbatim_doc_comment)]
    pub(crate) advertise: Option<String>,
    /// As a node: how long its shards' leases last unless renewed
    /// (`10s`, `1500ms`); a node that dies holds its shards this
    /// long
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_lease_ttl, verbatim_doc_comment)]
    pub(crate) lease_ttl: std::time::Duration,
    /// The scripted model's latency.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// The limits on tasks and requests.
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// The budgets on LLM spend.
    #[command(flatten)]
    pub(crate) budgets: super::budgets::BudgetArgs,
    /// The MCP servers whose tools the agent offers.
    #[command(flatten)]
    pub(crate) mcp: super::mcp::McpArgs,
}

/// A node's name: 1 to 64 letters, digits, `.`, `_` and `-` (it travels in a header
/// between nodes and names the node in logs and metrics).
fn parse_node_id(text: &str) -> Result<String, String> {
    let fits = (1..=64).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if fits {
        Ok(text.to_owned())
    } else {
        Err("1 to 64 letters, digits, `.`, `_` or `-`".to_owned())
    }
}

/// A lease's length: `10s`, `1.5s`, `1500ms`, from 100 ms to an hour.
fn parse_lease_ttl(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("a length like `10s` or `1500ms` from 100ms to 3600s, not `{text}`");
    let (number, unit) = match text.strip_suffix("ms") {
        Some(number) => (number, 0.001),
        None => (text.strip_suffix('s').ok_or_else(bad)?, 1.0),
    };
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    let secs = value * unit;
    if !(0.1..=3600.0).contains(&secs) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The most connections `--max-connections` takes: each is an open file.
const MAX_CONNECTIONS: usize = 65_536;

fn parse_max_connections(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_CONNECTIONS).contains(&n) => Ok(n),
        _ => Err(format!("a whole number from 1 to {MAX_CONNECTIONS}")),
    }
}

/// The defaults of `--addr`, `--shutdown-timeout` (seconds) and `--max-connections`:
/// the HTTP server's own (checked against them where the server is built in).
const DEFAULT_ADDR: &str = "127.0.0.1:7420";
const DEFAULT_SHUTDOWN_SECS: u64 = 10;
const DEFAULT_MAX_CONNECTIONS: usize = 512;
#[cfg(feature = "serve")]
const _: () = {
    assert!(DEFAULT_MAX_CONNECTIONS == spool_http::DEFAULT_MAX_CONNECTIONS);
    assert!(DEFAULT_SHUTDOWN_SECS == spool_http::DEFAULT_SHUTDOWN_TIMEOUT.as_secs());
};

#[cfg(all(test, feature = "serve"))]
mod tests {
    use super::*;

    #[test]
    fn a_node_id_is_a_plain_name_and_a_lease_a_length() {
        assert_eq!(parse_node_id("node-a.1_b"), Ok("node-a.1_b".to_owned()));
        for bad in ["", "né", "a b", "a/b", &"x".repeat(65)] {
            assert!(parse_node_id(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_lease_ttl("10s"),
            Ok(std::time::Duration::from_secs(10))
        );
        assert_eq!(
            parse_lease_ttl("1500ms"),
            Ok(std::time::Duration::from_millis(1500))
        );
        assert_eq!(
            parse_lease_ttl("1.5s"),
            Ok(std::time::Duration::from_millis(1500))
        );
        for bad in ["10", "50ms", "2h", "xs", "3601s"] {
            assert!(parse_lease_ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_defaults_are_the_servers() {
        assert_eq!(DEFAULT_ADDR, spool_http::DEFAULT_ADDR);
    }
}
