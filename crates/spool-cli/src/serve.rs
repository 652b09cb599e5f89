//! `spool serve --store PATH`: `spool run` behind the HTTP API. It goes on from the
//! store with the built-in agent as task type `agent` (input `{"prompt": ...}`,
//! checked against its schema) and the store's schedules, serves `spool-http`'s router
//! on `--addr` (loopback by default), and says `listening on http://ADDR` on stderr once
//! it takes connections, and the web page's address on stdout. Every request needs the bearer token (from `--token-file`, or
//! made at start and written to `STORE.token`, mode 0600) unless `--public-read` opens
//! the GETs. Ctrl-C or SIGTERM stops it within `--shutdown-timeout`: it stops taking
//! connections, answers the requests it took in while the loop still runs, then stops
//! the loop and cuts what is left.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::cli::ModelArgs;
use crate::limits::LimitArgs;

/// Starting the server: in builds with the `serve` feature (on by default).
#[cfg(feature = "serve")]
mod start;
#[cfg(feature = "serve")]
pub(crate) use start::run;

/// The options of `spool serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServeOptions {
    /// The store to run.
    pub(crate) store: PathBuf,
    /// Where to listen.
    pub(crate) addr: SocketAddr,
    /// A file holding the bearer token.
    pub(crate) token_file: Option<PathBuf>,
    /// GETs need no token.
    pub(crate) public_read: bool,
    /// The scripted model's latency per call.
    pub(crate) llm_latency: Duration,
    /// The limits on tasks and requests.
    pub(crate) limits: LimitArgs,
    /// How long a shutdown waits for the requests taken in.
    pub(crate) shutdown_timeout: Duration,
    /// Hosts answered besides the bound address's names.
    pub(crate) allow_hosts: Vec<String>,
    /// How many connections may be open at once.
    pub(crate) max_connections: usize,
}

/// The environment `spool serve` reads.
pub(crate) const SERVE_ENVIRONMENT: &str = concat!(
    "\
Environment for serve: as for run (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL).

Every request needs `Authorization: Bearer TOKEN`; without --token-file a token is
made at start and written to STORE.token (mode 0600; its path is said on stderr).
Once it takes connections it prints `listening on http://ADDR` on stderr, and the
live web page's address on stdout (docs/web.md): `web page: http://ADDR/#token=TOKEN`
with a token it made, without the token when it came from --token-file.
Requests must name the server in `Host` (its address, localhost, any IP address when
bound to 0.0.0.0 or ::, or --allow-host).
See docs/http.md.

",
    store_limits_help!()
);

/// The options of `spool serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The store (SQLite file) to serve; created if missing
    #[arg(long, value_name = "PATH")]
    store: PathBuf,
    /// Where to listen: loopback unless told otherwise; port 0 takes
    /// any free port
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADDR, verbatim_doc_comment)]
    addr: std::net::SocketAddr,
    /// A file holding the bearer token (else one is made and written
    /// to STORE.token)
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    token_file: Option<PathBuf>,
    /// GET requests need no token
    #[arg(long)]
    public_read: bool,
    /// Seconds a shutdown waits for the requests taken in before it
    /// cuts connections
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "SECS",
        default_value_t = DEFAULT_SHUTDOWN_SECS,
        value_parser = clap::value_parser!(u64).range(..=3600),
    )]
    shutdown_timeout: u64,
    /// Also answer requests whose Host is HOST (NAME for any port,
    /// NAME:PORT for one, '*' for any Host); repeatable
    #[arg(long = "allow-host", value_name = "HOST", verbatim_doc_comment)]
    allow_hosts: Vec<String>,
    /// Connections open at once; past it a client gets 503 with
    /// Retry-After
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        value_parser = parse_max_connections,
    )]
    max_connections: usize,
    /// The scripted model's latency.
    #[command(flatten)]
    model: ModelArgs,
    /// The limits on tasks and requests.
    #[command(flatten)]
    limits: LimitArgs,
}

impl From<ServeArgs> for ServeOptions {
    fn from(args: ServeArgs) -> ServeOptions {
        ServeOptions {
            store: args.store,
            addr: args.addr,
            token_file: args.token_file,
            public_read: args.public_read,
            llm_latency: args.model.latency(),
            limits: args.limits,
            shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
            allow_hosts: args.allow_hosts,
            max_connections: args.max_connections,
        }
    }
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

/// Where a token made at start is written: beside the store, `STORE.token`.
#[cfg(feature = "serve")]
pub(crate) fn token_path(store: &std::path::Path) -> PathBuf {
    let mut path = store.as_os_str().to_owned();
    path.push(".token");
    PathBuf::from(path)
}

/// `spool serve` in a build without the `serve` feature: says how to get one.
#[cfg(not(feature = "serve"))]
pub(crate) fn run(_options: &ServeOptions) -> std::process::ExitCode {
    crate::stored::Failure::Failed(crate::stored::not_built("serve")).report("spool serve")
}

#[cfg(all(test, feature = "serve"))]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("spool").chain(args.iter().copied()))
    }

    #[test]
    fn the_defaults_are_the_servers() {
        assert_eq!(DEFAULT_ADDR, spool_http::DEFAULT_ADDR);
    }

    #[test]
    fn serve_takes_a_store_and_listens_on_loopback_by_default() {
        match parse(&["serve", "--store", "s.spool"]) {
            Ok(Cli {
                command: Command::Serve(args),
                ..
            }) => assert_eq!(
                ServeOptions::from(args),
                ServeOptions {
                    store: "s.spool".into(),
                    addr: "127.0.0.1:7420".parse().expect("an address"),
                    token_file: None,
                    public_read: false,
                    llm_latency: Duration::from_millis(20),
                    limits: LimitArgs::default(),
                    shutdown_timeout: Duration::from_secs(10),
                    allow_hosts: Vec::new(),
                    max_connections: 512,
                }
            ),
            other => panic!("{other:?}"),
        }
        let args = [
            "serve",
            "--store",
            "s.spool",
            "--addr",
            "0.0.0.0:80",
            "--token-file",
            "t",
            "--public-read",
            "--shutdown-timeout",
            "3",
            "--allow-host",
            "spool.example",
            "--allow-host",
            "proxy.example:8443",
            "--max-connections",
            "50",
        ];
        match parse(&args) {
            Ok(Cli {
                command: Command::Serve(args),
                ..
            }) => {
                let options = ServeOptions::from(args);
                assert_eq!(options.addr, "0.0.0.0:80".parse().expect("an address"));
                assert_eq!(options.token_file, Some(PathBuf::from("t")));
                assert!(options.public_read);
                assert_eq!(options.shutdown_timeout, Duration::from_secs(3));
                assert_eq!(
                    options.allow_hosts,
                    ["spool.example", "proxy.example:8443"].map(String::from)
                );
                assert_eq!(options.max_connections, 50);
            }
            other => panic!("{other:?}"),
        }
        let error = parse(&["serve", "--store", "s", "--max-connections", "0"])
            .expect_err("no connections");
        assert!(
            error.to_string().starts_with(
                "error: invalid value '0' for '--max-connections <N>': a whole number from 1 to 65536"
            ),
            "{error}"
        );
        assert_eq!(
            token_path(std::path::Path::new("dir/s.spool")),
            PathBuf::from("dir/s.spool.token")
        );
        let error =
            parse(&["serve", "--store", "s", "--addr", "localhost"]).expect_err("a bad address");
        assert_eq!(error.kind(), ErrorKind::ValueValidation);
        assert!(
            error
                .to_string()
                .starts_with("error: invalid value 'localhost' for '--addr <ADDR>': invalid socket address syntax"),
            "{error}"
        );
    }
}
